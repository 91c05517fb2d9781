//! Bindings of `hippograph_core::gate`: a reader enters without releasing the GIL when it need not
//! wait; any wait releases it, so the thread inside can leave.

use hippograph_core::gate;
use pyo3::prelude::*;
use std::sync::Arc;

/// Many readers or one writer (`hippograph_core::gate::Gate`); `reader()` and `writer()` are
/// its context managers.
#[pyclass(frozen, module = "hippograph._core")]
pub struct Gate {
    inner: Arc<gate::Gate>,
}

/// Enters `Gate` as a reader for a `with` block.
#[pyclass(frozen, module = "hippograph._core")]
pub struct GateReader {
    inner: Arc<gate::Gate>,
}

/// Enters `Gate` as the writer for a `with` block.
#[pyclass(frozen, module = "hippograph._core")]
pub struct GateWriter {
    inner: Arc<gate::Gate>,
}

#[pymethods]
impl Gate {
    #[new]
    fn new() -> Self {
        Gate { inner: Arc::new(gate::Gate::new()) }
    }

    fn reader(&self) -> GateReader {
        GateReader { inner: Arc::clone(&self.inner) }
    }

    fn writer(&self) -> GateWriter {
        GateWriter { inner: Arc::clone(&self.inner) }
    }

    fn held(&self) -> (usize, bool, usize) {
        self.inner.held()
    }
}

#[pymethods]
impl GateReader {
    fn __enter__(&self, py: Python<'_>) {
        if !self.inner.try_read() {
            py.detach(|| self.inner.read());
        }
    }

    fn __exit__(&self, _t: Option<Bound<'_, PyAny>>, _v: Option<Bound<'_, PyAny>>, _tb: Option<Bound<'_, PyAny>>) {
        self.inner.end_read();
    }
}

#[pymethods]
impl GateWriter {
    fn __enter__(&self, py: Python<'_>) {
        py.detach(|| self.inner.write());
    }

    fn __exit__(&self, _t: Option<Bound<'_, PyAny>>, _v: Option<Bound<'_, PyAny>>, _tb: Option<Bound<'_, PyAny>>) {
        self.inner.end_write();
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Gate>()?;
    m.add_class::<GateReader>()?;
    m.add_class::<GateWriter>()?;
    Ok(())
}
