//! Candidate scoring: relevance, the default value function and selection.
//!
//! Stored vectors form a row-major `n × dim` matrix whose row norms are cached
//! by the caller (computed once with [`row_norms`] when rows are written), so a
//! query only streams the matrix once: every row is read a single time and
//! dotted against the query and all tag vectors together. That makes the scan
//! memory-bandwidth bound, which is the best an exact scan can do.

use crate::shadow::Shadow;
use rayon::prelude::*;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

/// Rows per parallel task; large enough to amortise scheduling, small enough
/// to balance across cores.
const PAR_CHUNK_ROWS: usize = 2048;
/// Below this many matrix elements the scan runs on the calling thread.
const PAR_MIN_ELEMS: usize = 1 << 21;
/// A listed-rows scan splits across threads from an eighth of a full scan's elements (1 MiB of
/// vectors), in tasks of so many rows: a scope's rows are rarely in cache when it is searched, and
/// a second core streaming from memory beside the first more than pays for waking the pool (a
/// 1,000 × 384 scope read cold: 35–40% faster on two cores; no slower when cached).
const PAR_MIN_LISTED_ELEMS: usize = 1 << 18;
const PAR_LISTED_ROWS: usize = 256;
/// How many listed rows ahead of the one being scored are prefetched.
const PREFETCH_ROWS_AHEAD: usize = 2;
/// Lanes per accumulator; eight f32 fill one AVX register.
const LANES: usize = 8;

/// Shape errors: the only way scoring can fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeError(pub String);

impl std::fmt::Display for ShapeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ShapeError {}

/// Parameters of the default value function (docs/architecture.md, scoring), per node type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ValueParams {
    /// Decay rate per hour.
    pub lambda: f64,
    /// Access count at which frequency reaches one half.
    pub k: f64,
    /// Lower bound of the frequency factor.
    pub base_floor: f64,
    /// Steepness of the reward sigmoid.
    pub beta: f64,
}

/// The default decay rate: a 90-day half-life, `ln 2 / 2160` per hour.
pub const DEFAULT_LAMBDA: f64 = std::f64::consts::LN_2 / 2160.0;

impl Default for ValueParams {
    fn default() -> Self {
        Self { lambda: DEFAULT_LAMBDA, k: 5.0, base_floor: 0.3, beta: 1.0 }
    }
}

/// What a type's `threshold` is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Gate {
    /// The value function's score.
    #[default]
    Score,
    /// The relevance alone; the score still orders what passes.
    Relevance,
}

impl Gate {
    /// Whether a row of this `relevance` and `score` passes `threshold` (a NaN score never does).
    #[inline]
    pub fn admits(self, threshold: f64, relevance: f64, score: f64) -> bool {
        !score.is_nan()
            && match self {
                Gate::Score => score >= threshold,
                Gate::Relevance => relevance >= threshold,
            }
    }

    /// The least score a row needs to be kept while fewer than `top_k` are: the threshold itself
    /// under the score gate, anything under the relevance gate (scores are never negative).
    #[inline]
    pub fn score_floor(self, threshold: f64) -> f64 {
        match self {
            Gate::Score => threshold,
            Gate::Relevance => f64::NEG_INFINITY,
        }
    }
}

/// Per-row usage metadata, as parallel columns (one entry per matrix row).
#[derive(Debug, Clone, Copy)]
pub struct MetaColumns<'a> {
    /// Non-zero when the row has metadata; otherwise the score is the relevance.
    pub has_meta: &'a [u8],
    /// Unix seconds of `last_accessed_at`, or of `created_at` when never accessed.
    pub timestamp: &'a [f64],
    pub access_count: &'a [f64],
    pub reward_count: &'a [f64],
    pub cumulative_reward: &'a [f64],
}

impl MetaColumns<'_> {
    /// Row `i` as the default value function's `(timestamp, access_count,
    /// reward_count, cumulative_reward)`, or `None` without metadata.
    #[inline]
    pub fn row(&self, i: usize) -> Option<(f64, f64, f64, f64)> {
        (self.has_meta[i] != 0)
            .then(|| (self.timestamp[i], self.access_count[i], self.reward_count[i], self.cumulative_reward[i]))
    }

    pub(crate) fn check(&self, n: usize) -> Result<(), ShapeError> {
        let lens = [
            self.has_meta.len(),
            self.timestamp.len(),
            self.access_count.len(),
            self.reward_count.len(),
            self.cumulative_reward.len(),
        ];
        if lens.iter().all(|&l| l == n) {
            Ok(())
        } else {
            Err(ShapeError(format!("metadata columns have lengths {lens:?}, expected {n}")))
        }
    }
}

/// A matrix of stored vectors with cached norms: f32 rows (`data`), or, with `half`, each row as
/// its unit vector in f16 (bit patterns, `data` then empty): the half-precision storage that
/// reads half the bytes a scan of f32 rows reads. A half row's relevance is its dot product with
/// the unit query (its norm is one, or zero for a row without a vector).
#[derive(Debug, Clone, Copy)]
pub struct Stored<'a> {
    pub data: &'a [f32],
    pub half: Option<&'a [u16]>,
    pub norms: &'a [f32],
    pub dim: usize,
}

impl<'a> Stored<'a> {
    /// f32 rows with their norms.
    pub fn new(data: &'a [f32], norms: &'a [f32], dim: usize) -> Self {
        Stored { data, half: None, norms, dim }
    }

    /// Unit rows in f16 (bit patterns) with the stored vectors' norms (zero: no vector).
    pub fn half(half: &'a [u16], norms: &'a [f32], dim: usize) -> Self {
        Stored { data: &[], half: Some(half), norms, dim }
    }

    /// Number of rows; validates that data, norms and dim agree.
    pub fn rows(&self) -> Result<usize, ShapeError> {
        let n = self.norms.len();
        let held = self.half.map_or(self.data.len(), <[u16]>::len);
        if held != n * self.dim {
            return Err(ShapeError(format!("matrix holds {held} values, expected {n} rows × {} dims", self.dim)));
        }
        Ok(n)
    }

    /// Values held (rows × dim): what a scan reads, for choosing to split it across threads.
    fn values(&self) -> usize {
        self.norms.len() * self.dim
    }

    /// Relevance of rows `start..end` against unit queries, with the kernel for the rows' precision.
    #[inline]
    pub(crate) fn block(&self, start: usize, end: usize, unit: &[f32], out: &mut [f32]) {
        let dim = self.dim;
        match self.half {
            Some(h) => crate::shadow::relevance_block(&h[start * dim..end * dim], dim, unit, out),
            None => relevance_block(&self.data[start * dim..end * dim], &self.norms[start..end], dim, unit, out),
        }
    }

    /// Each unit query's similarity to row `r` (clamped to [0, 1] as a relevance is), from the
    /// dot products the relevance kernel takes the largest of: their maximum is row `r`'s relevance.
    pub(crate) fn similarities(&self, r: usize, unit: &[f32], out: &mut [f32]) {
        let (dim, norm) = (self.dim, self.norms[r]);
        if norm <= 0.0 {
            out.fill(0.0);
            return;
        }
        match self.half {
            Some(h) => crate::shadow::row_dots(&h[r * dim..(r + 1) * dim], dim, unit, out),
            None => row_dots(&self.data[r * dim..(r + 1) * dim], dim, unit, out),
        }
        let norm = if self.half.is_some() { 1.0 } else { norm };
        out.iter_mut().for_each(|d| *d = (*d / norm).clamp(0.0, 1.0));
    }

    /// The cache lines of row `r`'s values (none past the end), for [`prefetch`].
    pub(crate) fn row_lines(&self, r: usize) -> impl Iterator<Item = *const i8> {
        let dim = self.dim;
        let (base, bytes): (*const i8, usize) = match self.half {
            Some(h) => {
                h.get(r * dim..(r + 1) * dim).map_or((std::ptr::null(), 0), |row| (row.as_ptr().cast(), 2 * dim))
            }
            None => self
                .data
                .get(r * dim..(r + 1) * dim)
                .map_or((std::ptr::null(), 0), |row| (row.as_ptr().cast(), 4 * dim)),
        };
        (0..bytes).step_by(64).map(move |offset| base.wrapping_add(offset))
    }
}

/// Euclidean norm of one vector, summed in f64: the one definition every cached norm uses.
pub fn vector_norm(v: &[f32]) -> f64 {
    v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt()
}

