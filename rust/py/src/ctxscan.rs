//! Binding of `hippograph_core::ctxscan`: a batch of a node range's (key, record) pairs in, the
//! keyword search's verdicts out (the batch is small: the GIL stays held).

use hippograph_core::ctxscan::{self, Verdict};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

/// The key and the record of one pair, as `bytes` objects (`None`: not such a pair).
fn pair<'py>(item: &Bound<'py, PyAny>) -> Option<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
    let tuple = item.cast::<PyTuple>().ok()?;
    if tuple.len() != 2 {
        return None;
    }
    let key = tuple.get_item(0).ok()?.cast_into::<PyBytes>().ok()?;
    let value = tuple.get_item(1).ok()?.cast_into::<PyBytes>().ok()?;
    Some((key, value))
}

/// The verdicts on `pairs[start:]`, read until `limit` of them are matches or undecided: a list
/// holding, per match, the tuple of its `TreeNode` fields (a layer not in `layers` is None) and,
/// per record to decide by decoding it, its index in `pairs`; and the index after the last pair read.
#[pyfunction]
fn context_keyword_scan<'py>(
    py: Python<'py>,
    pairs: &Bound<'py, PyList>,
    needle: &str,
    start: usize,
    limit: usize,
    layers: (bool, bool, bool),
) -> PyResult<(Bound<'py, PyList>, usize)> {
    let out = PyList::empty(py);
    let mut at = start;
    let mut found = 0;
    while at < pairs.len() && found < limit {
        let item = pairs.get_item(at)?;
        let got = pair(&item);
        let verdict = match &got {
            Some((key, record)) => ctxscan::keyword(key.as_bytes(), record.as_bytes(), needle.as_bytes()),
            None => Verdict::Unsure,
        };
        match verdict {
            Verdict::Skip => {}
            Verdict::Unsure => {
                out.append(at)?;
                found += 1;
            }
            Verdict::Match(doc) => {
                let (parent, name) = match doc.uri.rfind('/') {
                    Some(i) => (Some(&doc.uri[..i]).filter(|p| !p.is_empty()), &doc.uri[i + 1..]),
                    None => (None, doc.uri.as_str()),
                };
                let row = (
                    doc.uri.as_str(),
                    parent,
                    name,
                    "doc",
                    doc.content.filter(|_| layers.0),
                    doc.abstract_.filter(|_| layers.1),
                    doc.overview.filter(|_| layers.2),
                    doc.enabled,
                    doc.group,
                );
                out.append(row.into_pyobject(py)?)?;
                found += 1;
            }
        }
        at += 1;
    }
    Ok((out, at))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(context_keyword_scan, m)?)
}
