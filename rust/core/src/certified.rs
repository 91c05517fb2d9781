//! Certified top-k from a candidate pool: the approximate (`exact=False`) path.
//!
//! The default value function is `relevance × recency × weight`, where
//! `recency = exp(-λ·max(0, now − t)/3600)` and `weight` (frequency × reward)
//! does not depend on time. Hence for every row
//!
//! ```text
//! value ≤ relevance × exp(key − λ·now/3600),   key = λ·t/3600 + ln(weight)
//! ```
//!
//! and `key` does not depend on `now` either: rows sorted by key once stay in
//! order as time passes, and only rows whose metadata changed need a look of
//! their own. Given a pool of rows (the vector index's neighbours of every
//! query vector) and `bound`, a relevance no row outside the pool exceeds,
//! [`walk`] scores the pool, then walks the other rows in key order and stops
//! at the first whose `bound × exp(key − λ·now/3600)` is below the current
//! k-th best score: no later row can enter the answer. The answer is then the
//! exact one over every row whose relevance respects `bound`.
//!
//! With [`Regions`], a row's relevance bound is also at most its region's
//! (the caller derives it from the region's centre and radius): the walk then
//! skips, without reading its vector, every row whose region rules it out, so
//! when usage factors vary the walk reads the rows near the query, not every
//! row with a high usage factor.

use crate::scoring::{
    default_value, normalise_queries, prefetch as prefetch_lines, relevance, usage_weight, Gate, MetaColumns,
    ScanRequest, ShapeError, Stored, UnitQueries, ValueParams,
};
use crate::shadow::Shadow;
use rayon::prelude::*;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

/// Rows sorted by [`usage_key`], largest first (ties by row).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageOrder {
    pub rows: Vec<u32>,
    pub keys: Vec<f64>,
}

/// The time-independent log bound of a row's usage factor (see the module docs).
///
/// Rows without metadata score their relevance: `+∞` puts them first. A zero
/// or NaN weight can never score above zero: `−∞`. A NaN key (extreme
/// parameters) is treated as `+∞`, so such a row is always scored.
pub fn usage_key(meta: Option<(f64, f64, f64, f64)>, p: &ValueParams) -> f64 {
    let Some((timestamp, access_count, reward_count, cumulative_reward)) = meta else {
        return f64::INFINITY;
    };
    let weight = usage_weight(access_count, reward_count, cumulative_reward, p);
    if weight.is_nan() || weight <= 0.0 {
        return f64::NEG_INFINITY;
    }
    let key = p.lambda * timestamp / 3600.0 + weight.ln();
    if key.is_nan() {
        f64::INFINITY
    } else {
        key
    }
}

/// Every row's [`usage_key`], and the rows sorted by it (largest first).
pub fn usage_order(meta: crate::scoring::MetaColumns<'_>, p: &ValueParams) -> Result<UsageOrder, ShapeError> {
    let n = meta.has_meta.len();
    meta.check(n)?;
    let keys: Vec<f64> = (0..n).map(|i| usage_key(meta.row(i), p)).collect();
    let mut rows: Vec<u32> = (0..n as u32).collect();
    let cmp = |a: &u32, b: &u32| keys[*b as usize].total_cmp(&keys[*a as usize]).then(a.cmp(b));
    if n >= 1 << 16 {
        rows.par_sort_unstable_by(cmp);
    } else {
        rows.sort_unstable_by(cmp);
    }
    let sorted = rows.iter().map(|&r| keys[r as usize]).collect();
    Ok(UsageOrder { rows, keys: sorted })
}

