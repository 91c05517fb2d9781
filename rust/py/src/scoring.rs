//! Bindings of `hippograph_core::scoring`: zero-copy numpy input, GIL released
//! while scanning so several Python threads can recall at once.
//!
//! The core's structs cross the boundary as three frozen classes instead of
//! flat arguments, each built once by the caller and reused on every call:
//!
//! * [`ValueParams`] mirrors `scoring::ValueParams` (one per resolved type config);
//! * [`Selection`] holds threshold, [`Gate`] and top-k, with the gate checked
//!   when it is built rather than on every scan;
//! * [`UsageColumns`] bundles the five usage columns of `scoring::MetaColumns`.
//!   It holds references to the numpy arrays, never a borrow: each call borrows
//!   them read-only for its own duration (as a numpy argument would be), so
//!   the owner may keep writing rows between calls and one bundle serves every
//!   query until the arrays are replaced. It checks dtype, dimension,
//!   contiguity and equal lengths when built; a call checks dtype and
//!   contiguity again, since numpy lets both change in place.

use crate::errors;
use hippograph_core::scoring::{self, Gate, MetaColumns, ScanRequest, ShapeError, Stored};
use numpy::{Element, IntoPyArray, PyArray1, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyType;
use std::hash::{Hash, Hasher};

/// Indices and scores of the rows a scan selects, best first.
pub(crate) type Scan<'py> = (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<f64>>);

/// The slice of a C-contiguous array (`as_slice` also accepts Fortran order, which would be read transposed).
pub(crate) fn contiguous<'a, T: Element, D: numpy::ndarray::Dimension>(
    py: Python<'_>,
    what: &str,
    arr: &'a numpy::PyReadonlyArray<'_, T, D>,
) -> PyResult<&'a [T]> {
    if !arr.is_c_contiguous() {
        return Err(errors::validation(py, format!("{what} must be a C-contiguous array")));
    }
    arr.as_slice().map_err(|_| errors::validation(py, format!("{what} must be a C-contiguous array")))
}

pub(crate) fn shape(py: Python<'_>, err: ShapeError) -> PyErr {
    errors::validation(py, err.0)
}

/// The stored rows as a scan takes them: float32, or unit rows in float16 given as their bit
/// patterns (uint16), the columns' half-precision storage.
#[derive(FromPyObject)]
pub(crate) enum Matrix<'py> {
    F32(PyReadonlyArray2<'py, f32>),
    F16(PyReadonlyArray2<'py, u16>),
}

impl Matrix<'_> {
    pub(crate) fn dim(&self) -> usize {
        match self {
            Matrix::F32(m) => m.shape()[1],
            Matrix::F16(m) => m.shape()[1],
        }
    }
}

/// The stored matrix and its norms.
pub(crate) fn stored<'a>(
    py: Python<'_>,
    matrix: &'a Matrix<'_>,
    norms: &'a PyReadonlyArray1<'_, f32>,
) -> PyResult<Stored<'a>> {
    let (dim, norms) = (matrix.dim(), contiguous(py, "norms", norms)?);
    Ok(match matrix {
        Matrix::F32(m) => Stored::new(contiguous(py, "matrix", m)?, norms, dim),
        Matrix::F16(m) => Stored::half(contiguous(py, "matrix", m)?, norms, dim),
    })
}

pub(crate) fn check_query_dim(py: Python<'_>, dim: usize, queries: &PyReadonlyArray2<'_, f32>) -> PyResult<()> {
    let qdim = queries.shape()[1];
    if queries.shape()[0] > 0 && dim > 0 && qdim != dim {
        return Err(errors::validation(py, format!("query dimension {qdim} does not match stored dimension {dim}")));
    }
    Ok(())
}

pub(crate) fn hits_to_arrays(py: Python<'_>, hits: Vec<(usize, f64)>) -> Scan<'_> {
    let (idx, scores): (Vec<i64>, Vec<f64>) = hits.into_iter().map(|(i, s)| (i as i64, s)).unzip();
    (idx.into_pyarray(py), scores.into_pyarray(py))
}

/// Parameters of the default value function (`hippograph_core::scoring::ValueParams`).
#[pyclass(frozen, eq, hash, module = "hippograph._core")]
#[derive(Clone, Copy, PartialEq)]
pub struct ValueParams(pub(crate) scoring::ValueParams);

impl Hash for ValueParams {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let p = &self.0;
        for v in [p.lambda, p.k, p.base_floor, p.beta] {
            // Adding +0.0 turns -0.0 into 0.0, which compares equal.
            (v + 0.0).to_bits().hash(state);
        }
    }
}

