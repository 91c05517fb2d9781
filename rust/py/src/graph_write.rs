//! Binding of `hippograph_core::graph_write`: one LMDB write transaction's plan, reading the
//! stored state through a Python callable `read(db_code, key) -> bytes | None`.

use crate::errors;
use hippograph_core::graph_write::{self as core, Db, NewNode, Stored, Value, WriteError};
use hippograph_core::plain::{self, Meta, Plain};
use hippograph_core::scoring::all_finite;
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::PyRuntimeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType};

/// Where a write reads the stored state: a `read(db_code, key)` callable, or a py-lmdb write
/// transaction and its databases by code, read with `txn.get(key, None, db)` and no Python frame
/// in between.
enum Source {
    Callable(Py<PyAny>),
    Lmdb { txn: Py<PyAny>, dbs: Vec<Py<PyAny>> },
}

/// The stored state through a `Source`.
struct Reader<'a, 'py> {
    py: Python<'py>,
    source: &'a Source,
}

impl Stored for Reader<'_, '_> {
    type Error = PyErr;
    fn get(&mut self, db: Db, key: &[u8]) -> PyResult<Option<Vec<u8>>> {
        let py = self.py;
        let key = PyBytes::new(py, key);
        let value = match self.source {
            Source::Callable(read) => read.bind(py).call1((db as u8, key))?,
            Source::Lmdb { txn, dbs } => {
                let handle = dbs.get(db as usize).ok_or_else(|| errors::internal(py, format!("no database {db:?}")))?;
                txn.bind(py).call_method1(intern!(py, "get"), (key, py.None(), handle))?
            }
        };
        if value.is_none() {
            return Ok(None);
        }
        Ok(Some(value.extract::<Vec<u8>>()?))
    }
}

fn mapped<T>(py: Python<'_>, result: Result<T, WriteError<PyErr>>) -> PyResult<T> {
    result.map_err(|e| match e {
        WriteError::Read(err) => err,
        WriteError::Corrupt(message) => errors::storage(py, message),
        WriteError::Invalid(message) => errors::validation(py, message),
    })
}

fn value<'a>(v: &'a Bound<'_, PyAny>, field: &str) -> PyResult<Value<'a>> {
    if v.is_none() {
        Ok(Value::Nil)
    } else if let Ok(s) = v.cast::<PyString>() {
        Ok(Value::Str(s.to_str()?))
    } else if let Ok(b) = v.cast::<PyBool>() {
        Ok(Value::Bool(b.is_true()))
    } else if v.is_instance_of::<PyInt>() {
        Ok(Value::Int(v.extract()?))
    } else if let Ok(f) = v.cast::<PyFloat>() {
        Ok(Value::Float(f.value()))
    } else {
        Err(errors::validation(v.py(), format!("field {field:?} holds a {}", v.get_type().name()?)))
    }
}

/// What `put_changeset` and `put_metadata` need of the Python model, as
/// `hippograph.backends.lmdb.txn.MODEL` lists it: each node type's code and field names, each
/// edge type's code, the `datetime` class and `UTC`, and the Python functions that convert what
/// the native path leaves alone (`to_us`, `encode_meta`, `as_edge_type`).
#[derive(FromPyObject)]
struct Model<'py>(
    Bound<'py, PyDict>,
    Bound<'py, PyDict>,
    Bound<'py, PyType>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
);

/// The model with what one call has converted already: the last datetime (a write's nodes and
/// metadata mostly share one `now`) and each node type's code and field names.
struct Converter<'py> {
    model: Model<'py>,
    last_time: Option<(Bound<'py, PyAny>, i64)>,
    kinds: Vec<(Bound<'py, PyAny>, u8, Vec<Bound<'py, PyString>>)>,
}

impl<'py> Converter<'py> {
    fn new(model: Model<'py>) -> Self {
        Self { model, last_time: None, kinds: Vec::new() }
    }