/// `order` brought up to date: rows in `stale` (changed, added or moved since `order` was taken)
/// get fresh keys and are merged in; rows past the end (removed since) are dropped.
///
/// One pass over `order` plus a sort of the stale rows, instead of sorting every row again.
pub fn merge_usage_order(
    order_rows: &[u32],
    order_keys: &[f64],
    stale: &[u32],
    meta: crate::scoring::MetaColumns<'_>,
    p: &ValueParams,
) -> Result<UsageOrder, ShapeError> {
    let n = meta.has_meta.len();
    meta.check(n)?;
    if order_rows.len() != order_keys.len() {
        return Err(ShapeError(format!("order has {} rows but {} keys", order_rows.len(), order_keys.len())));
    }
    let changed = sorted_rows(stale, n);
    let mut fresh: Vec<(f64, u32)> = changed.iter().map(|&r| (usage_key(meta.row(r as usize), p), r)).collect();
    let first = |a: &(f64, u32), b: &(f64, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
    fresh.sort_unstable_by(first);
    // A flag per row rather than a binary search per row of the order: the pass stays linear.
    let mut is_changed = vec![false; n];
    for &r in &changed {
        is_changed[r as usize] = true;
    }
    let kept = order_rows
        .iter()
        .zip(order_keys)
        .filter(|(&r, _)| is_changed.get(r as usize) == Some(&false))
        .map(|(&r, &k)| (k, r));
    let mut rows = Vec::with_capacity(n);
    let mut keys = Vec::with_capacity(n);
    let mut fresh = fresh.into_iter().peekable();
    for old in kept {
        while let Some(new) = fresh.next_if(|new| first(new, &old) == Ordering::Less) {
            keys.push(new.0);
            rows.push(new.1);
        }
        keys.push(old.0);
        rows.push(old.1);
    }
    for new in fresh {
        keys.push(new.0);
        rows.push(new.1);
    }
    Ok(UsageOrder { rows, keys })
}

/// The rows of `rows` below `n`, sorted, each once.
fn sorted_rows(rows: &[u32], n: usize) -> Vec<u32> {
    let mut out: Vec<u32> = rows.iter().copied().filter(|&r| (r as usize) < n).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The pool's rows below `n`, each once with its largest bound (NaN: unbounded), largest bound first.
fn bounded_pool(rows: &[u32], bounds: &[f64], n: usize) -> Vec<(f64, u32)> {
    let mut out: Vec<(f64, u32)> = rows
        .iter()
        .zip(bounds)
        .filter(|(&r, _)| (r as usize) < n)
        .map(|(&r, &b)| (if b.is_nan() { f64::INFINITY } else { b }, r))
        .collect();
    out.sort_unstable_by(|a, b| a.1.cmp(&b.1).then(b.0.total_cmp(&a.0)));
    out.dedup_by_key(|x| x.1);
    out.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    out
}

/// Largest value a row with usage key `key` and relevance at most `bound` can have at `offset = λ·now/3600`.
#[inline]
fn upper(bound: f64, key: f64, offset: f64) -> f64 {
    if bound <= 0.0 || key == f64::NEG_INFINITY {
        return 0.0;
    }
    if key == f64::INFINITY {
        return bound;
    }
    // Slack for the rounding of two large, nearly equal terms (λ·t and λ·now).
    let slack = 1e-9 * (1.0 + key.abs() + offset.abs());
    bound * (key - offset + slack).exp()
}

/// `ln(x)` for a bound or a score: `−∞` for anything not positive (NaN included).
#[inline]
fn ln_positive(x: f64) -> f64 {
    if x > 0.0 {
        x.ln()
    } else {
        f64::NEG_INFINITY
    }
}

/// [`upper`]`(bound, key, offset) < cut` in log space, given `ln_bound = ln_positive(bound)` and
/// `ln_cut = ln_positive(cut)`: an addition a row instead of an exponential. The same slack in the
/// exponent, far above the rounding of either form, keeps it as conservative as `upper`.
#[inline]
fn below(ln_bound: f64, key: f64, offset: f64, ln_cut: f64) -> bool {
    if ln_cut == f64::NEG_INFINITY {
        return false; // a cut of zero or less: no value is below it
    }
    if ln_bound == f64::NEG_INFINITY || key == f64::NEG_INFINITY {
        return true; // the row's value is at most zero
    }
    if key == f64::INFINITY {
        return ln_bound < ln_cut;
    }
    let slack = 1e-9 * (1.0 + key.abs() + offset.abs());
    ln_bound + (key - offset + slack) < ln_cut
}

/// Rows ahead of the one being scored whose memory is requested early: pool and walk rows are
/// scattered over the matrix, so each would otherwise wait on a cache miss.
const PREFETCH_AHEAD: usize = 8;

/// The cache lines of row `r`'s metadata: every column the value function reads.
fn meta_lines(m: &MetaColumns<'_>, r: usize) -> [*const i8; 5] {
    [
        m.has_meta.as_ptr().wrapping_add(r) as *const i8,
        m.timestamp.as_ptr().wrapping_add(r) as *const i8,
        m.access_count.as_ptr().wrapping_add(r) as *const i8,
        m.reward_count.as_ptr().wrapping_add(r) as *const i8,
        m.cumulative_reward.as_ptr().wrapping_add(r) as *const i8,
    ]
}

/// Starts loading row `r` and its metadata.
#[inline(always)]
fn prefetch(scan: &ScanRequest<'_>, r: usize) {
    if r < scan.stored.norms.len() {
        prefetch_lines(scan.stored.row_lines(r).chain(meta_lines(&scan.meta, r)));
    }
}

/// Starts loading row `r` of the shadow, its residual and the row's metadata: all a shadow test reads.
#[inline(always)]
fn prefetch_half(scan: &ScanRequest<'_>, shadow: Shadow<'_>, r: usize) {
    let dim = shadow.dim;
    if let Some(row) = shadow.data.get(r * dim..(r + 1) * dim) {
        let residual = shadow.residual.as_ptr().wrapping_add(r) as *const i8;
        prefetch_lines(
            row.chunks(32).map(|line| line.as_ptr() as *const i8).chain(meta_lines(&scan.meta, r)).chain([residual]),
        );
    }
}

/// A scored row in the bounded top-k heap; "greater" means worse, so the heap's top is the worst kept.
#[derive(Debug, Clone, Copy)]
struct Kept {
    score: f64,
    key: u64,
    row: usize,
}

impl PartialEq for Kept {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Kept {}

impl PartialOrd for Kept {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Kept {
    fn cmp(&self, other: &Self) -> Ordering {
        other.score.total_cmp(&self.score).then(self.key.cmp(&other.key))
    }
}

/// What [`walk`] needs beyond one exact scan's inputs.
#[derive(Debug, Clone, Copy)]
pub struct WalkRequest<'a> {
    pub scan: ScanRequest<'a>,
    /// Rows scored first (the vector index's candidates); rows past the end are ignored.
    pub pool: &'a [u32],
    /// No row outside `pool` has a relevance above this.
    pub bound: f64,
    /// No row outside `pool` has a score above this (a value-weighted search's bound; `+∞` when
    /// the pool came from similarity alone). Below the k-th score, the pool is the answer.
    pub outside_score: f64,
    /// A [`UsageOrder`] taken when the rows in `stale` had other metadata (or did not exist);
    /// each row at most once.
    pub order: &'a [u32],
    pub order_keys: &'a [f64],
    /// Rows whose metadata changed, or that were added or moved, since `order` was taken.
    pub stale: &'a [u32],
    /// Most rows to score beyond the pool; past it the walk gives up (`None`).
    pub budget: usize,
    /// Tighter relevance bounds by region of the vector space, when the caller has them.
    pub regions: Option<Regions<'a>>,
    /// The rows' half-precision shadow: once the top-k is full, a row is read there first, and
    /// its f32 vector only when the shadow's bound lets it reach the k-th score.
    pub shadow: Option<Shadow<'a>>,
    /// A score no pool row exceeds, one per entry of `pool` (a value-weighted search's
    /// [`ValuedPool::bounds`]; `+∞` or NaN for rows it did not bound). The pool is then scored from
    /// the largest bound down, and rows whose bound lies below the k-th score are not read at all.
    pub pool_bounds: Option<&'a [f64]>,
}

/// A partition of the rows into regions, each with a bound on the relevance any of its rows can
/// have for this query (from the region's centre and radius). Rows whose region id is past the
/// end of `bound` (not placed in any region) have only the walk's own `bound`.
#[derive(Debug, Clone, Copy)]
pub struct Regions<'a> {
    /// Region of each row; rows past the end have none.
    pub of_row: &'a [u32],
    pub bound: &'a [f64],
    /// The region of the row at each position of the walk's `order`, read in order instead of
    /// looking each row up: for a row not in `stale`, its region in `of_row` or none (a looser
    /// bound), as a copy taken when the order was, before rows left their regions, has it.
    pub in_order: Option<&'a [u32]>,
}

impl Regions<'_> {
    /// The relevance bound of row `r`: its region's, never above `outside` (the pool's bound).
    #[inline]
    fn bound(&self, r: usize, outside: f64) -> f64 {
        match self.of_row.get(r).and_then(|&c| self.bound.get(c as usize)) {
            Some(&b) => b.min(outside),
            None => outside,
        }
    }
}

/// Per region, the largest relevance (a cosine in [0, 1]) any member can have for any of `queries`,
/// for [`Regions::bound`]. `centres` are unit vectors and `radius` each region's angular radius: a
/// member's cosine to a query at angle θ from the centre is at most cos(max(0, θ − radius)), which
/// grows with the query's cosine to the centre, so the largest of those over the queries decides.
/// `slack` is added to every bound (float rounding between this and the walk's own dot products).
/// All-zero queries have relevance 0 to every row: every bound is 0.
pub fn region_bounds(centres: Stored<'_>, radius: &[f64], queries: &[f32], slack: f64) -> Result<Vec<f64>, ShapeError> {
    let n = centres.rows()?;
    if radius.len() != n {
        return Err(ShapeError(format!("{n} centres but {} radii", radius.len())));
    }
    if queries.iter().all(|&x| x == 0.0) {
        return Ok(vec![0.0; n]);
    }
    let cos = relevance(centres, queries)?;
    Ok(cos
        .iter()
        .zip(radius)
        .map(|(&c, &r)| ((f64::from(c).min(1.0).acos() - r).max(0.0).cos() + slack).clamp(0.0, 1.0))
        .collect())
}

/// A candidate pool from a value-weighted search of the vector index (see [`valued_pool`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ValuedPool {
    /// Rows found for any query vector, each once.
    pub rows: Vec<u32>,
    /// Per entry of `rows`, a score the row cannot exceed: its largest product over the query
    /// vectors plus the codes' error (scaled by the largest factor), as `outside_score` is taken;
    /// with several vectors at least `outside_score` (a vector whose search did not return the
    /// row bounds its similarity there by that alone).
    pub bounds: Vec<f64>,
    /// No row outside `rows` scores above this (the [`WalkRequest::outside_score`] to pass),
    /// as far as the graph's recall goes.
    pub outside_score: f64,
    /// The largest code similarity of a row found (the nearest the queries land to the data).
    pub top: f32,
}

/// Each row's [`usage_key`] laid out by row (`by_row[r]`, from a [`UsageOrder`]), so a visited row's
/// value factor costs one read: `exp(min(0, key − λ·now/3600))`, its exact factor whenever the row's
/// timestamp is not after `now` and an upper bound otherwise. Rows in `stale` (written since the
/// keys were taken) or past the end are read from the metadata columns instead. `most`: no row's
/// factor at `now` exceeds it (stale rows included), so the search skips a node whose similarity
/// times `most` cannot enter without reading its key.
#[derive(Debug, Clone, Copy)]
pub struct RowKeys<'a> {
    pub by_row: &'a [f64],
    pub stale: &'a [u32],
    pub most: f32,
    /// No key of `by_row` is below it (`−∞`: unknown). When every factor lies within
    /// [`UNIFORM_SHARE`] of `most`, the search ranks by similarity alone and reads no keys.
    pub least: f64,
}

/// Factors this close to the largest (least over most) rank the rows as their similarities do, up
/// to a hundredth: the value-weighted search then weighs every row by the largest factor, which
/// bounds each product all the same, and saves each visited node's key (about a fifth of the
/// search on a store whose usage has not yet spread its values, such as one just written).
pub const UNIFORM_SHARE: f32 = 0.99;

