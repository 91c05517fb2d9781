//! Binding of `hippograph_core::lmdbcheck`: takes any contiguous byte buffer
//! (`bytes`, or an `mmap` of `data.mdb` so nothing is copied) and walks it with
//! the GIL released.

use crate::errors;
use hippograph_core::lmdbcheck::{self, CheckError, Meta};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

/// Checks one snapshot of an LMDB data file; `None` when that snapshot's meta
/// page was rewritten meanwhile (retry with a newer one).
#[pyfunction]
#[pyo3(signature = (data, txnid=None))]
fn lmdb_check<'py>(py: Python<'py>, data: PyBuffer<u8>, txnid: Option<u64>) -> PyResult<Option<Bound<'py, PyDict>>> {
    if !data.is_c_contiguous() {
        return Err(errors::validation(py, "data must be a contiguous byte buffer"));
    }
    let len = data.len_bytes();
    // SAFETY: the buffer stays exported (so its memory stays valid) until `data` drops at the end
    // of this function; the core only reads it and bounds-checks every read.
    let bytes: &[u8] = if len == 0 { &[] } else { unsafe { std::slice::from_raw_parts(data.buf_ptr().cast(), len) } };
    let which = txnid.map_or(Meta::Newest, Meta::Txnid);
    match errors::detached(py, "lmdb_check", || lmdbcheck::check(bytes, which))? {
        Ok(report) => {
            let out = PyDict::new(py);
            out.set_item("meta_page", report.meta_page)?;
            out.set_item("txnid", report.txnid)?;
            out.set_item("page_size", report.page_size)?;
            out.set_item("last_page", report.last_page)?;
            out.set_item("pages", report.pages)?;
            let dbs = PyDict::new(py);
            for (name, entries) in &report.databases {
                dbs.set_item(PyBytes::new(py, name), entries)?;
            }
            out.set_item("databases", dbs)?;
            Ok(Some(out))
        }
        Err(CheckError::Stale) => Ok(None),
        Err(CheckError::Corrupt(what)) => Err(errors::storage(py, what)),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(lmdb_check, m)?)
}
