//! Bindings of `hippograph_core::scoring`: zero-copy numpy input, GIL released
//! while scanning so several Python threads can recall at once.

use crate::errors;
use hippograph_core::scoring::{self, Gate, MetaColumns, ScanRequest, ShapeError, Stored, ValueParams};
use hippograph_core::{certified, pairs};
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::prelude::*;

type Scan<'py> = (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<f64>>);
type Order<'py> = (Bound<'py, PyArray1<u32>>, Bound<'py, PyArray1<f64>>);
type Pairs<'py> = (Bound<'py, PyArray1<u32>>, Bound<'py, PyArray1<u32>>, Bound<'py, PyArray1<f32>>);

fn contiguous<'a, T: numpy::Element, D: numpy::ndarray::Dimension>(
    py: Python<'_>,
    what: &str,
    arr: &'a numpy::PyReadonlyArray<'_, T, D>,
) -> PyResult<&'a [T]> {
    // as_slice() also accepts Fortran order, which would be read transposed.
    if !arr.is_c_contiguous() {
        return Err(errors::validation(py, format!("{what} must be a C-contiguous array")));
    }
    arr.as_slice().map_err(|_| errors::validation(py, format!("{what} must be a C-contiguous array")))
}

fn shape(py: Python<'_>, err: ShapeError) -> PyErr {
    errors::validation(py, err.0)
}

fn matrix_dim(
    py: Python<'_>,
    matrix: &PyReadonlyArray2<'_, f32>,
    queries: &PyReadonlyArray2<'_, f32>,
) -> PyResult<usize> {
    let dim = matrix.shape()[1];
    let qdim = queries.shape()[1];
    if queries.shape()[0] > 0 && dim > 0 && qdim != dim {
        return Err(errors::validation(py, format!("query dimension {qdim} does not match stored dimension {dim}")));
    }
    Ok(dim)
}

/// The metadata columns of the default value function, borrowed from numpy.
fn meta_columns<'a>(
    py: Python<'_>,
    has_meta: &'a PyReadonlyArray1<'_, u8>,
    timestamp: &'a PyReadonlyArray1<'_, f64>,
    access_count: &'a PyReadonlyArray1<'_, f64>,
    reward_count: &'a PyReadonlyArray1<'_, f64>,
    cumulative_reward: &'a PyReadonlyArray1<'_, f64>,
) -> PyResult<MetaColumns<'a>> {
    Ok(MetaColumns {
        has_meta: contiguous(py, "has_meta", has_meta)?,
        timestamp: contiguous(py, "timestamp", timestamp)?,
        access_count: contiguous(py, "access_count", access_count)?,
        reward_count: contiguous(py, "reward_count", reward_count)?,
        cumulative_reward: contiguous(py, "cumulative_reward", cumulative_reward)?,
    })
}

/// `"score"` or `"relevance"`: what a type's threshold is compared with.
fn gate(py: Python<'_>, name: &str) -> PyResult<Gate> {
    match name {
        "score" => Ok(Gate::Score),
        "relevance" => Ok(Gate::Relevance),
        other => Err(errors::validation(py, format!("gate must be 'score' or 'relevance', got {other:?}"))),
    }
}

fn indices(picked: Vec<usize>) -> Vec<i64> {
    picked.into_iter().map(|i| i as i64).collect()
}

/// Row norms of a float32 matrix.
#[pyfunction]
fn row_norms<'py>(py: Python<'py>, matrix: PyReadonlyArray2<'py, f32>) -> PyResult<Bound<'py, PyArray1<f32>>> {
    let dim = matrix.shape()[1];
    let data = contiguous(py, "matrix", &matrix)?;
    let out = errors::detached(py, "row_norms", || scoring::row_norms(data, dim))?;
    Ok(out.into_pyarray(py))
}