#[pymethods]
impl ValueParams {
    #[new]
    #[pyo3(signature = (lambda_, k, base_floor, beta))]
    fn new(lambda_: f64, k: f64, base_floor: f64, beta: f64) -> Self {
        ValueParams(scoring::ValueParams { lambda: lambda_, k, base_floor, beta })
    }

    #[getter]
    fn lambda_(&self) -> f64 {
        self.0.lambda
    }

    #[getter]
    fn k(&self) -> f64 {
        self.0.k
    }

    #[getter]
    fn base_floor(&self) -> f64 {
        self.0.base_floor
    }

    #[getter]
    fn beta(&self) -> f64 {
        self.0.beta
    }

    fn __repr__(&self) -> String {
        let p = &self.0;
        format!("ValueParams(lambda_={:?}, k={:?}, base_floor={:?}, beta={:?})", p.lambda, p.k, p.base_floor, p.beta)
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> (Bound<'py, PyType>, (f64, f64, f64, f64)) {
        let p = slf.get().0;
        (slf.get_type(), (p.lambda, p.k, p.base_floor, p.beta))
    }
}

fn gate_name(gate: Gate) -> &'static str {
    match gate {
        Gate::Score => "score",
        Gate::Relevance => "relevance",
    }
}

/// What a scan keeps: at most `top_k` rows whose score (or relevance, per `gate`) reaches `threshold`.
#[pyclass(frozen, eq, hash, module = "hippograph._core")]
#[derive(Clone, Copy, PartialEq)]
pub struct Selection {
    pub(crate) threshold: f64,
    pub(crate) gate: Gate,
    pub(crate) top_k: usize,
}

impl Hash for Selection {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.threshold + 0.0).to_bits().hash(state);
        gate_name(self.gate).hash(state);
        self.top_k.hash(state);
    }
}

#[pymethods]
impl Selection {
    /// `gate` is `"score"` or `"relevance"`; anything else is a `ValidationError`.
    #[new]
    fn new(py: Python<'_>, threshold: f64, gate: &str, top_k: usize) -> PyResult<Self> {
        let gate = match gate {
            "score" => Gate::Score,
            "relevance" => Gate::Relevance,
            other => return Err(errors::validation(py, format!("gate must be 'score' or 'relevance', got {other:?}"))),
        };
        Ok(Selection { threshold, gate, top_k })
    }

    #[getter]
    fn threshold(&self) -> f64 {
        self.threshold
    }

    #[getter]
    fn gate(&self) -> &'static str {
        gate_name(self.gate)
    }

    #[getter]
    fn top_k(&self) -> usize {
        self.top_k
    }

    fn __repr__(&self) -> String {
        format!("Selection(threshold={:?}, gate='{}', top_k={})", self.threshold, gate_name(self.gate), self.top_k)
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> (Bound<'py, PyType>, (f64, &'static str, usize)) {
        let s = slf.get();
        (slf.get_type(), (s.threshold, gate_name(s.gate), s.top_k))
    }
}

/// The usage columns of the default value function (`hippograph_core::scoring::MetaColumns`),
/// one entry per stored row.
#[pyclass(frozen, module = "hippograph._core")]
pub struct UsageColumns {
    #[pyo3(get)]
    has_meta: Py<PyArray1<u8>>,
    #[pyo3(get)]
    timestamp: Py<PyArray1<f64>>,
    #[pyo3(get)]
    access_count: Py<PyArray1<f64>>,
    #[pyo3(get)]
    reward_count: Py<PyArray1<f64>>,
    #[pyo3(get)]
    cumulative_reward: Py<PyArray1<f64>>,
}

#[pymethods]
impl UsageColumns {
    #[new]
    fn new(
        has_meta: Bound<'_, PyArray1<u8>>,
        timestamp: Bound<'_, PyArray1<f64>>,
        access_count: Bound<'_, PyArray1<f64>>,
        reward_count: Bound<'_, PyArray1<f64>>,
        cumulative_reward: Bound<'_, PyArray1<f64>>,
    ) -> PyResult<Self> {
        let py = has_meta.py();
        let usage = UsageColumns {
            has_meta: has_meta.unbind(),
            timestamp: timestamp.unbind(),
            access_count: access_count.unbind(),
            reward_count: reward_count.unbind(),
            cumulative_reward: cumulative_reward.unbind(),
        };
        let view = usage.borrow(py)?;
        let columns = view.columns(py)?;
        let lens = [
            columns.has_meta.len(),
            columns.timestamp.len(),
            columns.access_count.len(),
            columns.reward_count.len(),
            columns.cumulative_reward.len(),
        ];
        if lens.iter().any(|&l| l != lens[0]) {
            return Err(errors::validation(py, format!("usage columns have lengths {lens:?}; they must be equal")));
        }
        Ok(usage)
    }