/// The rows of largest `relevance × value` per query vector, found by searching `index` with each
/// row's value factor (the default value function at `now`, at most one) as the search's weight.
/// `row_of_label[l]` is the row of the index's id `l` (negative, past the rows or past the end: an
/// id that stands for no row, which routes but is never returned). The factor does not grow with
/// relevance, so a score is the weighted similarity, and the codes' error bounds the bound's.
/// `live`: how many ids stand for a row; a search that finds fewer than `ef` and fewer than
/// those bounds nothing (part of the graph was out of its reach). `error`: the most a code
/// similarity differs from the exact cosine for a row outside the pool (the caller scores the rows
/// `Index::error_split` lists anyway); a product's error is that times the row's factor, so the
/// bound scales it by the largest factor (one without `keys`). `keys`, when given, replaces the
/// five column reads per visited row by one (see [`RowKeys`]); a factor it gives is never below
/// the row's own, so the bound holds either way.
#[expect(clippy::too_many_arguments, reason = "the search, the rows it maps to, and the value function's inputs")]
pub fn valued_pool(
    index: &crate::hnsw::Index,
    queries: &[f32],
    ef: usize,
    ceiling: f32,
    error: f32,
    row_of_label: &[i64],
    live: usize,
    meta: MetaColumns<'_>,
    keys: Option<RowKeys<'_>>,
    now: f64,
    params: &ValueParams,
) -> Result<ValuedPool, ShapeError> {
    let dim = index.dim();
    let n = meta.has_meta.len();
    meta.check(n)?;
    if dim == 0 || !queries.len().is_multiple_of(dim) {
        return Err(ShapeError(format!("query values ({}) are not rows of the dimension {dim}", queries.len())));
    }
    let by_row = keys.map_or(&[][..], |k| &k.by_row[..k.by_row.len().min(n)]);
    let mut stale = vec![0u64; by_row.len().div_ceil(64)];
    for &r in keys.map_or(&[][..], |k| k.stale) {
        if let Some(word) = stale.get_mut(r as usize / 64) {
            *word |= 1 << (r % 64);
        }
    }
    let shift = params.lambda * now / 3600.0;
    let factor = |row: usize| -> f32 {
        let w = match by_row.get(row) {
            Some(&key) if stale[row / 64] & (1 << (row % 64)) == 0 => (key - shift).min(0.0).exp() as f32,
            _ => default_value(1.0, meta.row(row), now, params) as f32,
        };
        if w.is_nan() {
            1.0
        } else {
            w.clamp(0.0, 1.0)
        }
    };
    // The largest factor: the keys' own, and that of every row they do not cover (stale or new).
    let most = keys.map_or(1.0, |k| {
        let uncovered = k.stale.iter().map(|&r| r as usize).filter(|&r| r < n).chain(by_row.len()..n);
        uncovered.map(factor).fold(k.most.clamp(0.0, 1.0), f32::max)
    });
    let error = error * most;
    let least = keys.map_or(0.0, |k| ((k.least - shift).min(0.0).exp() as f32).clamp(0.0, 1.0));
    let uniform = least >= UNIFORM_SHARE * most;
    let row_at = |label: u32| -> Option<usize> {
        let row = *row_of_label.get(label as usize)?;
        usize::try_from(row).ok().filter(|&r| r < n)
    };
    let weight = |label: u32| -> Option<f32> { row_at(label).map(factor) };
    // The neighbours' rows, then their keys, asked for together while their codes arrive: read
    // one by one, `weight` would wait for each row, then for each key.
    let warm = |labels: &[u32]| {
        prefetch_lines(
            labels.iter().filter_map(|&l| row_of_label.get(l as usize)).map(|r| std::ptr::from_ref(r).cast::<i8>()),
        );
        for &label in labels {
            if let Some(key) = row_at(label).and_then(|r| by_row.get(r)) {
                prefetch_lines([std::ptr::from_ref(key).cast::<i8>()]);
            }
        }
    };
    let slack = f64::from(error) + 1e-6;
    let mut found_rows: Vec<(u32, f64)> = Vec::new();
    let mut outside = f64::NEG_INFINITY;
    let mut top = f32::NEG_INFINITY;
    for q in queries.chunks_exact(dim) {
        let found = if uniform {
            let near = index.search(q, ef, ef).map_err(|e| ShapeError(e.to_string()))?;
            near.into_iter().map(|(label, sim)| (label, sim * most)).collect()
        } else {
            index.search_weighted(q, ef, ceiling, weight, warm).map_err(|e| ShapeError(e.to_string()))?
        };
        if found.len() < ef.min(live) {
            outside = f64::INFINITY;
        } else if found.len() >= ef {
            let last = found.last().map_or(f64::NEG_INFINITY, |x| f64::from(x.1));
            // Relevance is a cosine clamped at zero: no score is below zero.
            outside = outside.max((last + slack).max(0.0));
        }
        for (label, product) in found {
            // The weighted search returns only ids that stand for a row; the similarity search
            // returns any live id, and one that stands for none is left out here.
            let Some(row) = row_at(label) else { continue };
            let w = if uniform { most } else { factor(row) };
            if w > 0.0 {
                top = top.max(product / w);
            }
            found_rows.push((row as u32, (f64::from(product) + slack).max(0.0)));
        }
    }
    if queries.len() > dim {
        // A row's score is its best over the vectors, and a search that did not return it bounds
        // its product by that search's own outside bound only.
        for r in &mut found_rows {
            r.1 = r.1.max(outside);
        }
    }
    // Each row once, with its largest bound over the query vectors.
    found_rows.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)));
    found_rows.dedup_by_key(|x| x.0);
    let (rows, bounds) = found_rows.into_iter().unzip();
    Ok(ValuedPool { rows, bounds, outside_score: outside, top })
}

/// A value-weighted search of the vector index, as [`valued_pool`] takes it, for [`valued_walk`].
#[derive(Clone, Copy)]
pub struct ValuedSearch<'a> {
    pub index: &'a crate::hnsw::Index,
    pub ef: usize,
    pub ceiling: f32,
    pub error: f32,
    pub row_of_label: &'a [i64],
    pub live: usize,
    pub keys: Option<RowKeys<'a>>,
    /// Below this top similarity the queries landed away from the data, where a graph search
    /// misses neighbours: no walk, the caller asks the exact scan.
    pub floor: f32,
}

/// What [`valued_walk`] found: the largest code similarity of a row the search reached, and the
/// certified top-k, or `None` when the pool could not certify it (or `top` is below the floor).
#[derive(Debug, Clone, PartialEq)]
pub struct ValuedAnswer {
    pub top: f32,
    pub hits: Option<Vec<(usize, f64)>>,
}

/// The value-weighted search and its certified finish in one step: [`valued_pool`] for the
/// request's queries, then [`walk`] over the pool's rows by their bounds plus `req.pool` (rows
/// the search cannot bound, such as those written since the graph absorbed them, read first in
/// full), with no rows beyond them. `req.pool_bounds`, `bound`, `budget`, `regions` and
/// `outside_score` are the search's to set and are ignored.
pub fn valued_walk(search: &ValuedSearch<'_>, req: &WalkRequest<'_>) -> Result<ValuedAnswer, ShapeError> {
    let scan = &req.scan;
    let found = valued_pool(
        search.index,
        scan.queries,
        search.ef,
        search.ceiling,
        search.error,
        search.row_of_label,
        search.live,
        scan.meta,
        search.keys,
        scan.now,
        &scan.params,
    )?;
    if found.top < search.floor {
        return Ok(ValuedAnswer { top: found.top, hits: None });
    }
    let (mut rows, mut bounds) = (found.rows, found.bounds);
    rows.extend_from_slice(req.pool);
    bounds.resize(rows.len(), f64::INFINITY);
    let full = WalkRequest {
        pool: &rows,
        bound: 1.0,
        outside_score: found.outside_score,
        budget: 0,
        regions: None,
        pool_bounds: Some(&bounds),
        ..*req
    };
    Ok(ValuedAnswer { top: found.top, hits: walk(&full)? })
}

/// The similarity search of the certified path, as [`similarity_walk`] takes it.
#[derive(Clone, Copy)]
pub struct SimilaritySearch<'a> {
    pub index: &'a crate::hnsw::Index,
    /// The search depth (at least each round's pool).
    pub ef: usize,
    /// Nearest ids per query vector in the first round; each later round takes four times as many.
    pub first: usize,
    /// How far a code similarity may lie from the exact cosine ([`crate::hnsw::Index::max_error`]).
    pub error: f32,
    /// The row each id stands for (negative or past the rows: none).
    pub row_of_label: &'a [i64],
    /// Live ids in the graph: a round asking for them all bounds nothing outside its pool.
    pub live: usize,
    /// Below this top similarity the queries landed away from the data: no walk (see [`ValuedSearch`]).
    pub floor: f32,
}

