//! Python term conversion for the ETF encoder and fingerprint (see etf helper).
use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
