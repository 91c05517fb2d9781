//! A half-precision shadow of the stored rows: exact answers that read about half the bytes.
//!
//! Next to the f32 matrix, each row is kept scaled to unit length in f16, with its `residual`:
//! the Euclidean distance between the unit row and its f16 copy (computed in f64, rounded up).
//! For a unit query `q`, `|q · unit(e) − q · f16(unit(e))| ≤ residual` (Cauchy–Schwarz), so one
//! pass over the f16 rows gives every row's relevance within [`bound`] of what the f32 kernel
//! computes, rounding of both passes included. Rows whose upper bound cannot reach the k-th best
//! lower bound cannot be in the answer; the f32 kernel scores the others, and the selection over
//! them equals [`scoring::top_relevance`]'s over every row (see [`top_relevance_shadowed`]).
//! A scan that is bound by memory reads the shadow (2 bytes a value) and a few f32 rows instead
//! of the whole f32 matrix.

use crate::scoring::{self, normalise_queries, relevance_of_rows, ShapeError, Stored};
use half::f16;
use rayon::prelude::*;

/// Shadow rows at or above this many values are scored on every core.
const PAR_MIN_VALUES: usize = 1 << 18;
/// Rows per parallel task.
const PAR_ROWS: usize = 256;

/// The unit rows in f16 (as their bit patterns) and each row's residual.
#[derive(Debug, Clone, Copy)]
pub struct Shadow<'a> {
    pub data: &'a [u16],
    pub residual: &'a [f32],
    pub dim: usize,
}

impl Shadow<'_> {
    pub(crate) fn check(&self, n: usize, dim: usize) -> Result<(), ShapeError> {
        if self.dim != dim || self.residual.len() != n || self.data.len() != n * dim {
            return Err(ShapeError(format!(
                "shadow holds {} values and {} residuals of dimension {}; the matrix has {n} rows × {dim}",
                self.data.len(),
                self.residual.len(),
                self.dim
            )));
        }
        Ok(())
    }
}

/// Each row of a row-major `? × dim` matrix as its unit vector in f16, with the residual. A zero
/// row stays zero with residual 0 (its relevance is 0 on both sides).
pub fn encode_rows(data: &[f32], dim: usize) -> (Vec<u16>, Vec<f32>) {
    if dim == 0 {
        return (Vec::new(), Vec::new());
    }
    let mut half = vec![0u16; data.len()];
    let mut residual = vec![0f32; data.len() / dim];
    let encode = |(row, (out, res)): (&[f32], (&mut [u16], &mut f32))| {
        let norm = scoring::vector_norm(row);
        if norm <= 0.0 || !norm.is_finite() {
            return;
        }
        let mut err = 0.0f64;
        for (&x, o) in row.iter().zip(out.iter_mut()) {
            let unit = f64::from(x) / norm;
            let h = f16::from_f64(unit);
            err += (unit - h.to_f64()).powi(2);
            *o = h.to_bits();
        }
        *res = (err.sqrt() as f32).next_up();
    };
    if data.len() >= PAR_MIN_VALUES && rayon::current_num_threads() > 1 {
        data.par_chunks_exact(dim).zip(half.par_chunks_exact_mut(dim).zip(residual.par_iter_mut())).for_each(encode);
    } else {
        data.chunks_exact(dim).zip(half.chunks_exact_mut(dim).zip(residual.iter_mut())).for_each(encode);
    }
    (half, residual)
}

/// How far the shadow's relevance of a row with this `residual` may lie from the f32 kernel's:
/// the residual (scaled for a unit query's own rounding) plus both passes' summation error, which
/// is at most `dim` units of f32 rounding each, doubled for the norm and the division.
#[inline]
pub fn bound(residual: f32, dim: usize) -> f32 {
    residual * 1.001 + (2 * dim + 16) as f32 * f32::EPSILON
}

/// Queries per block of the AVX2 and portable f16 kernels: the AVX2 kernel's two rows at a time keep
/// twelve accumulators, two row values and a query value within sixteen registers, and its single
/// rows group the queries alike, so a row's relevance does not depend on the pairing that read it
/// (a process uses one kernel: the AVX-512 one groups by eight).
const HALF_QUERIES: usize = 6;

