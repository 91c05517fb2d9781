//! Binding of `hippograph_core::graph_write`: one LMDB write transaction's plan, reading the
//! stored state through a Python callable `read(db_code, key) -> bytes | None`.

use crate::errors;
use hippograph_core::graph_write::{self as core, Db, NewNode, Stored, Value, WriteError};
use hippograph_core::scoring::all_finite;
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::PyRuntimeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType};

/// The stored state through the caller's `read` callable.
struct Reader<'a, 'py> {
    read: &'a Bound<'py, PyAny>,
}

impl Stored for Reader<'_, '_> {
    type Error = PyErr;
    fn get(&mut self, db: Db, key: &[u8]) -> PyResult<Option<Vec<u8>>> {
        let value = self.read.call1((db as u8, PyBytes::new(self.read.py(), key)))?;
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

/// One write transaction of the graph: see `hippograph_core::graph_write`.
#[pyclass(module = "hippograph._core")]
pub struct GraphWrite {
    inner: Option<core::GraphWrite>,
    read: Py<PyAny>,
}

impl GraphWrite {
    fn parts<'py>(&mut self, py: Python<'py>) -> PyResult<(&mut core::GraphWrite, Bound<'py, PyAny>)> {
        let read = self.read.bind(py).clone();
        let inner = self.inner.as_mut().ok_or_else(|| PyRuntimeError::new_err("the write was finished"))?;
        Ok((inner, read))
    }
}

#[pymethods]
impl GraphWrite {
    #[new]
    fn new(read: Py<PyAny>) -> Self {
        Self { inner: Some(core::GraphWrite::new()), read }
    }

    /// Puts each node (created at `created_us[i]`); `kinds` maps a node type to its code and
    /// its type-specific field names.
    fn put_nodes(
        &mut self,
        py: Python<'_>,
        nodes: Vec<Bound<'_, PyAny>>,
        created_us: Vec<i64>,
        kinds: &Bound<'_, PyDict>,
    ) -> PyResult<()> {
        if nodes.len() != created_us.len() {
            return Err(errors::validation(py, "one creation time per node"));
        }
        let (inner, read) = self.parts(py)?;
        let mut store = Reader { read: &read };
        for (node, created_us) in nodes.iter().zip(created_us) {
            let kind = node.getattr(intern!(py, "node_type"))?;
            let kind =
                kinds.get_item(&kind)?.ok_or_else(|| errors::validation(py, format!("unknown node type {kind}")))?;
            let (type_code, names): (u8, Vec<Bound<'_, PyString>>) = kind.extract()?;
            let values: Vec<Bound<'_, PyAny>> = names.iter().map(|n| node.getattr(n)).collect::<PyResult<_>>()?;
            let mut fields = Vec::with_capacity(names.len());
            for (name, v) in names.iter().zip(&values) {
                let name = name.to_str()?;
                fields.push((name, value(v, name)?));
            }
            let id = node.getattr(intern!(py, "id"))?;
            let id = id.cast::<PyString>()?.to_str()?;
            let embedding = node.getattr(intern!(py, "embedding"))?;
            let array: Option<PyReadonlyArray1<'_, f32>> =
                if embedding.is_none() { None } else { Some(embedding.extract()?) };
            let embedding = match &array {
                Some(a) => Some(
                    a.as_slice()
                        .map_err(|_| errors::validation(py, format!("embedding of node {id:?} is not contiguous")))?,
                ),
                None => None,
            };
            let node = NewNode { id, type_code, created_us, fields, embedding };
            mapped(py, inner.put_node(&mut store, &node))?;
        }
        Ok(())
    }

    /// Links each `(a, b, edge_code)` when both ends exist.
    fn link_all(&mut self, py: Python<'_>, links: Vec<(Bound<'_, PyString>, Bound<'_, PyString>, u8)>) -> PyResult<()> {
        let (inner, read) = self.parts(py)?;
        let mut store = Reader { read: &read };
        for (a, b, code) in &links {
            mapped(py, inner.link(&mut store, a.to_str()?, b.to_str()?, *code))?;
        }
        Ok(())
    }

    /// Puts each `(id, encoded metadata record)`.
    fn put_meta(&mut self, py: Python<'_>, items: Vec<(String, Vec<u8>)>) -> PyResult<()> {
        let (inner, _) = self.parts(py)?;
        for (id, record) in items {
            inner.put_meta(&id, record);
        }
        Ok(())
    }

    fn exists(&mut self, py: Python<'_>, id: &str) -> PyResult<bool> {
        let (inner, read) = self.parts(py)?;
        mapped(py, inner.exists(&mut Reader { read: &read }, id))
    }

    fn delete_node(&mut self, py: Python<'_>, id: &str) -> PyResult<()> {
        let (inner, read) = self.parts(py)?;
        mapped(py, inner.delete_node(&mut Reader { read: &read }, id))
    }

    fn delete_meta(&mut self, py: Python<'_>, id: &str) -> PyResult<()> {
        let (inner, read) = self.parts(py)?;
        mapped(py, inner.delete_meta(&mut Reader { read: &read }, id))
    }

    fn is_orphan(&mut self, py: Python<'_>, id: &str, orphan_codes: Vec<u8>) -> PyResult<bool> {
        let (inner, read) = self.parts(py)?;
        mapped(py, inner.is_orphan(&mut Reader { read: &read }, id, &orphan_codes))
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
        let read = self.read.bind(py).clone();
        let writes = mapped(py, inner.finish(&mut Reader { read: &read }, stored_dim, new_dim, seq, log_keep))?;
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

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<GraphWrite>()?;
    m.add_function(wrap_pyfunction!(plain_changeset, m)?)
}
