//! Binding of `hippograph_core::explain`: the parts of listed rows' scores, GIL released.

use crate::errors;
use crate::scoring::{check_query_dim, contiguous, shape, stored, Matrix, UsageColumns, ValueParams};
use hippograph_core::explain;
use numpy::{IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::prelude::*;

/// Columns of an explanation, one entry per listed row: similarities (`rows × queries`),
/// relevance, whether the row has metadata, hours, recency, frequency, reward and score.
type Columns<'py> = (
    Bound<'py, PyArray2<f32>>,
    Bound<'py, PyArray1<f32>>,
    Bound<'py, PyArray1<bool>>,
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<f64>>,
);

/// What the listed rows' default-value scores are made of.
#[pyfunction]
#[expect(clippy::too_many_arguments, reason = "one parameter per argument of the Python signature")]
fn explain_rows<'py>(
    py: Python<'py>,
    matrix: Matrix<'py>,
    norms: PyReadonlyArray1<'py, f32>,
    queries: PyReadonlyArray2<'py, f32>,
    usage: &Bound<'py, UsageColumns>,
    rows: PyReadonlyArray1<'py, u32>,
    now: f64,
    params: &Bound<'py, ValueParams>,
) -> PyResult<Columns<'py>> {
    check_query_dim(py, matrix.dim(), &queries)?;
    let stored = stored(py, &matrix, &norms)?;
    let q = contiguous(py, "queries", &queries)?;
    let r = contiguous(py, "rows", &rows)?;
    let view = usage.get().borrow(py)?;
    let meta = view.columns(py)?;
    let p = params.get().0;
    let got = errors::detached(py, "explain_rows", || explain::explain_rows(stored, q, meta, now, &p, r))?
        .map_err(|e| shape(py, e))?;
    let m = q.len().checked_div(stored.dim).unwrap_or(0);
    let sims = numpy::ndarray::Array2::from_shape_vec((r.len(), m), got.similarities)
        .map_err(|e| errors::validation(py, e.to_string()))?;
    let part = |f: fn(&hippograph_core::scoring::ValueParts) -> f64| -> Vec<f64> {
        got.parts.iter().map(|v| v.as_ref().map_or(f64::NAN, f)).collect()
    };
    Ok((
        sims.into_pyarray(py),
        got.relevance.into_pyarray(py),
        got.parts.iter().map(Option::is_some).collect::<Vec<bool>>().into_pyarray(py),
        part(|v| v.hours).into_pyarray(py),
        part(|v| v.recency).into_pyarray(py),
        part(|v| v.frequency).into_pyarray(py),
        part(|v| v.reward).into_pyarray(py),
        got.score.into_pyarray(py),
    ))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(explain_rows, m)?)?;
    Ok(())
}
