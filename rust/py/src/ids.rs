//! Bindings of `hippograph_core::ids`: ids kept as a UTF-8 blob and end offsets, matched with the GIL
//! released.

use crate::errors;
use crate::scoring::contiguous;
use hippograph_core::ids;
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Distinct ids (a UTF-8 blob and each id's end offset, copied) that finds where other ids sit among
/// them (`hippograph_core::ids::IdTable`).
#[pyclass(frozen, module = "hippograph._core")]
pub struct IdTable {
    inner: ids::IdTable,
}

#[pymethods]
impl IdTable {
    /// ValueError: offsets outside the blob, or an id repeated.
    #[new]
    fn new(py: Python<'_>, blob: PyReadonlyArray1<'_, u8>, ends: PyReadonlyArray1<'_, u64>) -> PyResult<Self> {
        let (b, e) = (contiguous(py, "blob", &blob)?, contiguous(py, "ends", &ends)?);
        let built = errors::detached(py, "IdTable", || ids::IdTable::new(ids::Ids::new(b, e)?))?;
        built.map(|inner| Self { inner }).map_err(|e| PyValueError::new_err(e.to_string()))
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// For each id of (`blob`, `ends`), its position here, or -1. ValueError: offsets outside the blob.
    fn positions<'py>(
        &self,
        py: Python<'py>,
        blob: PyReadonlyArray1<'py, u8>,
        ends: PyReadonlyArray1<'py, u64>,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let (b, e) = (contiguous(py, "blob", &blob)?, contiguous(py, "ends", &ends)?);
        let found = errors::detached(py, "IdTable.positions", || ids::Ids::new(b, e).map(|n| self.inner.positions(n)))?;
        found.map(|p| p.into_pyarray(py)).map_err(|e| PyValueError::new_err(e.to_string()))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<IdTable>()?;
    Ok(())
}