/// The similarity search and its certified finish in one step, the rounds the caller would run
/// otherwise: each round searches the `pool` nearest ids per query vector, bounds every row
/// outside them by the largest last similarity plus the codes' error, and walks the found rows
/// plus `req.pool` (rows the graph does not hold yet) with a budget of an eighth of the rows;
/// a walk past its budget takes another round four times as deep, until a round would ask for a
/// sixteenth of the rows, or every live id was found. `top` is the first round's largest
/// similarity; `hits` is `None` where the exact scan must answer (below the floor, past the last
/// round, or a graph that found fewer live ids than asked). `req.bound`, `budget` and
/// `pool_bounds` are the search's to set and are ignored.
pub fn similarity_walk(search: &SimilaritySearch<'_>, req: &WalkRequest<'_>) -> Result<ValuedAnswer, ShapeError> {
    let n = req.scan.stored.rows()?;
    let dim = search.index.dim();
    if dim == 0 || !req.scan.queries.len().is_multiple_of(dim) {
        let values = req.scan.queries.len();
        return Err(ShapeError(format!("query values ({values}) are not rows of the dimension {dim}")));
    }
    let none = |top: f32| Ok(ValuedAnswer { top, hits: None });
    let mut pool = search.first.max(1);
    let mut top = f32::NEG_INFINITY;
    loop {
        let k = pool.min(search.live);
        if k == 0 {
            return none(top);
        }
        let found =
            search.index.search_many(req.scan.queries, k, search.ef.max(k)).map_err(|e| ShapeError(e.to_string()))?;
        if found.iter().any(|f| f.len() < k) {
            return none(top);
        }
        if pool == search.first.max(1) {
            top = found.iter().map(|f| f[0].1).fold(f32::NEG_INFINITY, f32::max);
            if top < search.floor {
                return none(top);
            }
        }
        let exhausted = k >= search.live;
        let mut rows: Vec<u32> = Vec::with_capacity(found.len() * k + req.pool.len());
        for &(label, _) in found.iter().flatten() {
            let row = search.row_of_label.get(label as usize).copied().unwrap_or(-1);
            // An id that stands for no row maps past every row: the walk ignores it.
            rows.push(u32::try_from(row).unwrap_or(u32::MAX));
        }
        rows.extend_from_slice(req.pool);
        let last = found.iter().map(|f| f64::from(f[k - 1].1)).fold(f64::NEG_INFINITY, f64::max);
        let bound = if exhausted { 0.0 } else { (last + f64::from(search.error)).max(0.0) + 1e-6 };
        let round = WalkRequest {
            pool: &rows,
            bound,
            budget: (n / 8).max(1),
            pool_bounds: None,
            outside_score: f64::INFINITY,
            ..*req
        };
        if let Some(hits) = walk(&round)? {
            return Ok(ValuedAnswer { top, hits: Some(hits) });
        }
        if exhausted || 4 * pool > n / 4 {
            return none(top);
        }
        pool *= 4;
    }
}