    /// Microseconds since the epoch of a datetime: read from its fields when it is a `datetime` in
    /// UTC (what the model's checks leave), else by the Python `to_us`.
    fn micros(&mut self, dt: &Bound<'py, PyAny>) -> PyResult<i64> {
        if let Some((last, us)) = &self.last_time {
            if last.is(dt) {
                return Ok(*us);
            }
        }
        let py = dt.py();
        let us = if dt.get_type().is(&self.model.2) && dt.getattr(intern!(py, "tzinfo"))?.is(&self.model.3) {
            let field = |name: &Bound<'_, PyString>| dt.getattr(name)?.extract::<i64>();
            let date = (field(intern!(py, "year"))?, field(intern!(py, "month"))?, field(intern!(py, "day"))?);
            let time = (
                field(intern!(py, "hour"))?,
                field(intern!(py, "minute"))?,
                field(intern!(py, "second"))?,
                field(intern!(py, "microsecond"))?,
            );
            plain::micros_since_epoch(date, time)
        } else {
            self.model.4.call1((dt,))?.extract()?
        };
        self.last_time = Some((dt.clone(), us));
        Ok(us)
    }

    /// A node type's code and type-specific field names.
    fn kind(&mut self, node_type: &Bound<'py, PyAny>) -> PyResult<(u8, &[Bound<'py, PyString>])> {
        let at = match self.kinds.iter().position(|(known, _, _)| known.is(node_type)) {
            Some(at) => at,
            None => {
                let py = node_type.py();
                let kind = self
                    .model
                    .0
                    .get_item(node_type)?
                    .ok_or_else(|| errors::validation(py, format!("unknown node type {node_type}")))?;
                let (code, names): (u8, Vec<Bound<'py, PyString>>) = kind.extract()?;
                self.kinds.push((node_type.clone(), code, names));
                self.kinds.len() - 1
            }
        };
        let (_, code, names) = &self.kinds[at];
        Ok((*code, names))
    }

    /// The edge code of `edge` (an `EdgeType`, or what `as_edge_type` turns into one).
    fn edge(&self, edge: &Bound<'_, PyAny>) -> PyResult<u8> {
        if let Some(code) = self.model.1.get_item(edge)? {
            return code.extract();
        }
        let edge = self.model.6.call1((edge,))?;
        self.model
            .1
            .get_item(&edge)?
            .ok_or_else(|| errors::validation(edge.py(), format!("unknown edge type {edge}")))?
            .extract()
    }

    /// The metadata record of `meta`: encoded here when every value has its plain exact type,
    /// else by the Python `encode_meta`.
    fn meta_record(&mut self, meta: &Bound<'py, PyAny>) -> PyResult<Vec<u8>> {
        let py = meta.py();
        let last = meta.getattr(intern!(py, "last_accessed_at"))?;
        let custom = plain_value(&meta.getattr(intern!(py, "custom"))?, 0)?;
        let reward = meta.getattr(intern!(py, "cumulative_reward"))?;
        let (Some(custom), Ok(reward)) = (custom, reward.cast_exact::<PyFloat>()) else {
            return self.model.5.call1((meta,))?.extract();
        };
        let record = Meta {
            created_us: self.micros(&meta.getattr(intern!(py, "created_at"))?)?,
            access_count: meta.getattr(intern!(py, "access_count"))?.extract()?,
            last_accessed_us: if last.is_none() { None } else { Some(self.micros(&last)?) },
            cumulative_reward: reward.value(),
            reward_count: meta.getattr(intern!(py, "reward_count"))?.extract()?,
            custom,
        };
        Ok(plain::encode_meta(&record))
    }
}

/// Deepest `custom` nesting converted here (the model allows 32; deeper is Python's to judge).
const PLAIN_DEPTH: usize = 33;

/// `v` as a plain value when it and everything in it has an exact plain type (None, bool, int
/// within 64 bits, float, str, bytes, list, dict of str keys); None otherwise.
fn plain_value(v: &Bound<'_, PyAny>, depth: usize) -> PyResult<Option<Plain>> {
    if depth > PLAIN_DEPTH {
        return Ok(None);
    }
    let ty = v.get_type();
    let py = v.py();
    Ok(Some(if v.is_none() {
        Plain::Nil
    } else if ty.is(py.get_type::<PyBool>()) {
        Plain::Bool(v.is_truthy()?)
    } else if ty.is(py.get_type::<PyInt>()) {
        match v.extract::<i64>() {
            Ok(i) => Plain::Int(i),
            Err(_) => match v.extract::<u64>() {
                Ok(u) => Plain::UInt(u),
                Err(_) => return Ok(None),
            },
        }
    } else if let Ok(f) = v.cast_exact::<PyFloat>() {
        Plain::Float(f.value())
    } else if let Ok(text) = v.cast_exact::<PyString>() {
        match text.to_str() {
            Ok(text) => Plain::Str(text.to_owned()),
            Err(_) => return Ok(None),
        }
    } else if let Ok(bytes) = v.cast_exact::<PyBytes>() {
        Plain::Bin(bytes.as_bytes().to_vec())
    } else if let Ok(list) = v.cast_exact::<PyList>() {
        let mut items = Vec::with_capacity(list.len());
        for item in list.iter() {
            let Some(item) = plain_value(&item, depth + 1)? else { return Ok(None) };
            items.push(item);
        }
        Plain::Array(items)
    } else if let Ok(dict) = v.cast_exact::<PyDict>() {
        let mut pairs = Vec::with_capacity(dict.len());
        for (key, item) in dict.iter() {
            let Ok(key) = key.cast_exact::<PyString>() else { return Ok(None) };
            let (Ok(key), Some(item)) = (key.to_str(), plain_value(&item, depth + 1)?) else { return Ok(None) };
            pairs.push((key.to_owned(), item));
        }
        Plain::Map(pairs)
    } else {
        return Ok(None);
    }))
}

