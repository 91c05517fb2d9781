//! Bindings of `hippograph_core::pairs`: consolidation candidates, GIL released.

use crate::errors;
use crate::scoring::{contiguous, shape, stored, Matrix};
use hippograph_core::pairs;
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::prelude::*;

/// Rows `a`, rows `b` and their cosines.
type Pairs<'py> = (Bound<'py, PyArray1<u32>>, Bound<'py, PyArray1<u32>>, Bound<'py, PyArray1<f32>>);

/// Consolidation candidates: greedy best-partner pairs of rows sharing a group
/// with cosine above `threshold`, as `(a, b, cosine)` arrays.
#[pyfunction]
fn consolidation_pairs<'py>(
    py: Python<'py>,
    matrix: PyReadonlyArray2<'py, f32>,
    norms: PyReadonlyArray1<'py, f32>,
    members: PyReadonlyArray1<'py, u32>,
    offsets: PyReadonlyArray1<'py, u64>,
    threshold: f32,
) -> PyResult<Pairs<'py>> {
    let matrix = Matrix::F32(matrix);
    let stored = stored(py, &matrix, &norms)?;
    let members = contiguous(py, "members", &members)?;
    let offsets: Vec<usize> = contiguous(py, "offsets", &offsets)?.iter().map(|&o| o as usize).collect();
    let rows = norms.len();
    let matched = errors::detached(py, "consolidation_pairs", || {
        pairs::group_pairs(stored, members, &offsets, threshold).map(|p| pairs::greedy_matching(p, rows))
    })?
    .map_err(|e| shape(py, e))?;
    let a: Vec<u32> = matched.iter().map(|p| p.a).collect();
    let b: Vec<u32> = matched.iter().map(|p| p.b).collect();
    let c: Vec<f32> = matched.iter().map(|p| p.cosine).collect();
    Ok((a.into_pyarray(py), b.into_pyarray(py), c.into_pyarray(py)))
}

/// Every pair of rows with cosine above `threshold`, most similar first (ties by `(a, b)`), as
/// `(a, b, cosine)` arrays with `a < b`.
#[pyfunction]
fn similar_pairs<'py>(
    py: Python<'py>,
    matrix: PyReadonlyArray2<'py, f32>,
    norms: PyReadonlyArray1<'py, f32>,
    threshold: f32,
) -> PyResult<Pairs<'py>> {
    let matrix = Matrix::F32(matrix);
    let stored = stored(py, &matrix, &norms)?;
    let rows = norms.len();
    let found = errors::detached(py, "similar_pairs", || {
        let members: Vec<u32> = (0..rows as u32).collect();
        pairs::group_pairs(stored, &members, &[0, rows], threshold).map(pairs::by_similarity)
    })?
    .map_err(|e| shape(py, e))?;
    let a: Vec<u32> = found.iter().map(|p| p.a).collect();
    let b: Vec<u32> = found.iter().map(|p| p.b).collect();
    let c: Vec<f32> = found.iter().map(|p| p.cosine).collect();
    Ok((a.into_pyarray(py), b.into_pyarray(py), c.into_pyarray(py)))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(consolidation_pairs, m)?)?;
    m.add_function(wrap_pyfunction!(similar_pairs, m)?)?;
    Ok(())
}