/// Whether every value is finite (no NaN, no infinity): the exponent bits of each value
/// or-ed and and-ed together, a loop the compiler vectorises (no early exit).
pub fn all_finite(v: &[f32]) -> bool {
    const EXPONENT: u32 = 0x7f80_0000;
    v.iter().fold(true, |ok, &x| ok & (x.to_bits() & EXPONENT != EXPONENT))
}

/// Euclidean norm of every row of a row-major `? × dim` matrix.
pub fn row_norms(data: &[f32], dim: usize) -> Vec<f32> {
    if dim == 0 {
        return Vec::new();
    }
    let norm = |row: &[f32]| vector_norm(row) as f32;
    if data.len() >= PAR_MIN_ELEMS {
        data.par_chunks_exact(dim).map(norm).collect()
    } else {
        data.chunks_exact(dim).map(norm).collect()
    }
}

/// Query vectors starting on a cache line: no kernel load of a query straddles two lines (by the
/// address the allocator happened to give, a scan with five queries ran up to 40% slower in cache
/// with them unaligned, and a graph search's query alike).
#[derive(Debug, Default)]
pub(crate) struct UnitQueries {
    buf: Vec<f32>,
    start: usize,
    len: usize,
}

impl UnitQueries {
    /// A copy of `values` on a cache line.
    pub(crate) fn aligned(values: &[f32]) -> Self {
        const LINE_FLOATS: usize = 16;
        let mut buf = vec![0.0f32; values.len() + LINE_FLOATS];
        let start = buf.as_ptr().align_offset(64).min(LINE_FLOATS);
        buf[start..start + values.len()].copy_from_slice(values);
        UnitQueries { buf, start, len: values.len() }
    }
}

impl std::ops::Deref for UnitQueries {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        &self.buf[self.start..self.start + self.len]
    }
}

impl std::ops::DerefMut for UnitQueries {
    fn deref_mut(&mut self) -> &mut [f32] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

/// Queries scaled to unit length (a zero vector stays zero, so it matches nothing).
pub(crate) fn normalise_queries(queries: &[f32], dim: usize) -> UnitQueries {
    let mut out = UnitQueries::aligned(queries);
    for q in out.chunks_exact_mut(dim.max(1)) {
        let norm = q.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt();
        let scale = if norm > 0.0 { (1.0 / norm) as f32 } else { 0.0 };
        q.iter_mut().for_each(|x| *x *= scale);
    }
    out
}

/// Dot products of one row with `Q` unit queries, reading the row once.
#[inline(always)]
fn dots<const Q: usize>(row: &[f32], queries: &[f32], dim: usize) -> [f32; Q] {
    let mut acc = [[0.0f32; LANES]; Q];
    let full = dim - dim % LANES;
    let mut i = 0;
    while i < full {
        let r = &row[i..i + LANES];
        for (j, a) in acc.iter_mut().enumerate() {
            let q = &queries[j * dim + i..j * dim + i + LANES];
            for l in 0..LANES {
                a[l] += r[l] * q[l];
            }
        }
        i += LANES;
    }
    let mut out = [0.0f32; Q];
    for (j, a) in acc.iter().enumerate() {
        let mut s = a.iter().sum::<f32>();
        for t in full..dim {
            s += row[t] * queries[j * dim + t];
        }
        out[j] = s;
    }
    out
}

/// Each unit query's dot product with `row`, through `$dots::<Q, U>` (each query's dot product
/// from `U` independent accumulators) over blocks of at most `$most` queries; `$body` runs per
/// block with `$start` (the block's first query) and `$got` (its `[f32; Q]` of dot products) bound,
/// and `$then` with `$value`, what `$body` gave (a relevance's block maximum is taken in the arm, so
/// each arm's code is what a kernel returning its maximum would be).
/// The one grouping both a relevance (the largest of them) and an explanation (each on its own) go
/// through, so a query's dot product is the same number in both: `Q` is a constant, so a kernel
/// keeps its accumulators in registers, and `U` accumulators per query make a row's fused
/// multiply-adds form at least four independent chains rather than one waiting on the last (the
/// latency, not the loads, bounds a scan of a matrix that sits in cache).
macro_rules! query_blocks {
    ($dots:ident, $most:expr, $row:expr, $unit:expr, $dim:expr, $m:expr, |$start:ident, $got:ident| $body:expr, |$value:ident| $then:expr) => {{
        let (row, unit, dim, m): (_, &[f32], usize, usize) = ($row, $unit, $dim, $m);
        let mut first = 0;
        while first < m {
            let block = &unit[first * dim..];
            let take = (m - first).min($most);
            let $start = first;
            let $value = match take {
                1 => {
                    let $got = $dots::<1, 4>(row, block, dim);
                    $body
                }
                2 => {
                    let $got = $dots::<2, 2>(row, block, dim);
                    $body
                }
                3 => {
                    let $got = $dots::<3, 2>(row, block, dim);
                    $body
                }
                4 => {
                    let $got = $dots::<4, 1>(row, block, dim);
                    $body
                }
                5 => {
                    let $got = $dots::<5, 1>(row, block, dim);
                    $body
                }
                6 => {
                    let $got = $dots::<6, 1>(row, block, dim);
                    $body
                }
                7 => {
                    let $got = $dots::<7, 1>(row, block, dim);
                    $body
                }
                _ => {
                    let $got = $dots::<8, 1>(row, block, dim);
                    $body
                }
            };
            $then;
            first += take;
        }
    }};
}

pub(crate) use query_blocks;

/// Relevance of every row of `data` (f32, or the f16 bits of a shadow) against the unit queries:
/// the largest of `$max_dot::<Q, U>` over the blocks [`query_blocks`] makes (the same `Q` and `U`
/// for a block: a relevance is the maximum of the dot products an explanation lists), divided by
/// the row's norm and clamped to [0, 1]; a zero row scores 0. The one body every kernel
/// (portable, AVX2, AVX-512) instantiates with its own `max_dot`. (Written out rather than through
/// `query_blocks`: the scan's loop measured 40% slower in cache with five queries that way.)
macro_rules! relevance_rows {
    ($max_dot:ident, $most:expr, $data:expr, $norms:expr, $dim:expr, $unit:expr, $out:expr) => {{
        let (dim, unit): (usize, &[f32]) = ($dim, $unit);
        let m = unit.len() / dim;
        for ((row, &norm), o) in $data.chunks_exact(dim).zip($norms).zip($out.iter_mut()) {
            if norm <= 0.0 {
                *o = 0.0;
                continue;
            }
            let mut best = f32::NEG_INFINITY;
            let mut start = 0;
            while start < m {
                let block = &unit[start * dim..];
                let take = (m - start).min($most);
                let local = match take {
                    1 => $max_dot::<1, 4>(row, block, dim),
                    2 => $max_dot::<2, 2>(row, block, dim),
                    3 => $max_dot::<3, 2>(row, block, dim),
                    4 => $max_dot::<4, 1>(row, block, dim),
                    5 => $max_dot::<5, 1>(row, block, dim),
                    6 => $max_dot::<6, 1>(row, block, dim),
                    7 => $max_dot::<7, 1>(row, block, dim),
                    _ => $max_dot::<8, 1>(row, block, dim),
                };
                best = best.max(local);
                start += take;
            }
            *o = (best / norm).clamp(0.0, 1.0);
        }
    }};
}

pub(crate) use relevance_rows;

/// Each unit query's dot product with one row, into `out` (one per query): [`query_blocks`] as
/// [`relevance_rows`] runs it.
macro_rules! dots_of_row {
    ($dots:ident, $most:expr, $row:expr, $dim:expr, $unit:expr, $out:expr) => {{
        let out: &mut [f32] = $out;
        crate::scoring::query_blocks!(
            $dots,
            $most,
            $row,
            $unit,
            $dim,
            out.len(),
            |first, got| out[first..first + got.len()].copy_from_slice(&got),
            |_done| ()
        );
    }};
}

pub(crate) use dots_of_row;

/// Queries per block of the f32 kernels.
const F32_QUERIES: usize = 8;

/// Each of `Q` unit queries' dot product with `row` (portable kernel: `dots` already keeps a
/// lane-wide accumulator per query, so `U` is not needed here).
#[inline(always)]
fn dots_q<const Q: usize, const U: usize>(row: &[f32], queries: &[f32], dim: usize) -> [f32; Q] {
    dots::<Q>(row, queries, dim)
}

/// The largest of [`dots_q`].
#[inline(always)]
fn max_dot_q<const Q: usize, const U: usize>(row: &[f32], queries: &[f32], dim: usize) -> f32 {
    dots_q::<Q, U>(row, queries, dim).into_iter().fold(f32::NEG_INFINITY, f32::max)
}

#[inline(always)]
fn relevance_block_impl(data: &[f32], norms: &[f32], dim: usize, unit: &[f32], out: &mut [f32]) {
    relevance_rows!(max_dot_q, F32_QUERIES, data, norms, dim, unit, out)
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! Explicit AVX2/FMA kernel: each row is loaded once per 8 lanes and fused
    //! into up to 8 query accumulators, so the scan streams memory at full speed.
    use std::arch::x86_64::*;

    use crate::simd::hsum;

    use super::F32_QUERIES;

    /// Each of `Q` unit queries' dot product with `row`.
    #[inline(always)]
    unsafe fn dots_q<const Q: usize, const U: usize>(row: &[f32], queries: &[f32], dim: usize) -> [f32; Q] {
        const W: usize = 8;
        let full = dim - dim % W;
        let mut accs = [[_mm256_setzero_ps(); U]; Q];
        let r = row.as_ptr();
        let q = queries.as_ptr();
        let mut i = 0;
        while i + U * W <= full {
            for u in 0..U {
                let x = _mm256_loadu_ps(r.add(i + u * W));
                for (j, a) in accs.iter_mut().enumerate() {
                    a[u] = _mm256_fmadd_ps(x, _mm256_loadu_ps(q.add(j * dim + i + u * W)), a[u]);
                }
            }
            i += U * W;
        }
        while i < full {
            let x = _mm256_loadu_ps(r.add(i));
            for (j, a) in accs.iter_mut().enumerate() {
                a[0] = _mm256_fmadd_ps(x, _mm256_loadu_ps(q.add(j * dim + i)), a[0]);
            }
            i += W;
        }
        let mut acc = [_mm256_setzero_ps(); Q];
        for (sum, a) in acc.iter_mut().zip(&accs) {
            for &part in a {
                *sum = _mm256_add_ps(*sum, part);
            }
        }
        let mut out = [0.0f32; Q];
        for (j, (a, o)) in acc.iter().zip(&mut out).enumerate() {
            let mut s = hsum(*a);
            for t in full..dim {
                s += row[t] * queries[j * dim + t];
            }
            *o = s;
        }
        out
    }

    /// Relevance of a block of rows (the caller checked the CPU features).
    ///
    /// One row at a time: a two-row variant that shares query loads was
    /// measured slower once the matrix no longer fits in cache (it splits the
    /// hardware prefetcher across two streams), which is the case that matters.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn relevance_block(data: &[f32], norms: &[f32], dim: usize, unit: &[f32], out: &mut [f32]) {
        relevance_rows(data, norms, dim, unit, out)
    }