/// Puts the record of every `{id: NodeMetadata}` into the plan.
fn put_metadata<'py>(
    inner: &mut core::GraphWrite,
    metadata: &Bound<'py, PyDict>,
    convert: &mut Converter<'py>,
) -> PyResult<()> {
    for (id, meta) in metadata.iter() {
        let record = convert.meta_record(&meta)?;
        inner.put_meta(id.cast::<PyString>()?.to_str()?, record);
    }
    Ok(())
}

/// Puts `node` into the plan.
fn put_node<'py>(
    inner: &mut core::GraphWrite,
    store: &mut Reader<'_, 'py>,
    node: &Bound<'py, PyAny>,
    convert: &mut Converter<'py>,
) -> PyResult<()> {
    let py = node.py();
    let created_us = convert.micros(&node.getattr(intern!(py, "created_at"))?)?;
    let (type_code, names) = convert.kind(&node.getattr(intern!(py, "node_type"))?)?;
    let values: Vec<Bound<'_, PyAny>> = names.iter().map(|n| node.getattr(n)).collect::<PyResult<_>>()?;
    let mut fields = Vec::with_capacity(names.len());
    for (name, v) in names.iter().zip(&values) {
        let name = name.to_str()?;
        fields.push((name, value(v, name)?));
    }
    let id = node.getattr(intern!(py, "id"))?;
    let id = id.cast::<PyString>()?.to_str()?;
    let embedding = node.getattr(intern!(py, "embedding"))?;
    let array: Option<PyReadonlyArray1<'_, f32>> = if embedding.is_none() { None } else { Some(embedding.extract()?) };
    let embedding = match &array {
        Some(a) => Some(
            a.as_slice().map_err(|_| errors::validation(py, format!("embedding of node {id:?} is not contiguous")))?,
        ),
        None => None,
    };
    let node = NewNode { id, type_code, created_us, fields, embedding };
    mapped(py, inner.put_node(store, &node))
}

/// One write transaction of the graph: see `hippograph_core::graph_write`.
#[pyclass(module = "hippograph._core")]
pub struct GraphWrite {
    inner: Option<core::GraphWrite>,
    source: Source,
}

impl GraphWrite {
    fn parts<'a, 'py>(&'a mut self, py: Python<'py>) -> PyResult<(&'a mut core::GraphWrite, Reader<'a, 'py>)> {
        let inner = self.inner.as_mut().ok_or_else(|| PyRuntimeError::new_err("the write was finished"))?;
        Ok((inner, Reader { py, source: &self.source }))
    }
}

#[pymethods]
impl GraphWrite {
    #[new]
    fn new(read: Py<PyAny>) -> Self {
        Self { inner: Some(core::GraphWrite::new()), source: Source::Callable(read) }
    }

    /// A write reading py-lmdb transaction `txn` directly, `dbs` its database handles by code.
    #[staticmethod]
    fn in_lmdb(txn: Py<PyAny>, dbs: Vec<Py<PyAny>>) -> Self {
        Self { inner: Some(core::GraphWrite::new()), source: Source::Lmdb { txn, dbs } }
    }

