//! Bindings of `hippograph_core::ids`: matching ids kept as a UTF-8 blob and end offsets, GIL released.

use crate::errors;
use crate::scoring::contiguous;
use hippograph_core::ids;
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// For each id of (`needle_blob`, `needle_ends`), the position of the equal id among
/// (`hay_blob`, `hay_ends`), or -1. ValueError: offsets outside their blob, or a hay id repeated.
#[pyfunction]
fn id_positions<'py>(
    py: Python<'py>,
    hay_blob: PyReadonlyArray1<'py, u8>,
    hay_ends: PyReadonlyArray1<'py, u64>,
    needle_blob: PyReadonlyArray1<'py, u8>,
    needle_ends: PyReadonlyArray1<'py, u64>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let (hb, he) = (contiguous(py, "hay_blob", &hay_blob)?, contiguous(py, "hay_ends", &hay_ends)?);
    let (nb, ne) = (contiguous(py, "needle_blob", &needle_blob)?, contiguous(py, "needle_ends", &needle_ends)?);
    let found =
        errors::detached(py, "id_positions", || ids::positions(ids::Ids::new(hb, he)?, ids::Ids::new(nb, ne)?))?;
    found.map(|p| p.into_pyarray(py)).map_err(|e| PyValueError::new_err(e.to_string()))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(id_positions, m)?)?;
    Ok(())
}
