//! The vector index of the core: an HNSW graph over compressed codes.
//!
//! The graph holds no f32 vectors. Each node keeps its unit vector as codes
//! ([`Codes`]: half floats, half the f32 bytes, or `i8` on a per-dimension
//! scale, a quarter) and the *residual* `‖u − decode(codes)‖`, rounded up:
//! for a unit query `q`,
//! `|q·u − q·decode(codes)| ≤ residual` (Cauchy–Schwarz), so a similarity the
//! graph reports is within [`Index::max_error`] of the exact cosine. The
//! caller rescoring candidates exactly from its own rows (the scoring
//! columns) is what keeps one copy of the vectors per host: the codes and the
//! level-0 links of a saved index are read from a copy-on-write mapping of its
//! file, which every process opening it shares until it writes a page.
//!
//! Ids are dense (`0..len`), handed out in insertion order; deletion is a mark
//! (a deleted node still routes searches and is never returned). Searches and
//! inserts run concurrently on shared references: a neighbour list is written
//! under its node's lock and read without one (each entry is an atomic).

use crate::digest;
use crate::scoring::UnitQueries;
use rayon::prelude::*;
use std::cell::RefCell;
use std::cmp::{Ordering as CmpOrdering, Reverse};
use std::collections::BinaryHeap;
use std::fmt;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

/// How a node's unit vector is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codes {
    /// IEEE half floats: residuals near 1e-4, so a similarity the graph reports is nearly exact
    /// and a pool's bound on the rows outside it is tight (a shallow search certifies).
    F16,
    /// One byte per value on a per-dimension scale: half the bytes of `F16`, residuals near 1e-2.
    I8,
}

impl Codes {
    /// Bytes per value.
    pub fn width(self) -> usize {
        match self {
            Codes::F16 => 2,
            Codes::I8 => 1,
        }
    }

    fn magic(self) -> &'static [u8; 8] {
        match self {
            Codes::F16 => b"HGHNSW02",
            Codes::I8 => b"HGHNSW01",
        }
    }
}

/// How a graph is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Links per node above level 0 (twice as many at level 0).
    pub m: usize,
    /// Beam width while inserting.
    pub ef_construction: usize,
    /// Seed of the level draw (a node's level is a hash of its id and this).
    pub seed: u64,
    /// How each node's vector is kept.
    pub codes: Codes,
}

/// Why a call on an index failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexError {
    /// A vector or query of the wrong length, or an id out of order or range.
    Shape(String),
    /// A parameter out of range.
    Config(String),
    /// A saved file that is not an index this code wrote, or not the one expected.
    Corrupt(String),
    /// The file could not be read or written.
    Io(String),
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexError::Shape(m) | IndexError::Config(m) | IndexError::Corrupt(m) | IndexError::Io(m) => f.write_str(m),
        }
    }
}

const MAX_LEVEL: usize = 15;
const EXTRA_SEGMENT: usize = 1 << 14;
const HEADER: usize = 64;
/// Bytes of a node's codes fetched ahead while its neighbours' list is read (the hardware brings
/// the next lines itself once a row is streamed).
const PREFETCH_BYTES: usize = 128;
/// Float rounding of a code similarity (summed in f32 over at most a few thousand terms of
/// magnitude at most one), added to the largest residual.
const ROUNDING: f32 = 1e-5;

/// One slot's state besides its codes and level-0 links.
struct Meta {
    level: u8,
    deleted: AtomicBool,
    residual: AtomicU32,
    lock: Mutex<()>,
    upper: OnceLock<Box<[AtomicU32]>>,
    /// How many level-0 lists name this node: at zero no search can reach it.
    named: AtomicU32,
}

impl Meta {
    fn new(level: u8) -> Self {
        Meta {
            level,
            deleted: AtomicBool::new(false),
            residual: AtomicU32::new(0),
            lock: Mutex::new(()),
            upper: OnceLock::new(),
            named: AtomicU32::new(0),
        }
    }
}

enum Backing {
    Anon(#[allow(dead_code)] memmap2::MmapMut),
    Owned { _codes: Box<[u8]>, _links: Box<[AtomicU32]> },
    Mapped(#[allow(dead_code)] Arc<memmap2::MmapMut>),
}

/// A run of `cap` consecutive ids: their codes, level-0 links and states.
struct Segment {
    codes: *mut u8,
    links: *const AtomicU32,
    cap: usize,
    meta: Box<[OnceLock<Meta>]>,
    /// One bit per slot, set while it holds no node yet or a deleted one (never returned): what a
    /// search asks of every node it visits, in a few kilobytes that stay in cache where each
    /// `Meta` would cost a miss.
    gone: Box<[AtomicU64]>,
    _backing: Backing,
}

// SAFETY: the raw pointers point into `_backing`, which the segment owns and never moves; a
// node's codes are written once, by the thread inserting it, before any other thread can
// learn its id (through a link stored with Release), and links are atomics.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

impl Segment {
    fn owned(cap: usize, row_bytes: usize, m0: usize) -> Self {
        let codes_len = cap * row_bytes;
        let links_at = codes_len.next_multiple_of(64);
        let total = links_at + cap * (m0 + 1) * std::mem::size_of::<AtomicU32>();
        // Anonymous memory asked for in huge pages: a search reaches a few thousand nodes at random
        // places of tens of megabytes of codes and links, and with 4 KiB pages nearly each one
        // costs a page-table walk. Zeroed memory holds valid atomics. Where the map cannot be
        // had, the heap serves as before.
        let (codes, links, backing) = match memmap2::MmapOptions::new().len(total.max(1)).map_anon() {
            Ok(mut map) => {
                #[cfg(target_os = "linux")]
                let _ = map.advise(memmap2::Advice::HugePage);
                let base = map.as_mut_ptr();
                // SAFETY: `links_at` plus the links lie within the map's `total` bytes, and
                // `links_at` is a multiple of 64 from a page-aligned base, so the atomics are aligned.
                let links = unsafe { base.add(links_at) }.cast::<AtomicU32>().cast_const();
                (base, links, Backing::Anon(map))
            }
            Err(_) => {
                let mut codes = vec![0u8; codes_len].into_boxed_slice();
                let links: Box<[AtomicU32]> = (0..cap * (m0 + 1)).map(|_| AtomicU32::new(0)).collect();
                (codes.as_mut_ptr(), links.as_ptr(), Backing::Owned { _codes: codes, _links: links })
            }
        };
        Segment {
            codes,
            links,
            cap,
            meta: (0..cap).map(|_| OnceLock::new()).collect(),
            gone: (0..cap.div_ceil(64)).map(|_| AtomicU64::new(u64::MAX)).collect(),
            _backing: backing,
        }
    }

    /// Whether slot `at` holds no node or a deleted one.
    #[inline]
    fn gone(&self, at: usize) -> bool {
        self.gone[at / 64].load(Ordering::Acquire) >> (at % 64) & 1 == 1
    }

    /// Marks slot `at` as holding a live node (`true`) or not.
    fn set_live(&self, at: usize, live: bool) {
        let bit = 1u64 << (at % 64);
        if live {
            self.gone[at / 64].fetch_and(!bit, Ordering::Release);
        } else {
            self.gone[at / 64].fetch_or(bit, Ordering::Release);
        }
    }
}

/// A query form's dot product with a node's codes (their bytes).
type Kernel = fn(&[f32], &[u8]) -> f32;

/// The bytes of `i8` codes as the codes.
#[inline(always)]
fn as_i8(c: &[u8]) -> &[i8] {
    // SAFETY: i8 and u8 have the same size and alignment.
    unsafe { std::slice::from_raw_parts(c.as_ptr().cast::<i8>(), c.len()) }
}

#[inline(always)]
fn half_at(c: &[u8], i: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([c[2 * i], c[2 * i + 1]])).to_f32()
}

#[inline(always)]
fn dot_i8_body(q: &[f32], c: &[i8]) -> f32 {
    const W: usize = 16;
    let n = q.len().min(c.len());
    let full = n - n % W;
    let mut acc = [0f32; W];
    for (qc, cc) in q[..full].chunks_exact(W).zip(c[..full].chunks_exact(W)) {
        for j in 0..W {
            acc[j] += qc[j] * f32::from(cc[j]);
        }
    }
    let mut s: f32 = acc.iter().sum();
    for i in full..n {
        s += q[i] * f32::from(c[i]);
    }
    s
}

fn dot_f16_body(q: &[f32], c: &[u8]) -> f32 {
    const W: usize = 8;
    let n = q.len().min(c.len() / 2);
    let full = n - n % W;
    let mut acc = [0f32; W];
    for base in (0..full).step_by(W) {
        for j in 0..W {
            acc[j] += q[base + j] * half_at(c, base + j);
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (i, x) in q.iter().enumerate().take(n).skip(full) {
        s += x * half_at(c, i);
    }
    s
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_i8_avx2(q: &[f32], c: &[i8]) -> f32 {
    use std::arch::x86_64::*;
    let n = q.len().min(c.len());
    let full = n - n % 16;
    let (qp, cp) = (q.as_ptr(), c.as_ptr());
    let mut a0 = _mm256_setzero_ps();
    let mut a1 = _mm256_setzero_ps();
    let mut i = 0;
    while i < full {
        // SAFETY: i + 16 <= full <= n, within both slices.
        let bytes = _mm_loadu_si128(cp.add(i).cast());
        let lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
        let hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(bytes, 8)));
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(i)), lo, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(i + 8)), hi, a1);
        i += 16;
    }
    let mut total = crate::simd::hsum(_mm256_add_ps(a0, a1));
    for j in full..n {
        total += q[j] * f32::from(c[j]);
    }
    total
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f16_avx2(q: &[f32], c: &[u8]) -> f32 {
    use std::arch::x86_64::*;
    let n = q.len().min(c.len() / 2);
    let (qp, cp) = (q.as_ptr(), c.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    // Four independent sums keep the FMA units busy; then eight lanes at a time.
    while i + 32 <= n {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: i + 32 <= n: 64 bytes of codes and 32 floats from `i` lie within the slices.
            let codes = _mm256_cvtph_ps(_mm_loadu_si128(cp.add(2 * (i + 8 * k)).cast()));
            *a = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(i + 8 * k)), codes, *a);
        }
        i += 32;
    }
    while i + 8 <= n {
        // SAFETY: i + 8 <= n: 16 bytes of codes and 8 floats from `i` lie within the slices.
        let codes = _mm256_cvtph_ps(_mm_loadu_si128(cp.add(2 * i).cast()));
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(i)), codes, acc[0]);
        i += 8;
    }
    let full = i;
    let mut total = crate::simd::hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (j, x) in q.iter().enumerate().take(n).skip(full) {
        total += x * half_at(c, j);
    }
    total
}

