//! Bindings of `hippograph_core::shadow`: the half-precision shadow of a matrix and the exact
//! top-k read through it; GIL released.

use crate::errors;
use crate::scoring::{check_query_dim, contiguous, shape, stored, Matrix};
use hippograph_core::shadow::{self, Shadow};
use numpy::ndarray::Array2;
use numpy::{IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::prelude::*;

/// Each row as its unit vector in f16 (bit patterns, `uint16`) and each row's residual.
#[pyfunction]
#[expect(clippy::type_complexity, reason = "a pair of numpy arrays, as the Python signature says")]
fn shadow_rows<'py>(
    py: Python<'py>,
    matrix: PyReadonlyArray2<'py, f32>,
) -> PyResult<(Bound<'py, PyArray2<u16>>, Bound<'py, PyArray1<f32>>)> {
    let (n, dim) = (matrix.shape()[0], matrix.shape()[1]);
    let data = contiguous(py, "matrix", &matrix)?;
    let (half, residual) = errors::detached(py, "shadow_rows", || shadow::encode_rows(data, dim))?;
    let half = Array2::from_shape_vec((n, dim), half).map_err(|e| errors::validation(py, e.to_string()))?;
    Ok((half.into_pyarray(py), residual.into_pyarray(py)))
}

/// The shadow of a matrix of dimension `dim` as the core reads it.
pub(crate) fn borrowed<'a>(
    py: Python<'_>,
    half: &'a PyReadonlyArray2<'_, u16>,
    residual: &'a PyReadonlyArray1<'_, f32>,
    dim: usize,
) -> PyResult<Shadow<'a>> {
    if half.shape()[1] != dim {
        return Err(errors::validation(py, format!("the shadow's dimension {} is not {dim}", half.shape()[1])));
    }
    Ok(Shadow { data: contiguous(py, "half", half)?, residual: contiguous(py, "residual", residual)?, dim })
}

/// `top_relevance` read through the shadow: the same answer.
#[pyfunction]
#[pyo3(signature = (matrix, norms, half, residual, queries, k, rows=None))]
#[expect(clippy::too_many_arguments, reason = "the matrix, its shadow and the query, as the Python signature says")]
#[expect(clippy::type_complexity, reason = "a pair of numpy arrays, as the Python signature says")]
fn top_relevance_shadowed<'py>(
    py: Python<'py>,
    matrix: PyReadonlyArray2<'py, f32>,
    norms: PyReadonlyArray1<'py, f32>,
    half: PyReadonlyArray2<'py, u16>,
    residual: PyReadonlyArray1<'py, f32>,
    queries: PyReadonlyArray2<'py, f32>,
    k: usize,
    rows: Option<PyReadonlyArray1<'py, u32>>,
) -> PyResult<(Bound<'py, PyArray1<u32>>, Bound<'py, PyArray1<f32>>)> {
    let dim = matrix.shape()[1];
    check_query_dim(py, dim, &queries)?;
    let matrix = Matrix::F32(matrix);
    let stored = stored(py, &matrix, &norms)?;
    let sh = borrowed(py, &half, &residual, dim)?;
    let q = contiguous(py, "queries", &queries)?;
    let r = match &rows {
        Some(r) => Some(contiguous(py, "rows", r)?),
        None => None,
    };
    let (found, sims) =
        errors::detached(py, "top_relevance_shadowed", || shadow::top_relevance_shadowed(stored, sh, q, k, r))?
            .map_err(|e| shape(py, e))?;
    Ok((found.into_pyarray(py), sims.into_pyarray(py)))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(shadow_rows, m)?)?;
    m.add_function(wrap_pyfunction!(top_relevance_shadowed, m)?)?;
    Ok(())
}
