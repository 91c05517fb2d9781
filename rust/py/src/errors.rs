//! Mapping of core failures and panics onto the `hippograph.errors` classes.
//!
//! The classes are declared in Python (where their attributes are typed) and
//! looked up here only on the error path, so the hot path pays nothing.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::panic::{catch_unwind, AssertUnwindSafe};

fn error_class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    PyModule::import(py, "hippograph.errors")?.getattr(name)
}

fn build<'py>(py: Python<'py>, name: &str, args: Bound<'py, PyTuple>, kwargs: Option<&Bound<'py, PyDict>>) -> PyErr {
    let made = error_class(py, name).and_then(|cls| cls.call(args, kwargs));
    match made {
        Ok(instance) => PyErr::from_value(instance),
        Err(err) => err,
    }
}

/// `hippograph.errors.ValidationError(message)`.
pub fn validation(py: Python<'_>, message: impl Into<String>) -> PyErr {
    build(py, "ValidationError", PyTuple::new(py, [message.into()]).expect("tuple"), None)
}

/// `hippograph.errors.IngestionError(reason, message)`.
pub fn ingestion(py: Python<'_>, reason: &str, message: impl Into<String>) -> PyErr {
    build(py, "IngestionError", PyTuple::new(py, [reason.to_string(), message.into()]).expect("tuple"), None)
}

/// `hippograph.errors.StorageError(message)`.
pub fn storage(py: Python<'_>, message: impl Into<String>) -> PyErr {
    build(py, "StorageError", PyTuple::new(py, [message.into()]).expect("tuple"), None)
}

/// `hippograph.errors.StorageError(message, operation=operation)`.
pub fn storage_in(py: Python<'_>, message: impl Into<String>, operation: &str) -> PyErr {
    let kwargs = PyDict::new(py);
    if let Err(err) = kwargs.set_item("operation", operation) {
        return err;
    }
    build(py, "StorageError", PyTuple::new(py, [message.into()]).expect("tuple"), Some(&kwargs))
}

/// `hippograph.errors.HippographError(message)` for internal failures.
pub fn internal(py: Python<'_>, message: impl Into<String>) -> PyErr {
    build(py, "HippographError", PyTuple::new(py, [message.into()]).expect("tuple"), None)
}

fn panic_detail(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

/// Runs `f` with the GIL released, turning a panic into a `HippographError`.
pub fn detached<T: Send>(py: Python<'_>, what: &str, f: impl FnOnce() -> T + Send) -> PyResult<T> {
    py.detach(|| catch_unwind(AssertUnwindSafe(f)).map_err(|p| panic_detail(&*p)))
        .map_err(|detail| internal(py, format!("internal error in {what}: {detail}")))
}

/// Runs `f`, turning a Rust panic into a `HippographError` instead of letting
/// it unwind into the interpreter.
pub fn guard<T>(py: Python<'_>, what: &str, f: impl FnOnce() -> T) -> PyResult<T> {
    catch_unwind(AssertUnwindSafe(f))
        .map_err(|p| internal(py, format!("internal error in {what}: {}", panic_detail(&*p))))
}