/// The exact top-k over every row whose relevance respects `bound`, best first; `None` past the budget.
pub fn walk(req: &WalkRequest<'_>) -> Result<Option<Vec<(usize, f64)>>, ShapeError> {
    let scan = &req.scan;
    let n = scan.stored.rows()?;
    let dim = scan.stored.dim;
    scan.meta.check(n)?;
    if req.order.len() != req.order_keys.len() {
        return Err(ShapeError(format!("order has {} rows but {} keys", req.order.len(), req.order_keys.len())));
    }
    if let Some(r) = scan.rank {
        if r.len() != n {
            return Err(ShapeError(format!("rank has {} entries, rows {n}", r.len())));
        }
    }
    if let Some(b) = req.pool_bounds {
        if b.len() != req.pool.len() {
            return Err(ShapeError(format!("pool has {} rows but {} bounds", req.pool.len(), b.len())));
        }
    }
    if let Some(in_order) = req.regions.and_then(|g| g.in_order) {
        if in_order.len() != req.order.len() {
            return Err(ShapeError(format!("order has {} rows but {} regions", req.order.len(), in_order.len())));
        }
    }
    let scoring = dim > 0 && !scan.queries.is_empty();
    if scoring && !scan.queries.len().is_multiple_of(dim) {
        return Err(ShapeError(format!(
            "query values ({}) are not a multiple of the dimension {dim}",
            scan.queries.len()
        )));
    }
    if scan.top_k == 0 || n == 0 {
        return Ok(Some(Vec::new()));
    }
    if let Some(sh) = req.shadow {
        sh.check(n, dim)?;
    }
    let unit = if scoring { normalise_queries(scan.queries, dim) } else { UnitQueries::default() };
    let score = |r: usize| {
        let mut rel = [0.0f32];
        if scoring {
            scan.stored.block(r, r + 1, &unit, &mut rel);
        }
        let relevance = f64::from(rel[0]);
        (relevance, default_value(relevance, scan.meta.row(r), scan.now, &scan.params))
    };
    let rank_key = |r: usize| scan.rank.map_or(r as u64, |rk| u64::from(rk[r]));
    let mut heap: BinaryHeap<Kept> = BinaryHeap::with_capacity(scan.top_k + 1);
    let offer = |heap: &mut BinaryHeap<Kept>, row: usize, (relevance, value): (f64, f64)| {
        if !scan.gate.admits(scan.threshold, relevance, value) {
            return;
        }
        let kept = Kept { score: value, key: rank_key(row), row };
        if heap.len() < scan.top_k {
            heap.push(kept);
        } else if heap.peek().is_some_and(|worst| kept < *worst) {
            heap.pop();
            heap.push(kept);
        }
    };
    let cutoff = |heap: &BinaryHeap<Kept>| match heap.peek() {
        Some(worst) if heap.len() == scan.top_k => worst.score,
        _ => scan.gate.score_floor(scan.threshold),
    };
    // Whether the shadow shows row `r` cannot beat the k-th score: its relevance is at most the
    // shadow's plus the row's bound, and the value grows with relevance when its factor is not
    // negative (a negative value bound is never trusted).
    let shadow_rules_out = |heap: &BinaryHeap<Kept>, r: usize| {
        let (Some(sh), Some(worst)) = (req.shadow, heap.peek()) else {
            return false;
        };
        if heap.len() < scan.top_k || !scoring {
            return false;
        }
        let mut rel = [0.0f32];
        crate::shadow::relevance_block(&sh.data[r * dim..(r + 1) * dim], dim, &unit, &mut rel);
        let most = (f64::from(rel[0]) + f64::from(crate::shadow::bound(sh.residual[r], dim))).min(1.0);
        let value = default_value(most, scan.meta.row(r), scan.now, &scan.params);
        value >= 0.0 && value < worst.score
    };
    let consider = |heap: &mut BinaryHeap<Kept>, r: usize| {
        if !shadow_rules_out(heap, r) {
            offer(heap, r, score(r));
        }
    };
    let fetch = |r: usize| match req.shadow {
        Some(sh) => prefetch_half(scan, sh, r),
        None => prefetch(scan, r),
    };
    // Under the relevance gate no row outside the pool passes when the bound is below the threshold.
    let outside_can_pass = scan.gate != Gate::Relevance || req.bound >= scan.threshold;
    // Sorted lookups rather than a bitmap of every row: a walk touches a few hundred rows,
    // and zeroing n bits per query would cost more than the walk itself at a million rows.
    let pool = sorted_rows(req.pool, n);
    let stale = sorted_rows(req.stale, n);
    match req.pool_bounds {
        Some(bounds) => {
            // Largest bound first: once the top-k is full, the first row whose bound lies below
            // the k-th score ends the pass (every later row's is lower), and no row is read twice
            // (the codes' bound is as tight as the shadow's).
            let by_bound = bounded_pool(req.pool, bounds, n);
            // The first rows are asked for together; the loop then keeps PREFETCH_AHEAD in flight.
            for &(_, r) in by_bound.iter().take(PREFETCH_AHEAD) {
                prefetch(scan, r as usize);
            }
            for (i, &(b, r)) in by_bound.iter().enumerate() {
                if heap.len() == scan.top_k && heap.peek().is_some_and(|worst| b < worst.score) {
                    break;
                }
                if let Some(&(_, ahead)) = by_bound.get(i + PREFETCH_AHEAD) {
                    prefetch(scan, ahead as usize);
                }
                offer(&mut heap, r as usize, score(r as usize));
            }
        }
        None => {
            for &r in pool.iter().take(PREFETCH_AHEAD) {
                fetch(r as usize);
            }
            for (i, &r) in pool.iter().enumerate() {
                if let Some(&ahead) = pool.get(i + PREFETCH_AHEAD) {
                    fetch(ahead as usize);
                }
                consider(&mut heap, r as usize);
            }
        }
    }
    if !outside_can_pass || req.outside_score < cutoff(&heap) {
        return Ok(Some(heap.into_sorted_vec().into_iter().map(|k| (k.row, k.score)).collect()));
    }
    let offset = scan.params.lambda * scan.now / 3600.0;
    let row_bound = |r: usize| req.regions.map_or(req.bound, |g| g.bound(r, req.bound));
    // The walk may pass over many rows: it compares logarithms (bounds per region taken once,
    // the cut's only when it changes) instead of taking an exponential per row.
    let ln_outside = ln_positive(req.bound);
    let ln_regions: Vec<f64> =
        req.regions.map_or_else(Vec::new, |g| g.bound.iter().map(|&b| ln_positive(b.min(req.bound))).collect());
    let ln_region = |c: Option<&u32>| c.and_then(|&c| ln_regions.get(c as usize)).copied().unwrap_or(ln_outside);
    // The bound of the row at position `i` of the order (row `r`): its region's, read in order
    // when the caller gave the regions in order (a stale row's is checked again below).
    let ln_row_bound = |i: usize, r: usize| match req.regions {
        Some(Regions { in_order: Some(in_order), .. }) => ln_region(in_order.get(i)),
        Some(g) => ln_region(g.of_row.get(r)),
        None => ln_outside,
    };
    let mut ln_cut = ln_positive(cutoff(&heap));
    let mut scored = 0usize;
    // A scout runs ahead of the walk and starts loading the next rows it will score: most rows the
    // walk passes are ruled out by their region, so a fixed distance in the order would prefetch
    // almost nothing. The scout judges by the cut it saw, never above the walk's (the cut only
    // rises), so it skips no row the walk would score.
    let mut ahead: VecDeque<usize> = VecDeque::with_capacity(PREFETCH_AHEAD);
    let mut scout = 0usize;
    let mut scouting = true;
    loop {
        while scouting && ahead.len() < PREFETCH_AHEAD {
            let (Some(&r), Some(&key)) = (req.order.get(scout), req.order_keys.get(scout)) else {
                scouting = false;
                break;
            };
            if below(ln_outside, key, offset, ln_cut) {
                scouting = false; // every later row has a smaller key
                break;
            }
            let wanted = (r as usize) < n
                && !below(ln_row_bound(scout, r as usize), key, offset, ln_cut)
                && stale.binary_search(&r).is_err()
                && pool.binary_search(&r).is_err();
            if wanted {
                fetch(r as usize);
                ahead.push_back(scout);
            }
            scout += 1;
        }
        let Some(i) = ahead.pop_front() else {
            break;
        };
        let (r, key) = (req.order[i] as usize, req.order_keys[i]);
        if below(ln_outside, key, offset, ln_cut) {
            break;
        }
        if below(ln_row_bound(i, r), key, offset, ln_cut) {
            continue; // its region keeps it below the k-th score: no need to read its vector
        }
        scored += 1;
        if scored > req.budget {
            return Ok(None);
        }
        consider(&mut heap, r);
        ln_cut = ln_positive(cutoff(&heap));
    }
    for &r in &stale {
        if pool.binary_search(&r).is_ok() {
            continue;
        }
        let r = r as usize;
        if upper(row_bound(r), usage_key(scan.meta.row(r), &scan.params), offset) < cutoff(&heap) {
            continue;
        }
        scored += 1;
        if scored > req.budget {
            return Ok(None);
        }
        consider(&mut heap, r);
    }
    Ok(Some(heap.into_sorted_vec().into_iter().map(|k| (k.row, k.score)).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scoring::{scan_default, MetaColumns, Stored};

    /// A deterministic generator (xorshift), so the tests need no extra crate.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn unit(&mut self) -> f64 {
            (self.next() >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    struct Data {
        dim: usize,
        data: Vec<f32>,
        norms: Vec<f32>,
        queries: Vec<f32>,
        has_meta: Vec<u8>,
        ts: Vec<f64>,
        acc: Vec<f64>,
        rc: Vec<f64>,
        cr: Vec<f64>,
        rank: Vec<u32>,
    }

    const NOW: f64 = 1.75e9;

    fn data(n: usize, dim: usize, seed: u64) -> Data {
        let mut rng = Rng(seed | 1);
        let data: Vec<f32> = (0..n * dim).map(|_| (rng.unit() * 2.0 - 1.0) as f32).collect();
        let norms = crate::scoring::row_norms(&data, dim);
        let queries: Vec<f32> = (0..3 * dim).map(|_| (rng.unit() * 2.0 - 1.0) as f32).collect();
        let has_meta = (0..n).map(|_| u8::from(rng.unit() < 0.9)).collect();
        // Some timestamps lie in the future: recency is clamped to one there.
        let ts = (0..n).map(|_| NOW - 3600.0 * 24.0 * 40.0 * (rng.unit() - 0.05)).collect();
        let acc = (0..n).map(|_| (rng.next() % 20) as f64).collect();
        let rc = (0..n).map(|_| (rng.next() % 4) as f64).collect();
        let cr = (0..n).map(|_| rng.unit() * 4.0 - 2.0).collect();
        let mut rank: Vec<u32> = (0..n as u32).collect();
        rank.reverse();
        Data { dim, data, norms, queries, has_meta, ts, acc, rc, cr, rank }
    }

    impl Data {
        fn meta(&self) -> MetaColumns<'_> {
            MetaColumns {
                has_meta: &self.has_meta,
                timestamp: &self.ts,
                access_count: &self.acc,
                reward_count: &self.rc,
                cumulative_reward: &self.cr,
            }
        }

        fn scan(&self, threshold: f64, top_k: usize) -> ScanRequest<'_> {
            self.gated(Gate::Score, threshold, top_k)
        }

        fn gated(&self, gate: Gate, threshold: f64, top_k: usize) -> ScanRequest<'_> {
            ScanRequest {
                stored: Stored::new(&self.data, &self.norms, self.dim),
                queries: &self.queries,
                meta: self.meta(),
                rank: Some(&self.rank),
                now: NOW,
                params: ValueParams::default(),
                threshold,
                gate,
                top_k,
            }
        }
    }

    #[test]
    fn key_bounds_the_value_at_any_time() {
        let p = ValueParams::default();
        let mut rng = Rng(7);
        for _ in 0..10_000 {
            let row = (NOW + 3600.0 * 100.0 * (rng.unit() - 0.3), 20.0 * rng.unit(), 3.0, rng.unit() - 0.5);
            let meta = Some(row);
            let rel = rng.unit();
            let value = default_value(rel, meta, NOW, &p);
            let bound = upper(rel, usage_key(meta, &p), p.lambda * NOW / 3600.0);
            assert!(value <= bound, "value {value} above its bound {bound}");
            assert!(bound <= value * 1.0001 + 1e-12 || row.0 > NOW, "bound {bound} loose for {value}");
        }
        assert_eq!(usage_key(None, &p), f64::INFINITY);
        let floorless = ValueParams { base_floor: 0.0, ..p };
        assert_eq!(usage_key(Some((NOW, 0.0, 0.0, 0.0)), &floorless), f64::NEG_INFINITY);
    }

    #[test]
    fn region_bounds_hold_for_every_member() {
        // Rows around four random directions (so regions are narrow enough to rule some out) and
        // random queries.
        let (dim, n) = (12, 600);
        let mut rng = Rng(0xcafe);
        let mut signed = |scale: f64| ((rng.unit() * 2.0 - 1.0) * scale) as f32;
        let dirs: Vec<f32> = (0..4 * dim).map(|_| signed(1.0)).collect();
        let rows: Vec<f32> = (0..n * dim).map(|i| dirs[(i / dim % 4) * dim + i % dim] + signed(0.3)).collect();
        let queries: Vec<f32> = (0..3 * dim).map(|_| signed(1.0)).collect();
        let norms = crate::scoring::row_norms(&rows, dim);
        let unit = |v: &[f32]| {
            let n = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt();
            v.iter().map(|&x| (f64::from(x) / n) as f32).collect::<Vec<f32>>()
        };
        let cosine = |a: &[f32], b: &[f32]| {
            let (a, b) = (unit(a), unit(b));
            a.iter().zip(&b).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum::<f64>()
        };
        // Four regions: each row goes to its nearest of the first four rows; the radius is the widest member.
        let centres: Vec<f32> = (0..4).flat_map(|c| unit(&rows[c * dim..(c + 1) * dim])).collect();
        let of_row: Vec<usize> = (0..n)
            .map(|r| {
                let row = &rows[r * dim..(r + 1) * dim];
                (0..4)
                    .max_by(|&a, &b| {
                        cosine(row, &centres[a * dim..(a + 1) * dim])
                            .total_cmp(&cosine(row, &centres[b * dim..(b + 1) * dim]))
                    })
                    .unwrap()
            })
            .collect();
        let mut radius = vec![0.0f64; 4];
        for (r, &c) in of_row.iter().enumerate() {
            let angle = cosine(&rows[r * dim..(r + 1) * dim], &centres[c * dim..(c + 1) * dim]).clamp(-1.0, 1.0).acos();
            radius[c] = radius[c].max(angle);
        }
        let ones = vec![1.0f32; 4];
        let stored = Stored::new(&centres, &ones, dim);
        let bounds = region_bounds(stored, &radius, &queries, 1e-6).unwrap();
        let rel = relevance(Stored::new(&rows, &norms, dim), &queries).unwrap();
        for (r, &c) in of_row.iter().enumerate() {
            assert!(
                f64::from(rel[r]) <= bounds[c],
                "row {r}: relevance {} above its region's bound {}",
                rel[r],
                bounds[c]
            );
        }
        assert!(bounds.iter().all(|&b| (0.0..=1.0).contains(&b)));
        assert!(bounds.iter().any(|&b| b < 1.0), "bounds this loose would never skip a region");
        let zeros = vec![0.0f32; 2 * dim];
        assert_eq!(region_bounds(stored, &radius, &zeros, 1e-6).unwrap(), vec![0.0; 4]);
        assert!(region_bounds(stored, &radius[..3], &queries, 1e-6).is_err());
    }

    #[test]
    fn log_space_test_agrees_with_the_value_bound() {
        let mut rng = Rng(0x5eed);
        let specials = [0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY];
        for i in 0..20_000 {
            let bound = if i % 97 == 0 { specials[i % 5] } else { rng.unit() };
            let key = if i % 89 == 0 { specials[i % 5] } else { 150.0 + 10.0 * rng.unit() + (rng.unit() - 0.5) };
            let offset = 150.0 + 10.0 * rng.unit();
            let cut = if i % 83 == 0 { specials[i % 5] } else { upper(bound, key, offset) * (0.9 + 0.2 * rng.unit()) };
            if key.is_nan() {
                continue; // usage keys are never NaN (`usage_key` turns them into +∞)
            }
            let want = upper(bound, key, offset) < cut;
            let got = below(ln_positive(bound), key, offset, ln_positive(cut));
            if got != want {
                let ratio = upper(bound, key, offset) / cut;
                assert!((ratio - 1.0).abs() < 1e-12, "bound {bound} key {key} offset {offset} cut {cut}");
            }
        }
    }

    #[test]
    fn order_is_by_key_descending() {
        let d = data(500, 4, 3);
        let p = ValueParams::default();
        let order = usage_order(d.meta(), &p).unwrap();
        assert_eq!(order.rows.len(), 500);
        assert!(order.keys.windows(2).all(|w| w[0] >= w[1]));
        for (&r, &k) in order.rows.iter().zip(&order.keys) {
            assert_eq!(k.to_bits(), usage_key(d.meta().row(r as usize), &p).to_bits());
        }
    }

    #[test]
    fn merged_order_equals_a_fresh_sort() {
        let d = data(800, 4, 9);
        let p = ValueParams::default();
        let mut old = d.meta().has_meta.to_vec();
        let mut rng = Rng(17);
        let stale: Vec<u32> = (0..300).map(|_| (rng.next() % 900) as u32).collect(); // repeats, some past the end
        for &r in &stale {
            if (r as usize) < 800 {
                old[r as usize] ^= 1;
            }
        }
        let before = usage_order(MetaColumns { has_meta: &old, ..d.meta() }, &p).unwrap();
        let merged = merge_usage_order(&before.rows, &before.keys, &stale, d.meta(), &p).unwrap();
        assert_eq!(merged, usage_order(d.meta(), &p).unwrap());
        // Rows removed since (the type shrank to 700) are dropped; rows added are merged in.
        let shrunk = MetaColumns {
            has_meta: &d.has_meta[..700],
            timestamp: &d.ts[..700],
            access_count: &d.acc[..700],
            reward_count: &d.rc[..700],
            cumulative_reward: &d.cr[..700],
        };
        let small = usage_order(shrunk, &p).unwrap();
        let added: Vec<u32> = (700..800).collect();
        let grown = merge_usage_order(&small.rows, &small.keys, &added, d.meta(), &p).unwrap();
        assert_eq!(grown, usage_order(d.meta(), &p).unwrap());
        assert_eq!(merge_usage_order(&before.rows, &before.keys, &[], shrunk, &p).unwrap().rows.len(), 700);
    }

    /// With the pool holding every row whose relevance exceeds `bound`, the walk equals the exact scan.
    #[test]
    fn walk_equals_exact_scan_when_the_bound_holds() {
        for (seed, gate) in (1..40u64).flat_map(|s| [(s, Gate::Score), (s, Gate::Relevance)]) {
            let d = data(700, 8, seed);
            let top_k = 1 + (seed as usize % 25);
            let threshold = match (gate, seed % 3) {
                (Gate::Relevance, 0) => 0.5,
                (Gate::Relevance, _) => 0.2,
                (Gate::Score, 0) => 0.05,
                (Gate::Score, _) => 0.001,
            };
            let req = d.gated(gate, threshold, top_k);
            let exact = scan_default(&req).unwrap();
            let rel = crate::scoring::relevance(req.stored, &d.queries).unwrap();
            let mut by_rel: Vec<usize> = (0..700).collect();
            by_rel.sort_by(|&a, &b| rel[b].total_cmp(&rel[a]));
            let pool_size = 20 + (seed as usize * 13) % 200;
            let pool: Vec<u32> = by_rel[..pool_size].iter().map(|&r| r as u32).collect();
            let bound = f64::from(rel[by_rel[pool_size]]) + 1e-6;
            // An order taken before some rows changed: those are passed as stale.
            let mut old = d.meta().has_meta.to_vec();
            let stale: Vec<u32> = (0..700u32).filter(|r| r % 11 == seed as u32 % 11).collect();
            for &r in &stale {
                old[r as usize] ^= 1;
            }
            let old_meta = MetaColumns { has_meta: &old, ..d.meta() };
            let order = usage_order(old_meta, &req.params).unwrap();
            // Regions: rows spread over seven by relevance band (every eighth row in none), each
            // bounded by the largest relevance among its rows, as a centre and radius would bound it.
            let of_row: Vec<u32> = (0..700).map(|r| if r % 8 == 0 { u32::MAX } else { (r * 7 / 700) as u32 }).collect();
            // Region 7 holds no row and bounds nothing above zero.
            let mut region_bound = vec![0.0f64; 8];
            for (r, &c) in by_rel.iter().map(|&r| (r, &of_row[r])) {
                if let Some(b) = region_bound.get_mut(c as usize) {
                    *b = b.max(f64::from(rel[r]) + 1e-6);
                }
            }
            // The regions in the order's positions, as a copy taken with the order would have them:
            // a row's own region or none, and for a stale row anything (here region 7, which would
            // rule it out: the walk must look at stale rows again).
            let in_order: Vec<u32> = order
                .rows
                .iter()
                .enumerate()
                .map(|(i, &r)| {
                    if stale.contains(&r) {
                        7
                    } else if i % 5 == 0 {
                        u32::MAX
                    } else {
                        of_row[r as usize]
                    }
                })
                .collect();
            let plain = Regions { of_row: &of_row, bound: &region_bound, in_order: None };
            let ordered = Regions { in_order: Some(&in_order), ..plain };
            // A shadow with every ninth row stale (its residual infinite, its f16 copy garbage).
            let (mut half, mut residual) = crate::shadow::encode_rows(&d.data, d.dim);
            for r in (0..700).step_by(9) {
                residual[r] = f32::INFINITY;
                half[r * d.dim..(r + 1) * d.dim].fill(0x3c00);
            }
            let shadow = Shadow { data: &half, residual: &residual, dim: d.dim };
            for regions in [None, Some(plain), Some(ordered)] {
                for shadow in [None, Some(shadow)] {
                    let walked = walk(&WalkRequest {
                        scan: req,
                        pool: &pool,
                        bound,
                        outside_score: f64::INFINITY,
                        order: &order.rows,
                        order_keys: &order.keys,
                        stale: &stale,
                        budget: usize::MAX,
                        regions,
                        shadow,
                        pool_bounds: None,
                    })
                    .unwrap()
                    .unwrap();
                    let read = if shadow.is_some() { "through the shadow" } else { "in f32" };
                    assert_eq!(walked, exact, "seed {seed}, {gate:?}, regions: {regions:?}, {read}");
                }
            }
        }
    }

    #[test]
    fn relevance_gate_keeps_relevant_rows_whatever_their_usage() {
        // Every row is relevant enough but scores far below the threshold (old, never used).
        let d = data(200, 4, 21);
        let mut old = d.ts.clone();
        old.iter_mut().for_each(|t| *t = NOW - 3600.0 * 24.0 * 365.0);
        let meta = MetaColumns { timestamp: &old, has_meta: &[1; 200], ..d.meta() };
        let queries: Vec<f32> = d.data[..4].to_vec();
        let req = ScanRequest { meta, queries: &queries, ..d.gated(Gate::Score, 0.8, 10) };
        assert!(scan_default(&req).unwrap().is_empty());
        let gated = ScanRequest { gate: Gate::Relevance, ..req };
        let got = scan_default(&gated).unwrap();
        assert!(!got.is_empty() && got.iter().all(|&(_, s)| s < 0.8));
        let rel = crate::scoring::relevance(gated.stored, &queries).unwrap();
        assert!(got.iter().all(|&(r, _)| f64::from(rel[r]) >= 0.8));
        let order = usage_order(meta, &gated.params).unwrap();
        let pool: Vec<u32> = (0..200).filter(|&r| rel[r as usize] >= 0.5).collect();
        let w = pool_walk(gated, &pool, 0.5, f64::INFINITY, &order);
        // A bound under the threshold: nothing outside the pool can pass, so no budget is spent.
        assert_eq!(walk(&w).unwrap().unwrap(), got);
    }

    #[test]
    fn walk_gives_up_past_its_budget_and_handles_empty_input() {
        let d = data(300, 4, 5);
        let req = d.scan(0.0, 10);
        let order = usage_order(d.meta(), &req.params).unwrap();
        let w = WalkRequest { budget: 5, ..pool_walk(req, &[], 1.0, f64::INFINITY, &order) };
        assert_eq!(walk(&w).unwrap(), None);
        let none = WalkRequest { scan: d.scan(0.0, 0), ..w };
        assert_eq!(walk(&none).unwrap(), Some(Vec::new()));
        let bad = WalkRequest { order_keys: &order.keys[1..], ..w };
        assert!(walk(&bad).is_err());
        // Rows past the end (removed since) are skipped, never read.
        let far = [10_000u32, 2];
        let w = WalkRequest { pool: &far, stale: &far, budget: usize::MAX, ..w };
        assert!(walk(&w).unwrap().is_some());
    }

    #[test]
    fn a_score_bound_below_the_kth_score_makes_the_pool_the_answer() {
        let d = data(400, 4, 17);
        let req = d.scan(0.0, 10);
        let exact = scan_default(&req).unwrap();
        let kth = exact[9].1;
        let order = usage_order(d.meta(), &req.params).unwrap();
        // The pool: the exact top 10 and a few rows that score less, as a weighted search returns.
        let pool: Vec<u32> = exact.iter().map(|&(r, _)| r as u32).chain([0, 1, 2]).collect();
        let w = pool_walk(req, &pool, 1.0, kth - 1e-9, &order);
        assert_eq!(walk(&w).unwrap().unwrap(), exact);
        // A bound at or above the k-th score proves nothing: the walk must go on (here: past its budget).
        let open = WalkRequest { outside_score: kth, ..w };
        assert_eq!(walk(&open).unwrap(), None);
    }

    /// A walk of `pool` under `bound` and `outside_score` with no budget, regions, shadow,
    /// stale rows or pool bounds: what a test then changes, it sets with `..`.
    fn pool_walk<'a>(
        scan: ScanRequest<'a>,
        pool: &'a [u32],
        bound: f64,
        outside_score: f64,
        order: &'a UsageOrder,
    ) -> WalkRequest<'a> {
        WalkRequest {
            scan,
            pool,
            bound,
            outside_score,
            order: &order.rows,
            order_keys: &order.keys,
            stale: &[],
            budget: 0,
            regions: None,
            shadow: None,
            pool_bounds: None,
        }
    }

    /// An f16 graph over every row of `d` (labels are rows).
    fn graph(d: &Data, dim: usize, seed: u64) -> crate::hnsw::Index {
        let config = crate::hnsw::Config { m: 16, ef_construction: 100, seed, codes: crate::hnsw::Codes::F16 };
        let index = crate::hnsw::Index::new(dim, config, &d.data[..300 * dim]).unwrap();
        index.add(0, &d.data, 0).unwrap();
        index
    }

    /// Each pool row's bound is at least its exact score (of the `n` rows `req` scans).
    fn bounds_hold(pool: &ValuedPool, req: ScanRequest<'_>, n: usize) {
        assert_eq!(pool.bounds.len(), pool.rows.len());
        let all = crate::scoring::scan_default(&ScanRequest { top_k: n, threshold: f64::NEG_INFINITY, ..req });
        for (r, s) in all.unwrap() {
            if let Ok(i) = pool.rows.binary_search(&(r as u32)) {
                assert!(s <= pool.bounds[i], "row {r}: score {s} above its bound {}", pool.bounds[i]);
            }
        }
    }

    #[test]
    fn a_value_weighted_pool_answers_as_the_exact_scan() {
        let (n, dim) = (3000, 16);
        let d = data(n, dim, 41);
        let index = graph(&d, dim, 3);
        // Labels are rows, except that the last label stands for no row.
        let mut row_of_label: Vec<i64> = (0..n as i64).collect();
        row_of_label[n - 1] = -1;
        let req = d.scan(0.0, 10);
        let order = usage_order(d.meta(), &req.params).unwrap();
        // One query vector, then three (a query with two tags).
        for vectors in [1, 3] {
            let mut agreed = 0;
            for q in d.data[..20 * vectors * dim].chunks_exact(vectors * dim) {
                let req = ScanRequest { queries: q, ..req };
                let pool = valued_pool(
                    &index,
                    q,
                    64,
                    1.0,
                    index.max_error(),
                    &row_of_label,
                    n - 1,
                    d.meta(),
                    None,
                    NOW,
                    &req.params,
                )
                .unwrap();
                assert!(!pool.rows.contains(&(n as u32 - 1)) && pool.rows.windows(2).all(|w| w[0] < w[1]));
                assert!(pool.outside_score.is_finite() && pool.top > 0.5, "{} {}", pool.outside_score, pool.top);
                let w = pool_walk(req, &pool.rows, 1.0, pool.outside_score, &order);
                // Every row's bound holds its exact score, and a walk that reads the pool by its bounds
                // (skipping rows that cannot reach the k-th score) answers as the plain walk does.
                bounds_hold(&pool, req, n);
                let by_bounds = WalkRequest { pool_bounds: Some(&pool.bounds), ..w };
                assert_eq!(walk(&by_bounds).unwrap(), walk(&w).unwrap());
                if let Some(got) = walk(&w).unwrap() {
                    let mut exact = scan_default(&req).unwrap();
                    exact.retain(|&(r, _)| r != n - 1 || got.iter().any(|g| g.0 == r));
                    assert_eq!(got[..], exact[..got.len().min(exact.len())], "{vectors} query vectors");
                    agreed += 1;
                }
            }
            assert!(agreed >= 18, "{vectors} query vectors: {agreed} of 20 answered from the pool");
        }
    }

    #[test]
    fn values_within_a_hundredth_search_by_similarity_and_answer_as_the_exact_scan() {
        let (n, dim) = (3000, 16);
        let mut d = data(n, dim, 53);
        // Every row written an hour ago and used alike, except that a tenth were used a little
        // less: their factors lie within a hundredth of the largest.
        d.has_meta.fill(1);
        d.ts.fill(NOW - 3600.0);
        d.acc.fill(3.0);
        d.rc.fill(0.0);
        d.cr.fill(0.0);
        for r in (0..n).step_by(10) {
            d.ts[r] = NOW - 13.0 * 3600.0;
        }
        let index = graph(&d, dim, 9);
        // The last label stands for no row: the similarity search may meet it, the pool never holds it.
        let mut row_of_label: Vec<i64> = (0..n as i64).collect();
        row_of_label[n - 1] = -1;
        let req = d.scan(0.0, 10);
        let order = usage_order(d.meta(), &req.params).unwrap();
        let mut by_row = vec![0.0; n];
        for (&r, &k) in order.rows.iter().zip(&order.keys) {
            by_row[r as usize] = k;
        }
        let shift = req.params.lambda * NOW / 3600.0;
        let most = ((order.keys[0] - shift).min(0.0).exp() as f32).clamp(0.0, 1.0);
        let least = *order.keys.last().unwrap();
        assert!(((least - shift).exp() as f32) >= UNIFORM_SHARE * most && least < order.keys[0]);
        let keys = RowKeys { by_row: &by_row, stale: &[], most, least };
        let mut answered = 0;
        for q in d.data[..20 * dim].chunks_exact(dim) {
            let req = ScanRequest { queries: q, ..req };
            let pool = valued_pool(
                &index,
                q,
                48,
                0.0,
                index.max_error(),
                &row_of_label,
                n - 1,
                d.meta(),
                Some(keys),
                NOW,
                &req.params,
            )
            .unwrap();
            // The pool is the similarity search's, less the id that stands for no row.
            let mut near: Vec<u32> =
                index.search(q, 48, 48).unwrap().into_iter().map(|x| x.0).filter(|&l| l as usize != n - 1).collect();
            near.sort_unstable();
            assert_eq!(pool.rows, near);
            bounds_hold(&pool, req, n);
            let w = WalkRequest {
                pool_bounds: Some(&pool.bounds),
                ..pool_walk(req, &pool.rows, 1.0, pool.outside_score, &order)
            };
            if let Some(got) = walk(&w).unwrap() {
                let mut exact = scan_default(&req).unwrap();
                exact.retain(|&(r, _)| r != n - 1 || got.iter().any(|g| g.0 == r));
                assert_eq!(got[..], exact[..got.len().min(exact.len())]);
                answered += 1;
            }
        }
        assert!(answered >= 18, "{answered} of 20 answered from the pool");
    }

    #[test]
    fn the_one_step_valued_walk_answers_as_its_two_steps() {
        let (n, dim) = (3000, 16);
        let d = data(n, dim, 47);
        let index = graph(&d, dim, 7);
        let row_of_label: Vec<i64> = (0..n as i64).collect();
        let req = d.scan(0.0, 10);
        let order = usage_order(d.meta(), &req.params).unwrap();
        // Rows 5 and 17 stand for rows written since the graph was built: the caller's pool.
        let pending: Vec<u32> = vec![5, 17];
        let mut answered = 0;
        for q in d.data[..20 * dim].chunks_exact(dim) {
            let req = ScanRequest { queries: q, ..req };
            let search = ValuedSearch {
                index: &index,
                ef: 32,
                ceiling: 0.0,
                error: index.max_error(),
                row_of_label: &row_of_label,
                live: n,
                keys: None,
                floor: -1.0,
            };
            let base = WalkRequest { pool: &pending, ..pool_walk(req, &[], 1.0, f64::INFINITY, &order) };
            let got = valued_walk(&search, &base).unwrap();
            let pool =
                valued_pool(&index, q, 32, 0.0, index.max_error(), &row_of_label, n, d.meta(), None, NOW, &req.params)
                    .unwrap();
            assert_eq!(got.top, pool.top);
            let mut rows = pool.rows.clone();
            rows.extend_from_slice(&pending);
            let mut bounds = pool.bounds.clone();
            bounds.resize(rows.len(), f64::INFINITY);
            let two =
                WalkRequest { pool_bounds: Some(&bounds), ..pool_walk(req, &rows, 1.0, pool.outside_score, &order) };
            assert_eq!(got.hits, walk(&two).unwrap());
            answered += usize::from(got.hits.is_some());
            // Above every similarity, the floor sends the query to the exact scan without a walk.
            let high = valued_walk(&ValuedSearch { floor: 2.0, ..search }, &base).unwrap();
            assert_eq!((high.top, high.hits), (got.top, None));
        }
        assert!(answered >= 18, "{answered} of 20 answered from the pool");
    }

    #[test]
    fn the_one_step_similarity_walk_answers_as_its_rounds() {
        let (n, dim) = (3000, 16);
        let d = data(n, dim, 61);
        let index = graph(&d, dim, 11);
        // The last id stands for no row; rows 5 and 17 stand for rows the graph does not hold yet.
        let mut row_of_label: Vec<i64> = (0..n as i64).collect();
        row_of_label[n - 1] = -1;
        let pending: Vec<u32> = vec![5, 17];
        let req = d.scan(0.0, 10);
        let order = usage_order(d.meta(), &req.params).unwrap();
        let error = index.max_error();
        let mut answered = 0;
        for (i, q) in d.data[..40 * dim].chunks_exact(2 * dim).enumerate() {
            // Half the queries with a second vector (a tag), half alone.
            let q = if i % 2 == 0 { &q[..dim] } else { q };
            let req = ScanRequest { queries: q, ..req };
            let search = SimilaritySearch {
                index: &index,
                ef: 16,
                first: 8,
                error,
                row_of_label: &row_of_label,
                live: n,
                floor: -1.0,
            };
            let base = WalkRequest { pool: &pending, ..pool_walk(req, &[], 1.0, f64::INFINITY, &order) };
            let got = similarity_walk(&search, &base).unwrap();
            // The rounds by hand: the first one's pool, bound and walk.
            let found = index.search_many(q, 8, 16).unwrap();
            let top = found.iter().map(|f| f[0].1).fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(got.top, top);
            let mut rows: Vec<u32> =
                found.iter().flatten().map(|x| u32::try_from(row_of_label[x.0 as usize]).unwrap_or(u32::MAX)).collect();
            rows.extend_from_slice(&pending);
            let last = found.iter().map(|f| f64::from(f[7].1)).fold(f64::NEG_INFINITY, f64::max);
            let bound = (last + f64::from(error)).max(0.0) + 1e-6;
            let first = WalkRequest { budget: n / 8, ..pool_walk(req, &rows, bound, f64::INFINITY, &order) };
            if let Some(hits) = walk(&first).unwrap() {
                assert_eq!(got.hits.as_ref(), Some(&hits));
            }
            if let Some(hits) = &got.hits {
                // Certified: the exact scan's answer (the row no id stands for is still a row).
                assert_eq!(hits[..], scan_default(&req).unwrap()[..hits.len()]);
                answered += 1;
            }
            // Above every similarity, the floor sends the query to the exact scan without a walk.
            let high = similarity_walk(&SimilaritySearch { floor: 2.0, ..search }, &base).unwrap();
            assert_eq!((high.top, high.hits), (top, None));
            // A graph with fewer live ids than a round asks for cannot bound the rest.
            let empty = similarity_walk(&SimilaritySearch { live: 0, ..search }, &base).unwrap();
            assert!(empty.hits.is_none());
        }
        assert!(answered >= 18, "{answered} of 20 answered from the pool");
    }

    #[test]
    fn keyed_rows_weigh_the_search_as_the_columns_do() {
        let (n, dim) = (2000, 16);
        let mut d = data(n, dim, 43);
        // Keys give exact factors for timestamps up to `now` (later ones: an upper bound).
        for t in &mut d.ts {
            *t = t.min(NOW);
        }
        let index = graph(&d, dim, 5);
        let row_of_label: Vec<i64> = (0..n as i64).collect();
        let params = d.scan(0.0, 10).params;
        let order = usage_order(d.meta(), &params).unwrap();
        let mut by_row = vec![0.0; n];
        for (&r, &k) in order.rows.iter().zip(&order.keys) {
            by_row[r as usize] = k;
        }
        // Keys that are wrong (too low) for rows listed as stale must not be read; the last rows
        // have no key at all (added since).
        let stale: Vec<u32> = (0..n as u32).step_by(7).collect();
        for &r in &stale {
            by_row[r as usize] = f64::NEG_INFINITY;
        }
        // `most` covers only the rows the keys hold current; the search adds the others' factors.
        let shift = params.lambda * NOW / 3600.0;
        let most = by_row[..n - 50].iter().map(|&k| (k - shift).min(0.0).exp() as f32).fold(0.0, f32::max);
        let keys = RowKeys { by_row: &by_row[..n - 50], stale: &stale, most, least: f64::NEG_INFINITY };
        for q in d.data[..20 * dim].chunks_exact(dim) {
            let pool = |k| {
                valued_pool(&index, q, 48, 0.0, index.max_error(), &row_of_label, n, d.meta(), k, NOW, &params).unwrap()
            };
            let (plain, keyed) = (pool(None), pool(Some(keys)));
            assert_eq!(plain.rows, keyed.rows);
            // The same bound, or a tighter one when no row's factor reaches one.
            assert!(keyed.outside_score <= plain.outside_score + 1e-9);
            assert!(keyed.outside_score >= plain.outside_score - f64::from(index.max_error()) - 1e-9);
        }
    }
}