/// Each of `Q` unit queries' dot product with an f16 row (portable).
#[inline(always)]
fn dots_half<const Q: usize, const U: usize>(row: &[u16], queries: &[f32], dim: usize) -> [f32; Q] {
    let mut acc = [0.0f32; Q];
    for (t, &bits) in row.iter().enumerate() {
        let x = f16::from_bits(bits).to_f32();
        for (j, a) in acc.iter_mut().enumerate() {
            *a += x * queries[j * dim + t];
        }
    }
    acc
}

/// The largest of [`dots_half`] (portable).
#[inline(always)]
fn max_dot_half<const Q: usize, const U: usize>(row: &[u16], queries: &[f32], dim: usize) -> f32 {
    dots_half::<Q, U>(row, queries, dim).into_iter().fold(f32::NEG_INFINITY, f32::max)
}

/// Relevance (clamped to [0, 1]) of every f16 unit row against the unit queries: the f32 kernels'
/// loop, each row with norm one.
macro_rules! shadow_rows {
    ($max_dot:ident, $most:expr, $data:expr, $dim:expr, $unit:expr, $out:expr) => {
        crate::scoring::relevance_rows!($max_dot, $most, $data, std::iter::repeat(&1.0f32), $dim, $unit, $out)
    };
}

/// [`shadow_rows`] with rows in pairs, one from each half of the block (two sequential streams,
/// which the hardware prefetcher follows), through a kernel that scores two rows per query value
/// it loads (the same bits as one row at a time); an odd last row goes alone.
#[cfg(target_arch = "x86_64")]
macro_rules! paired_rows {
    ($max_two:ident, $max_dot:ident, $most:expr, $data:expr, $dim:expr, $unit:expr, $out:expr) => {{
        let (data, dim, unit, out): (&[u16], usize, &[f32], &mut [f32]) = ($data, $dim, $unit, $out);
        let half_rows = out.len() / 2;
        let paired = 2 * half_rows;
        let (front, back) = data[..paired * dim].split_at(half_rows * dim);
        let (out_front, rest) = out.split_at_mut(half_rows);
        let (out_back, _) = rest.split_at_mut(half_rows);
        let m = unit.len() / dim;
        for (((first, second), o0), o1) in
            front.chunks_exact(dim).zip(back.chunks_exact(dim)).zip(out_front.iter_mut()).zip(out_back.iter_mut())
        {
            let mut best = [f32::NEG_INFINITY; 2];
            let mut start = 0;
            while start < m {
                // The blocks `relevance_rows` makes of `$most`, written out for two rows.
                let block = &unit[start * dim..];
                let take = (m - start).min($most);
                let got = match take {
                    1 => $max_two::<1, 4>(first, second, block, dim),
                    2 => $max_two::<2, 2>(first, second, block, dim),
                    3 => $max_two::<3, 2>(first, second, block, dim),
                    4 => $max_two::<4, 1>(first, second, block, dim),
                    5 => $max_two::<5, 1>(first, second, block, dim),
                    6 => $max_two::<6, 1>(first, second, block, dim),
                    7 => $max_two::<7, 1>(first, second, block, dim),
                    _ => $max_two::<8, 1>(first, second, block, dim),
                };
                best = [best[0].max(got[0]), best[1].max(got[1])];
                start += take;
            }
            *o0 = best[0].clamp(0.0, 1.0);
            *o1 = best[1].clamp(0.0, 1.0);
        }
        shadow_rows!($max_dot, $most, &data[paired * dim..], dim, unit, &mut out[paired..])
    }};
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    //! Sixteen f16 values converted per instruction and fused into the queries' accumulators.
    use std::arch::x86_64::*;

    /// Queries per block: 32 registers hold eight accumulators and more, and a CPU that has this
    /// kernel uses no other, so its grouping only has to agree with itself.
    const WIDE_QUERIES: usize = 8;

    #[inline(always)]
    unsafe fn dots_half<const Q: usize, const U: usize>(row: &[u16], queries: &[f32], dim: usize) -> [f32; Q] {
        const W: usize = 16;
        let full = dim - dim % W;
        let mut accs = [[_mm512_setzero_ps(); U]; Q];
        let r = row.as_ptr();
        let q = queries.as_ptr();
        let mut i = 0;
        while i + U * W <= full {
            for u in 0..U {
                let x = _mm512_cvtph_ps(_mm256_loadu_si256(r.add(i + u * W).cast()));
                for (j, a) in accs.iter_mut().enumerate() {
                    a[u] = _mm512_fmadd_ps(x, _mm512_loadu_ps(q.add(j * dim + i + u * W)), a[u]);
                }
            }
            i += U * W;
        }
        while i < full {
            let x = _mm512_cvtph_ps(_mm256_loadu_si256(r.add(i).cast()));
            for (j, a) in accs.iter_mut().enumerate() {
                a[0] = _mm512_fmadd_ps(x, _mm512_loadu_ps(q.add(j * dim + i)), a[0]);
            }
            i += W;
        }
        sums_of(accs, row, queries, dim)
    }

    /// Each query's dot product with the row, from its `U` partial accumulators plus the tail
    /// beyond the last whole lane group.
    #[inline(always)]
    unsafe fn sums_of<const Q: usize, const U: usize>(
        accs: [[__m512; U]; Q],
        row: &[u16],
        queries: &[f32],
        dim: usize,
    ) -> [f32; Q] {
        let full = dim - dim % 16;
        let mut out = [0.0f32; Q];
        for (j, (a, o)) in accs.iter().zip(&mut out).enumerate() {
            let mut sum = _mm512_setzero_ps();
            for &part in a {
                sum = _mm512_add_ps(sum, part);
            }
            let mut s = _mm512_reduce_add_ps(sum);
            for t in full..dim {
                s += half::f16::from_bits(row[t]).to_f32() * queries[j * dim + t];
            }
            *o = s;
        }
        out
    }

    /// `dots_half` of two rows at once, the largest of each row's: each query value loaded serves
    /// both rows (the same sums, bit for bit, as one row at a time).
    #[inline(always)]
    unsafe fn max_dot_half_two<const Q: usize, const U: usize>(
        first: &[u16],
        second: &[u16],
        queries: &[f32],
        dim: usize,
    ) -> [f32; 2] {
        const W: usize = 16;
        let full = dim - dim % W;
        let mut acc0 = [[_mm512_setzero_ps(); U]; Q];
        let mut acc1 = acc0;
        let (r0, r1) = (first.as_ptr(), second.as_ptr());
        let q = queries.as_ptr();
        let mut i = 0;
        while i + U * W <= full {
            for u in 0..U {
                let x0 = _mm512_cvtph_ps(_mm256_loadu_si256(r0.add(i + u * W).cast()));
                let x1 = _mm512_cvtph_ps(_mm256_loadu_si256(r1.add(i + u * W).cast()));
                for (j, (a0, a1)) in acc0.iter_mut().zip(acc1.iter_mut()).enumerate() {
                    let qv = _mm512_loadu_ps(q.add(j * dim + i + u * W));
                    a0[u] = _mm512_fmadd_ps(x0, qv, a0[u]);
                    a1[u] = _mm512_fmadd_ps(x1, qv, a1[u]);
                }
            }
            i += U * W;
        }
        while i < full {
            let x0 = _mm512_cvtph_ps(_mm256_loadu_si256(r0.add(i).cast()));
            let x1 = _mm512_cvtph_ps(_mm256_loadu_si256(r1.add(i).cast()));
            for (j, (a0, a1)) in acc0.iter_mut().zip(acc1.iter_mut()).enumerate() {
                let qv = _mm512_loadu_ps(q.add(j * dim + i));
                a0[0] = _mm512_fmadd_ps(x0, qv, a0[0]);
                a1[0] = _mm512_fmadd_ps(x1, qv, a1[0]);
            }
            i += W;
        }
        let best = |sums: [f32; Q]| sums.into_iter().fold(f32::NEG_INFINITY, f32::max);
        [best(sums_of(acc0, first, queries, dim)), best(sums_of(acc1, second, queries, dim))]
    }

    /// The largest of [`dots_half`].
    #[inline(always)]
    unsafe fn max_dot_half<const Q: usize, const U: usize>(row: &[u16], queries: &[f32], dim: usize) -> f32 {
        dots_half::<Q, U>(row, queries, dim).into_iter().fold(f32::NEG_INFINITY, f32::max)
    }

    /// Shadow relevance of a block of rows (the caller checked the CPU features): with several
    /// queries, rows in pairs ([`paired_rows`]).
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn relevance_block(data: &[u16], dim: usize, unit: &[f32], out: &mut [f32]) {
        if dim == 0 || unit.len() < 2 * dim {
            return shadow_rows!(max_dot_half, WIDE_QUERIES, data, dim, unit, out);
        }
        paired_rows!(max_dot_half_two, max_dot_half, WIDE_QUERIES, data, dim, unit, out)
    }

    /// Each query's dot product with one f16 row (the caller checked the CPU features).
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn row_dots(row: &[u16], dim: usize, unit: &[f32], out: &mut [f32]) {
        crate::scoring::dots_of_row!(dots_half, WIDE_QUERIES, row, dim, unit, out)
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! Eight f16 values converted per instruction (F16C) and fused into the queries' accumulators.
    use std::arch::x86_64::*;

    use crate::simd::hsum;

    const W: usize = 8;

    /// Each query's dot product with the row, from its `U` partial accumulators plus the tail
    /// beyond the last whole lane group.
    #[inline(always)]
    unsafe fn sums_of<const Q: usize, const U: usize>(
        accs: [[__m256; U]; Q],
        row: &[u16],
        queries: &[f32],
        dim: usize,
    ) -> [f32; Q] {
        let full = dim - dim % W;
        let mut out = [0.0f32; Q];
        for (j, (a, o)) in accs.iter().zip(&mut out).enumerate() {
            let mut sum = _mm256_setzero_ps();
            for &part in a {
                sum = _mm256_add_ps(sum, part);
            }
            let mut s = hsum(sum);
            for t in full..dim {
                s += half::f16::from_bits(row[t]).to_f32() * queries[j * dim + t];
            }
            *o = s;
        }
        out
    }

    /// The largest of [`sums_of`].
    #[inline(always)]
    unsafe fn best_of<const Q: usize, const U: usize>(
        accs: [[__m256; U]; Q],
        row: &[u16],
        queries: &[f32],
        dim: usize,
    ) -> f32 {
        sums_of(accs, row, queries, dim).into_iter().fold(f32::NEG_INFINITY, f32::max)
    }

    #[inline(always)]
    unsafe fn dots_half<const Q: usize, const U: usize>(row: &[u16], queries: &[f32], dim: usize) -> [f32; Q] {
        let full = dim - dim % W;
        let mut accs = [[_mm256_setzero_ps(); U]; Q];
        let r = row.as_ptr();
        let q = queries.as_ptr();
        let mut i = 0;
        while i + U * W <= full {
            for u in 0..U {
                let x = _mm256_cvtph_ps(_mm_loadu_si128(r.add(i + u * W).cast()));
                for (j, a) in accs.iter_mut().enumerate() {
                    a[u] = _mm256_fmadd_ps(x, _mm256_loadu_ps(q.add(j * dim + i + u * W)), a[u]);
                }
            }
            i += U * W;
        }
        while i < full {
            let x = _mm256_cvtph_ps(_mm_loadu_si128(r.add(i).cast()));
            for (j, a) in accs.iter_mut().enumerate() {
                a[0] = _mm256_fmadd_ps(x, _mm256_loadu_ps(q.add(j * dim + i)), a[0]);
            }
            i += W;
        }
        sums_of(accs, row, queries, dim)
    }

    /// `dots_half` of two rows at once, the largest of each row's: each query value loaded serves both rows, so a pass
    /// loads half as many query values per multiply-add.
    #[inline(always)]
    unsafe fn max_dot_half_two<const Q: usize, const U: usize>(
        first: &[u16],
        second: &[u16],
        queries: &[f32],
        dim: usize,
    ) -> [f32; 2] {
        let full = dim - dim % W;
        let mut acc0 = [[_mm256_setzero_ps(); U]; Q];
        let mut acc1 = acc0;
        let (r0, r1) = (first.as_ptr(), second.as_ptr());
        let q = queries.as_ptr();
        let mut i = 0;
        while i + U * W <= full {
            for u in 0..U {
                let x0 = _mm256_cvtph_ps(_mm_loadu_si128(r0.add(i + u * W).cast()));
                let x1 = _mm256_cvtph_ps(_mm_loadu_si128(r1.add(i + u * W).cast()));
                for (j, (a0, a1)) in acc0.iter_mut().zip(acc1.iter_mut()).enumerate() {
                    let qv = _mm256_loadu_ps(q.add(j * dim + i + u * W));
                    a0[u] = _mm256_fmadd_ps(x0, qv, a0[u]);
                    a1[u] = _mm256_fmadd_ps(x1, qv, a1[u]);
                }
            }
            i += U * W;
        }
        while i < full {
            let x0 = _mm256_cvtph_ps(_mm_loadu_si128(r0.add(i).cast()));
            let x1 = _mm256_cvtph_ps(_mm_loadu_si128(r1.add(i).cast()));
            for (j, (a0, a1)) in acc0.iter_mut().zip(acc1.iter_mut()).enumerate() {
                let qv = _mm256_loadu_ps(q.add(j * dim + i));
                a0[0] = _mm256_fmadd_ps(x0, qv, a0[0]);
                a1[0] = _mm256_fmadd_ps(x1, qv, a1[0]);
            }
            i += W;
        }
        [best_of(acc0, first, queries, dim), best_of(acc1, second, queries, dim)]
    }

    /// The largest of [`dots_half`].
    #[inline(always)]
    unsafe fn max_dot_half<const Q: usize, const U: usize>(row: &[u16], queries: &[f32], dim: usize) -> f32 {
        dots_half::<Q, U>(row, queries, dim).into_iter().fold(f32::NEG_INFINITY, f32::max)
    }

    /// Shadow relevance of a block of rows (the caller checked the CPU features), rows in pairs
    /// ([`paired_rows`]: neighbouring rows paired in one loop defeat the prefetcher, and ran slower
    /// than one row at a time).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn relevance_block(data: &[u16], dim: usize, unit: &[f32], out: &mut [f32]) {
        paired_rows!(max_dot_half_two, max_dot_half, super::HALF_QUERIES, data, dim, unit, out)
    }

    /// Each query's dot product with one f16 row (the caller checked the CPU features).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn row_dots(row: &[u16], dim: usize, unit: &[f32], out: &mut [f32]) {
        crate::scoring::dots_of_row!(dots_half, super::HALF_QUERIES, row, dim, unit, out)
    }
}

