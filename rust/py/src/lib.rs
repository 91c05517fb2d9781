//! Thin PyO3 binding of `hippograph-core`: argument conversion, GIL release and
//! error mapping only. Every function is documented in `python/hippograph/_core.pyi`.

use pyo3::prelude::*;

mod errors;
mod etf;
mod lmdbcheck;
mod scoring;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    scoring::register(m)?;
    etf::register(m)?;
    lmdbcheck::register(m)?;
    Ok(())
}
