//! Thin PyO3 binding of `hippograph-core`: argument conversion, GIL release and
//! error mapping only. One module per core module it wraps; every class and
//! function is documented in `python/hippograph/_core.pyi`.

use pyo3::prelude::*;

mod certified;
mod context_write;
mod ctxscan;
mod errors;
mod etf;
mod explain;
mod gate;
mod graph_write;
mod hnsw;
mod ids;
mod lexical;
mod lmdbcheck;
mod pairs;
mod scoring;
mod shadow;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    scoring::register(m)?;
    shadow::register(m)?;
    certified::register(m)?;
    context_write::register(m)?;
    ctxscan::register(m)?;
    pairs::register(m)?;
    etf::register(m)?;
    explain::register(m)?;
    gate::register(m)?;
    graph_write::register(m)?;
    hnsw::register(m)?;
    ids::register(m)?;
    lexical::register(m)?;
    lmdbcheck::register(m)?;
    Ok(())
}