/// Shadow relevance of a block of rows, with the widest kernel the CPU has.
pub(crate) fn relevance_block(data: &[u16], dim: usize, unit: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has the kernel's features; every load stays within the row
            // (i + 16 <= full <= dim) or within the query block.
            unsafe { avx512::relevance_block(data, dim, unit, out) };
            return;
        }
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
        {
            // SAFETY: as above, at 8 lanes.
            unsafe { avx2::relevance_block(data, dim, unit, out) };
            return;
        }
    }
    shadow_rows!(max_dot_half, HALF_QUERIES, data, dim, unit, out)
}

/// Each unit query's dot product with one f16 row, with the kernel [`relevance_block`] picks.
pub(crate) fn row_dots(row: &[u16], dim: usize, unit: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: as in `relevance_block`.
            unsafe { avx512::row_dots(row, dim, unit, out) };
            return;
        }
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
        {
            // SAFETY: as in `relevance_block`.
            unsafe { avx2::row_dots(row, dim, unit, out) };
            return;
        }
    }
    crate::scoring::dots_of_row!(dots_half, HALF_QUERIES, row, dim, unit, out)
}

/// The shadow's relevance of every row (`rows`: only those, in their order) against unit queries.
fn shadow_relevance(shadow: Shadow<'_>, unit: &[f32], rows: Option<&[u32]>) -> Vec<f32> {
    let dim = shadow.dim;
    let count = rows.map_or(shadow.residual.len(), <[u32]>::len);
    let mut out = vec![0.0f32; count];
    let parallel = count * dim >= PAR_MIN_VALUES && rayon::current_num_threads() > 1;
    match rows {
        None if parallel => out
            .par_chunks_mut(PAR_ROWS)
            .zip(shadow.data.par_chunks(PAR_ROWS * dim))
            .for_each(|(o, d)| relevance_block(d, dim, unit, o)),
        None => relevance_block(shadow.data, dim, unit, &mut out),
        Some(listed) => {
            let fill = |listed: &[u32], out: &mut [f32]| {
                let mut i = 0;
                while i < listed.len() {
                    let start = listed[i] as usize;
                    let mut j = i + 1;
                    while j < listed.len() && listed[j] as usize == start + (j - i) {
                        j += 1;
                    }
                    let end = start + (j - i);
                    relevance_block(&shadow.data[start * dim..end * dim], dim, unit, &mut out[i..j]);
                    i = j;
                }
            };
            if parallel {
                out.par_chunks_mut(PAR_ROWS).zip(listed.par_chunks(PAR_ROWS)).for_each(|(o, r)| fill(r, o));
            } else {
                fill(listed, &mut out);
            }
        }
    }
    out
}