/// As [`dot_f16_avx2`], sixteen lanes at a time: a search's time is mostly these dot products,
/// and a 384-dimensional code takes half the conversions and multiplies.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn dot_f16_avx512(q: &[f32], c: &[u8]) -> f32 {
    use std::arch::x86_64::*;
    let n = q.len().min(c.len() / 2);
    let (qp, cp) = (q.as_ptr(), c.as_ptr());
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut i = 0;
    while i + 64 <= n {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: i + 64 <= n: 128 bytes of codes and 64 floats from `i` lie within the slices.
            let codes = _mm512_cvtph_ps(_mm256_loadu_si256(cp.add(2 * (i + 16 * k)).cast()));
            *a = _mm512_fmadd_ps(_mm512_loadu_ps(qp.add(i + 16 * k)), codes, *a);
        }
        i += 64;
    }
    while i + 16 <= n {
        // SAFETY: i + 16 <= n: 32 bytes of codes and 16 floats from `i` lie within the slices.
        let codes = _mm512_cvtph_ps(_mm256_loadu_si256(cp.add(2 * i).cast()));
        acc[0] = _mm512_fmadd_ps(_mm512_loadu_ps(qp.add(i)), codes, acc[0]);
        i += 16;
    }
    let full = i;
    let mut total = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
    for (j, x) in q.iter().enumerate().take(n).skip(full) {
        total += x * half_at(c, j);
    }
    total
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn decode_f16_f16c(c: &[u8], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = out.len().min(c.len() / 2);
    let full = n - n % 8;
    let (cp, op) = (c.as_ptr(), out.as_mut_ptr());
    let mut i = 0;
    while i < full {
        // SAFETY: i + 8 <= full <= n: 16 bytes of codes and 8 floats lie within the slices.
        _mm256_storeu_ps(op.add(i), _mm256_cvtph_ps(_mm_loadu_si128(cp.add(2 * i).cast())));
        i += 8;
    }
    for (j, o) in out.iter_mut().enumerate().take(n).skip(full) {
        *o = half_at(c, j);
    }
}

/// Appends the `n` half floats of `c` as f32 (F16C when the CPU has it: a build decodes a node
/// per neighbour it weighs).
fn decode_f16(c: &[u8], n: usize, out: &mut Vec<f32>) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") && std::arch::is_x86_feature_detected!("f16c") {
        let start = out.len();
        out.resize(start + n, 0.0);
        // SAFETY: the CPU has AVX and F16C (checked just above).
        unsafe { decode_f16_f16c(c, &mut out[start..]) };
        return;
    }
    out.extend((0..n).map(|i| half_at(c, i)));
}

fn dot_i8_portable(q: &[f32], c: &[u8]) -> f32 {
    dot_i8_body(q, as_i8(c))
}

#[cfg(target_arch = "x86_64")]
fn dot_i8_avx2_safe(q: &[f32], c: &[u8]) -> f32 {
    // SAFETY: only chosen by `kernel` when the CPU has AVX2 and FMA.
    unsafe { dot_i8_avx2(q, as_i8(c)) }
}

#[cfg(target_arch = "x86_64")]
fn dot_f16_avx512_safe(q: &[f32], c: &[u8]) -> f32 {
    // SAFETY: only chosen by `kernel` when the CPU has AVX-512F.
    unsafe { dot_f16_avx512(q, c) }
}

#[cfg(target_arch = "x86_64")]
fn dot_f16_avx2_safe(q: &[f32], c: &[u8]) -> f32 {
    // SAFETY: only chosen by `kernel` when the CPU has AVX2, FMA and F16C.
    unsafe { dot_f16_avx2(q, c) }
}

fn kernel(codes: Codes) -> Kernel {
    #[cfg(target_arch = "x86_64")]
    {
        let simd = std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma");
        match codes {
            Codes::I8 if simd => return dot_i8_avx2_safe,
            Codes::F16 if std::arch::is_x86_feature_detected!("avx512f") => return dot_f16_avx512_safe,
            Codes::F16 if simd && std::arch::is_x86_feature_detected!("f16c") => return dot_f16_avx2_safe,
            _ => {}
        }
    }
    match codes {
        Codes::I8 => dot_i8_portable,
        Codes::F16 => dot_f16_body,
    }
}

#[derive(Clone, Copy, PartialEq)]
struct Near(f32, u32);
impl Eq for Near {}
impl PartialOrd for Near {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Near {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        self.0.total_cmp(&other.0).then_with(|| other.1.cmp(&self.1))
    }
}

struct Visited {
    marks: Vec<u32>,
    stamp: u32,
}

impl Visited {
    fn reset(&mut self, n: usize) {
        if self.marks.len() < n {
            self.marks.resize(n, 0);
        }
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.marks.iter_mut().for_each(|m| *m = 0);
            self.stamp = 1;
        }
    }
    /// Asks for `id`'s mark ahead of `first`.
    #[inline]
    fn prefetch(&self, id: u32) {
        if let Some(slot) = self.marks.get(id as usize) {
            crate::scoring::prefetch([std::ptr::from_ref(slot).cast::<i8>()]);
        }
    }
    /// True the first time `id` is seen since the last reset.
    #[inline]
    fn first(&mut self, id: u32) -> bool {
        let slot = &mut self.marks[id as usize];
        if *slot == self.stamp {
            return false;
        }
        *slot = self.stamp;
        true
    }
}

thread_local! {
    static VISITED: RefCell<Visited> = const { RefCell::new(Visited { marks: Vec::new(), stamp: 0 }) };
}

struct Graph {
    segments: Vec<Segment>,
}

/// The mutable state a write lock guards: where the entry point is.
struct Entry {
    node: u32,
    level: usize,
}

/// An HNSW graph over compressed codes of unit vectors.
pub struct Index {
    dim: usize,
    /// Bytes of one node's codes.
    row_bytes: usize,
    config: Config,
    m0: usize,
    scale: Vec<f32>,
    /// `scale²`: a stored node's codes times this are its query form.
    scale2: Vec<f32>,
    kernel: Kernel,
    graph: RwLock<Graph>,
    entry: Mutex<Option<Entry>>,
    len: AtomicU32,
    /// Every id below this one is inserted (its codes and residual final); ids from here to `len`
    /// belong to an `add` still running.
    ready: AtomicU32,
    max_residual: AtomicU32,
    /// The last [`Index::error_split`], carried forward over the ids added since.
    split: Mutex<Option<Split>>,
    reserve: Mutex<()>,
    adding: Mutex<()>,
    /// Ids that level-0 lists stopped naming since the last `relink_orphans`.
    cut: Mutex<Vec<u32>>,
}

/// An error split over the ids below `upto`: none outside `above` has a residual beyond `cut`.
struct Split {
    most: usize,
    upto: u32,
    cut: f32,
    above: Vec<u32>,
}

fn unit(v: &[f32]) -> Vec<f32> {
    let norm = v.iter().map(|x| f64::from(*x) * f64::from(*x)).sum::<f64>().sqrt();
    if norm > 0.0 && norm.is_finite() {
        v.iter().map(|x| (f64::from(*x) / norm) as f32).collect()
    } else {
        vec![0.0; v.len()]
    }
}

/// Per-dimension scales from sample unit vectors: the largest magnitude seen maps to 127 (never
/// below what four standard deviations of a random unit vector need, so a short sample does not
/// clamp later vectors much; a clamped value only widens that row's residual).
fn scales_for(sample: &[f32], dim: usize) -> Vec<f32> {
    let floor = 4.0 / (dim.max(1) as f32).sqrt();
    let mut top = vec![floor; dim];
    for row in sample.chunks_exact(dim.max(1)) {
        let u = unit(row);
        for (t, x) in top.iter_mut().zip(&u) {
            *t = t.max(x.abs());
        }
    }
    top.iter().map(|t| t.min(1.0) / 127.0).collect()
}

impl Index {
    /// An empty index of dimension `dim`; `sample` (rows of `dim` floats, possibly none) sets the
    /// code scales.
    pub fn new(dim: usize, config: Config, sample: &[f32]) -> Result<Self, IndexError> {
        if dim == 0 || dim > 1 << 16 {
            return Err(IndexError::Config(format!("dimension {dim} is not from 1 to 65536")));
        }
        if !(2..=2048).contains(&config.m) || config.ef_construction == 0 {
            return Err(IndexError::Config(format!(
                "M must be from 2 to 2048 and ef_construction at least 1, got {} and {}",
                config.m, config.ef_construction
            )));
        }
        let scale = match config.codes {
            Codes::I8 => scales_for(sample, dim),
            Codes::F16 => vec![1.0; dim],
        };
        Ok(Self::with_scale(dim, config, scale, Vec::new()))
    }

    fn with_scale(dim: usize, config: Config, scale: Vec<f32>, segments: Vec<Segment>) -> Self {
        let scale2 = scale.iter().map(|s| s * s).collect();
        Index {
            dim,
            row_bytes: dim * config.codes.width(),
            config,
            m0: 2 * config.m,
            scale,
            scale2,
            kernel: kernel(config.codes),
            graph: RwLock::new(Graph { segments }),
            entry: Mutex::new(None),
            len: AtomicU32::new(0),
            ready: AtomicU32::new(0),
            max_residual: AtomicU32::new(0f32.to_bits()),
            split: Mutex::new(None),
            reserve: Mutex::new(()),
            adding: Mutex::new(()),
            cut: Mutex::new(Vec::new()),
        }
    }