    /// A changeset's additions (each created at its `created_at`), then its links (each
    /// addition's own, then the changeset's), then its metadata, in one call: `apply_changeset`'s
    /// plan. `model` is `hippograph.backends.lmdb.txn.MODEL`.
    fn put_changeset<'py>(
        &mut self,
        py: Python<'py>,
        additions: Vec<Bound<'py, PyAny>>,
        links: Vec<Bound<'py, PyAny>>,
        metadata: &Bound<'py, PyDict>,
        model: Model<'py>,
    ) -> PyResult<()> {
        let (inner, mut store) = self.parts(py)?;
        let mut convert = Converter::new(model);
        for node in &additions {
            put_node(inner, &mut store, node, &mut convert)?;
        }
        for node in &additions {
            let own = node.getattr(intern!(py, "links"))?;
            if own.cast::<PyDict>().is_ok_and(|d| d.is_empty()) {
                continue;
            }
            let id = node.getattr(intern!(py, "id"))?;
            let id = id.cast::<PyString>()?.to_str()?;
            for item in own.call_method0(intern!(py, "items"))?.try_iter()? {
                let (edge, others): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item?.extract()?;
                let code = convert.edge(&edge)?;
                for other in others.try_iter()? {
                    let other = other?;
                    mapped(py, inner.link(&mut store, id, other.cast::<PyString>()?.to_str()?, code))?;
                }
            }
        }
        for link in &links {
            let (a, b, edge): (Bound<'_, PyString>, Bound<'_, PyString>, Bound<'_, PyAny>) = link.extract()?;
            let code = convert.edge(&edge)?;
            mapped(py, inner.link(&mut store, a.to_str()?, b.to_str()?, code))?;
        }
        put_metadata(inner, metadata, &mut convert)
    }

    /// Puts the metadata record of each `{id: NodeMetadata}`.
    fn put_metadata<'py>(&mut self, py: Python<'py>, metadata: &Bound<'py, PyDict>, model: Model<'py>) -> PyResult<()> {
        let (inner, _) = self.parts(py)?;
        put_metadata(inner, metadata, &mut Converter::new(model))
    }

    fn exists(&mut self, py: Python<'_>, id: &str) -> PyResult<bool> {
        let (inner, mut store) = self.parts(py)?;
        mapped(py, inner.exists(&mut store, id))
    }

    fn delete_node(&mut self, py: Python<'_>, id: &str) -> PyResult<()> {
        let (inner, mut store) = self.parts(py)?;
        mapped(py, inner.delete_node(&mut store, id))
    }

    fn delete_meta(&mut self, py: Python<'_>, id: &str) -> PyResult<()> {
        let (inner, mut store) = self.parts(py)?;
        mapped(py, inner.delete_meta(&mut store, id))
    }

    fn is_orphan(&mut self, py: Python<'_>, id: &str, orphan_codes: Vec<u8>) -> PyResult<bool> {
        let (inner, mut store) = self.parts(py)?;
        mapped(py, inner.is_orphan(&mut store, id, &orphan_codes))
    }

    /// The final values of every key the write touches, by database: `(db_code, [(key, value)])`
    /// to put and `(db_code, key)` to delete.
    fn finish<'py>(
        &mut self,
        py: Python<'py>,
        stored_dim: Option<u32>,
        new_dim: Option<u32>,
        seq: u64,
        log_keep: u64,
    ) -> PyResult<Finished<'py>> {
        let inner = self.inner.take().ok_or_else(|| PyRuntimeError::new_err("the write was finished"))?;
        let mut store = Reader { py, source: &self.source };
        let writes = mapped(py, inner.finish(&mut store, stored_dim, new_dim, seq, log_keep))?;
        let mut puts: Vec<(u8, Items<'py>)> = Vec::new();
        let mut deletes = Vec::new();
        for (db, key, value) in writes {
            let key = PyBytes::new(py, &key);
            match value {
                None => deletes.push((db as u8, key)),
                Some(v) => {
                    let item = (key, PyBytes::new(py, &v));
                    match puts.last_mut() {
                        Some((code, items)) if *code == db as u8 => items.push(item),
                        _ => puts.push((db as u8, vec![item])),
                    }
                }
            }
        }
        Ok((puts, deletes))
    }
}

/// Puts by database and deletes, as `GraphWrite.finish` returns them.
type Finished<'py> = (Vec<(u8, Items<'py>)>, Vec<(u8, Bound<'py, PyBytes>)>);

/// One database's `(key, value)` puts.
type Items<'py> = Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>;

/// The classes and the id limit a plain changeset is checked against: `(Node, NodeMetadata,
/// EdgeType, max id bytes)`.
type Shapes<'py> = (Bound<'py, PyType>, Bound<'py, PyType>, Bound<'py, PyType>, usize);