/// [`scoring::top_relevance`] through the shadow, with the same answer: the rows (every stored
/// row, or the listed ones) with a positive f32 relevance among the best `k`, and every row tied
/// with the k-th, each with its f32 relevance, in no particular order.
///
/// Why the answer is the same: every row's f32 relevance `s` lies in `[a − b, a + b]` (`a` the
/// shadow's, `b` its [`bound`]). Let `L` be the k-th largest lower bound. At least `k` rows have
/// `s ≥ L`, so the k-th best `s` is at least `L`, and a row whose upper bound is below `L` is
/// strictly worse than the k-th: neither in the answer nor tied with it. A row whose upper bound
/// is not positive cannot have a positive relevance either. Every other row is scored in f32.
pub fn top_relevance_shadowed(
    stored: Stored<'_>,
    shadow: Shadow<'_>,
    queries: &[f32],
    k: usize,
    rows: Option<&[u32]>,
) -> Result<(Vec<u32>, Vec<f32>), ShapeError> {
    let n = stored.rows()?;
    let dim = stored.dim;
    shadow.check(n, dim)?;
    if let Some(&bad) = rows.and_then(|listed| listed.iter().find(|&&r| r as usize >= n)) {
        return Err(ShapeError(format!("row {bad} is past the {n} stored rows")));
    }
    if k == 0 || dim == 0 || queries.is_empty() {
        return scoring::top_relevance(stored, queries, k, rows);
    }
    if !queries.len().is_multiple_of(dim) {
        return Err(ShapeError(format!("query values ({}) are not a multiple of the dimension {dim}", queries.len())));
    }
    let unit = normalise_queries(queries, dim);
    let approx = shadow_relevance(shadow, &unit, rows);
    let row_of = |i: usize| rows.map_or(i as u32, |listed| listed[i]);
    let margin = |i: usize| bound(shadow.residual[row_of(i) as usize], dim);
    let (kth, full) =
        scoring::kth_key(approx.iter().enumerate().map(|(i, &a)| scoring::positive_key(a - margin(i))), k);
    let floor = if full { f32::from_bits(kth) } else { 0.0 };
    let candidates = candidates(&approx, floor, margin, row_of);
    let sims = relevance_of_rows(stored, queries, &candidates)?;
    Ok(scoring::best_positive(&sims, k, |i| candidates[i]))
}