    /// The dimension of the vectors.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// How the graph is built.
    pub fn config(&self) -> Config {
        self.config
    }

    /// Ids handed out so far (deleted ones included).
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire) as usize
    }

    /// True when no vector was ever added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Slots allocated (ids below this need no new memory).
    pub fn capacity(&self) -> usize {
        self.graph.read().expect("graph lock").segments.iter().map(|s| s.cap).sum()
    }

    /// The most a reported similarity can differ from the exact cosine of the unit vectors.
    pub fn max_error(&self) -> f32 {
        f32::from_bits(self.max_residual.load(Ordering::Acquire)) + ROUNDING
    }

    /// A tighter error bound than `max_error` for all but a few ids: the bound that at most `most`
    /// ids' residuals exceed, those ids (a vector clamped by the scales, say), which a caller
    /// scores exactly instead, and how many ids it covers: every id below that count, inserted
    /// in full (an `add` still running covers its ids once it returns). With `most` or fewer
    /// ids, `max_error` and none.
    ///
    /// Each call carries the last split forward over the ids added since (a few after a write,
    /// rather than a pass over every id per query), and passes over every id again only when
    /// more than `most` of them lie beyond its bound.
    pub fn error_split(&self, most: usize) -> (f32, Vec<u32>, usize) {
        let graph = self.graph.read().expect("graph lock");
        let ready = self.ready.load(Ordering::Acquire);
        if ready as usize <= most {
            return (self.max_error(), Vec::new(), ready as usize);
        }
        let residual = |id: u32| {
            let (seg, at) = locate(&graph, id);
            seg.meta[at].get().map_or(0.0, |m| f32::from_bits(m.residual.load(Ordering::Acquire)))
        };
        let mut kept = self.split.lock().expect("split lock");
        let carried = match kept.as_mut() {
            Some(split) if split.most == most && split.upto <= ready => {
                split.above.extend((split.upto..ready).filter(|&id| residual(id) > split.cut));
                split.upto = ready;
                split.above.len() <= most
            }
            _ => false,
        };
        if !carried {
            let mut all: Vec<f32> = (0..ready).map(residual).collect();
            let (_, &mut cut, _) = all.select_nth_unstable_by(most, |a, b| b.total_cmp(a));
            let above = (0..ready).filter(|&id| residual(id) > cut).collect();
            *kept = Some(Split { most, upto: ready, cut, above });
        }
        let split = kept.as_ref().expect("split just kept");
        (split.cut + ROUNDING, split.above.clone(), ready as usize)
    }

    /// Bytes of codes and links this index addresses (mapped or owned).
    pub fn memory_bytes(&self) -> usize {
        self.capacity() * (self.row_bytes + 4 * (self.m0 + 1))
    }

    /// Grows the slots to at least `cap` (readers keep going; writers wait).
    pub fn reserve(&self, cap: usize) {
        let _one = self.reserve.lock().expect("reserve lock");
        if self.capacity() >= cap {
            return;
        }
        let mut graph = self.graph.write().expect("graph lock");
        let mut have: usize = graph.segments.iter().map(|s| s.cap).sum();
        while have < cap {
            let size = if graph.segments.is_empty() { cap.max(EXTRA_SEGMENT) } else { EXTRA_SEGMENT };
            graph.segments.push(Segment::owned(size, self.row_bytes, self.m0));
            have += size;
        }
    }

    fn level_of(&self, id: u32) -> usize {
        let mut z = self.config.seed ^ (u64::from(id).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let u = ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let ml = 1.0 / (self.config.m as f64).ln();
        ((-u.ln() * ml) as usize).min(MAX_LEVEL)
    }

    /// Adds `vectors` (rows of `dim` floats) under the ids `first..first + rows`; `first` must be
    /// `len()`. Zero vectors are refused. `threads`: 0 for rayon's pool, else a pool of that many.
    pub fn add(&self, first: usize, vectors: &[f32], threads: usize) -> Result<(), IndexError> {
        if !vectors.len().is_multiple_of(self.dim) {
            return Err(IndexError::Shape(format!("{} floats are not rows of {}", vectors.len(), self.dim)));
        }
        let rows = vectors.len() / self.dim;
        if rows == 0 {
            return Ok(());
        }
        for (i, row) in vectors.chunks_exact(self.dim).enumerate() {
            if !row.iter().all(|x| x.is_finite()) || row.iter().all(|x| *x == 0.0) {
                return Err(IndexError::Shape(format!("vector {i} is zero or not finite")));
            }
        }
        let _adding = self.adding.lock().expect("add lock");
        let start = self.len();
        if first != start || start + rows > u32::MAX as usize - 1 {
            return Err(IndexError::Shape(format!("ids must continue at {start}, got {first}")));
        }
        self.reserve(start + rows);
        let graph = self.graph.read().expect("graph lock");
        for i in 0..rows {
            let id = (start + i) as u32;
            let (seg, at) = locate(&graph, id);
            seg.meta[at].get_or_init(|| Meta::new(self.level_of(id) as u8));
            seg.set_live(at, true);
        }
        self.len.store((start + rows) as u32, Ordering::Release);
        let insert = |i: usize| self.insert(&graph, (start + i) as u32, &vectors[i * self.dim..(i + 1) * self.dim]);
        let serial = if self.entry.lock().expect("entry lock").is_none() { 1 } else { 0 };
        (0..serial.min(rows)).for_each(insert);
        if rows > serial {
            if threads == 1 || rows - serial < 64 {
                (serial..rows).for_each(insert);
            } else if threads == 0 {
                (serial..rows).into_par_iter().for_each(insert);
            } else {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .map_err(|e| IndexError::Config(format!("thread pool: {e}")))?;
                pool.install(|| (serial..rows).into_par_iter().for_each(insert));
            }
        }
        self.relink_orphans(&graph, start as u32..(start + rows) as u32);
        self.ready.store((start + rows) as u32, Ordering::Release);
        Ok(())
    }

    /// Marks `id` deleted: it still routes searches but is never returned.
    pub fn mark_deleted(&self, id: u32) -> Result<(), IndexError> {
        let graph = self.graph.read().expect("graph lock");
        self.meta(&graph, id)?.deleted.store(true, Ordering::Release);
        let (seg, at) = locate(&graph, id);
        seg.set_live(at, false);
        Ok(())
    }

    /// Whether `id` is marked deleted.
    pub fn is_deleted(&self, id: u32) -> Result<bool, IndexError> {
        let graph = self.graph.read().expect("graph lock");
        Ok(self.meta(&graph, id)?.deleted.load(Ordering::Acquire))
    }

    fn meta<'g>(&self, graph: &'g Graph, id: u32) -> Result<&'g Meta, IndexError> {
        if id as usize >= self.len() {
            return Err(IndexError::Shape(format!("id {id} is not in the index ({} ids)", self.len())));
        }
        let (seg, at) = locate(graph, id);
        seg.meta[at].get().ok_or_else(|| IndexError::Shape(format!("id {id} is not in the index")))
    }

    /// The codes of `vector` (made unit) and its residual, rounded up.
    fn encode(&self, vector: &[f32], out: &mut [u8]) -> f32 {
        let u = unit(vector);
        let mut err = 0f64;
        match self.config.codes {
            Codes::I8 => {
                for ((o, x), s) in out.iter_mut().zip(&u).zip(&self.scale) {
                    let c = (x / s).round().clamp(-127.0, 127.0);
                    *o = (c as i8) as u8;
                    let d = f64::from(*x) - f64::from(c) * f64::from(*s);
                    err += d * d;
                }
            }
            Codes::F16 => {
                for (o, x) in out.chunks_exact_mut(2).zip(&u) {
                    let h = half::f16::from_f32(*x);
                    o.copy_from_slice(&h.to_bits().to_le_bytes());
                    let d = f64::from(*x) - f64::from(h.to_f32());
                    err += d * d;
                }
            }
        }
        let r = err.sqrt() * (1.0 + 1e-6) + 1e-7;
        r as f32
    }

    /// True where the codes of `vectors[i]` are exactly those stored for `ids[i]` (the vector an
    /// id was added with, as far as the codes can tell).
    pub fn holds(&self, ids: &[u32], vectors: &[f32]) -> Result<Vec<bool>, IndexError> {
        if vectors.len() != ids.len() * self.dim {
            return Err(IndexError::Shape("one vector per id".into()));
        }
        let graph = self.graph.read().expect("graph lock");
        let mut buf = vec![0u8; self.row_bytes];
        ids.iter()
            .zip(vectors.chunks_exact(self.dim))
            .map(|(&id, v)| {
                self.meta(&graph, id)?;
                self.encode(v, &mut buf);
                Ok(self.codes(&graph, id) == buf.as_slice())
            })
            .collect()
    }

    /// The decoded unit vectors of `ids` (each within its residual of the vector added).
    pub fn decode(&self, ids: &[u32]) -> Result<Vec<f32>, IndexError> {
        let graph = self.graph.read().expect("graph lock");
        let mut out = Vec::with_capacity(ids.len() * self.dim);
        for &id in ids {
            self.meta(&graph, id)?;
            self.decoded(self.codes(&graph, id), &self.scale, &mut out);
        }
        Ok(out)
    }

    /// Appends `codes` decoded, each value times `scale` (`i8` codes; half floats ignore it).
    fn decoded(&self, codes: &[u8], scale: &[f32], out: &mut Vec<f32>) {
        match self.config.codes {
            Codes::I8 => out.extend(as_i8(codes).iter().zip(scale).map(|(c, s)| f32::from(*c) * s)),
            Codes::F16 => decode_f16(codes, self.dim, out),
        }
    }

    fn codes<'g>(&self, graph: &'g Graph, id: u32) -> &'g [u8] {
        let (seg, at) = locate(graph, id);
        // SAFETY: `at < seg.cap`, so the range lies in the segment's codes; they were written
        // before `id` became reachable (see `Segment`).
        unsafe { std::slice::from_raw_parts(seg.codes.add(at * self.row_bytes), self.row_bytes) }
    }

    fn links<'g>(&self, graph: &'g Graph, id: u32, level: usize) -> &'g [AtomicU32] {
        let (seg, at) = locate(graph, id);
        if level == 0 {
            let w = self.m0 + 1;
            // SAFETY: `at < seg.cap`, and the segment holds `cap * (m0 + 1)` link slots.
            return unsafe { std::slice::from_raw_parts(seg.links.add(at * w), w) };
        }
        let w = self.config.m + 1;
        match seg.meta[at].get().and_then(|m| m.upper.get()) {
            Some(upper) if upper.len() >= level * w => &upper[(level - 1) * w..level * w],
            _ => &[],
        }
    }

    fn neighbours(&self, graph: &Graph, id: u32, level: usize, out: &mut Vec<u32>) {
        out.clear();
        let list = self.links(graph, id, level);
        if let Some((count, rest)) = list.split_first() {
            let n = (count.load(Ordering::Acquire) as usize).min(rest.len());
            out.extend(rest[..n].iter().map(|x| x.load(Ordering::Acquire)));
        }
    }

    #[inline]
    fn sim(&self, graph: &Graph, form: &[f32], id: u32) -> f32 {
        (self.kernel)(form, self.codes(graph, id))
    }

    /// `q` as a query form: its unit vector times the scales (`i8` codes).
    /// On a cache line (`UnitQueries::aligned`): every code a search visits is dotted with it.
    fn query_form(&self, q: &[f32]) -> UnitQueries {
        match self.config.codes {
            Codes::I8 => {
                let scaled: Vec<f32> = unit(q).iter().zip(&self.scale).map(|(x, s)| x * s).collect();
                UnitQueries::aligned(&scaled)
            }
            Codes::F16 => UnitQueries::aligned(&unit(q)),
        }
    }

    /// A stored node's query form: its codes times the squared scales (`i8` codes), or decoded.
    fn node_form(&self, graph: &Graph, id: u32, out: &mut Vec<f32>) {
        out.clear();
        self.decoded(self.codes(graph, id), &self.scale2, out);
    }

    fn greedy(&self, graph: &Graph, form: &[f32], mut at: Near, level: usize, scratch: &mut Vec<u32>) -> Near {
        loop {
            let mut moved = false;
            self.neighbours(graph, at.1, level, scratch);
            for &n in scratch.iter() {
                let s = self.sim(graph, form, n);
                if s > at.0 {
                    at = Near(s, n);
                    moved = true;
                }
            }
            if !moved {
                return at;
            }
        }
    }

    /// The `ef` best found from `starts` at `level`, best first, by `similarity × weight`.
    /// `weigh(id)` gives a node's weight in [0, 1], or None for a node that routes the search but
    /// is never returned (a deleted one, or one that stands for nothing). A node is explored while
    /// its priority, the larger of its objective and `similarity × ceiling`, exceeds the worst
    /// objective kept. The weight is taken before the similarity: a node whose priority cannot
    /// exceed that worst objective at any similarity (weight and ceiling at most it) is passed
    /// over without its codes being compared, which on rows of widely varying value is most of
    /// the nodes a beam reaches. `warm(ids)` runs with the unvisited neighbours of a node explored,
    /// after the prefetch of their codes and before any is weighed: where `weigh` reads memory of
    /// its own, it asks for all of it there, so the loads overlap.
    #[expect(clippy::too_many_arguments, reason = "the graph, the query, where to start, and how to rank")]
    fn beam(
        &self,
        graph: &Graph,
        form: &[f32],
        starts: &[Near],
        ef: usize,
        level: usize,
        ceiling: f32,
        weigh: impl Fn(u32) -> Option<f32>,
        warm: impl Fn(&[u32]),
    ) -> Vec<Near> {
        // No code similarity exceeds one by more than the codes' error.
        let sim_cap = 1.0 + self.max_error();
        let rank = |s: f32, w: Option<f32>| {
            let kept = w.map(|w| s * w);
            (kept.map_or(s * ceiling, |f| f.max(s * ceiling)), kept)
        };
        VISITED.with(|cell| {
            let mut visited = cell.borrow_mut();
            visited.reset(self.len());
            let mut todo: BinaryHeap<Near> = BinaryHeap::new();
            let mut best: BinaryHeap<Reverse<Near>> = BinaryHeap::new();
            let mut floor = f32::NEG_INFINITY;
            for &s in starts {
                if !visited.first(s.1) {
                    continue;
                }
                let (priority, kept) = rank(s.0, weigh(s.1));
                todo.push(Near(priority, s.1));
                if let Some(f) = kept {
                    best.push(Reverse(Near(f, s.1)));
                }
            }
            while best.len() > ef {
                best.pop();
            }
            if best.len() >= ef {
                floor = best.peek().map_or(f32::NEG_INFINITY, |r| r.0 .0);
            }
            let mut scratch = Vec::with_capacity(self.m0);
            let mut fresh = Vec::with_capacity(self.m0);
            while let Some(cur) = todo.pop() {
                if best.len() >= ef && cur.0 < floor {
                    break;
                }
                self.neighbours(graph, cur.1, level, &mut scratch);
                // The next node likely explored: its links arrive while this one's neighbours are
                // weighed and compared.
                if let Some(next) = todo.peek() {
                    self.prefetch_links(graph, next.1, level);
                }
                // Visit marks first (one line each, asked for together), then codes and weights
                // for the unvisited only: a visited neighbour costs no memory beyond its mark.
                for &n in &scratch {
                    visited.prefetch(n);
                }
                fresh.clear();
                fresh.extend(
                    scratch.iter().copied().filter(|&n| (n as usize) < visited.marks.len() && visited.first(n)),
                );
                for &n in &fresh {
                    self.prefetch(graph, n);
                }
                warm(&fresh);
                for &n in &fresh {
                    let w = weigh(n);
                    if best.len() >= ef && w.unwrap_or(0.0).max(ceiling) * sim_cap <= floor {
                        continue;
                    }
                    let (priority, kept) = rank(self.sim(graph, form, n), w);
                    if best.len() < ef || priority > floor {
                        todo.push(Near(priority, n));
                        if let Some(f) = kept.filter(|&f| best.len() < ef || f > floor) {
                            best.push(Reverse(Near(f, n)));
                            if best.len() > ef {
                                best.pop();
                            }
                            if best.len() >= ef {
                                floor = best.peek().map_or(f32::NEG_INFINITY, |r| r.0 .0);
                            }
                        }
                    }
                }
            }
            let mut out: Vec<Near> = best.into_iter().map(|r| r.0).collect();
            out.sort_unstable_by(|a, b| b.cmp(a));
            out
        })
    }

    #[inline]
    fn prefetch(&self, graph: &Graph, id: u32) {
        #[cfg(target_arch = "x86_64")]
        {
            let c = self.codes(graph, id);
            for line in (0..c.len().min(PREFETCH_BYTES)).step_by(64) {
                // SAFETY: prefetching is a hint; it reads nothing and cannot fault.
                unsafe { std::arch::x86_64::_mm_prefetch(c.as_ptr().add(line).cast(), std::arch::x86_64::_MM_HINT_T0) };
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (graph, id);
    }

    /// Asks for the start of `id`'s level-0 links (the count and the first neighbours).
    #[inline]
    fn prefetch_links(&self, graph: &Graph, id: u32, level: usize) {
        if level == 0 {
            let (seg, at) = locate(graph, id);
            // SAFETY: `at < seg.cap`; only the address is formed, prefetching reads nothing.
            let start = unsafe { seg.links.add(at * (self.m0 + 1)) };
            crate::scoring::prefetch([start.cast::<i8>(), start.cast::<i8>().wrapping_add(64)]);
        }
    }

    fn deleted(&self, graph: &Graph, id: u32) -> bool {
        let (seg, at) = locate(graph, id);
        seg.gone(at)
    }

    /// HNSW's neighbour heuristic: from candidates best first, keep one only when it is nearer
    /// to the base than to every one kept (spreads links across directions).
    /// Up to `m` of `cands` (best first), the neighbours of `node`, by HNSW's heuristic: a
    /// candidate nearer to one already kept than to the node is left out, so links spread in all
    /// directions. A candidate with the same codes as one kept is its twin and adds no direction;
    /// a kept twin of the node itself leaves out nothing (it is as near as the node). A quarter of
    /// the slots may then go to the nearest left out: near-duplicates would otherwise leave nodes
    /// with one link each and parts of the graph unreachable. Equally near candidates are taken in
    /// an order of their own per node, so that twins do not all link to the same few.
    fn select(&self, graph: &Graph, node: u32, cands: &[Near], m: usize, forms: &mut Vec<f32>) -> Vec<u32> {
        let mut cands = cands.to_vec();
        let mix = |id: u32| (u64::from(id ^ node)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        cands.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| mix(a.1).cmp(&mix(b.1))));
        let mut kept: Vec<u32> = Vec::with_capacity(m);
        let mut passed: Vec<u32> = Vec::new();
        let own = self.codes(graph, node);
        forms.clear();
        let mut form = Vec::with_capacity(self.dim);
        for &c in &cands {
            if kept.len() >= m {
                break;
            }
            let codes = self.codes(graph, c.1);
            if kept.iter().any(|&k| self.codes(graph, k) == codes) {
                passed.push(c.1);
                continue;
            }
            if forms.chunks_exact(self.dim).all(|f| (self.kernel)(f, codes) < c.0) {
                kept.push(c.1);
                if codes != own {
                    self.node_form(graph, c.1, &mut form);
                    forms.extend_from_slice(&form);
                }
            } else {
                passed.push(c.1);
            }
        }
        let room = m.saturating_sub(kept.len()).min(passed.len()).min(m / 4);
        kept.extend_from_slice(&passed[..room]);
        kept
    }

    fn write_list(list: &[AtomicU32], ids: &[u32]) {
        for (slot, id) in list[1..].iter().zip(ids) {
            slot.store(*id, Ordering::Release);
        }
        list[0].store(ids.len() as u32, Ordering::Release);
    }

    fn insert(&self, graph: &Graph, id: u32, vector: &[f32]) {
        let (seg, at) = locate(graph, id);
        let meta = seg.meta[at].get().expect("slot prepared by add");
        // SAFETY: this thread alone inserts `id`; nobody reads its codes before it is linked.
        let codes = unsafe { std::slice::from_raw_parts_mut(seg.codes.add(at * self.row_bytes), self.row_bytes) };
        let residual = self.encode(vector, codes);
        meta.residual.store(residual.to_bits(), Ordering::Release);
        self.max_residual.fetch_max(residual.to_bits(), Ordering::AcqRel);
        let level = meta.level as usize;
        if level > 0 {
            let w = self.config.m + 1;
            let _ = meta.upper.set((0..level * w).map(|_| AtomicU32::new(0)).collect());
        }
        let form = self.query_form(vector);
        let mut entry = self.entry.lock().expect("entry lock");
        let (top_node, top_level) = match entry.as_ref() {
            None => {
                *entry = Some(Entry { node: id, level });
                return;
            }
            Some(e) => (e.node, e.level),
        };
        let raise = level > top_level;
        // The entry stays locked only while this node may replace it; otherwise inserts run side by side.
        let mut held = if raise {
            Some(entry)
        } else {
            drop(entry);
            None
        };
        let mut scratch = Vec::new();
        let mut at_near = Near(self.sim(graph, &form, top_node), top_node);
        for l in ((level + 1)..=top_level).rev() {
            at_near = self.greedy(graph, &form, at_near, l, &mut scratch);
        }
        let mut starts = vec![at_near];
        let mut nform = Vec::with_capacity(self.dim);
        // Every level's own links are written before any other node links here: a search that
        // reaches this node (inserts run side by side) never finds it without neighbours.
        let mut chosen = Vec::with_capacity(level.min(top_level) + 1);
        for l in (0..=level.min(top_level)).rev() {
            let found = self.beam(graph, &form, &starts, self.config.ef_construction, l, 1.0, |_| Some(1.0), |_| {});
            chosen.push((l, self.select(graph, id, &found, self.config.m, &mut nform)));
            starts = found;
        }
        {
            let _own = meta.lock.lock().expect("node lock");
            for (l, ids) in &chosen {
                Self::write_list(self.links(graph, id, *l), ids);
                if *l == 0 {
                    ids.iter().for_each(|&x| self.name(graph, x));
                }
            }
        }
        for (l, ids) in chosen {
            let cap = if l == 0 { self.m0 } else { self.config.m };
            for n in ids {
                self.link_back(graph, n, id, l, cap, &mut nform, &mut scratch);
            }
        }
        if let Some(entry) = held.as_mut() {
            **entry = Some(Entry { node: id, level });
        }
    }

    /// Gives every live node that no level-0 list names a way in. A search ends its descent at
    /// level 0 and walks only level-0 links, so such a node is never found, however wide the beam.
    /// Inserts running side by side make them: a node whose beam ran while the graph was a handful
    /// of nodes links back into lists that other threads have since filled, and is pruned from
    /// all of them (a serial build leaves some too, where later inserts prune every link to a node).
    /// Each one found is searched for in the graph as it now is: it links to the nodes found (as
    /// many as its list holds) and the nearest of them with room lists it, else that node's least
    /// similar neighbour is replaced, when some other list still names it.
    fn relink_orphans(&self, graph: &Graph, added: std::ops::Range<u32>) {
        let Some((top_node, top_level)) = self.entry.lock().expect("entry lock").as_ref().map(|e| (e.node, e.level))
        else {
            return;
        };
        let mut orphans: Vec<u32> = std::mem::take(&mut *self.cut.lock().expect("cut lock"));
        orphans.extend(added);
        orphans.sort_unstable();
        orphans.dedup();
        orphans.retain(|&id| self.named(graph, id) == 0 && !self.deleted(graph, id));
        if self.len() < 2 {
            return;
        }
        let (mut form, mut base, mut forms, mut scratch) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for u in orphans {
            self.node_form(graph, u, &mut form);
            let mut at = Near(self.sim(graph, &form, top_node), top_node);
            for l in (1..=top_level).rev() {
                at = self.greedy(graph, &form, at, l, &mut scratch);
            }
            let mut found = self.beam(graph, &form, &[at], self.config.ef_construction, 0, 1.0, |_| Some(1.0), |_| {});
            found.retain(|c| c.1 != u);
            let fresh = self.select(graph, u, &found, self.config.m, &mut forms);
            {
                let meta = self.meta(graph, u).expect("an id below len");
                let _own = meta.lock.lock().expect("node lock");
                self.neighbours(graph, u, 0, &mut scratch);
                let list = self.links(graph, u, 0);
                for x in fresh {
                    if scratch.len() < self.m0 && !scratch.contains(&x) {
                        list[1 + scratch.len()].store(x, Ordering::Release);
                        list[0].store(scratch.len() as u32 + 1, Ordering::Release);
                        scratch.push(x);
                        self.name(graph, x);
                    }
                }
            }
            for v in found.iter().map(|c| c.1) {
                let meta = self.meta(graph, v).expect("an id below len");
                let _guard = meta.lock.lock().expect("node lock");
                self.neighbours(graph, v, 0, &mut scratch);
                let list = self.links(graph, v, 0);
                if scratch.contains(&u) {
                    break;
                }
                if scratch.len() < self.m0 {
                    list[1 + scratch.len()].store(u, Ordering::Release);
                    list[0].store(scratch.len() as u32 + 1, Ordering::Release);
                    self.name(graph, u);
                    break;
                }
                self.node_form(graph, v, &mut base);
                let least = scratch
                    .iter()
                    .enumerate()
                    .filter(|(_, &w)| self.named(graph, w) >= 2)
                    .map(|(i, &w)| Near(self.sim(graph, &base, w), i as u32))
                    .min();
                if let Some(Near(_, i)) = least {
                    let w = scratch[i as usize];
                    list[1 + i as usize].store(u, Ordering::Release);
                    self.unname(graph, w);
                    self.name(graph, u);
                    break;
                }
            }
        }
    }

    /// How many level-0 lists name `id`.
    fn named(&self, graph: &Graph, id: u32) -> u32 {
        let (seg, at) = locate(graph, id);
        seg.meta[at].get().map_or(0, |m| m.named.load(Ordering::Acquire))
    }

    /// One more level-0 list names `id`.
    fn name(&self, graph: &Graph, id: u32) {
        let (seg, at) = locate(graph, id);
        if let Some(m) = seg.meta[at].get() {
            m.named.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// One level-0 list fewer names `id`; at none, `id` waits in `cut` for `relink_orphans`.
    fn unname(&self, graph: &Graph, id: u32) {
        let (seg, at) = locate(graph, id);
        if let Some(m) = seg.meta[at].get() {
            if m.named.fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| c.checked_sub(1)) == Ok(1) {
                self.cut.lock().expect("cut lock").push(id);
            }
        }
    }

    /// Counts, for every node, the level-0 lists that name it (an index read from a file): tallied
    /// in one array first (it stays in cache), then stored node by node.
    fn count_names(&self, graph: &Graph) {
        let n = self.len();
        let mut counts = vec![0u32; n];
        let mut scratch = Vec::with_capacity(self.m0);
        for id in 0..n as u32 {
            self.neighbours(graph, id, 0, &mut scratch);
            for &x in &scratch {
                if let Some(c) = counts.get_mut(x as usize) {
                    *c += 1;
                }
            }
        }
        for (id, count) in counts.into_iter().enumerate() {
            let (seg, at) = locate(graph, id as u32);
            if let Some(m) = seg.meta[at].get() {
                m.named.store(count, Ordering::Release);
            }
        }
    }

    #[expect(clippy::too_many_arguments, reason = "scratch buffers reused across calls")]
    fn link_back(
        &self,
        graph: &Graph,
        node: u32,
        new: u32,
        level: usize,
        cap: usize,
        form: &mut Vec<f32>,
        scratch: &mut Vec<u32>,
    ) {
        let (seg, at) = locate(graph, node);
        let Some(meta) = seg.meta[at].get() else { return };
        let _guard = meta.lock.lock().expect("node lock");
        let list = self.links(graph, node, level);
        if list.is_empty() {
            return;
        }
        self.neighbours(graph, node, level, scratch);
        if scratch.contains(&new) {
            return;
        }
        if scratch.len() < cap {
            list[1 + scratch.len()].store(new, Ordering::Release);
            list[0].store(scratch.len() as u32 + 1, Ordering::Release);
            if level == 0 {
                self.name(graph, new);
            }
            return;
        }
        self.node_form(graph, node, form);
        let mut cands: Vec<Near> =
            scratch.iter().chain(std::iter::once(&new)).map(|&c| Near(self.sim(graph, form, c), c)).collect();
        cands.sort_unstable_by(|a, b| b.cmp(a));
        let chosen = self.select(graph, node, &cands, cap, form);
        Self::write_list(list, &chosen);
        if level == 0 {
            scratch.iter().filter(|x| !chosen.contains(x)).for_each(|&x| self.unname(graph, x));
            if chosen.contains(&new) {
                self.name(graph, new);
            }
        }
    }

    /// The `k` nearest live ids to `query` with their code similarities (best first, at most `k`;
    /// fewer when the graph holds fewer live ids than it finds). `ef`: the beam width (at least `k`).
    pub fn search(&self, query: &[f32], k: usize, ef: usize) -> Result<Vec<(u32, f32)>, IndexError> {
        let mut found = self.search_by(
            query,
            ef.max(k),
            1.0,
            |graph, id| (!self.deleted(graph, id)).then_some(1.0),
            |_: &[u32]| {},
        )?;
        found.truncate(k);
        Ok(found)
    }

    /// `search` of each `dim`-long row of `queries`, in order; several rows are searched side by
    /// side on rayon's threads (a query with its tags asks for one list per vector).
    pub fn search_many(&self, queries: &[f32], k: usize, ef: usize) -> Result<Vec<Vec<(u32, f32)>>, IndexError> {
        let dim = self.dim.max(1);
        if queries.len() <= dim {
            queries.chunks_exact(dim).map(|q| self.search(q, k, ef)).collect()
        } else {
            queries.par_chunks_exact(dim).map(|q| self.search(q, k, ef)).collect()
        }
    }

    /// The `ef` live ids of largest `similarity × weight(id)`, with that product by their codes
    /// (best first): a beam over the weighted objective, so a row's value steers the search
    /// rather than filtering after it. `weight(id)` is None for an id that stands for nothing now
    /// (it routes and is never returned). A node is explored while the larger of its product and
    /// `similarity × ceiling` exceeds the worst product kept: `ceiling` at least every weight
    /// explores each node whose neighbours could still enter (as far as the graph's recall goes),
    /// a lower one trusts the products to lead the way. With weights in [0, 1], a reported
    /// product is within `max_error` of the exact similarity's. A node whose weight (and
    /// `ceiling`) cannot reach the worst product kept is passed over unread (see `beam`).
    /// `warm(ids)`: asks for the memory `weight` will read for each of `ids` (see `beam`).
    pub fn search_weighted(
        &self,
        query: &[f32],
        ef: usize,
        ceiling: f32,
        weight: impl Fn(u32) -> Option<f32>,
        warm: impl Fn(&[u32]),
    ) -> Result<Vec<(u32, f32)>, IndexError> {
        let weigh = |graph: &Graph, id| {
            if self.deleted(graph, id) {
                None
            } else {
                weight(id).map(|w| w.clamp(0.0, 1.0))
            }
        };
        self.search_by(query, ef, ceiling.max(0.0), weigh, warm)
    }

    fn search_by(
        &self,
        query: &[f32],
        ef: usize,
        ceiling: f32,
        weigh: impl Fn(&Graph, u32) -> Option<f32>,
        warm: impl Fn(&[u32]),
    ) -> Result<Vec<(u32, f32)>, IndexError> {
        if query.len() != self.dim {
            return Err(IndexError::Shape(format!("a query of {} floats for dimension {}", query.len(), self.dim)));
        }
        let graph = self.graph.read().expect("graph lock");
        let Some((top_node, top_level)) = self.entry.lock().expect("entry lock").as_ref().map(|e| (e.node, e.level))
        else {
            return Ok(Vec::new());
        };
        if ef == 0 {
            return Ok(Vec::new());
        }
        let form = self.query_form(query);
        let mut scratch = Vec::new();
        let mut at = Near(self.sim(&graph, &form, top_node), top_node);
        for l in (1..=top_level).rev() {
            at = self.greedy(&graph, &form, at, l, &mut scratch);
        }
        let found = self.beam(&graph, &form, &[at], ef, 0, ceiling, |id| weigh(&graph, id), warm);
        Ok(found.into_iter().map(|n| (n.1, n.0)).collect())
    }

    /// Writes the whole index to `out`: header, scales, per-node state, codes, level-0 links,
    /// upper links. Searches may run meanwhile; the caller keeps inserts out.
    pub fn write_to(&self, out: &mut impl Write) -> Result<(), IndexError> {
        let graph = self.graph.read().expect("graph lock");
        let n = self.len();
        let entry = self.entry.lock().expect("entry lock").as_ref().map_or((u32::MAX, 0), |e| (e.node, e.level));
        let io = |e: std::io::Error| IndexError::Io(e.to_string());
        let layout = Layout::new(n, self.dim, self.row_bytes, self.m0);
        let mut head = Vec::with_capacity(HEADER);
        head.extend_from_slice(self.config.codes.magic());
        for v in [self.dim as u64, self.config.m as u64, self.config.ef_construction as u64, n as u64] {
            head.extend_from_slice(&v.to_le_bytes());
        }
        head.extend_from_slice(&self.config.seed.to_le_bytes());
        head.extend_from_slice(&u64::from(entry.0).to_le_bytes());
        head.extend_from_slice(&(entry.1 as u64).to_le_bytes());
        out.write_all(&head).map_err(io)?;
        let mut buf: Vec<u8> = Vec::with_capacity(layout.codes);
        buf.extend(self.scale.iter().flat_map(|s| s.to_le_bytes()));
        for id in 0..n as u32 {
            let m = self.meta(&graph, id)?;
            buf.extend_from_slice(&m.residual.load(Ordering::Acquire).to_le_bytes());
        }
        for id in 0..n as u32 {
            let m = self.meta(&graph, id)?;
            buf.push(m.level | if m.deleted.load(Ordering::Acquire) { 0x80 } else { 0 });
        }
        buf.resize(layout.codes - HEADER, 0);
        out.write_all(&buf).map_err(io)?;
        for id in 0..n as u32 {
            out.write_all(self.codes(&graph, id)).map_err(io)?;
        }
        out.write_all(&vec![0u8; layout.links - layout.codes - n * self.row_bytes]).map_err(io)?;
        let mut words: Vec<u8> = Vec::with_capacity((self.m0 + 1) * 4 * 1024);
        for id in 0..n as u32 {
            for w in self.links(&graph, id, 0) {
                words.extend_from_slice(&w.load(Ordering::Acquire).to_le_bytes());
            }
            if words.len() >= (self.m0 + 1) * 4 * 1024 {
                out.write_all(&words).map_err(io)?;
                words.clear();
            }
        }
        out.write_all(&words).map_err(io)?;
        words.clear();
        for id in 0..n as u32 {
            let level = self.meta(&graph, id)?.level as usize;
            for l in 1..=level {
                for w in self.links(&graph, id, l) {
                    words.extend_from_slice(&w.load(Ordering::Acquire).to_le_bytes());
                }
            }
        }
        out.write_all(&words).map_err(io)?;
        Ok(())
    }

    /// Writes the index to a new file at `path` (the caller fsyncs and renames it).
    pub fn save(&self, path: &Path) -> Result<(), IndexError> {
        let file = File::create(path).map_err(|e| IndexError::Io(format!("{}: {e}", path.display())))?;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
        self.write_to(&mut out)?;
        out.flush().map_err(|e| IndexError::Io(e.to_string()))
    }

    /// Opens the index saved at `path`, mapped copy-on-write (its codes and level-0 links stay
    /// shared pages until written). `tree_sha256`: the hex root of the bytes' SHA-256 hash tree
    /// (`digest::tree_sha256`, checked over the mapping itself, so what is used is what was
    /// hashed); every link is checked in range.
    pub fn open(path: &Path, tree_sha256: Option<&str>) -> Result<Self, IndexError> {
        let file = File::open(path).map_err(|e| IndexError::Io(format!("{}: {e}", path.display())))?;
        // SAFETY: a private (copy-on-write) mapping; the saved files are written once under a
        // temporary name and renamed, never changed in place.
        let map = unsafe { memmap2::MmapOptions::new().map_copy(&file) }.map_err(|e| IndexError::Io(e.to_string()))?;
        if let Some(want) = tree_sha256 {
            if digest::hex(&digest::tree_sha256(&map[..])) != want {
                return Err(IndexError::Corrupt("the index file's SHA-256 tree does not match".into()));
            }
        }
        // A file saved before `add` relinked its orphans may hold some: linked in here, on the
        // private pages of the few lists that change.
        let index = Self::from_map(map)?;
        {
            let graph = index.graph.read().expect("graph lock");
            index.count_names(&graph);
            index.relink_orphans(&graph, 0..index.len() as u32);
        }
        Ok(index)
    }

    fn from_map(map: memmap2::MmapMut) -> Result<Self, IndexError> {
        let bad = |what: &str| IndexError::Corrupt(format!("not a hippograph index file: {what}"));
        let Some(codes) = [Codes::F16, Codes::I8].into_iter().find(|c| map.len() >= HEADER && &map[..8] == c.magic())
        else {
            return Err(bad("magic"));
        };
        let word = |i: usize| u64::from_le_bytes(map[8 + 8 * i..16 + 8 * i].try_into().expect("8 bytes"));
        let (dim, m, efc, n, seed, entry_node, entry_level) = (
            word(0) as usize,
            word(1) as usize,
            word(2) as usize,
            word(3) as usize,
            word(4),
            word(5),
            word(6) as usize,
        );
        if dim == 0 || dim > 1 << 16 || !(2..=2048).contains(&m) || efc == 0 || n >= u32::MAX as usize {
            return Err(bad("parameters"));
        }
        let m0 = 2 * m;
        let layout = Layout::new(n, dim, dim * codes.width(), m0);
        if map.len() < layout.upper {
            return Err(bad("size"));
        }
        let f32_at = |off: usize| f32::from_le_bytes(map[off..off + 4].try_into().expect("4 bytes"));
        let scale: Vec<f32> = (0..dim).map(|d| f32_at(HEADER + 4 * d)).collect();
        if !scale.iter().all(|s| s.is_finite() && *s > 0.0) {
            return Err(bad("scales"));
        }
        let residual: Vec<f32> = (0..n).map(|i| f32_at(layout.residual + 4 * i)).collect();
        let flags = &map[layout.flags..layout.flags + n];
        let w = m + 1;
        let upper_words: usize = flags.iter().map(|f| usize::from(f & 0x7f) * w).sum();
        if flags.iter().any(|f| usize::from(f & 0x7f) > MAX_LEVEL) || map.len() != layout.upper + 4 * upper_words {
            return Err(bad("levels"));
        }
        if n == 0 && entry_node != u64::from(u32::MAX) || n > 0 && entry_node >= n as u64 {
            return Err(bad("entry point"));
        }
        if n > 0 && usize::from(flags[entry_node as usize] & 0x7f) != entry_level {
            return Err(bad("entry level"));
        }
        let word32 = |off: usize| u32::from_le_bytes(map[off..off + 4].try_into().expect("4 bytes"));
        let valid_list = |off: usize, width: usize| {
            let count = word32(off) as usize;
            count < width && (0..count).all(|j| (word32(off + 4 * (1 + j)) as usize) < n)
        };
        if !(0..n).all(|i| valid_list(layout.links + 4 * i * (m0 + 1), m0 + 1)) {
            return Err(bad("level-0 links"));
        }
        let mut meta: Vec<OnceLock<Meta>> = Vec::with_capacity(n);
        let mut off = layout.upper;
        let mut max_residual = 0f32;
        for i in 0..n {
            let level = flags[i] & 0x7f;
            let m_ = Meta::new(level);
            m_.deleted.store(flags[i] & 0x80 != 0, Ordering::Relaxed);
            if !(residual[i].is_finite() && residual[i] >= 0.0) {
                return Err(bad("residuals"));
            }
            m_.residual.store(residual[i].to_bits(), Ordering::Relaxed);
            max_residual = max_residual.max(residual[i]);
            if level > 0 {
                let words = usize::from(level) * w;
                for l in 0..usize::from(level) {
                    if !valid_list(off + 4 * l * w, w) {
                        return Err(bad("upper links"));
                    }
                }
                let _ = m_.upper.set((0..words).map(|j| AtomicU32::new(word32(off + 4 * j))).collect());
                off += 4 * words;
            }
            let cell = OnceLock::new();
            let _ = cell.set(m_);
            meta.push(cell);
        }
        let gone: Box<[AtomicU64]> = flags
            .chunks(64)
            .map(|word| AtomicU64::new(word.iter().enumerate().fold(0, |acc, (b, f)| acc | u64::from(f >> 7) << b)))
            .collect();
        let config = Config { m, ef_construction: efc, seed, codes };
        let mut map = map;
        let base = map.as_mut_ptr();
        let map = Arc::new(map);
        let segments = if n == 0 {
            Vec::new()
        } else {
            // SAFETY: both offsets lie within the mapping (checked against its length above); the
            // links start at a multiple of 64 from a page-aligned base, so the atomics are aligned.
            let (codes, links) = unsafe { (base.add(layout.codes), base.add(layout.links).cast::<AtomicU32>()) };
            let meta = meta.into_boxed_slice();
            vec![Segment { codes, links, cap: n, meta, gone, _backing: Backing::Mapped(map) }]
        };
        let index = Self::with_scale(dim, config, scale, segments);
        index.len.store(n as u32, Ordering::Release);
        index.ready.store(n as u32, Ordering::Release);
        index.max_residual.store(max_residual.to_bits(), Ordering::Release);
        if n > 0 {
            *index.entry.lock().expect("entry lock") = Some(Entry { node: entry_node as u32, level: entry_level });
        }
        Ok(index)
    }
}

/// Byte offsets of a saved index's sections.
struct Layout {
    residual: usize,
    flags: usize,
    codes: usize,
    links: usize,
    upper: usize,
}

impl Layout {
    fn new(n: usize, dim: usize, row_bytes: usize, m0: usize) -> Self {
        let up = |x: usize| x.div_ceil(64) * 64;
        let residual = HEADER + 4 * dim;
        let flags = residual + 4 * n;
        let codes = up(flags + n);
        let links = up(codes + n * row_bytes);
        let upper = links + 4 * n * (m0 + 1);
        Layout { residual, flags, codes, links, upper }
    }
}

#[inline]
fn locate(graph: &Graph, id: u32) -> (&Segment, usize) {
    let mut at = id as usize;
    let first = &graph.segments[0];
    if at < first.cap {
        return (first, at);
    }
    at -= first.cap;
    (&graph.segments[1 + at / EXTRA_SEGMENT], at % EXTRA_SEGMENT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    fn rng(seed: &mut u64) -> f32 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        ((*seed >> 11) as f64 / (1u64 << 53) as f64) as f32 * 2.0 - 1.0
    }

    #[test]
    fn every_f16_kernel_agrees_with_the_portable_one() {
        for n in [0, 1, 7, 8, 15, 16, 17, 31, 32, 63, 64, 65, 100, 384, 385] {
            let q = data(1, n.max(1), n as u64)[..n].to_vec();
            let v = data(1, n.max(1), 1000 + n as u64);
            let codes: Vec<u8> = v[..n].iter().flat_map(|x| half::f16::from_f32(*x).to_bits().to_le_bytes()).collect();
            let want = dot_f16_body(&q, &codes);
            let mut kernels: Vec<Kernel> = vec![kernel(Codes::F16)];
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
                && std::arch::is_x86_feature_detected!("f16c")
            {
                kernels.push(dot_f16_avx2_safe);
            }
            for k in kernels {
                let got = k(&q, &codes);
                assert!((got - want).abs() <= 1e-4 * (1.0 + want.abs()), "n {n}: {got} against {want}");
            }
        }
    }

    fn data(n: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut s = seed | 1;
        (0..n * dim).map(|_| rng(&mut s)).collect()
    }

    fn exact(data: &[f32], dim: usize, q: &[f32], k: usize) -> Vec<u32> {
        let qu = unit(q);
        let mut all: Vec<(f32, u32)> = data
            .chunks_exact(dim)
            .enumerate()
            .map(|(i, r)| (unit(r).iter().zip(&qu).map(|(a, b)| a * b).sum(), i as u32))
            .collect();
        all.sort_by(|a, b| b.0.total_cmp(&a.0));
        all.into_iter().take(k).map(|x| x.1).collect()
    }

    fn config() -> Config {
        Config { m: 16, ef_construction: 100, seed: 7, codes: Codes::F16 }
    }

    /// Every live id a search with a beam as wide as the index returns.
    fn all_found(index: &Index, data: &[f32], dim: usize) -> bool {
        let n = index.len();
        (0..3).all(|q| index.search(&data[q * dim..(q + 1) * dim], n, n + 10).unwrap().len() == n)
    }

    #[test]
    fn a_node_no_list_names_is_linked_in_again() {
        let (n, dim) = (300, 16);
        let d = data(n, dim, 41);
        let index = Index::new(dim, config(), &[]).unwrap();
        index.add(0, &d, 1).unwrap();
        assert!(all_found(&index, &d, dim));
        let graph = index.graph.read().unwrap();
        let entry = index.entry.lock().unwrap().as_ref().unwrap().node;
        let lost = (0..n as u32).find(|&id| id != entry && index.level_of(id) == 0).unwrap();
        let mut s = Vec::new();
        for id in 0..n as u32 {
            index.neighbours(&graph, id, 0, &mut s);
            if s.contains(&lost) {
                s.retain(|&x| x != lost);
                Index::write_list(index.links(&graph, id, 0), &s);
                index.unname(&graph, lost);
            }
        }
        let own = &d[lost as usize * dim..(lost as usize + 1) * dim];
        assert!(!index.search(own, n, n + 10).unwrap().iter().any(|x| x.0 == lost), "the node is cut off");
        let path = std::env::temp_dir().join(format!("hippograph-orphan-{}.bin", std::process::id()));
        index.write_to(&mut std::io::BufWriter::new(File::create(&path).unwrap())).unwrap();
        assert_eq!(index.named(&graph, lost), 0);
        index.relink_orphans(&graph, 0..0); // the node is found by its count falling to zero
        assert!(index.named(&graph, lost) >= 1);
        drop(graph);
        assert_eq!(index.search(own, 1, n + 10).unwrap()[0].0, lost);
        assert!(all_found(&index, &d, dim));
        let saved = Index::open(&path, None).unwrap(); // saved with the node cut off
        std::fs::remove_file(&path).unwrap();
        assert_eq!(saved.search(own, 1, n + 10).unwrap()[0].0, lost, "an index opened relinks its orphans");
        assert!(all_found(&saved, &d, dim));
        let graph = saved.graph.read().unwrap();
        let mut counted = vec![0u32; n];
        for id in 0..n as u32 {
            saved.neighbours(&graph, id, 0, &mut s);
            s.iter().for_each(|&x| counted[x as usize] += 1);
        }
        assert_eq!((0..n as u32).map(|id| saved.named(&graph, id)).collect::<Vec<_>>(), counted);
    }

    #[test]
    fn every_node_of_small_graphs_built_side_by_side_is_found() {
        // Inserts on several threads while the graph is a handful of nodes: the first node each
        // thread inserts links into lists the other threads are filling (the case relinking fixes).
        for round in 0..200u64 {
            let (n, dim) = (64 + (round as usize * 7) % 200, 16);
            let d = data(n, dim, 100 + round);
            let index = Index::new(dim, Config { ef_construction: 200, ..config() }, &[]).unwrap();
            index.add(0, &d, 4).unwrap();
            assert!(all_found(&index, &d, dim), "round {round}: {n} nodes");
            let graph = index.graph.read().unwrap();
            let mut counted = vec![0u32; n];
            let mut s = Vec::new();
            for id in 0..n as u32 {
                index.neighbours(&graph, id, 0, &mut s);
                s.iter().for_each(|&x| counted[x as usize] += 1);
            }
            let kept: Vec<u32> = (0..n as u32).map(|id| index.named(&graph, id)).collect();
            assert_eq!(kept, counted, "round {round}: the counts kept are the lists' own");
        }
    }

    #[test]
    fn finds_the_nearest_neighbours() {
        let (n, dim) = (3000, 32);
        let d = data(n, dim, 3);
        let index = Index::new(dim, config(), &d[..256 * dim]).unwrap();
        index.add(0, &d, 0).unwrap();
        let qs = data(50, dim, 9);
        let mut hit = 0;
        for q in qs.chunks_exact(dim) {
            let got: Vec<u32> = index.search(q, 10, 64).unwrap().into_iter().map(|x| x.0).collect();
            let want = exact(&d, dim, q, 10);
            hit += want.iter().filter(|w| got.contains(w)).count();
        }
        assert!(hit as f64 / 500.0 >= 0.9, "recall {}", hit as f64 / 500.0);
    }

    #[test]
    fn several_queries_searched_side_by_side_answer_as_each_alone() {
        let (n, dim) = (2000, 24);
        let d = data(n, dim, 11);
        let index = Index::new(dim, config(), &d[..256 * dim]).unwrap();
        index.add(0, &d, 0).unwrap();
        let qs = data(7, dim, 13);
        let many = index.search_many(&qs, 10, 32).unwrap();
        let alone: Vec<_> = qs.chunks_exact(dim).map(|q| index.search(q, 10, 32).unwrap()).collect();
        assert_eq!(many, alone);
        assert_eq!(index.search_many(&qs[..dim], 10, 32).unwrap(), alone[..1].to_vec());
        assert!(index.search_many(&[], 10, 32).unwrap().is_empty());
    }

    #[test]
    fn reported_similarity_is_within_max_error_for_either_codes() {
        let (n, dim) = (500, 40);
        let d = data(n, dim, 5);
        let dir = std::env::temp_dir().join(format!("hg-hnsw-codes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (codes, most) in [(Codes::F16, 1e-3), (Codes::I8, 0.05)] {
            let index = Index::new(dim, Config { codes, ..config() }, &d[..10 * dim]).unwrap();
            index.add(0, &d, 1).unwrap();
            let err = index.max_error();
            assert!(err < most, "{codes:?}: error bound {err}");
            let path = dir.join(format!("{codes:?}"));
            index.save(&path).unwrap();
            let back = Index::open(&path, None).unwrap();
            assert_eq!(back.config(), index.config());
            let rows: Vec<u32> = (0..n as u32).collect();
            assert!(back.holds(&rows, &d).unwrap().iter().all(|x| *x));
            for q in data(20, dim, 11).chunks_exact(dim) {
                let qu = unit(q);
                let got = index.search(q, 20, 40).unwrap();
                assert_eq!(back.search(q, 20, 40).unwrap(), got);
                for (id, s) in got {
                    let row = unit(&d[id as usize * dim..(id as usize + 1) * dim]);
                    let cos: f32 = row.iter().zip(&qu).map(|(a, b)| a * b).sum();
                    assert!((cos - s).abs() <= err, "{codes:?}: {cos} vs {s} (bound {err})");
                }
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn weighted_search_finds_the_best_products_and_skips_ids_that_stand_for_nothing() {
        let (n, dim) = (3000, 24);
        let d = data(n, dim, 29);
        let index = Index::new(dim, config(), &d[..200 * dim]).unwrap();
        index.add(0, &d, 0).unwrap();
        let weight = |id: u32| {
            (!id.is_multiple_of(7)).then(|| 0.3 + 0.7 * (id.wrapping_mul(2_654_435_761) % 1000) as f32 / 1000.0)
        };
        let cos = |q: &[f32], id: u32| -> f32 {
            let (qu, r) = (unit(q), unit(&d[id as usize * dim..(id as usize + 1) * dim]));
            qu.iter().zip(&r).map(|(a, b)| a * b).sum()
        };
        let (mut hit, mut asked) = (0, 0);
        for q in data(30, dim, 31).chunks_exact(dim) {
            let got = index.search_weighted(q, 40, 1.0, weight, |_: &[u32]| {}).unwrap();
            assert_eq!(got.len(), 40);
            assert!(got.windows(2).all(|w| w[0].1 >= w[1].1));
            for &(id, f) in &got {
                let w = weight(id).expect("an id that stands for nothing is never returned");
                assert!((cos(q, id) * w - f).abs() <= index.max_error() + 1e-6);
            }
            let mut all: Vec<(f32, u32)> =
                (0..n as u32).filter_map(|i| weight(i).map(|w| (cos(q, i) * w, i))).collect();
            all.sort_by(|a, b| b.0.total_cmp(&a.0));
            let kept: Vec<u32> = got.iter().map(|x| x.0).collect();
            hit += all[..10].iter().filter(|x| kept.contains(&x.1)).count();
            asked += 10;
        }
        assert!(hit as f64 / asked as f64 >= 0.95, "recall {}", hit as f64 / asked as f64);
    }

    #[test]
    fn error_split_bounds_every_id_it_does_not_list() {
        let (n, dim) = (2000, 24);
        let mut d = data(n, dim, 37);
        for id in [5, 1500] {
            for v in &mut d[id * dim..(id + 1) * dim] {
                *v *= 40.0; // far outside the scales' sample: clamped codes, a large residual
            }
            d[id * dim] = 1.0;
        }
        let index = Index::new(dim, config(), &d[100 * dim..400 * dim]).unwrap();
        index.add(0, &d[..1000 * dim], 0).unwrap();
        let (_, _, covered) = index.error_split(8);
        assert_eq!(covered, 1000);
        // The second half carried forward from the first half's split, with the clamped vector in it.
        index.add(1000, &d[1000 * dim..], 0).unwrap();
        let (bound, listed, covered) = index.error_split(8);
        assert_eq!(covered, n);
        assert!(listed.len() <= 8 && bound <= index.max_error());
        let graph = index.graph.read().unwrap();
        for id in (0..n as u32).filter(|id| !listed.contains(id)) {
            let (seg, at) = locate(&graph, id);
            let residual = f32::from_bits(seg.meta[at].get().unwrap().residual.load(Ordering::Acquire));
            assert!(residual + ROUNDING <= bound, "id {id}: residual {residual} beyond the bound {bound}");
        }
        drop(graph);
        for q in data(10, dim, 41).chunks_exact(dim) {
            let qu = unit(q);
            for (id, s) in index.search(q, 50, 60).unwrap() {
                if listed.contains(&id) {
                    continue;
                }
                let row = unit(&d[id as usize * dim..(id as usize + 1) * dim]);
                let cos: f32 = row.iter().zip(&qu).map(|(a, b)| a * b).sum();
                assert!((cos - s).abs() <= bound, "{cos} vs {s} (bound {bound})");
            }
        }
        assert_eq!(index.error_split(n), (index.max_error(), Vec::new(), n));
    }

    #[test]
    fn deleted_ids_are_never_returned() {
        let (n, dim) = (800, 16);
        let d = data(n, dim, 13);
        let index = Index::new(dim, config(), &d).unwrap();
        index.add(0, &d, 1).unwrap();
        for id in (0..n as u32).step_by(2) {
            index.mark_deleted(id).unwrap();
        }
        for q in data(10, dim, 17).chunks_exact(dim) {
            let got = index.search(q, 20, 50).unwrap();
            assert_eq!(got.len(), 20);
            assert!(got.iter().all(|(id, _)| id % 2 == 1));
        }
        // Saved and opened again, and grown past the mapped segment: the same ids stay out.
        let dir = std::env::temp_dir().join(format!("hg-hnsw-deleted-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        index.save(&dir.join("t.bin")).unwrap();
        let back = Index::open(&dir.join("t.bin"), None).unwrap();
        back.add(n, &d, 1).unwrap();
        back.mark_deleted(n as u32 + 1).unwrap();
        for q in data(10, dim, 19).chunks_exact(dim) {
            let got = back.search(q, 40, 120).unwrap();
            assert_eq!(got.len(), 40);
            assert!(got.iter().all(|&(id, _)| (id as usize >= n || id % 2 == 1) && id != n as u32 + 1), "{got:?}");
            assert!(got.iter().any(|&(id, _)| id as usize >= n));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ids_must_continue_in_order_and_vectors_be_nonzero() {
        let index = Index::new(4, config(), &[]).unwrap();
        assert!(matches!(index.add(1, &[1.0, 0.0, 0.0, 0.0], 1), Err(IndexError::Shape(_))));
        assert!(matches!(index.add(0, &[0.0; 4], 1), Err(IndexError::Shape(_))));
        assert!(matches!(index.add(0, &[f32::NAN, 0.0, 0.0, 0.0], 1), Err(IndexError::Shape(_))));
        assert!(index.is_empty());
        index.add(0, &[1.0, 0.0, 0.0, 0.0], 1).unwrap();
        assert!(matches!(index.mark_deleted(5), Err(IndexError::Shape(_))));
        assert!(matches!(index.search(&[1.0], 1, 1), Err(IndexError::Shape(_))));
    }

    #[test]
    fn grows_past_its_first_segment_and_round_trips_through_a_file() {
        let (n, dim) = (EXTRA_SEGMENT + 700, 8);
        let d = data(n, dim, 19);
        let index = Index::new(dim, config(), &d[..100 * dim]).unwrap();
        index.add(0, &d[..500 * dim], 0).unwrap();
        index.add(500, &d[500 * dim..], 0).unwrap();
        index.mark_deleted(3).unwrap();
        let dir = std::env::temp_dir().join(format!("hg-hnsw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.bin");
        index.save(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let back = Index::open(&path, Some(&digest::hex(&digest::tree_sha256(&bytes)))).unwrap();
        let plain = digest::hex(&Sha256::digest(&bytes));
        assert!(matches!(Index::open(&path, Some(&plain)), Err(IndexError::Corrupt(_))));
        assert!(matches!(Index::open(&path, Some(&"0".repeat(64))), Err(IndexError::Corrupt(_))));
        assert_eq!(back.len(), n);
        assert!(back.is_deleted(3).unwrap());
        assert_eq!(back.max_error(), index.max_error());
        for q in data(5, dim, 23).chunks_exact(dim) {
            assert_eq!(back.search(q, 10, 50).unwrap(), index.search(q, 10, 50).unwrap());
        }
        back.add(n, &d[..dim * 300], 1).unwrap();
        assert_eq!(back.len(), n + 300);
        let rows: Vec<u32> = (0..5).collect();
        assert!(back.holds(&rows, &d[..5 * dim]).unwrap().iter().all(|x| *x));
        let mut truncated = bytes.clone();
        truncated.truncate(bytes.len() - 4);
        std::fs::write(&path, &truncated).unwrap();
        assert!(matches!(Index::open(&path, None), Err(IndexError::Corrupt(_))));
        let mut wild = bytes;
        let links = Layout::new(n, dim, dim * config().codes.width(), 32).links;
        wild[links + 4..links + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        wild[links..links + 4].copy_from_slice(&1u32.to_le_bytes());
        std::fs::write(&path, &wild).unwrap();
        assert!(matches!(Index::open(&path, None), Err(IndexError::Corrupt(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