    /// The largest of [`dots_q`].
    #[inline(always)]
    unsafe fn max_dot_q<const Q: usize, const U: usize>(row: &[f32], queries: &[f32], dim: usize) -> f32 {
        dots_q::<Q, U>(row, queries, dim).into_iter().fold(f32::NEG_INFINITY, f32::max)
    }

    #[inline(always)]
    unsafe fn relevance_rows(data: &[f32], norms: &[f32], dim: usize, unit: &[f32], out: &mut [f32]) {
        relevance_rows!(max_dot_q, F32_QUERIES, data, norms, dim, unit, out)
    }

    /// Each query's dot product with one row (the caller checked the CPU features).
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn row_dots(row: &[f32], dim: usize, unit: &[f32], out: &mut [f32]) {
        crate::scoring::dots_of_row!(dots_q, F32_QUERIES, row, dim, unit, out)
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    //! The AVX2 kernel's shape at 16 lanes: where the matrix sits in a large
    //! cache the scan is bound by instructions rather than memory, and half as
    //! many loads and FMAs per row show directly.
    use std::arch::x86_64::*;

    use super::F32_QUERIES;

    const W: usize = 16;

    /// Each of `Q` queries' products with `row` over the whole lane groups, summed lane-wise.
    #[inline(always)]
    unsafe fn accumulate<const Q: usize, const U: usize>(row: &[f32], queries: &[f32], dim: usize) -> [__m512; Q] {
        let full = dim - dim % W;
        let mut accs = [[_mm512_setzero_ps(); U]; Q];
        let r = row.as_ptr();
        let q = queries.as_ptr();
        let mut i = 0;
        while i + U * W <= full {
            for u in 0..U {
                let x = _mm512_loadu_ps(r.add(i + u * W));
                for (j, a) in accs.iter_mut().enumerate() {
                    a[u] = _mm512_fmadd_ps(x, _mm512_loadu_ps(q.add(j * dim + i + u * W)), a[u]);
                }
            }
            i += U * W;
        }
        while i < full {
            let x = _mm512_loadu_ps(r.add(i));
            for (j, a) in accs.iter_mut().enumerate() {
                a[0] = _mm512_fmadd_ps(x, _mm512_loadu_ps(q.add(j * dim + i)), a[0]);
            }
            i += W;
        }
        let mut acc = [_mm512_setzero_ps(); Q];
        for (sum, a) in acc.iter_mut().zip(&accs) {
            for &part in a {
                *sum = _mm512_add_ps(*sum, part);
            }
        }
        acc
    }

    /// Query `j`'s dot product from its lane sums, plus the tail past the last whole lane group.
    #[inline(always)]
    unsafe fn finish(acc: __m512, row: &[f32], queries: &[f32], j: usize, dim: usize) -> f32 {
        let mut s = _mm512_reduce_add_ps(acc);
        for t in dim - dim % W..dim {
            s += row[t] * queries[j * dim + t];
        }
        s
    }

    /// Each of `Q` unit queries' dot product with `row`.
    #[inline(always)]
    unsafe fn dots_q<const Q: usize, const U: usize>(row: &[f32], queries: &[f32], dim: usize) -> [f32; Q] {
        let acc = accumulate::<Q, U>(row, queries, dim);
        let mut out = [0.0f32; Q];
        for (j, o) in out.iter_mut().enumerate() {
            *o = finish(acc[j], row, queries, j, dim);
        }
        out
    }

    /// The largest of [`dots_q`], computed alike (the same `accumulate` and `finish`).
    #[inline(always)]
    unsafe fn max_dot_q<const Q: usize, const U: usize>(row: &[f32], queries: &[f32], dim: usize) -> f32 {
        let acc = accumulate::<Q, U>(row, queries, dim);
        let mut best = f32::NEG_INFINITY;
        for (j, &a) in acc.iter().enumerate() {
            best = best.max(finish(a, row, queries, j, dim));
        }
        best
    }

    /// Relevance of a block of rows (the caller checked the CPU features).
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn relevance_block(data: &[f32], norms: &[f32], dim: usize, unit: &[f32], out: &mut [f32]) {
        relevance_rows!(max_dot_q, F32_QUERIES, data, norms, dim, unit, out)
    }

    /// Each query's dot product with one row (the caller checked the CPU features).
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn row_dots(row: &[f32], dim: usize, unit: &[f32], out: &mut [f32]) {
        crate::scoring::dots_of_row!(dots_q, F32_QUERIES, row, dim, unit, out)
    }
}

/// Relevance of a block of rows, using AVX2 when the CPU has it.
pub(crate) fn relevance_block(data: &[f32], norms: &[f32], dim: usize, unit: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: as below, at 16 lanes (i + 16 <= full <= dim).
            unsafe { avx512::relevance_block(data, norms, dim, unit, out) };
            return;
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports the features the kernel was compiled for, and
            // every pointer offset stays within `row` (i + 8 <= full <= dim) or
            // within the `take` query rows of `block`.
            unsafe { avx2::relevance_block(data, norms, dim, unit, out) };
            return;
        }
    }
    relevance_block_impl(data, norms, dim, unit, out)
}

/// Each unit query's dot product with one f32 row, with the kernel [`relevance_block`] picks.
fn row_dots(row: &[f32], dim: usize, unit: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: as in `relevance_block`.
            unsafe { avx512::row_dots(row, dim, unit, out) };
            return;
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: as in `relevance_block`.
            unsafe { avx2::row_dots(row, dim, unit, out) };
            return;
        }
    }
    dots_of_row!(dots_q, F32_QUERIES, row, dim, unit, out)
}