/// The rows whose upper bound is positive and reaches `floor`: those the f32 kernel must score.
fn candidates(approx: &[f32], floor: f32, margin: impl Fn(usize) -> f32, row_of: impl Fn(usize) -> u32) -> Vec<u32> {
    approx
        .iter()
        .enumerate()
        .filter_map(|(i, &a)| {
            let upper = a + margin(i);
            (upper > 0.0 && upper >= floor).then(|| row_of(i))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scoring::{row_norms, top_relevance};

    fn sorted((r, s): (Vec<u32>, Vec<f32>)) -> Vec<(u32, u32)> {
        let mut v: Vec<(u32, u32)> = r.into_iter().zip(s.into_iter().map(f32::to_bits)).collect();
        v.sort_unstable();
        v
    }

    /// A deterministic pseudo-random matrix with exact duplicates (every fifth row repeats row 0),
    /// a zero row and a row whose values overflow f16 before they are scaled to unit length.
    fn matrix(n: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut state = seed;
        let mut data: Vec<f32> = (0..n * dim)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((state >> 33) as f32 / (1u64 << 31) as f32) - 0.5
            })
            .collect();
        for i in (5..n).step_by(5) {
            data.copy_within(0..dim, i * dim);
        }
        data[3 * dim..4 * dim].iter_mut().for_each(|x| *x = 0.0);
        data[7 * dim..8 * dim].iter_mut().for_each(|x| *x *= 1e6);
        data
    }

    #[test]
    fn the_shadow_answers_exactly_what_the_f32_scan_does() {
        for (n, dim, seed) in [(300, 16, 1), (2000, 384, 2), (5000, 33, 3), (600_000 / 64, 64, 4)] {
            let data = matrix(n, dim, seed);
            let norms = row_norms(&data, dim);
            let (half, residual) = encode_rows(&data, dim);
            let stored = Stored::new(&data, &norms, dim);
            let shadow = Shadow { data: &half, residual: &residual, dim };
            for (qi, k) in [(1usize, 1usize), (2, 10), (3, 50), (4, n + 5)] {
                let queries: Vec<f32> = data[qi * 11 * dim..(qi * 11 + qi) * dim].to_vec();
                let want = sorted(top_relevance(stored, &queries, k, None).unwrap());
                let got = sorted(top_relevance_shadowed(stored, shadow, &queries, k, None).unwrap());
                assert_eq!(got, want, "n {n} dim {dim} queries {qi} k {k}");
                let listed: Vec<u32> = (0..n as u32).filter(|r| r % 3 != 1).collect();
                let want = sorted(top_relevance(stored, &queries, k, Some(&listed)).unwrap());
                let got = sorted(top_relevance_shadowed(stored, shadow, &queries, k, Some(&listed)).unwrap());
                assert_eq!(got, want, "listed: n {n} dim {dim} queries {qi} k {k}");
            }
        }
    }

    #[test]
    fn residuals_bound_the_shadow_error() {
        let (n, dim) = (500, 48);
        let data = matrix(n, dim, 9);
        let norms = row_norms(&data, dim);
        let (half, residual) = encode_rows(&data, dim);
        let q: Vec<f32> = data[dim..2 * dim].to_vec();
        let exact = scoring::relevance(Stored::new(&data, &norms, dim), &q).unwrap();
        let approx =
            shadow_relevance(Shadow { data: &half, residual: &residual, dim }, &normalise_queries(&q, dim), None);
        for i in 0..n {
            assert!((exact[i] - approx[i]).abs() <= bound(residual[i], dim), "row {i}");
            assert!(residual[i] < 1e-3, "row {i}: residual {}", residual[i]);
        }
        assert_eq!(residual[3], 0.0);
        assert!(half[3 * dim..4 * dim].iter().all(|&h| h == 0));
    }

    #[test]
    fn every_kernel_agrees_with_the_portable_one() {
        // Every block size of the kernels (1 to 9 queries), and an odd row count, whose last row
        // has no partner.
        for (n, dim) in [(64, 77), (65, 384), (11, 5)] {
            let data = matrix(n, dim, 5);
            let (half, _) = encode_rows(&data, dim);
            for q in 1..=9 {
                let queries = normalise_queries(&data[dim..(1 + q) * dim], dim);
                let mut portable = vec![0.0f32; n];
                shadow_rows!(max_dot_half, HALF_QUERIES, half, dim, &queries, portable);
                let mut dispatched = vec![0.0f32; n];
                relevance_block(&half, dim, &queries, &mut dispatched);
                for i in 0..n {
                    assert!((portable[i] - dispatched[i]).abs() < 1e-5, "n {n} dim {dim} queries {q} row {i}");
                }
            }
        }
    }

    type BlockKernel = fn(&[u16], usize, &[f32], &mut [f32]);

    /// Every block kernel this CPU can run, the dispatched one first.
    fn block_kernels() -> Vec<(&'static str, BlockKernel)> {
        let mut out: Vec<(&'static str, BlockKernel)> = vec![("dispatched", relevance_block)];
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c") {
            // SAFETY: the CPU has the kernel's features.
            out.push(("avx2", |d, dim, u, o| unsafe { avx2::relevance_block(d, dim, u, o) }));
        }
        out
    }

    #[test]
    fn rows_taken_in_pairs_score_as_each_row_alone() {
        // The kernels pair rows of a block; a block of one row goes alone. Same bits, and within
        // float noise of the portable kernel.
        for (name, kernel) in block_kernels() {
            for (n, dim) in [(64, 77), (65, 384), (11, 5)] {
                let data = matrix(n, dim, 9);
                let (half, _) = encode_rows(&data, dim);
                for q in 1..=9 {
                    let queries = normalise_queries(&data[dim..(1 + q) * dim], dim);
                    let mut portable = vec![0.0f32; n];
                    shadow_rows!(max_dot_half, HALF_QUERIES, half, dim, &queries, portable);
                    let mut block = vec![0.0f32; n];
                    kernel(&half, dim, &queries, &mut block);
                    for (i, row) in half.chunks_exact(dim).enumerate() {
                        let mut alone = [0.0f32];
                        kernel(row, dim, &queries, &mut alone);
                        let at = format!("{name}: n {n} dim {dim} queries {q} row {i}");
                        assert_eq!(block[i].to_bits(), alone[0].to_bits(), "{at}");
                        assert!((block[i] - portable[i]).abs() < 1e-5, "{at}");
                    }
                }
            }
        }
    }

    #[test]
    fn only_rows_near_the_kth_are_scored_in_f32() {
        let (n, dim) = (4000, 64);
        let data = matrix(n, dim, 6);
        let (half, residual) = encode_rows(&data, dim);
        let unit = normalise_queries(&data[9 * dim..10 * dim], dim);
        let approx = shadow_relevance(Shadow { data: &half, residual: &residual, dim }, &unit, None);
        let margin = |i: usize| bound(residual[i], dim);
        let (kth, full) =
            scoring::kth_key(approx.iter().enumerate().map(|(i, &a)| scoring::positive_key(a - margin(i))), 10);
        assert!(full);
        let scored = candidates(&approx, f32::from_bits(kth), margin, |i| i as u32);
        // The ten best and the few rows within the bounds of the tenth, not 4,000.
        assert!((10..40).contains(&scored.len()), "{} of {n} rows scored in f32", scored.len());
    }

    #[test]
    fn shapes_are_checked() {
        let data = [1.0f32, 0.0, 0.0, 1.0];
        let norms = row_norms(&data, 2);
        let (half, residual) = encode_rows(&data, 2);
        let stored = Stored::new(&data, &norms, 2);
        let short = Shadow { data: &half[..2], residual: &residual, dim: 2 };
        assert!(top_relevance_shadowed(stored, short, &[1.0, 0.0], 1, None).is_err());
        let shadow = Shadow { data: &half, residual: &residual, dim: 2 };
        assert!(top_relevance_shadowed(stored, shadow, &[1.0, 0.0], 1, Some(&[2])).is_err());
        assert!(top_relevance_shadowed(stored, shadow, &[1.0, 0.0, 1.0], 1, None).is_err());
        assert!(top_relevance_shadowed(stored, shadow, &[1.0, 0.0], 0, None).unwrap().0.is_empty());
    }
}
