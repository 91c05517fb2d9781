//! Bindings of `hippograph_core::certified`: the usage order and the certified
//! walk of the approximate path, over the same structured arguments as
//! [`crate::scoring`].

use crate::errors;
use crate::scoring::{
    check_query_dim, contiguous, hits_to_arrays, shape, Matrix, Scan, ScanArrays, Selection, UsageColumns, ValueParams,
};
use hippograph_core::certified::{self, UsageOrder};
use hippograph_core::scoring::Stored;
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::prelude::*;

/// Rows sorted by their usage key, largest first, and the keys.
type Order<'py> = (Bound<'py, PyArray1<u32>>, Bound<'py, PyArray1<f64>>);

fn order_to_arrays(py: Python<'_>, order: UsageOrder) -> Order<'_> {
    (order.rows.into_pyarray(py), order.keys.into_pyarray(py))
}

/// Rows sorted by their time-independent usage bound, for `certified_walk`.
#[pyfunction]
fn usage_order<'py>(
    py: Python<'py>,
    usage: &Bound<'py, UsageColumns>,
    params: &Bound<'py, ValueParams>,
) -> PyResult<Order<'py>> {
    let view = usage.get().borrow(py)?;
    let meta = view.columns(py)?;
    let p = params.get().0;
    let order = errors::detached(py, "usage_order", || certified::usage_order(meta, &p))?.map_err(|e| shape(py, e))?;
    Ok(order_to_arrays(py, order))
}

/// A usage order with its stale rows merged in (see `hippograph_core::certified::merge_usage_order`).
#[pyfunction]
fn merge_usage_order<'py>(
    py: Python<'py>,
    rows: PyReadonlyArray1<'py, u32>,
    keys: PyReadonlyArray1<'py, f64>,
    stale: PyReadonlyArray1<'py, u32>,
    usage: &Bound<'py, UsageColumns>,
    params: &Bound<'py, ValueParams>,
) -> PyResult<Order<'py>> {
    let view = usage.get().borrow(py)?;
    let meta = view.columns(py)?;
    let p = params.get().0;
    let (rows, keys) = (contiguous(py, "rows", &rows)?, contiguous(py, "keys", &keys)?);
    let stale = contiguous(py, "stale", &stale)?;
    let order =
        errors::detached(py, "merge_usage_order", || certified::merge_usage_order(rows, keys, stale, meta, &p))?
            .map_err(|e| shape(py, e))?;
    Ok(order_to_arrays(py, order))
}

/// Each region's relevance bound for `queries` (see `hippograph_core::certified::region_bounds`).
#[pyfunction]
fn region_bounds<'py>(
    py: Python<'py>,
    centres: PyReadonlyArray2<'py, f32>,
    radius: PyReadonlyArray1<'py, f64>,
    queries: PyReadonlyArray2<'py, f32>,
    slack: f64,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    check_query_dim(py, centres.shape()[1], &queries)?;
    let data = contiguous(py, "centres", &centres)?;
    let radius = contiguous(py, "radius", &radius)?;
    let queries = contiguous(py, "queries", &queries)?;
    let ones = vec![1.0f32; centres.shape()[0]];
    let stored = Stored::new(data, &ones, centres.shape()[1]);
    let bounds = errors::detached(py, "region_bounds", || certified::region_bounds(stored, radius, queries, slack))?
        .map_err(|e| shape(py, e))?;
    Ok(bounds.into_pyarray(py))
}

/// Each row's region, each region's relevance bound, and the region at each position of the
/// order (optional), as Python passes them.
pub(crate) type RegionArrays<'py> =
    (PyReadonlyArray1<'py, u32>, PyReadonlyArray1<'py, f64>, Option<PyReadonlyArray1<'py, u32>>);

/// The arrays of a certified walk as Python passes them, borrowed for the call (`certified_walk`,
/// `Hnsw.valued_walk`).
pub(crate) struct WalkArrays<'py> {
    pub scan: ScanArrays<'py>,
    pub shadow: Option<(PyReadonlyArray2<'py, u16>, PyReadonlyArray1<'py, f32>)>,
    pub pool: PyReadonlyArray1<'py, u32>,
    pub order: PyReadonlyArray1<'py, u32>,
    pub order_keys: PyReadonlyArray1<'py, f64>,
    pub stale: PyReadonlyArray1<'py, u32>,
    pub regions: Option<RegionArrays<'py>>,
}