    fn __len__(&self, py: Python<'_>) -> usize {
        self.has_meta.bind(py).len()
    }
}

fn borrow_column<'py, T: Element>(py: Python<'py>, column: &Py<PyArray1<T>>) -> PyResult<PyReadonlyArray1<'py, T>> {
    // Extracting again re-checks the dtype, which numpy allows to be reassigned in place.
    column.bind(py).as_any().extract()
}

impl UsageColumns {
    /// The five columns, borrowed read-only until the returned view drops.
    pub(crate) fn borrow<'py>(&self, py: Python<'py>) -> PyResult<UsageView<'py>> {
        Ok(UsageView {
            has_meta: borrow_column(py, &self.has_meta)?,
            timestamp: borrow_column(py, &self.timestamp)?,
            access_count: borrow_column(py, &self.access_count)?,
            reward_count: borrow_column(py, &self.reward_count)?,
            cumulative_reward: borrow_column(py, &self.cumulative_reward)?,
        })
    }
}

/// The columns of a [`UsageColumns`] borrowed for one call.
pub(crate) struct UsageView<'py> {
    has_meta: PyReadonlyArray1<'py, u8>,
    timestamp: PyReadonlyArray1<'py, f64>,
    access_count: PyReadonlyArray1<'py, f64>,
    reward_count: PyReadonlyArray1<'py, f64>,
    cumulative_reward: PyReadonlyArray1<'py, f64>,
}

impl UsageView<'_> {
    pub(crate) fn columns(&self, py: Python<'_>) -> PyResult<MetaColumns<'_>> {
        Ok(MetaColumns {
            has_meta: contiguous(py, "has_meta", &self.has_meta)?,
            timestamp: contiguous(py, "timestamp", &self.timestamp)?,
            access_count: contiguous(py, "access_count", &self.access_count)?,
            reward_count: contiguous(py, "reward_count", &self.reward_count)?,
            cumulative_reward: contiguous(py, "cumulative_reward", &self.cumulative_reward)?,
        })
    }
}

/// The arrays one scan reads, borrowed for the call.
pub(crate) struct ScanArrays<'py> {
    pub matrix: Matrix<'py>,
    pub norms: PyReadonlyArray1<'py, f32>,
    pub queries: PyReadonlyArray2<'py, f32>,
    pub usage: UsageView<'py>,
    pub rank: Option<PyReadonlyArray1<'py, u32>>,
}

impl ScanArrays<'_> {
    /// The core's request over these arrays, after the checks the core leaves to its callers.
    pub(crate) fn request(
        &self,
        py: Python<'_>,
        now: f64,
        params: &ValueParams,
        selection: &Selection,
    ) -> PyResult<ScanRequest<'_>> {
        check_query_dim(py, self.matrix.dim(), &self.queries)?;
        Ok(ScanRequest {
            stored: stored(py, &self.matrix, &self.norms)?,
            queries: contiguous(py, "queries", &self.queries)?,
            meta: self.usage.columns(py)?,
            rank: match &self.rank {
                Some(r) => Some(contiguous(py, "rank", r)?),
                None => None,
            },
            now,
            params: params.0,
            threshold: selection.threshold,
            gate: selection.gate,
            top_k: selection.top_k,
        })
    }
}

/// Row norms of a float32 matrix.
#[pyfunction]
fn row_norms<'py>(py: Python<'py>, matrix: PyReadonlyArray2<'py, f32>) -> PyResult<Bound<'py, PyArray1<f32>>> {
    let dim = matrix.shape()[1];
    let data = contiguous(py, "matrix", &matrix)?;
    let out = errors::detached(py, "row_norms", || scoring::row_norms(data, dim))?;
    Ok(out.into_pyarray(py))
}

/// Euclidean norm of one vector (f64 sum): short, so the GIL is kept.
#[pyfunction]
fn vector_norm(v: PyReadonlyArray1<'_, f32>) -> f64 {
    match v.as_slice() {
        Ok(values) => scoring::vector_norm(values),
        Err(_) => scoring::vector_norm(&v.as_array().iter().copied().collect::<Vec<f32>>()),
    }
}