/// Relevance of every stored row against the query and tag vectors.
#[pyfunction]
fn relevance<'py>(
    py: Python<'py>,
    matrix: PyReadonlyArray2<'py, f32>,
    norms: PyReadonlyArray1<'py, f32>,
    queries: PyReadonlyArray2<'py, f32>,
) -> PyResult<Bound<'py, PyArray1<f32>>> {
    let dim = matrix_dim(py, &matrix, &queries)?;
    let stored = Stored { data: contiguous(py, "matrix", &matrix)?, norms: contiguous(py, "norms", &norms)?, dim };
    let q = contiguous(py, "queries", &queries)?;
    let rel = errors::detached(py, "relevance", || scoring::relevance(stored, q))?.map_err(|e| shape(py, e))?;
    Ok(rel.into_pyarray(py))
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
    Ok(indices(picked).into_pyarray(py))
}

/// One exact scan of a node type with the default value function.
#[pyfunction]
#[pyo3(signature = (
    matrix, norms, queries, has_meta, timestamp, access_count, reward_count, cumulative_reward,
    rank, now, lambda_, k, base_floor, beta, threshold, gate, top_k
))]
#[allow(clippy::too_many_arguments)]
fn scan_default<'py>(
    py: Python<'py>,
    matrix: PyReadonlyArray2<'py, f32>,
    norms: PyReadonlyArray1<'py, f32>,
    queries: PyReadonlyArray2<'py, f32>,
    has_meta: PyReadonlyArray1<'py, u8>,
    timestamp: PyReadonlyArray1<'py, f64>,
    access_count: PyReadonlyArray1<'py, f64>,
    reward_count: PyReadonlyArray1<'py, f64>,
    cumulative_reward: PyReadonlyArray1<'py, f64>,
    rank: Option<PyReadonlyArray1<'py, u32>>,
    now: f64,
    lambda_: f64,
    k: f64,
    base_floor: f64,
    beta: f64,
    threshold: f64,
    gate: &str,
    top_k: usize,
) -> PyResult<Scan<'py>> {
    let dim = matrix_dim(py, &matrix, &queries)?;
    let req = ScanRequest {
        stored: Stored { data: contiguous(py, "matrix", &matrix)?, norms: contiguous(py, "norms", &norms)?, dim },
        queries: contiguous(py, "queries", &queries)?,
        meta: meta_columns(py, &has_meta, &timestamp, &access_count, &reward_count, &cumulative_reward)?,
        rank: match &rank {
            Some(r) => Some(contiguous(py, "rank", r)?),
            None => None,
        },
        now,
        params: ValueParams { lambda: lambda_, k, base_floor, beta },
        threshold,
        gate: self::gate(py, gate)?,
        top_k,
    };
    let hits = errors::detached(py, "scan_default", || scoring::scan_default(&req))?.map_err(|e| shape(py, e))?;
    let (idx, scores): (Vec<i64>, Vec<f64>) = hits.into_iter().map(|(i, s)| (i as i64, s)).unzip();
    Ok((idx.into_pyarray(py), scores.into_pyarray(py)))
}

/// The default value function over precomputed relevances (used by tests and
/// by maintenance, which scores without relevance).
#[pyfunction]
#[pyo3(signature = (
    relevance, has_meta, timestamp, access_count, reward_count, cumulative_reward,
    now, lambda_, k, base_floor, beta
))]
#[allow(clippy::too_many_arguments)]
fn default_values<'py>(
    py: Python<'py>,
    relevance: PyReadonlyArray1<'py, f32>,
    has_meta: PyReadonlyArray1<'py, u8>,
    timestamp: PyReadonlyArray1<'py, f64>,
    access_count: PyReadonlyArray1<'py, f64>,
    reward_count: PyReadonlyArray1<'py, f64>,
    cumulative_reward: PyReadonlyArray1<'py, f64>,
    now: f64,
    lambda_: f64,
    k: f64,
    base_floor: f64,
    beta: f64,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let rel = contiguous(py, "relevance", &relevance)?;
    let meta = meta_columns(py, &has_meta, &timestamp, &access_count, &reward_count, &cumulative_reward)?;
    let params = ValueParams { lambda: lambda_, k, base_floor, beta };
    let out = errors::detached(py, "default_values", || scoring::default_values(rel, meta, now, &params))?
        .map_err(|e| shape(py, e))?;
    Ok(out.into_pyarray(py))
}