impl WalkArrays<'_> {
    /// The core's walk over these arrays, with the relevance bound and budget given (no score
    /// bounds: a value-weighted search sets those itself, `certified::valued_walk`).
    pub(crate) fn request(
        &self,
        py: Python<'_>,
        scan: (f64, &ValueParams, &Selection),
        bound: f64,
        budget: usize,
    ) -> PyResult<certified::WalkRequest<'_>> {
        let (now, params, selection) = scan;
        let shadow = match &self.shadow {
            Some((half, residual)) => Some(crate::shadow::borrowed(py, half, residual, self.scan.matrix.dim())?),
            None => None,
        };
        Ok(certified::WalkRequest {
            scan: self.scan.request(py, now, params, selection)?,
            pool: contiguous(py, "pool", &self.pool)?,
            bound,
            outside_score: f64::INFINITY,
            order: contiguous(py, "order", &self.order)?,
            order_keys: contiguous(py, "order_keys", &self.order_keys)?,
            stale: contiguous(py, "stale", &self.stale)?,
            budget,
            regions: match &self.regions {
                Some((of_row, bound, in_order)) => Some(certified::Regions {
                    of_row: contiguous(py, "region of each row", of_row)?,
                    bound: contiguous(py, "region bounds", bound)?,
                    in_order: match in_order {
                        Some(a) => Some(contiguous(py, "region of each position of the order", a)?),
                        None => None,
                    },
                }),
                None => None,
            },
            shadow,
            pool_bounds: None,
        })
    }
}

/// The certified top-k from a candidate pool with the default value function, or None past the budget.
#[pyfunction]
#[expect(clippy::too_many_arguments, reason = "one parameter per argument of the Python signature")]
#[pyo3(signature = (
    matrix, norms, queries, usage, rank, now, params, selection, pool, bound, order, order_keys, stale, budget,
    regions=None, shadow=None
))]
fn certified_walk<'py>(
    py: Python<'py>,
    matrix: Matrix<'py>,
    norms: PyReadonlyArray1<'py, f32>,
    queries: PyReadonlyArray2<'py, f32>,
    usage: &Bound<'py, UsageColumns>,
    rank: Option<PyReadonlyArray1<'py, u32>>,
    now: f64,
    params: &Bound<'py, ValueParams>,
    selection: &Bound<'py, Selection>,
    pool: PyReadonlyArray1<'py, u32>,
    bound: f64,
    order: PyReadonlyArray1<'py, u32>,
    order_keys: PyReadonlyArray1<'py, f64>,
    stale: PyReadonlyArray1<'py, u32>,
    budget: usize,
    regions: Option<RegionArrays<'py>>,
    shadow: Option<(PyReadonlyArray2<'py, u16>, PyReadonlyArray1<'py, f32>)>,
) -> PyResult<Option<Scan<'py>>> {
    let scan = ScanArrays { matrix, norms, queries, usage: usage.get().borrow(py)?, rank };
    let arrays = WalkArrays { scan, shadow, pool, order, order_keys, stale, regions };
    let req = arrays.request(py, (now, params.get(), selection.get()), bound, budget)?;
    let hits = errors::detached(py, "certified_walk", || certified::walk(&req))?.map_err(|e| shape(py, e))?;
    Ok(hits.map(|hits| hits_to_arrays(py, hits)))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(usage_order, m)?)?;
    m.add_function(wrap_pyfunction!(merge_usage_order, m)?)?;
    m.add_function(wrap_pyfunction!(certified_walk, m)?)?;
    m.add_function(wrap_pyfunction!(region_bounds, m)?)?;
    Ok(())
}
