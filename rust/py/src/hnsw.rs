//! Bindings of `hippograph_core::hnsw`: the core's vector index, with the method names of the
//! hnswlib index it stands in for; every call that searches or inserts releases the GIL.

use crate::certified::{RegionArrays, WalkArrays};
use crate::errors;
use crate::scoring::{check_query_dim, contiguous, shape, Matrix, ScanArrays, Selection, UsageColumns, ValueParams};
use hippograph_core::certified;
use hippograph_core::hnsw::{self, Codes, Config, IndexError};
use numpy::ndarray::Array2;
use numpy::{IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

fn mapped(py: Python<'_>, err: IndexError) -> PyErr {
    match err {
        IndexError::Shape(m) | IndexError::Config(m) => errors::validation(py, m),
        IndexError::Corrupt(m) => PyValueError::new_err(m),
        IndexError::Io(m) => errors::storage(py, m),
    }
}

/// An HNSW graph over one-byte codes (`hippograph_core::hnsw::Index`).
#[pyclass(frozen, module = "hippograph._core")]
pub struct Hnsw {
    inner: hnsw::Index,
    ef: AtomicUsize,
    threads: AtomicUsize,
}

fn wrap(inner: hnsw::Index) -> Hnsw {
    Hnsw { inner, ef: AtomicUsize::new(16), threads: AtomicUsize::new(0) }
}

#[pymethods]
impl Hnsw {
    /// An empty index; `sample` (rows of `dim` floats) sets the code scales.
    #[new]
    #[pyo3(signature = (dim, m, ef_construction, sample, seed=0x5EED, codes="f16"))]
    fn new(
        py: Python<'_>,
        dim: usize,
        m: usize,
        ef_construction: usize,
        sample: PyReadonlyArray2<'_, f32>,
        seed: u64,
        codes: &str,
    ) -> PyResult<Self> {
        let codes = match codes {
            "f16" => Codes::F16,
            "i8" => Codes::I8,
            other => return Err(errors::validation(py, format!("codes must be 'f16' or 'i8', got {other:?}"))),
        };
        let data = contiguous(py, "sample", &sample)?;
        if sample.shape()[0] > 0 && sample.shape()[1] != dim {
            return Err(errors::validation(py, "the sample's rows are not of the index's dimension"));
        }
        let config = Config { m, ef_construction, seed, codes };
        hnsw::Index::new(dim, config, data).map(wrap).map_err(|e| mapped(py, e))
    }

    /// The index saved at `path`, mapped copy-on-write, after its bytes matched `tree_sha256` (the
    /// root of their SHA-256 hash tree, leaves hashed on rayon's threads).
    /// ValueError: not an index file, or not the one expected.
    #[staticmethod]
    #[pyo3(signature = (path, tree_sha256=None))]
    fn open(py: Python<'_>, path: PathBuf, tree_sha256: Option<String>) -> PyResult<Self> {
        let got = errors::detached(py, "Hnsw.open", || hnsw::Index::open(&path, tree_sha256.as_deref()))?;
        got.map(wrap).map_err(|e| mapped(py, e))
    }

    #[getter]
    fn dim(&self) -> usize {
        self.inner.dim()
    }

    /// Ids added so far, deleted ones included.
    #[getter]
    fn element_count(&self) -> usize {
        self.inner.len()
    }

    /// The most a reported similarity differs from the exact cosine.
    #[getter]
    fn max_error(&self) -> f32 {
        self.inner.max_error()
    }

    /// The error bound all but at most `most` ids keep, those ids, and how many ids it covers
    /// (`Index::error_split`).
    fn error_split<'py>(&self, py: Python<'py>, most: usize) -> PyResult<(f32, Bound<'py, PyArray1<u32>>, usize)> {
        let (bound, ids, covered) = errors::detached(py, "Hnsw.error_split", || self.inner.error_split(most))?;
        Ok((bound, ids.into_pyarray(py), covered))
    }

    /// Bytes of codes and links the index addresses (mapped or owned).
    #[getter]
    fn memory_bytes(&self) -> usize {
        self.inner.memory_bytes()
    }

    fn get_max_elements(&self) -> usize {
        self.inner.capacity()
    }

    fn resize_index(&self, py: Python<'_>, size: usize) -> PyResult<()> {
        errors::detached(py, "Hnsw.resize_index", || self.inner.reserve(size))
    }

    fn set_ef(&self, ef: usize) {
        self.ef.store(ef.max(1), Ordering::Relaxed);
    }

    fn set_num_threads(&self, threads: usize) {
        self.threads.store(threads, Ordering::Relaxed);
    }

    /// Adds `data` under `ids`, which must continue the ids given so far (`element_count`, ...).
    #[pyo3(signature = (data, ids, num_threads=-1))]
    fn add_items(
        &self,
        py: Python<'_>,
        data: PyReadonlyArray2<'_, f32>,
        ids: PyReadonlyArray1<'_, i64>,
        num_threads: i64,
    ) -> PyResult<()> {
        let vectors = contiguous(py, "data", &data)?;
        let ids = contiguous(py, "ids", &ids)?;
        if data.shape()[0] != ids.len() || (!ids.is_empty() && data.shape()[1] != self.inner.dim()) {
            return Err(errors::validation(py, "one vector of the index's dimension per id"));
        }
        let Some(&first) = ids.first() else { return Ok(()) };
        if first < 0 || ids.windows(2).any(|w| w[1] != w[0] + 1) {
            return Err(errors::validation(py, "ids must be consecutive and not negative"));
        }
        let threads = if num_threads < 0 { self.threads.load(Ordering::Relaxed) } else { num_threads as usize };
        errors::detached(py, "Hnsw.add_items", || self.inner.add(first as usize, vectors, threads))?
            .map_err(|e| mapped(py, e))
    }

    fn mark_deleted(&self, py: Python<'_>, label: u32) -> PyResult<()> {
        self.inner.mark_deleted(label).map_err(|e| mapped(py, e))
    }

    /// Labels and cosine distances (1 − similarity) of the `k` nearest per query row.
    /// RuntimeError when the graph finds fewer than `k` live ids (as hnswlib).
    #[pyo3(signature = (data, k=1))]
    #[expect(clippy::type_complexity, reason = "a pair of numpy arrays, as hnswlib returns")]
    fn knn_query<'py>(
        &self,
        py: Python<'py>,
        data: PyReadonlyArray2<'py, f32>,
        k: usize,
    ) -> PyResult<(Bound<'py, PyArray2<u64>>, Bound<'py, PyArray2<f32>>)> {
        let queries = contiguous(py, "data", &data)?;
        let rows = data.shape()[0];
        if rows > 0 && data.shape()[1] != self.inner.dim() {
            return Err(errors::validation(py, "queries are not of the index's dimension"));
        }
        let ef = self.ef.load(Ordering::Relaxed);
        let found = errors::detached(py, "Hnsw.knn_query", || self.inner.search_many(queries, k, ef))?
            .map_err(|e| mapped(py, e))?;
        if found.iter().any(|f| f.len() < k) {
            return Err(PyRuntimeError::new_err("the graph found fewer live neighbours than asked for"));
        }
        let labels: Vec<u64> = found.iter().flat_map(|f| f.iter().map(|x| u64::from(x.0))).collect();
        let dist: Vec<f32> = found.iter().flat_map(|f| f.iter().map(|x| 1.0 - x.1)).collect();
        let labels = Array2::from_shape_vec((rows, k), labels).map_err(|e| errors::internal(py, e.to_string()))?;
        let dist = Array2::from_shape_vec((rows, k), dist).map_err(|e| errors::internal(py, e.to_string()))?;
        Ok((labels.into_pyarray(py), dist.into_pyarray(py)))
    }

    /// The decoded unit vectors of `ids`.
    fn get_items<'py>(&self, py: Python<'py>, ids: Vec<u32>) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let out = self.inner.decode(&ids).map_err(|e| mapped(py, e))?;
        let out = Array2::from_shape_vec((ids.len(), self.inner.dim()), out)
            .map_err(|e| errors::internal(py, e.to_string()))?;
        Ok(out.into_pyarray(py))
    }

    /// Per id, whether `vectors[i]` encodes to exactly the codes stored for `ids[i]`.
    fn holds<'py>(
        &self,
        py: Python<'py>,
        ids: PyReadonlyArray1<'py, u32>,
        vectors: PyReadonlyArray2<'py, f32>,
    ) -> PyResult<Bound<'py, PyArray1<bool>>> {
        let ids = contiguous(py, "ids", &ids)?;
        let vectors = contiguous(py, "vectors", &vectors)?;
        let got = errors::detached(py, "Hnsw.holds", || self.inner.holds(ids, vectors))?.map_err(|e| mapped(py, e))?;
        Ok(got.into_pyarray(py))
    }

    /// The value-weighted search (`hippograph_core::certified::valued_pool`) and `certified_walk`
    /// over its rows in one step, the GIL released once
    /// (`hippograph_core::certified::valued_walk`): the largest code similarity the search found,
    /// and the certified top rows with their scores (lists, best first), or None when the pool
    /// does not certify them or that similarity is below `floor`. The search takes `queries`
    /// and its arguments as `valued_pool` takes them; the walk takes the scan's arrays as
    /// `certified_walk` does, with `pending` (rows the graph does not hold yet) read in full.
    #[pyo3(signature = (
        queries, ef, ceiling, error, row_of_label, live, keys, key_stale, most, floor,
        matrix, norms, usage, rank, now, params, selection, pending, order, order_keys, stale, shadow=None
    ))]
    #[expect(clippy::too_many_arguments, reason = "one parameter per argument of the Python signature")]
    fn valued_walk<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
        ef: usize,
        ceiling: f32,
        error: f32,
        row_of_label: PyReadonlyArray1<'py, i64>,
        live: usize,
        keys: PyReadonlyArray1<'py, f64>,
        key_stale: PyReadonlyArray1<'py, u32>,
        most: f32,
        floor: f32,
        matrix: Matrix<'py>,
        norms: PyReadonlyArray1<'py, f32>,
        usage: &Bound<'py, UsageColumns>,
        rank: Option<PyReadonlyArray1<'py, u32>>,
        now: f64,
        params: &Bound<'py, ValueParams>,
        selection: &Bound<'py, Selection>,
        pending: PyReadonlyArray1<'py, u32>,
        order: PyReadonlyArray1<'py, u32>,
        order_keys: PyReadonlyArray1<'py, f64>,
        stale: PyReadonlyArray1<'py, u32>,
        shadow: Option<(PyReadonlyArray2<'py, u16>, PyReadonlyArray1<'py, f32>)>,
    ) -> PyResult<ValuedAnswer> {
        check_query_dim(py, self.inner.dim(), &queries)?;
        let scan = ScanArrays { matrix, norms, queries, usage: usage.get().borrow(py)?, rank };
        let arrays = WalkArrays { scan, shadow, pool: pending, order, order_keys, stale, regions: None };
        // Bounds, budget and regions are the search's to set (`certified::valued_walk`).
        let req = arrays.request(py, (now, params.get(), selection.get()), 1.0, 0)?;
        let keys = certified::RowKeys {
            by_row: contiguous(py, "keys", &keys)?,
            stale: contiguous(py, "key_stale", &key_stale)?,
            most,
            // The order's keys run from largest to smallest, over the same rows as `keys`.
            least: req.order_keys.last().copied().unwrap_or(f64::NEG_INFINITY),
        };
        let search = certified::ValuedSearch {
            index: &self.inner,
            ef: ef.max(1),
            ceiling,
            error,
            row_of_label: contiguous(py, "row_of_label", &row_of_label)?,
            live,
            keys: Some(keys),
            floor,
        };
        answered(py, errors::detached(py, "Hnsw.valued_walk", || certified::valued_walk(&search, &req))?)
    }

    /// The similarity search and its certified walk in one step, the GIL released once
    /// (`hippograph_core::certified::similarity_walk`): the first round's largest similarity, and
    /// the certified top rows with their scores (lists, best first), or None when the exact scan
    /// must answer. The walk takes the scan's arrays as `certified_walk` does, with `pending`
    /// (rows the graph does not hold yet) in every round's pool.
    #[pyo3(signature = (
        queries, ef, first, error, row_of_label, live, floor,
        matrix, norms, usage, rank, now, params, selection, pending, order, order_keys, stale,
        regions=None, shadow=None
    ))]
    #[expect(clippy::too_many_arguments, reason = "one parameter per argument of the Python signature")]
    fn similarity_walk<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
        ef: usize,
        first: usize,
        error: f32,
        row_of_label: PyReadonlyArray1<'py, i64>,
        live: usize,
        floor: f32,
        matrix: Matrix<'py>,
        norms: PyReadonlyArray1<'py, f32>,
        usage: &Bound<'py, UsageColumns>,
        rank: Option<PyReadonlyArray1<'py, u32>>,
        now: f64,
        params: &Bound<'py, ValueParams>,
        selection: &Bound<'py, Selection>,
        pending: PyReadonlyArray1<'py, u32>,
        order: PyReadonlyArray1<'py, u32>,
        order_keys: PyReadonlyArray1<'py, f64>,
        stale: PyReadonlyArray1<'py, u32>,
        regions: Option<RegionArrays<'py>>,
        shadow: Option<(PyReadonlyArray2<'py, u16>, PyReadonlyArray1<'py, f32>)>,
    ) -> PyResult<ValuedAnswer> {
        check_query_dim(py, self.inner.dim(), &queries)?;
        let scan = ScanArrays { matrix, norms, queries, usage: usage.get().borrow(py)?, rank };
        let arrays = WalkArrays { scan, shadow, pool: pending, order, order_keys, stale, regions };
        // Bound and budget are each round's to set (`certified::similarity_walk`).
        let req = arrays.request(py, (now, params.get(), selection.get()), 1.0, 0)?;
        let search = certified::SimilaritySearch {
            index: &self.inner,
            ef,
            first,
            error,
            row_of_label: contiguous(py, "row_of_label", &row_of_label)?,
            live,
            floor,
        };
        answered(py, errors::detached(py, "Hnsw.similarity_walk", || certified::similarity_walk(&search, &req))?)
    }

    /// Writes the index to a new file at `path` (the caller fsyncs and renames it).
    fn save_index(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        errors::detached(py, "Hnsw.save_index", || self.inner.save(&path))?.map_err(|e| mapped(py, e))
    }
}

/// `Hnsw.valued_walk`'s and `Hnsw.similarity_walk`'s answer: the top similarity, and the certified
/// rows and scores if any.
type ValuedAnswer = (f32, Option<(Vec<usize>, Vec<f64>)>);

/// A one-step search and walk's answer as Python takes it (a shape error mapped).
fn answered(
    py: Python<'_>,
    got: Result<certified::ValuedAnswer, hippograph_core::scoring::ShapeError>,
) -> PyResult<ValuedAnswer> {
    let got = got.map_err(|e| shape(py, e))?;
    Ok((got.top, got.hits.map(|hits| hits.into_iter().unzip())))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Hnsw>()
}