/// Hints the CPU to bring these cache lines in; no effect on results, none off x86-64.
#[inline(always)]
pub(crate) fn prefetch(lines: impl IntoIterator<Item = *const i8>) {
    #[cfg(target_arch = "x86_64")]
    for line in lines {
        // SAFETY: prefetching is only a hint; it reads nothing and cannot fault, whatever the address.
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    for _ in lines {}
}

/// `max(0, cos(q, e), max_t cos(t, e))` for every stored row `e`.
///
/// `queries` is a row-major `m × dim` matrix holding the query and the tag
/// vectors. Rows or queries with zero norm have similarity 0. With no queries
/// (or `dim == 0`) every relevance is 0.
pub fn relevance(stored: Stored<'_>, queries: &[f32]) -> Result<Vec<f32>, ShapeError> {
    let n = stored.rows()?;
    let dim = stored.dim;
    let mut out = vec![0.0f32; n];
    if dim == 0 || queries.is_empty() || n == 0 {
        return Ok(out);
    }
    if !queries.len().is_multiple_of(dim) {
        return Err(ShapeError(format!("query values ({}) are not a multiple of the dimension {dim}", queries.len())));
    }
    let unit = normalise_queries(queries, dim);
    if stored.values() >= PAR_MIN_ELEMS && rayon::current_num_threads() > 1 {
        out.par_chunks_mut(PAR_CHUNK_ROWS).enumerate().for_each(|(c, o)| {
            let start = c * PAR_CHUNK_ROWS;
            stored.block(start, start + o.len(), &unit, o);
        });
    } else {
        stored.block(0, n, &unit, &mut out);
    }
    Ok(out)
}

/// `relevance` of the listed `rows` only (a scope, a filter), in their order: a restricted search
/// reads just those rows, never the whole matrix. Runs of consecutive rows go through the kernel
/// together, and a long list is split across threads.
pub fn relevance_of_rows(stored: Stored<'_>, queries: &[f32], rows: &[u32]) -> Result<Vec<f32>, ShapeError> {
    let n = stored.rows()?;
    let dim = stored.dim;
    if let Some(&bad) = rows.iter().find(|&&r| r as usize >= n) {
        return Err(ShapeError(format!("row {bad} is past the {n} stored rows")));
    }
    let mut out = vec![0.0f32; rows.len()];
    if dim == 0 || queries.is_empty() {
        return Ok(out);
    }
    if !queries.len().is_multiple_of(dim) {
        return Err(ShapeError(format!("query values ({}) are not a multiple of the dimension {dim}", queries.len())));
    }
    let unit = normalise_queries(queries, dim);
    let fill = |rows: &[u32], out: &mut [f32]| {
        let mut i = 0;
        while i < rows.len() {
            let start = rows[i] as usize;
            let mut j = i + 1;
            while j < rows.len() && rows[j] as usize == start + (j - i) {
                j += 1;
            }
            // Scattered rows defeat the hardware prefetcher: ask for the rows a few places ahead.
            for &ahead in rows.iter().skip(j).take(PREFETCH_ROWS_AHEAD) {
                prefetch(stored.row_lines(ahead as usize));
            }
            stored.block(start, start + (j - i), &unit, &mut out[i..j]);
            i = j;
        }
    };
    if rows.len() * dim >= PAR_MIN_LISTED_ELEMS && rayon::current_num_threads() > 1 {
        out.par_chunks_mut(PAR_LISTED_ROWS).zip(rows.par_chunks(PAR_LISTED_ROWS)).for_each(|(o, r)| fill(r, o));
    } else {
        fill(rows, &mut out);
    }
    Ok(out)
}

/// The rows (every stored row, or the listed ones) with a positive relevance among the best `k`,
/// and every row tied with the k-th: `(rows, relevances)`, in no particular order, so the caller
/// breaks ties its own way. One call replaces a scan and a selection over the whole result.
pub fn top_relevance(
    stored: Stored<'_>,
    queries: &[f32],
    k: usize,
    rows: Option<&[u32]>,
) -> Result<(Vec<u32>, Vec<f32>), ShapeError> {
    let sims = match rows {
        Some(listed) => relevance_of_rows(stored, queries, listed)?,
        None => relevance(stored, queries)?,
    };
    Ok(best_positive(&sims, k, |i| rows.map_or(i as u32, |listed| listed[i])))
}

/// A relevance as a key that orders positive values as their bit patterns do; anything else is 0.
#[inline]
pub(crate) fn positive_key(s: f32) -> u32 {
    if s > 0.0 {
        s.to_bits()
    } else {
        0
    }
}

/// The k-th largest non-zero key (the least when there are fewer), 0 when there is none, and
/// whether there were at least `k`. Branch-free keys and one comparison against the heap's least
/// (0 while filling) keep a random mix of signs from costing a mispredicted branch per row.
pub(crate) fn kth_key(keys: impl Iterator<Item = u32>, k: usize) -> (u32, bool) {
    let mut best: BinaryHeap<Reverse<u32>> = BinaryHeap::with_capacity(k + 1);
    let mut least = 0u32;
    for bits in keys {
        if bits > least {
            best.push(Reverse(bits));
            if best.len() > k {
                best.pop();
            }
            if best.len() == k {
                least = best.peek().map_or(0, |low| low.0);
            }
        }
    }
    (best.peek().map_or(0, |low| low.0), best.len() >= k)
}

/// The positions of `sims` with a positive value among the best `k`, and every tie with the k-th,
/// as `(row_of(position), value)` columns in position order.
pub(crate) fn best_positive(sims: &[f32], k: usize, row_of: impl Fn(usize) -> u32) -> (Vec<u32>, Vec<f32>) {
    if k == 0 {
        return (Vec::new(), Vec::new());
    }
    let (kth, _) = kth_key(sims.iter().map(|&s| positive_key(s)), k);
    if kth == 0 {
        return (Vec::new(), Vec::new());
    }
    let (mut out_rows, mut out_sims) = (Vec::with_capacity(k), Vec::with_capacity(k));
    for (i, &s) in sims.iter().enumerate() {
        if positive_key(s) >= kth {
            out_rows.push(row_of(i));
            out_sims.push(s);
        }
    }
    (out_rows, out_sims)
}

/// The default value function's factors for one row with metadata: what [`default_value`]
/// multiplies a relevance by, kept apart so an explanation shows the very numbers a score used.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ValueParts {
    /// Hours from the row's timestamp to `now`, never negative.
    pub hours: f64,
    /// `exp(-lambda × hours)`.
    pub recency: f64,
    /// `max(base_floor, n / (n + k))` for `n` accesses.
    pub frequency: f64,
    /// 1 without rewards, else `1 / (1 + exp(-beta × mean reward))`.
    pub reward: f64,
}

impl ValueParts {
    /// The factors of a row with this metadata at `now`.
    #[inline]
    pub fn of(meta: (f64, f64, f64, f64), now: f64, p: &ValueParams) -> Self {
        let (timestamp, access_count, reward_count, cumulative_reward) = meta;
        let hours = ((now - timestamp) / 3600.0).max(0.0);
        ValueParts {
            hours,
            recency: (-p.lambda * hours).exp(),
            frequency: frequency(access_count, p),
            reward: reward(reward_count, cumulative_reward, p),
        }
    }

    /// The score of a row of this `relevance`: `relevance × recency × (frequency × reward)`,
    /// multiplied in that order.
    #[inline]
    pub fn score(&self, relevance: f64) -> f64 {
        relevance * self.recency * (self.frequency * self.reward)
    }
}

/// The default value function for one candidate (docs/architecture.md, scoring).
///
/// Never exceeds `relevance` for relevance ≥ 0: elapsed time is clamped at
/// zero and every factor is at most one.
#[inline]
pub fn default_value(relevance: f64, meta: Option<(f64, f64, f64, f64)>, now: f64, p: &ValueParams) -> f64 {
    match meta {
        None => relevance,
        Some(m) => ValueParts::of(m, now, p).score(relevance),
    }
}

#[inline]
fn frequency(access_count: f64, p: &ValueParams) -> f64 {
    let denom = access_count + p.k;
    let freq = if denom > 0.0 { access_count / denom } else { 0.0 };
    freq.max(p.base_floor)
}

