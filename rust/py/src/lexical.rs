//! Bindings of `hippograph_core::lexical`: one index per owner, searched with the GIL released.

use crate::errors;
use crate::scoring::contiguous;
use hippograph_core::lexical;
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use std::sync::RwLock;

/// Documents found and their BM25 scores, best first.
type Found<'py> = (Bound<'py, PyArray1<u32>>, Bound<'py, PyArray1<f32>>);

/// A BM25 inverted index (`hippograph_core::lexical::LexicalIndex`); readers search at once, a
/// writer waits for them.
#[pyclass(frozen, module = "hippograph._core")]
pub struct LexicalIndex {
    inner: RwLock<lexical::LexicalIndex>,
}

impl LexicalIndex {
    fn write(&self, py: Python<'_>) -> PyResult<std::sync::RwLockWriteGuard<'_, lexical::LexicalIndex>> {
        self.inner.write().map_err(|_| errors::internal(py, "lexical index poisoned by an earlier failure"))
    }
}

#[pymethods]
impl LexicalIndex {
    #[new]
    fn new() -> Self {
        LexicalIndex { inner: RwLock::new(lexical::LexicalIndex::new()) }
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        let inner = self.inner.read().map_err(|_| errors::internal(py, "lexical index poisoned"))?;
        Ok(inner.len())
    }

    /// Indexes `text` as document `doc`, replacing what it held.
    fn set(&self, py: Python<'_>, doc: u32, text: &str) -> PyResult<()> {
        let mut inner = self.write(py)?;
        errors::guard(py, "LexicalIndex.set", || inner.set(doc, text))
    }

    /// Forgets document `doc`; False when it was not indexed.
    fn remove(&self, py: Python<'_>, doc: u32) -> PyResult<bool> {
        let mut inner = self.write(py)?;
        errors::guard(py, "LexicalIndex.remove", || inner.remove(doc))
    }

    /// Mean token count of the live documents.
    fn average_length(&self, py: Python<'_>) -> PyResult<f32> {
        let inner = self.inner.read().map_err(|_| errors::internal(py, "lexical index poisoned"))?;
        Ok(inner.average_length())
    }

    /// What document `doc`'s score for `query` is made of: `(word, idf, tf, weight)` per query word
    /// it holds (their sum in this order is the score), its length and the score; None when absent.
    #[expect(clippy::type_complexity, reason = "the tuple the Python signature states")]
    fn explain(
        &self,
        py: Python<'_>,
        query: &str,
        doc: u32,
    ) -> PyResult<Option<(Vec<(String, f32, u32, f32)>, u32, f32)>> {
        let inner = self.inner.read().map_err(|_| errors::internal(py, "lexical index poisoned"))?;
        Ok(inner.explain(query, doc).map(|(parts, len, score)| {
            (parts.into_iter().map(|p| (p.word, p.idf, p.tf, p.weight)).collect(), len, score)
        }))
    }

    /// The best `k` documents for `query` (and any tied with the k-th), only among `allowed` when given.
    #[pyo3(signature = (query, k, allowed=None))]
    fn search<'py>(
        &self,
        py: Python<'py>,
        query: &str,
        k: usize,
        allowed: Option<PyReadonlyArray1<'py, u32>>,
    ) -> PyResult<Found<'py>> {
        let allowed = match &allowed {
            Some(a) => Some(contiguous(py, "allowed", a)?),
            None => None,
        };
        let inner = &self.inner;
        let found = errors::detached(py, "LexicalIndex.search", || {
            inner.read().map(|ix| ix.search(query, allowed, k)).map_err(|_| ())
        })?
        .map_err(|()| errors::internal(py, "lexical index poisoned by an earlier failure"))?;
        let docs: Vec<u32> = found.iter().map(|s| s.doc).collect();
        let scores: Vec<f32> = found.iter().map(|s| s.score).collect();
        Ok((docs.into_pyarray(py), scores.into_pyarray(py)))
    }
}

/// The lowercased Unicode words of `text`, as the index sees them.
#[pyfunction]
fn word_tokens(text: &str) -> Vec<String> {
    lexical::tokens(text)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<LexicalIndex>()?;
    m.add_function(wrap_pyfunction!(word_tokens, m)?)?;
    Ok(())
}