/// The default value function for one row with usage metadata (the per-node form of `default_values`).
#[pyfunction]
#[pyo3(signature = (relevance, timestamp, access_count, reward_count, cumulative_reward, now, lambda_, k, base_floor, beta))]
#[allow(clippy::too_many_arguments)]
fn default_value(
    relevance: f64,
    timestamp: f64,
    access_count: f64,
    reward_count: f64,
    cumulative_reward: f64,
    now: f64,
    lambda_: f64,
    k: f64,
    base_floor: f64,
    beta: f64,
) -> f64 {
    let params = ValueParams { lambda: lambda_, k, base_floor, beta };
    scoring::default_value(relevance, Some((timestamp, access_count, reward_count, cumulative_reward)), now, &params)
}

/// Rows sorted by their time-independent usage bound, for `certified_walk`.
#[pyfunction]
#[pyo3(signature = (has_meta, timestamp, access_count, reward_count, cumulative_reward, lambda_, k, base_floor, beta))]
#[allow(clippy::too_many_arguments)]
fn usage_order<'py>(
    py: Python<'py>,
    has_meta: PyReadonlyArray1<'py, u8>,
    timestamp: PyReadonlyArray1<'py, f64>,
    access_count: PyReadonlyArray1<'py, f64>,
    reward_count: PyReadonlyArray1<'py, f64>,
    cumulative_reward: PyReadonlyArray1<'py, f64>,
    lambda_: f64,
    k: f64,
    base_floor: f64,
    beta: f64,
) -> PyResult<Order<'py>> {
    let meta = meta_columns(py, &has_meta, &timestamp, &access_count, &reward_count, &cumulative_reward)?;
    let params = ValueParams { lambda: lambda_, k, base_floor, beta };
    let order =
        errors::detached(py, "usage_order", || certified::usage_order(meta, &params))?.map_err(|e| shape(py, e))?;
    Ok((order.rows.into_pyarray(py), order.keys.into_pyarray(py)))
}

/// A usage order with its stale rows merged in (see `hippograph_core::certified::merge_usage_order`).
#[pyfunction]
#[pyo3(signature = (
    rows, keys, stale, has_meta, timestamp, access_count, reward_count, cumulative_reward, lambda_, k, base_floor, beta
))]
#[allow(clippy::too_many_arguments)]
fn merge_usage_order<'py>(
    py: Python<'py>,
    rows: PyReadonlyArray1<'py, u32>,
    keys: PyReadonlyArray1<'py, f64>,
    stale: PyReadonlyArray1<'py, u32>,
    has_meta: PyReadonlyArray1<'py, u8>,
    timestamp: PyReadonlyArray1<'py, f64>,
    access_count: PyReadonlyArray1<'py, f64>,
    reward_count: PyReadonlyArray1<'py, f64>,
    cumulative_reward: PyReadonlyArray1<'py, f64>,
    lambda_: f64,
    k: f64,
    base_floor: f64,
    beta: f64,
) -> PyResult<Order<'py>> {
    let meta = meta_columns(py, &has_meta, &timestamp, &access_count, &reward_count, &cumulative_reward)?;
    let params = ValueParams { lambda: lambda_, k, base_floor, beta };
    let (rows, keys) = (contiguous(py, "rows", &rows)?, contiguous(py, "keys", &keys)?);
    let stale = contiguous(py, "stale", &stale)?;
    let order =
        errors::detached(py, "merge_usage_order", || certified::merge_usage_order(rows, keys, stale, meta, &params))?
            .map_err(|e| shape(py, e))?;
    Ok((order.rows.into_pyarray(py), order.keys.into_pyarray(py)))
}

