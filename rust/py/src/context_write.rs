//! Bindings of `hippograph_core::context_write`: a document write planned by the core, reading
//! and writing a py-lmdb transaction directly (no Python frame per record).

use crate::errors;
use hippograph_core::context_write::{self as core, Document, Move, Space};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// The py-lmdb handles of the spaces a context write touches, in `Space` order.
type Handles = (Py<PyAny>, Py<PyAny>, Py<PyAny>, Py<PyAny>, Py<PyAny>, Py<PyAny>);

fn handle(dbs: &Handles, space: Space) -> &Py<PyAny> {
    match space {
        Space::Nodes => &dbs.0,
        Space::Vectors => &dbs.1,
        Space::Counters => &dbs.2,
        Space::Jobs => &dbs.3,
        Space::Queue => &dbs.4,
        Space::State => &dbs.5,
    }
}

/// `put_document` of `segments` with its `jobs` ((kind, the payload's msgpack)) in py-lmdb write
/// transaction `txn`: the revision written, or None when the Python path must write it (a case
/// the plan does not cover, or an argument it does not take as given; nothing written then).
#[pyfunction]
#[pyo3(signature = (txn, dbs, segments, content, abstract_, overview, jobs, now_us, max_attempts))]
#[expect(clippy::too_many_arguments, reason = "one argument per part of the write, as Python has them")]
fn context_document(
    py: Python<'_>,
    txn: &Bound<'_, PyAny>,
    dbs: Handles,
    segments: &Bound<'_, PyAny>,
    content: &Bound<'_, PyAny>,
    abstract_: &Bound<'_, PyAny>,
    overview: &Bound<'_, PyAny>,
    jobs: &Bound<'_, PyAny>,
    now_us: &Bound<'_, PyAny>,
    max_attempts: &Bound<'_, PyAny>,
) -> PyResult<Option<u64>> {
    let text = |v: &Bound<'_, PyAny>| v.extract::<String>().ok();
    let layer = |v: &Bound<'_, PyAny>| if v.is_none() { Some(None) } else { text(v).map(Some) };
    let (Ok(segments), Some(content), Some(abstract_), Some(overview), Ok(jobs), Ok(now_us), Ok(max_attempts)) = (
        segments.extract::<Vec<String>>(),
        text(content),
        layer(abstract_),
        layer(overview),
        jobs.extract::<Vec<(String, Vec<u8>)>>(),
        now_us.extract::<u64>(),
        max_attempts.extract::<i64>(),
    ) else {
        return Ok(None);
    };
    let doc = Document {
        segments: &segments,
        content: &content,
        abstract_: abstract_.as_deref(),
        overview: overview.as_deref(),
        jobs: &jobs,
        now_us,
        max_attempts,
    };
    let (get, put) = (txn.getattr(intern!(py, "get"))?, txn.getattr(intern!(py, "put"))?);
    let read = |space: Space, key: &[u8]| -> PyResult<Option<Vec<u8>>> {
        let got = get.call1((PyBytes::new(py, key), py.None(), handle(&dbs, space)))?;
        if got.is_none() {
            return Ok(None);
        }
        Ok(Some(got.cast::<PyBytes>()?.as_bytes().to_vec()))
    };
    let Some(plan) = core::plan_document(read, &doc)? else { return Ok(None) };
    for (space, key, value) in plan.puts {
        put.call1((PyBytes::new(py, &key), PyBytes::new(py, &value), true, true, false, handle(&dbs, space)))?;
    }
    Ok(Some(plan.revision))
}

/// Claims (`step` "claim": running, one more attempt) or completes ("complete") job `job_id` in
/// py-lmdb write transaction `txn`: the job's record afterwards, or None when the Python path
/// must decide (no such job, a record the plan does not take apart, a claim of a job that is not
/// pending; nothing written then).
#[pyfunction]
fn context_job_move<'py>(
    py: Python<'py>,
    txn: &Bound<'py, PyAny>,
    dbs: Handles,
    job_id: u64,
    step: &str,
    now_us: u64,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let step = match step {
        "claim" => Move::Claim,
        "complete" => Move::Complete,
        _ => return Err(errors::validation(py, format!("step must be 'claim' or 'complete', got {step:?}"))),
    };
    let get = txn.getattr(intern!(py, "get"))?;
    let read = |space: Space, key: &[u8]| -> PyResult<Option<Vec<u8>>> {
        let got = get.call1((PyBytes::new(py, key), py.None(), handle(&dbs, space)))?;
        if got.is_none() {
            return Ok(None);
        }
        Ok(Some(got.cast::<PyBytes>()?.as_bytes().to_vec()))
    };
    let Some(plan) = core::plan_move(read, job_id, step, now_us)? else { return Ok(None) };
    if !plan.deletes.is_empty() {
        let delete = txn.getattr(intern!(py, "delete"))?;
        for (space, key) in plan.deletes {
            delete.call1((PyBytes::new(py, &key), PyBytes::new(py, b""), handle(&dbs, space)))?;
        }
    }
    if !plan.puts.is_empty() {
        let put = txn.getattr(intern!(py, "put"))?;
        for (space, key, value) in plan.puts {
            put.call1((PyBytes::new(py, &key), PyBytes::new(py, &value), true, true, false, handle(&dbs, space)))?;
        }
    }
    Ok(Some(PyBytes::new(py, &plan.record)))
}

/// Claims the runnable job of one of `kinds` due first (then lowest id) in py-lmdb write
/// transaction `txn`: (its id, its record afterwards), (0, None) when none is due, or None when
/// the Python path must decide (nothing written then).
#[pyfunction]
fn context_job_claim<'py>(
    py: Python<'py>,
    txn: &Bound<'py, PyAny>,
    dbs: Handles,
    kinds: Vec<String>,
    now_us: u64,
) -> PyResult<Option<(u64, Option<Bound<'py, PyBytes>>)>> {
    let cursor = txn.call_method1(intern!(py, "cursor"), (handle(&dbs, Space::Queue),))?;
    let due_first = || -> PyResult<Option<Option<(u64, u64)>>> {
        let mut best: Option<(u64, u64)> = None;
        for kind in &kinds {
            let head = core::queue_head(kind);
            if !cursor.call_method1(intern!(py, "set_range"), (PyBytes::new(py, &head),))?.is_truthy()? {
                continue;
            }
            let key = cursor.call_method0(intern!(py, "key"))?;
            match core::due_in_queue(&head, key.cast::<PyBytes>()?.as_bytes(), now_us) {
                Some(Some(got)) => best = Some(best.map_or(got, |b| b.min(got))),
                Some(None) => {}
                None => return Ok(None),
            }
        }
        Ok(Some(best))
    };
    let found = due_first();
    cursor.call_method0(intern!(py, "close"))?;
    let Some(best) = found? else { return Ok(None) };
    let Some((_, id)) = best else { return Ok(Some((0, None))) };
    Ok(context_job_move(py, txn, dbs, id, "claim", now_us)?.map(|record| (id, Some(record))))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(context_job_claim, m)?)?;
    m.add_function(wrap_pyfunction!(context_job_move, m)?)?;
    m.add_function(wrap_pyfunction!(context_document, m)?)?;
    Ok(())
}