/// A list or tuple of Python floats and ints (no bools) as a new float32 array, as numpy would
/// convert it (a float rounded to the nearest float32, out of range: infinite), or None for any
/// other element, which the caller's general conversion judges: an embedder's list of floats is
/// then read once, without a float64 array and a pass over the elements' types in between.
#[pyfunction]
fn float_list_f32<'py>(py: Python<'py>, value: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyArray1<f32>>>> {
    use pyo3::types::{PyFloat, PyInt, PyList, PyTuple};
    let read = |x: Bound<'py, PyAny>| -> Option<f32> {
        if x.is_exact_instance_of::<PyFloat>() {
            Some(x.cast_into::<PyFloat>().ok()?.value() as f32)
        } else if x.is_exact_instance_of::<PyInt>() {
            // Exact in f64 up to 2^53, so one rounding to f32, as numpy's; larger ints go to numpy,
            // which rounds an all-int list straight from int64.
            x.extract::<i64>().ok().filter(|i| i.unsigned_abs() <= 1 << 53).map(|i| i as f64 as f32)
        } else {
            None
        }
    };
    let out: Option<Vec<f32>> = if let Ok(list) = value.cast_exact::<PyList>() {
        list.iter().map(read).collect()
    } else if let Ok(tuple) = value.cast_exact::<PyTuple>() {
        tuple.iter().map(read).collect()
    } else {
        None
    };
    Ok(out.map(|v| v.into_pyarray(py)))
}

/// Relevance of every stored row against the query and tag vectors.
#[pyfunction]
fn relevance<'py>(
    py: Python<'py>,
    matrix: Matrix<'py>,
    norms: PyReadonlyArray1<'py, f32>,
    queries: PyReadonlyArray2<'py, f32>,
) -> PyResult<Bound<'py, PyArray1<f32>>> {
    check_query_dim(py, matrix.dim(), &queries)?;
    let stored = stored(py, &matrix, &norms)?;
    let q = contiguous(py, "queries", &queries)?;
    let rel = errors::detached(py, "relevance", || scoring::relevance(stored, q))?.map_err(|e| shape(py, e))?;
    Ok(rel.into_pyarray(py))
}

/// `relevance` of the listed rows only, in their order; GIL released.
#[pyfunction]
fn relevance_of_rows<'py>(
    py: Python<'py>,
    matrix: Matrix<'py>,
    norms: PyReadonlyArray1<'py, f32>,
    queries: PyReadonlyArray2<'py, f32>,
    rows: PyReadonlyArray1<'py, u32>,
) -> PyResult<Bound<'py, PyArray1<f32>>> {
    check_query_dim(py, matrix.dim(), &queries)?;
    let stored = stored(py, &matrix, &norms)?;
    let q = contiguous(py, "queries", &queries)?;
    let r = contiguous(py, "rows", &rows)?;
    let rel = errors::detached(py, "relevance_of_rows", || scoring::relevance_of_rows(stored, q, r))?
        .map_err(|e| shape(py, e))?;
    Ok(rel.into_pyarray(py))
}

/// The best `k` rows by positive relevance and every tie with the k-th, unordered; GIL released.
#[pyfunction]
#[pyo3(signature = (matrix, norms, queries, k, rows=None))]
#[expect(clippy::type_complexity, reason = "a pair of numpy arrays, as the Python signature says")]
fn top_relevance<'py>(
    py: Python<'py>,
    matrix: Matrix<'py>,
    norms: PyReadonlyArray1<'py, f32>,
    queries: PyReadonlyArray2<'py, f32>,
    k: usize,
    rows: Option<PyReadonlyArray1<'py, u32>>,
) -> PyResult<(Bound<'py, PyArray1<u32>>, Bound<'py, PyArray1<f32>>)> {
    check_query_dim(py, matrix.dim(), &queries)?;
    let stored = stored(py, &matrix, &norms)?;
    let q = contiguous(py, "queries", &queries)?;
    let r = match &rows {
        Some(r) => Some(contiguous(py, "rows", r)?),
        None => None,
    };
    let (found, sims) =
        errors::detached(py, "top_relevance", || scoring::top_relevance(stored, q, k, r))?.map_err(|e| shape(py, e))?;
    Ok((found.into_pyarray(py), sims.into_pyarray(py)))
}