/// An id `check_id` accepts without encoding it: a str of ASCII, 1 to `max` characters.
fn plain_id(v: &Bound<'_, PyAny>, max: usize) -> bool {
    v.cast_exact::<PyString>()
        .ok()
        .and_then(|s| s.to_str().ok())
        .is_some_and(|s| s.is_ascii() && !s.is_empty() && s.len() <= max)
}

/// `check_changeset`'s common case in one call: `(True, dim after)` when the additions are a list
/// of nodes whose embeddings are None or non-empty, contiguous, finite 1-D float32 arrays of one
/// dimension (`dim`'s, when given), the links a list of `(id, id, EdgeType)` tuples and the
/// metadata a dict of id to `NodeMetadata`, every id plain; `(False, None)` for anything else,
/// which the Python check then judges and names. Accepts nothing the Python check refuses.
#[pyfunction]
fn plain_changeset(
    additions: &Bound<'_, PyAny>,
    links: &Bound<'_, PyAny>,
    metadata: &Bound<'_, PyAny>,
    mut dim: Option<usize>,
    shapes: Shapes<'_>,
) -> PyResult<(bool, Option<usize>)> {
    let (node_class, meta_class, edge_class, max_id) = shapes;
    const NO: (bool, Option<usize>) = (false, None);
    let (Ok(additions), Ok(links), Ok(metadata)) =
        (additions.cast_exact::<PyList>(), links.cast_exact::<PyList>(), metadata.cast_exact::<PyDict>())
    else {
        return Ok(NO);
    };
    let py = additions.py();
    for node in additions.iter() {
        if !node.is_instance(&node_class)? {
            return Ok(NO);
        }
        let embedding = node.getattr(intern!(py, "embedding"))?;
        if embedding.is_none() {
            continue;
        }
        let Ok(array) = embedding.cast::<PyArray1<f32>>() else { return Ok(NO) };
        let Ok(view) = array.try_readonly() else { return Ok(NO) };
        let Ok(values) = view.as_slice() else { return Ok(NO) };
        if values.is_empty() || !all_finite(values) || dim.is_some_and(|d| d != values.len()) {
            return Ok(NO);
        }
        dim = Some(values.len());
    }
    for link in links.iter() {
        let Ok(link) = link.cast_exact::<PyTuple>() else { return Ok(NO) };
        if link.len() != 3
            || !plain_id(&link.get_item(0)?, max_id)
            || !plain_id(&link.get_item(1)?, max_id)
            || !link.get_item(2)?.get_type().is(&edge_class)
        {
            return Ok(NO);
        }
    }
    for (id, meta) in metadata.iter() {
        if !plain_id(&id, max_id) || !meta.is_instance(&meta_class)? {
            return Ok(NO);
        }
    }
    Ok((true, dim))
}

/// The change-log entries (`first`, `last`, inclusive; `first > last`: none) the write of entry
/// `next` deletes to keep the newest `log_keep` (`hippograph_core::graph_write::pruned`).
#[pyfunction]
fn log_pruned(next: u64, log_keep: u64) -> (u64, u64) {
    core::pruned(next, log_keep).map_or((1, 0), |run| (*run.start(), *run.end()))
}

/// Where the embedding of the node of stored record `data` is: its number in `vectors` (from 1),
/// 0 for none, -1 for a record written before numbers (its embedding, if any, in `emb` under the
/// node's key). `StorageError` for a record that does not decode.
#[pyfunction]
fn node_vector(py: Python<'_>, data: &[u8]) -> PyResult<i64> {
    match core::vector_of(data) {
        Ok(core::Vector::Keyed) => Ok(-1),
        Ok(core::Vector::Absent) => Ok(0),
        Ok(core::Vector::Numbered(n)) => i64::try_from(n)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| errors::storage_in(py, format!("corrupt node record: embedding number {n}"), "decode")),
        Err(message) => Err(errors::storage_in(py, message, "decode")),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<GraphWrite>()?;
    m.add_function(wrap_pyfunction!(log_pruned, m)?)?;
    m.add_function(wrap_pyfunction!(node_vector, m)?)?;
    m.add_function(wrap_pyfunction!(plain_changeset, m)?)
}