#[inline]
fn reward(reward_count: f64, cumulative_reward: f64, p: &ValueParams) -> f64 {
    if reward_count <= 0.0 {
        1.0
    } else {
        1.0 / (1.0 + (-p.beta * (cumulative_reward / reward_count)).exp())
    }
}

/// The time-independent factors of the default value function: frequency × reward.
#[inline]
pub fn usage_weight(access_count: f64, reward_count: f64, cumulative_reward: f64, p: &ValueParams) -> f64 {
    frequency(access_count, p) * reward(reward_count, cumulative_reward, p)
}

/// Scores every row with the default value function.
pub fn default_values(
    relevance: &[f32],
    meta: MetaColumns<'_>,
    now: f64,
    p: &ValueParams,
) -> Result<Vec<f64>, ShapeError> {
    meta.check(relevance.len())?;
    let score = |i: usize| default_value(f64::from(relevance[i]), meta.row(i), now, p);
    Ok((0..relevance.len()).map(score).collect())
}

/// Orders candidates: score descending, then id rank ascending.
#[inline]
fn better(scores: &[f64], rank: Option<&[u32]>, a: usize, b: usize) -> Ordering {
    scores[b].partial_cmp(&scores[a]).unwrap_or(Ordering::Equal).then_with(|| match rank {
        Some(r) => r[a].cmp(&r[b]),
        None => a.cmp(&b),
    })
}

/// Indices of the best `top_k` rows with `score >= threshold`, best first.
///
/// Ties in score are broken by `rank` ascending (the caller passes each row's
/// position in id order), or by row index when `rank` is `None`. Uses partial
/// selection, so only the kept rows are sorted. NaN scores are never selected.
pub fn select_top(
    scores: &[f64],
    threshold: f64,
    top_k: usize,
    rank: Option<&[u32]>,
) -> Result<Vec<usize>, ShapeError> {
    if let Some(r) = rank {
        if r.len() != scores.len() {
            return Err(ShapeError(format!("rank has {} entries, scores {}", r.len(), scores.len())));
        }
    }
    if top_k == 0 {
        return Ok(Vec::new());
    }
    let mut keep: Vec<usize> = (0..scores.len()).filter(|&i| scores[i] >= threshold).collect();
    let cmp = |a: &usize, b: &usize| better(scores, rank, *a, *b);
    if keep.len() > top_k {
        keep.select_nth_unstable_by(top_k - 1, cmp);
        keep.truncate(top_k);
    }
    keep.sort_unstable_by(cmp);
    Ok(keep)
}

/// Everything one exact `find_candidates` pass over one node type needs.
#[derive(Debug, Clone, Copy)]
pub struct ScanRequest<'a> {
    pub stored: Stored<'a>,
    pub queries: &'a [f32],
    pub meta: MetaColumns<'a>,
    pub rank: Option<&'a [u32]>,
    pub now: f64,
    pub params: ValueParams,
    pub threshold: f64,
    pub gate: Gate,
    pub top_k: usize,
}

/// Rows per block of the fused scan: relevance, values and a bounded top-k
/// are computed block by block while the rows are still in cache.
const SCAN_BLOCK: usize = 4096;

/// The `k`-th largest of `values` (`0 < k <= values.len()`, by `f32::total_cmp`): a sorted buffer
/// of the best `k` for a small `k` (most values fail one comparison), else a selection over
/// order-preserving integer keys (a buffer of a few dozen would take a binary search and a shift
/// for many of the values).
fn kth_largest(values: &[f32], k: usize) -> f32 {
    if k > 16 {
        let mut keys: Vec<u32> = values.iter().map(|&v| total_order_key(v)).collect();
        return from_total_order_key(*keys.select_nth_unstable_by(k - 1, |a, b| b.cmp(a)).1);
    }
    let mut best: Vec<f32> = Vec::with_capacity(k + 1);
    for &v in values {
        if best.len() == k && v.total_cmp(&best[k - 1]).is_le() {
            continue;
        }
        let at = best.partition_point(|b| b.total_cmp(&v).is_ge());
        best.insert(at, v);
        best.truncate(k);
    }
    best[k - 1]
}

/// An unsigned key that orders like `f32::total_cmp`: negatives (sign bit set) reversed below
/// the positives.
fn total_order_key(v: f32) -> u32 {
    let bits = v.to_bits();
    if bits >> 31 == 1 {
        !bits
    } else {
        bits | 0x8000_0000
    }
}

fn from_total_order_key(key: u32) -> f32 {
    f32::from_bits(if key >> 31 == 1 { key & 0x7fff_ffff } else { !key })
}

/// Rows valued per answer slot when a block seeds its floor: the best `SEED_ROWS × top_k` by
/// relevance. The k-th best of their scores bounds the answer far more tightly than the least
/// score of the `top_k` most relevant rows when usage varies, for a few dozen value computations.
const SEED_ROWS: usize = 4;

/// A score the block's answer cannot fall below, from its most relevant rows alone: when `top_k`
/// of them pass the gate, the block holds `top_k` rows scoring at least the k-th best of their
/// scores, so no row scoring below it belongs to the answer. Most rows then skip the value
/// function (their relevance × `gain` is already below it). Zero when the block is too small or
/// fewer than `top_k` of those rows pass the gate.
fn seed_floor(rel: &[f32], start: usize, req: &ScanRequest<'_>, gain: f64) -> f64 {
    seed_floor_from_bounds(rel, start, req, gain)
}

/// [`seed_floor`] from lower bounds of the block's relevances: each row is valued at its lower
/// bound, which the value function (growing with relevance) keeps below the row's score, and the
/// gate admits a row at its lower bound only if it admits it at its relevance.
fn seed_floor_from_bounds(lower: &[f32], start: usize, req: &ScanRequest<'_>, gain: f64) -> f64 {
    let k = req.top_k;
    if k == 0 || lower.len() <= 2 * k || gain < 1.0 {
        return 0.0;
    }
    let picked = (SEED_ROWS * k).min(lower.len() / 2);
    let cut = kth_largest(lower, picked);
    if cut.is_nan() || cut <= 0.0 {
        return 0.0;
    }
    let mut values: Vec<f64> = Vec::with_capacity(picked + 8);
    for (j, &lj) in lower.iter().enumerate() {
        if lj < cut {
            continue;
        }
        let r = f64::from(lj);
        let value = default_value(r, req.meta.row(start + j), req.now, &req.params);
        if req.gate.admits(req.threshold, r, value) && !value.is_nan() {
            values.push(value);
        }
    }
    if values.len() < k {
        return 0.0;
    }
    let kth = *values.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a)).1;
    if kth.is_finite() && kth > 0.0 {
        kth * (1.0 - 1e-12)
    } else {
        0.0
    }
}

/// Relevance, default value function and selection in one pass: the fast path.
///
/// Each block keeps only its own best `top_k` (by score, then rank), which
/// always contains the block's members of the global answer; the survivors of
/// all blocks are ordered once at the end.
pub fn scan_default(req: &ScanRequest<'_>) -> Result<Vec<(usize, f64)>, ShapeError> {
    scan_default_with(req, None)
}

/// [`scan_default`] reading the rows' half-precision shadow first ([`crate::shadow`]): the same
/// answer, with the f32 rows read only where a row's upper bound (its shadow relevance plus its
/// bound, valued with its own metadata) reaches what the block must beat.
pub fn scan_default_shadowed(req: &ScanRequest<'_>, shadow: Shadow<'_>) -> Result<Vec<(usize, f64)>, ShapeError> {
    shadow.check(req.stored.rows()?, req.stored.dim)?;
    scan_default_with(req, Some(shadow))
}

