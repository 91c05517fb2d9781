//! Pure-Rust core of hippograph.
//!
//! No Python types live here: plain slices and structs in, results out, so the
//! algorithms are tested with `cargo test` and benchmarked without an interpreter.

pub mod certified;
pub mod context_write;
pub mod ctxscan;
pub mod digest;
pub mod etf;
pub mod explain;
pub mod gate;
pub mod graph_write;
pub mod hnsw;
pub mod ids;
pub mod lexical;
pub mod lmdbcheck;
pub mod pairs;
pub mod plain;
pub mod scoring;
pub mod shadow;
mod simd;