/// Best `top_k` indices with `score >= threshold`, ties by `rank` ascending.
#[pyfunction]
#[pyo3(signature = (scores, threshold, top_k, rank=None))]
fn select_top<'py>(
    py: Python<'py>,
    scores: PyReadonlyArray1<'py, f64>,
    threshold: f64,
    top_k: usize,
    rank: Option<PyReadonlyArray1<'py, u32>>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let s = contiguous(py, "scores", &scores)?;
    let r = match &rank {
        Some(r) => Some(contiguous(py, "rank", r)?),
        None => None,
    };
    let picked = errors::detached(py, "select_top", || scoring::select_top(s, threshold, top_k, r))?
        .map_err(|e| shape(py, e))?;
    let picked: Vec<i64> = picked.into_iter().map(|i| i as i64).collect();
    Ok(picked.into_pyarray(py))
}

/// One exact scan of a node type with the default value function (through the rows' shadow when
/// given: the same answer).
#[pyfunction]
#[pyo3(signature = (matrix, norms, queries, usage, rank, now, params, selection, shadow=None))]
#[expect(clippy::too_many_arguments, reason = "one parameter per argument of the Python signature")]
fn scan_default<'py>(
    py: Python<'py>,
    matrix: Matrix<'py>,
    norms: PyReadonlyArray1<'py, f32>,
    queries: PyReadonlyArray2<'py, f32>,
    usage: &Bound<'py, UsageColumns>,
    rank: Option<PyReadonlyArray1<'py, u32>>,
    now: f64,
    params: &Bound<'py, ValueParams>,
    selection: &Bound<'py, Selection>,
    shadow: Option<(PyReadonlyArray2<'py, u16>, PyReadonlyArray1<'py, f32>)>,
) -> PyResult<Scan<'py>> {
    let arrays = ScanArrays { matrix, norms, queries, usage: usage.get().borrow(py)?, rank };
    let req = arrays.request(py, now, params.get(), selection.get())?;
    let hits = match &shadow {
        None => errors::detached(py, "scan_default", || scoring::scan_default(&req))?,
        Some((half, residual)) => {
            let sh = crate::shadow::borrowed(py, half, residual, req.stored.dim)?;
            errors::detached(py, "scan_default", || scoring::scan_default_shadowed(&req, sh))?
        }
    }
    .map_err(|e| shape(py, e))?;
    Ok(hits_to_arrays(py, hits))
}

/// The default value function over precomputed relevances (maintenance scores usage alone this way).
#[pyfunction]
fn default_values<'py>(
    py: Python<'py>,
    relevance: PyReadonlyArray1<'py, f32>,
    usage: &Bound<'py, UsageColumns>,
    now: f64,
    params: &Bound<'py, ValueParams>,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let rel = contiguous(py, "relevance", &relevance)?;
    let view = usage.get().borrow(py)?;
    let meta = view.columns(py)?;
    let p = params.get().0;
    let out = errors::detached(py, "default_values", || scoring::default_values(rel, meta, now, &p))?
        .map_err(|e| shape(py, e))?;
    Ok(out.into_pyarray(py))
}

/// The default value function for one row with usage metadata (the per-node form of `default_values`).
#[pyfunction]
fn default_value(
    relevance: f64,
    timestamp: f64,
    access_count: f64,
    reward_count: f64,
    cumulative_reward: f64,
    now: f64,
    params: &Bound<'_, ValueParams>,
) -> f64 {
    let meta = (timestamp, access_count, reward_count, cumulative_reward);
    scoring::default_value(relevance, Some(meta), now, &params.get().0)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ValueParams>()?;
    m.add_class::<Selection>()?;
    m.add_class::<UsageColumns>()?;
    m.add_function(wrap_pyfunction!(row_norms, m)?)?;
    m.add_function(wrap_pyfunction!(vector_norm, m)?)?;
    m.add_function(wrap_pyfunction!(float_list_f32, m)?)?;
    m.add_function(wrap_pyfunction!(relevance, m)?)?;
    m.add_function(wrap_pyfunction!(relevance_of_rows, m)?)?;
    m.add_function(wrap_pyfunction!(top_relevance, m)?)?;
    m.add_function(wrap_pyfunction!(select_top, m)?)?;
    m.add_function(wrap_pyfunction!(scan_default, m)?)?;
    m.add_function(wrap_pyfunction!(default_values, m)?)?;
    m.add_function(wrap_pyfunction!(default_value, m)?)?;
    Ok(())
}