fn scan_default_with(req: &ScanRequest<'_>, shadow: Option<Shadow<'_>>) -> Result<Vec<(usize, f64)>, ShapeError> {
    let n = req.stored.rows()?;
    let dim = req.stored.dim;
    req.meta.check(n)?;
    if let Some(r) = req.rank {
        if r.len() != n {
            return Err(ShapeError(format!("rank has {} entries, rows {n}", r.len())));
        }
    }
    let scoring = dim > 0 && !req.queries.is_empty();
    if scoring && !req.queries.len().is_multiple_of(dim) {
        return Err(ShapeError(format!(
            "query values ({}) are not a multiple of the dimension {dim}",
            req.queries.len()
        )));
    }
    if req.top_k == 0 || n == 0 {
        return Ok(Vec::new());
    }
    let unit = if scoring { normalise_queries(req.queries, dim) } else { UnitQueries::default() };
    // The k-th best score any finished block has seen: no row scoring below it can be in the
    // answer, so later blocks skip the value function and the selection for such rows. Scores
    // are never negative, and the bits of non-negative f64 order like their values.
    let cutoff = AtomicU64::new(0.0f64.to_bits());
    // Recency and reward are at most one, frequency at most max(1, base_floor).
    let gain = req.params.base_floor.max(1.0);
    // Score descending, then id rank ascending (row index without ranks).
    let key = |i: usize| req.rank.map_or(i as u64, |r| u64::from(r[i]));
    let order = |a: &(usize, f64), b: &(usize, f64)| {
        b.1.partial_cmp(&a.1).unwrap_or(Ordering::Equal).then_with(|| key(a.0).cmp(&key(b.0)))
    };
    let exact = |i: usize| -> f32 {
        let mut out = [0.0f32];
        req.stored.block(i, i + 1, &unit, &mut out);
        out[0]
    };
    let block = |start: usize| -> Vec<(usize, f64)> {
        let end = (start + SCAN_BLOCK).min(n);
        let mut rel = vec![0.0f32; end - start];
        // With a shadow, `rel` first holds each row's upper bound; a row's f32 relevance is read
        // only once the row is found able to reach the answer (`upper` false below).
        let mut upper = false;
        let m = req.meta;
        let seeded = match shadow {
            Some(sh) if scoring => {
                crate::shadow::relevance_block(&sh.data[start * dim..end * dim], dim, &unit, &mut rel);
                let margins: Vec<f32> = sh.residual[start..end].iter().map(|&r| crate::shadow::bound(r, dim)).collect();
                let lower: Vec<f32> = rel.iter().zip(&margins).map(|(&a, &b)| a - b).collect();
                rel.iter_mut().zip(&margins).for_each(|(a, &b)| *a = (*a + b).min(1.0));
                upper = true;
                seed_floor_from_bounds(&lower, start, req, gain)
            }
            _ => {
                if scoring {
                    req.stored.block(start, end, &unit, &mut rel);
                }
                seed_floor(&rel, start, req, gain)
            }
        };
        let floor = f64::from_bits(cutoff.load(AtomicOrdering::Relaxed)).max(seeded);
        let least = req.gate.score_floor(req.threshold).max(floor);
        // Only rows that can reach the answer are valued and kept: below the floor whatever
        // their metadata (relevance × gain bounds the value), refused by the gate, or NaN.
        let mut kept: Vec<(usize, f64)> = Vec::new();
        for (j, &rj) in rel.iter().enumerate() {
            let mut r = f64::from(rj);
            if r * gain < floor {
                continue;
            }
            if upper {
                // The value grows with relevance: the upper bound valued with the row's metadata
                // bounds the row's score, and the gate's relevance test applies to it as well.
                let most = default_value(r, m.row(start + j), req.now, &req.params);
                if most < least || (req.gate == Gate::Relevance && r < req.threshold) {
                    continue;
                }
                r = f64::from(exact(start + j));
            }
            let value = default_value(r, m.row(start + j), req.now, &req.params);
            if req.gate.admits(req.threshold, r, value) && value >= least {
                kept.push((start + j, value));
            }
        }
        if kept.len() > req.top_k {
            kept.select_nth_unstable_by(req.top_k - 1, order);
            kept.truncate(req.top_k);
        }
        if kept.len() == req.top_k {
            let kth = kept.iter().map(|&(_, v)| v).fold(f64::INFINITY, f64::min);
            if kth >= 0.0 {
                cutoff.fetch_max(kth.to_bits(), AtomicOrdering::Relaxed);
            }
        }
        kept
    };
    let starts: Vec<usize> = (0..n).step_by(SCAN_BLOCK).collect();
    let parallel = req.stored.values() >= PAR_MIN_ELEMS && rayon::current_num_threads() > 1;
    let mut kept: Vec<(usize, f64)> = if parallel {
        starts.par_iter().flat_map_iter(|&s| block(s)).collect()
    } else {
        starts.iter().flat_map(|&s| block(s)).collect()
    };
    kept.sort_unstable_by(order);
    kept.truncate(req.top_k);
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored<'a>(data: &'a [f32], norms: &'a [f32], dim: usize) -> Stored<'a> {
        Stored::new(data, norms, dim)
    }

    fn no_meta(n: usize) -> (Vec<u8>, Vec<f64>) {
        (vec![0; n], vec![0.0; n])
    }

    #[test]
    fn all_finite_agrees_with_the_norm_in_f64_on_every_kind_of_value() {
        let specials = [0.0, -0.0, 1.0, f32::MIN_POSITIVE, f32::from_bits(1), f32::MAX, f32::MIN];
        let bad = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::from_bits(0x7fc0_0001)];
        for len in [0, 1, 7, 8, 9, 33, 384] {
            let mut v: Vec<f32> = (0..len).map(|i| specials[i % specials.len()]).collect();
            assert!(all_finite(&v));
            assert!(vector_norm(&v).is_finite());
            for at in [0, len / 2, len.saturating_sub(1)].into_iter().filter(|_| len > 0) {
                for &b in &bad {
                    let kept = v[at];
                    v[at] = b;
                    assert!(!all_finite(&v) && !vector_norm(&v).is_finite(), "{b} at {at} of {len}");
                    v[at] = kept;
                }
            }
        }
    }

    #[test]
    fn relevance_is_cosine_clamped_at_zero() {
        let data = [1.0, 0.0, 0.0, 2.0, -1.0, 0.0, 1.0, 1.0];
        let norms = row_norms(&data, 2);
        let rel = relevance(stored(&data, &norms, 2), &[3.0, 0.0]).unwrap();
        assert!((rel[0] - 1.0).abs() < 1e-6);
        assert_eq!(rel[1], 0.0);
        assert_eq!(rel[2], 0.0);
        assert!((rel[3] - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
    }

    #[test]
    fn tag_vector_raises_relevance_above_query() {
        let data = [0.0, 1.0];
        let norms = row_norms(&data, 2);
        let only_query = relevance(stored(&data, &norms, 2), &[1.0, 0.0]).unwrap();
        let with_tag = relevance(stored(&data, &norms, 2), &[1.0, 0.0, 0.0, 5.0]).unwrap();
        assert_eq!(only_query[0], 0.0);
        assert!((with_tag[0] - 1.0).abs() < 1e-6);
    }

    #[test]
    fn zero_rows_and_zero_queries_have_zero_relevance() {
        let data = [0.0, 0.0, 1.0, 0.0];
        let norms = row_norms(&data, 2);
        assert_eq!(relevance(stored(&data, &norms, 2), &[1.0, 0.0]).unwrap()[0], 0.0);
        assert_eq!(relevance(stored(&data, &norms, 2), &[0.0, 0.0]).unwrap(), vec![0.0, 0.0]);
    }

    #[test]
    fn many_queries_and_odd_dimensions_match_naive_cosine() {
        let dim = 13;
        let n = 40;
        let m = 11;
        let gen = |i: usize| ((i * 7919 % 101) as f32 - 50.0) / 17.0;
        let data: Vec<f32> = (0..n * dim).map(gen).collect();
        let queries: Vec<f32> = (0..m * dim).map(|i| gen(i + 3)).collect();
        let norms = row_norms(&data, dim);
        let rel = relevance(stored(&data, &norms, dim), &queries).unwrap();
        for (r, row) in data.chunks(dim).enumerate() {
            let mut best = 0.0f64;
            for q in queries.chunks(dim) {
                let dot: f64 = row.iter().zip(q).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
                let nq: f64 = q.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
                let nr: f64 = row.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
                best = best.max(dot / (nq * nr));
            }
            assert!((f64::from(rel[r]) - best).abs() < 1e-5, "row {r}");
        }
    }

    #[test]
    fn parallel_scan_equals_serial_scan() {
        let dim = 64;
        let n = PAR_MIN_ELEMS / dim + 3000;
        let data: Vec<f32> = (0..n * dim).map(|i| ((i * 31 % 97) as f32) - 48.0).collect();
        let norms = row_norms(&data, dim);
        let q: Vec<f32> = (0..dim).map(|i| i as f32 - 30.0).collect();
        let unit = normalise_queries(&q, dim);
        let mut serial = vec![0.0; n];
        relevance_block(&data, &norms, dim, &unit, &mut serial);
        assert_eq!(relevance(stored(&data, &norms, dim), &q).unwrap(), serial);
    }

    #[test]
    fn simd_kernel_agrees_with_portable_kernel() {
        let dim = 389;
        let n = 301;
        let data: Vec<f32> = (0..n * dim).map(|i| ((i * 37 % 89) as f32) / 11.0 - 4.0).collect();
        let norms = row_norms(&data, dim);
        for m in [1, 2, 5, 6, 7, 8, 9, 17] {
            let q: Vec<f32> = (0..m * dim).map(|i| ((i * 13 % 71) as f32) / 7.0 - 5.0).collect();
            let unit = normalise_queries(&q, dim);
            let mut portable = vec![0.0; n];
            relevance_block_impl(&data, &norms, dim, &unit, &mut portable);
            // Every kernel this CPU can run, not only the one the dispatcher picks.
            let mut kernels: Vec<(&str, Vec<f32>)> = Vec::new();
            let mut fast = vec![0.0; n];
            relevance_block(&data, &norms, dim, &unit, &mut fast);
            kernels.push(("dispatched", fast));
            #[cfg(target_arch = "x86_64")]
            {
                if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                    let mut out = vec![0.0; n];
                    // SAFETY: the CPU has the features this kernel needs.
                    unsafe { avx2::relevance_block(&data, &norms, dim, &unit, &mut out) };
                    kernels.push(("avx2", out));
                }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    let mut out = vec![0.0; n];
                    // SAFETY: the CPU has the features this kernel needs.
                    unsafe { avx512::relevance_block(&data, &norms, dim, &unit, &mut out) };
                    kernels.push(("avx512", out));
                }
            }
            for (name, out) in &kernels {
                for (a, b) in out.iter().zip(&portable) {
                    assert!((a - b).abs() < 1e-5, "{name}, {m} queries: {a} vs {b}");
                }
            }
        }
    }

    #[test]
    fn shape_mismatch_is_an_error() {
        let data = [1.0, 2.0, 3.0];
        assert!(relevance(stored(&data, &[1.0], 2), &[1.0, 0.0]).is_err());
        let norms = [1.0];
        assert!(relevance(stored(&data[..2], &norms, 2), &[1.0, 0.0, 1.0]).is_err());
    }

    #[test]
    fn relevance_of_rows_matches_relevance() {
        let data: Vec<f32> = (0..40).map(|i| ((i * 7 % 11) as f32) - 5.0).collect();
        let norms = row_norms(&data, 4);
        let stored = Stored::new(&data, &norms, 4);
        let queries = [1.0, -2.0, 0.5, 3.0, 0.0, 1.0, 1.0, -1.0];
        let all = relevance(stored, &queries).unwrap();
        let rows = [7u32, 0, 3, 3, 9];
        let some = relevance_of_rows(stored, &queries, &rows).unwrap();
        for (got, &r) in some.iter().zip(&rows) {
            assert!((got - all[r as usize]).abs() < 1e-6);
        }
        assert!(relevance_of_rows(stored, &queries, &[10]).is_err());
    }

    #[test]
    fn long_row_lists_with_runs_match_relevance() {
        let (n, dim) = (40_000usize, 64usize);
        let data: Vec<f32> = (0..n * dim).map(|i| ((i * 2654435761usize % 1000) as f32) / 500.0 - 1.0).collect();
        let mut norms = row_norms(&data, dim);
        norms[17] = 0.0;
        let stored = Stored::new(&data, &norms, dim);
        let queries: Vec<f32> = (0..dim).map(|i| (i as f32 * 0.37).sin()).collect();
        let all = relevance(stored, &queries).unwrap();
        let rows: Vec<u32> = (0..n as u32).filter(|r| r % 7 != 3).rev().chain(10..30).collect();
        assert!(rows.len() * dim >= PAR_MIN_LISTED_ELEMS);
        let some = relevance_of_rows(stored, &queries, &rows).unwrap();
        for (got, &r) in some.iter().zip(&rows) {
            assert!((got - all[r as usize]).abs() < 1e-6, "row {r}");
        }
    }

    #[test]
    fn top_relevance_keeps_the_best_k_positive_rows_and_every_tie() {
        let dim = 2;
        let data = [1.0, 0.0, 1.0, 0.0, 0.6, 0.8, -1.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.8, 0.6];
        let norms = row_norms(&data, dim);
        let stored = Stored::new(&data, &norms, dim);
        let q = [1.0, 0.0];
        let sorted = |(r, s): (Vec<u32>, Vec<f32>)| {
            let mut v: Vec<(u32, f32)> = r.into_iter().zip(s).collect();
            v.sort_by_key(|p| p.0);
            v
        };
        // Rows 0, 1 and 4 tie at 1.0: asking for 2 returns all three.
        let got = sorted(top_relevance(stored, &q, 2, None).unwrap());
        assert_eq!(got.iter().map(|p| p.0).collect::<Vec<_>>(), vec![0, 1, 4]);
        // Fewer positive rows than k: every positive row, none of the zero or negative ones.
        let got = sorted(top_relevance(stored, &q, 10, None).unwrap());
        assert_eq!(got.iter().map(|p| p.0).collect::<Vec<_>>(), vec![0, 1, 2, 4, 6]);
        let got = sorted(top_relevance(stored, &q, 1, Some(&[6, 3, 2])).unwrap());
        assert_eq!(got, vec![(6, 0.8)]);
        assert!(top_relevance(stored, &q, 0, None).unwrap().0.is_empty());
        assert!(top_relevance(stored, &[-1.0, 0.0], 3, Some(&[0, 1])).unwrap().0.is_empty());
    }

    #[test]
    fn value_without_metadata_is_relevance() {
        assert_eq!(default_value(0.42, None, 1e9, &ValueParams::default()), 0.42);
    }

    #[test]
    fn value_prefers_recent_frequent_and_rewarded() {
        let p = ValueParams::default();
        let now = 1_000_000.0;
        let v = |ts: f64, n: f64, rc: f64, cr: f64| default_value(1.0, Some((ts, n, rc, cr)), now, &p);
        assert!(v(now, 0.0, 0.0, 0.0) > v(now - 3600.0 * 100.0, 0.0, 0.0, 0.0));
        assert!(v(now, 20.0, 0.0, 0.0) > v(now, 1.0, 0.0, 0.0));
        assert!(v(now, 0.0, 1.0, 1.0) > v(now, 0.0, 1.0, 0.0));
        assert!(v(now, 0.0, 1.0, 0.0) > v(now, 0.0, 1.0, -1.0));
        assert!(v(now, 0.0, 0.0, 0.0) > v(now, 0.0, 1.0, 0.0));
    }

    #[test]
    fn value_never_exceeds_relevance_for_future_timestamps() {
        let p = ValueParams { base_floor: 1.0, ..ValueParams::default() };
        assert_eq!(default_value(0.7, Some((2e9, 0.0, 0.0, 0.0)), 1e9, &p), 0.7);
    }

    #[test]
    fn default_half_life_is_ninety_days() {
        let p = ValueParams::default();
        let ninety_days = 90.0 * 24.0 * 3600.0;
        assert!((default_value(1.0, Some((0.0, 5.0, 0.0, 0.0)), ninety_days, &p) - 0.25).abs() < 1e-12);
    }

    #[test]
    fn value_matches_formula() {
        let p = ValueParams { lambda: 0.01, ..ValueParams::default() };
        let got = default_value(0.8, Some((0.0, 10.0, 2.0, 1.0)), 7200.0, &p);
        let want = 0.8 * (-0.02f64).exp() * (10.0 / 15.0) * (1.0 / (1.0 + (-0.5f64).exp()));
        assert!((got - want).abs() < 1e-12);
    }

    #[test]
    fn selection_threshold_is_inclusive_and_top_k_bounds() {
        let scores = [0.5, 0.2, 0.9, 0.5, 0.1];
        assert_eq!(select_top(&scores, 0.5, 10, None).unwrap(), vec![2, 0, 3]);
        assert_eq!(select_top(&scores, 0.0, 2, None).unwrap(), vec![2, 0]);
        assert_eq!(select_top(&scores, 0.0, 0, None).unwrap(), Vec::<usize>::new());
    }

    #[test]
    fn selection_breaks_ties_by_rank() {
        let scores = [0.5, 0.5, 0.5, 0.7];
        let rank = [2, 0, 1, 3];
        assert_eq!(select_top(&scores, 0.0, 3, Some(&rank)).unwrap(), vec![3, 1, 2]);
    }

    #[test]
    fn selection_never_keeps_nan() {
        assert_eq!(select_top(&[f64::NAN, 0.1], 0.0, 5, None).unwrap(), vec![1]);
    }

    #[test]
    fn fused_scan_equals_relevance_then_values_then_selection() {
        let dim = 24;
        let n = 3 * SCAN_BLOCK + 77;
        let data: Vec<f32> = (0..n * dim).map(|i| ((i * 7919 % 211) as f32) / 13.0 - 8.0).collect();
        let norms = row_norms(&data, dim);
        let queries: Vec<f32> = (0..3 * dim).map(|i| ((i * 31 % 17) as f32) - 8.0).collect();
        let (half, residual) = crate::shadow::encode_rows(&data, dim);
        let has: Vec<u8> = (0..n).map(|i| (i % 3 != 0) as u8).collect();
        let ts: Vec<f64> = (0..n).map(|i| (i % 50) as f64 * 3600.0).collect();
        let cnt: Vec<f64> = (0..n).map(|i| (i % 7) as f64).collect();
        let rc: Vec<f64> = (0..n).map(|i| (i % 2) as f64).collect();
        let cr: Vec<f64> = (0..n).map(|i| (i % 5) as f64 - 2.0).collect();
        let rank: Vec<u32> = (0..n as u32).rev().collect();
        let meta = MetaColumns {
            has_meta: &has,
            timestamp: &ts,
            access_count: &cnt,
            reward_count: &rc,
            cumulative_reward: &cr,
        };
        // A base_floor above one lets a value exceed its relevance: the scan's cutoff must allow for it.
        let boosted = ValueParams { base_floor: 1.5, ..ValueParams::default() };
        let cases = [(0.0, 25), (0.2, 7), (-1.0, n + 5), (0.99, 3), (0.6, 40)];
        let fast = ValueParams { lambda: 0.01, ..ValueParams::default() };
        let settings = [(fast, 200.0 * 3600.0), (boosted, 200.0 * 3600.0), (boosted, 0.0)];
        let runs = settings.into_iter().flat_map(|p| cases.into_iter().map(move |c| (p, c)));
        for ((params, now), (threshold, top_k), gate) in
            runs.flat_map(|(p, c)| [Gate::Score, Gate::Relevance].map(|g| (p, c, g)))
        {
            let req = ScanRequest {
                stored: stored(&data, &norms, dim),
                queries: &queries,
                meta,
                rank: Some(&rank),
                now,
                params,
                threshold,
                gate,
                top_k,
            };
            let rel = relevance(req.stored, req.queries).unwrap();
            let mut scores = default_values(&rel, meta, req.now, &req.params).unwrap();
            let mut least = threshold;
            if gate == Gate::Relevance {
                scores.iter_mut().zip(&rel).filter(|(_, &r)| f64::from(r) < threshold).for_each(|(s, _)| *s = f64::NAN);
                least = f64::NEG_INFINITY;
            }
            let want: Vec<(usize, f64)> =
                select_top(&scores, least, top_k, Some(&rank)).unwrap().into_iter().map(|i| (i, scores[i])).collect();
            assert_eq!(scan_default(&req).unwrap(), want, "threshold {threshold}, top_k {top_k}, {gate:?}");
            let shadow = Shadow { data: &half, residual: &residual, dim };
            assert_eq!(scan_default_shadowed(&req, shadow).unwrap(), want, "shadowed: {threshold}, {top_k}, {gate:?}");
        }
        let short = Shadow { data: &half[dim..], residual: &residual[1..], dim };
        let req = ScanRequest {
            stored: stored(&data, &norms, dim),
            queries: &queries,
            meta,
            rank: None,
            now: 0.0,
            params: fast,
            threshold: 0.0,
            gate: Gate::Score,
            top_k: 3,
        };
        assert!(scan_default_shadowed(&req, short).is_err());
    }

    #[test]
    fn half_rows_scan_as_their_decoded_unit_rows_and_near_the_f32_rows() {
        let dim = 37;
        let n = 2 * SCAN_BLOCK + 5;
        let mut data: Vec<f32> = (0..n * dim).map(|i| ((i * 7919 % 211) as f32) / 13.0 - 8.0).collect();
        data[5 * dim..6 * dim].iter_mut().for_each(|x| *x = 0.0);
        let norms = row_norms(&data, dim);
        let (half, _) = crate::shadow::encode_rows(&data, dim);
        let decoded: Vec<f32> = half.iter().map(|&h| half::f16::from_bits(h).to_f32()).collect();
        let unit_norms: Vec<f32> = norms.iter().map(|&x| if x > 0.0 { 1.0 } else { 0.0 }).collect();
        let queries: Vec<f32> = (0..2 * dim).map(|i| ((i * 31 % 17) as f32) - 8.0).collect();
        let halved = Stored::half(&half, &unit_norms, dim);
        let got = relevance(halved, &queries).unwrap();
        let as_f32 = relevance(stored(&decoded, &unit_norms, dim), &queries).unwrap();
        let exact = relevance(stored(&data, &norms, dim), &queries).unwrap();
        for i in 0..n {
            assert!((got[i] - as_f32[i]).abs() <= 1e-6, "row {i}: {} vs decoded {}", got[i], as_f32[i]);
            assert!((got[i] - exact[i]).abs() <= 1e-3, "row {i}: {} vs f32 {}", got[i], exact[i]);
        }
        assert_eq!(got[5], 0.0);
        let listed: Vec<u32> = (0..n as u32).step_by(3).collect();
        let some = relevance_of_rows(halved, &queries, &listed).unwrap();
        assert!(listed.iter().zip(&some).all(|(&r, &s)| s == got[r as usize]));
        let (has, zeros) = no_meta(n);
        let meta = MetaColumns {
            has_meta: &has,
            timestamp: &zeros,
            access_count: &zeros,
            reward_count: &zeros,
            cumulative_reward: &zeros,
        };
        let request = |stored| ScanRequest {
            stored,
            queries: &queries,
            meta,
            rank: None,
            now: 0.0,
            params: ValueParams::default(),
            threshold: 0.0,
            gate: Gate::Score,
            top_k: 30,
        };
        let from_half = scan_default(&request(halved)).unwrap();
        let from_decoded = scan_default(&request(stored(&decoded, &unit_norms, dim))).unwrap();
        assert_eq!(from_half.len(), 30);
        for (a, b) in from_half.iter().zip(&from_decoded) {
            assert!((a.1 - b.1).abs() <= 1e-6, "{a:?} vs {b:?}");
        }
        let short = Stored::half(&half[dim..], &unit_norms, dim);
        assert!(relevance(short, &queries).is_err());
    }

    #[test]
    fn scan_default_combines_the_steps() {
        let data = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0];
        let norms = row_norms(&data, 2);
        let (has, zeros) = no_meta(3);
        let req = ScanRequest {
            stored: stored(&data, &norms, 2),
            queries: &[1.0, 0.0],
            meta: MetaColumns {
                has_meta: &has,
                timestamp: &zeros,
                access_count: &zeros,
                reward_count: &zeros,
                cumulative_reward: &zeros,
            },
            rank: None,
            now: 0.0,
            params: ValueParams::default(),
            threshold: 0.5,
            gate: Gate::Score,
            top_k: 5,
        };
        let got = scan_default(&req).unwrap();
        assert_eq!(got.iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, 2]);
    }

    #[test]
    fn kth_largest_agrees_with_a_full_sort() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let specials = [0.0f32, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -f32::NAN, f32::MIN_POSITIVE, -1.0];
        for n in [1usize, 2, 17, 40, 300, 1000] {
            let values: Vec<f32> = (0..n)
                .map(|i| {
                    let r = next();
                    if r % 13 == 0 {
                        specials[i % specials.len()]
                    } else {
                        ((r >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0) as f32
                    }
                })
                .collect();
            let mut sorted = values.clone();
            sorted.sort_by(|a, b| b.total_cmp(a));
            for k in [1, 2, 16, 17, 80, n / 2, n].into_iter().filter(|&k| k >= 1 && k <= n) {
                let got = kth_largest(&values, k);
                assert_eq!(got.to_bits(), sorted[k - 1].to_bits(), "n {n} k {k}");
            }
        }
    }
}