/// The certified top-k from a candidate pool with the default value function, or None past the budget.
#[pyfunction]
#[pyo3(signature = (
    matrix, norms, queries, has_meta, timestamp, access_count, reward_count, cumulative_reward,
    rank, now, lambda_, k, base_floor, beta, threshold, gate, top_k, pool, bound, order, order_keys, stale, budget
))]
#[allow(clippy::too_many_arguments)]
fn certified_walk<'py>(
    py: Python<'py>,
    matrix: PyReadonlyArray2<'py, f32>,
    norms: PyReadonlyArray1<'py, f32>,
    queries: PyReadonlyArray2<'py, f32>,
    has_meta: PyReadonlyArray1<'py, u8>,
    timestamp: PyReadonlyArray1<'py, f64>,
    access_count: PyReadonlyArray1<'py, f64>,
    reward_count: PyReadonlyArray1<'py, f64>,
    cumulative_reward: PyReadonlyArray1<'py, f64>,
    rank: Option<PyReadonlyArray1<'py, u32>>,
    now: f64,
    lambda_: f64,
    k: f64,
    base_floor: f64,
    beta: f64,
    threshold: f64,
    gate: &str,
    top_k: usize,
    pool: PyReadonlyArray1<'py, u32>,
    bound: f64,
    order: PyReadonlyArray1<'py, u32>,
    order_keys: PyReadonlyArray1<'py, f64>,
    stale: PyReadonlyArray1<'py, u32>,
    budget: usize,
) -> PyResult<Option<Scan<'py>>> {
    let dim = matrix_dim(py, &matrix, &queries)?;
    let req = certified::WalkRequest {
        scan: ScanRequest {
            stored: Stored { data: contiguous(py, "matrix", &matrix)?, norms: contiguous(py, "norms", &norms)?, dim },
            queries: contiguous(py, "queries", &queries)?,
            meta: meta_columns(py, &has_meta, &timestamp, &access_count, &reward_count, &cumulative_reward)?,
            rank: match &rank {
                Some(r) => Some(contiguous(py, "rank", r)?),
                None => None,
            },
            now,
            params: ValueParams { lambda: lambda_, k, base_floor, beta },
            threshold,
            gate: self::gate(py, gate)?,
            top_k,
        },
        pool: contiguous(py, "pool", &pool)?,
        bound,
        order: contiguous(py, "order", &order)?,
        order_keys: contiguous(py, "order_keys", &order_keys)?,
        stale: contiguous(py, "stale", &stale)?,
        budget,
    };
    let hits = errors::detached(py, "certified_walk", || certified::walk(&req))?.map_err(|e| shape(py, e))?;
    Ok(hits.map(|hits| {
        let (idx, scores): (Vec<i64>, Vec<f64>) = hits.into_iter().map(|(i, s)| (i as i64, s)).unzip();
        (idx.into_pyarray(py), scores.into_pyarray(py))
    }))
}

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
    let dim = matrix.shape()[1];
    let stored = Stored { data: contiguous(py, "matrix", &matrix)?, norms: contiguous(py, "norms", &norms)?, dim };
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

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(consolidation_pairs, m)?)?;
    m.add_function(wrap_pyfunction!(row_norms, m)?)?;
    m.add_function(wrap_pyfunction!(relevance, m)?)?;
    m.add_function(wrap_pyfunction!(select_top, m)?)?;
    m.add_function(wrap_pyfunction!(scan_default, m)?)?;
    m.add_function(wrap_pyfunction!(default_values, m)?)?;
    m.add_function(wrap_pyfunction!(default_value, m)?)?;
    m.add_function(wrap_pyfunction!(usage_order, m)?)?;
    m.add_function(wrap_pyfunction!(merge_usage_order, m)?)?;
    m.add_function(wrap_pyfunction!(certified_walk, m)?)?;
    Ok(())
}
