//! Erlang External Term Format (ETF) encoder and the version-1 trajectory fingerprint.
//!
//! hippograph's ingestion records must be byte-compatible with the Elixir library it
//! mirrors, whose fingerprint is SHA-256 over
//! `term_to_binary(Term, [deterministic, {minor_version, 2}])`. This module reproduces
//! that encoding without an Erlang runtime (docs/architecture.md, fingerprint):
//!
//! * integers: `SMALL_INTEGER_EXT` (0..=255), `INTEGER_EXT` (32-bit signed), otherwise
//!   `SMALL_BIG_EXT` / `LARGE_BIG_EXT` with a minimal little-endian magnitude;
//! * floats: `NEW_FLOAT_EXT` (big-endian IEEE 754); NaN and infinities do not exist in
//!   Erlang and are refused;
//! * atoms: `SMALL_ATOM_UTF8_EXT` / `ATOM_UTF8_EXT` (at most 255 characters);
//! * binaries: `BINARY_EXT`; tuples: `SMALL_TUPLE_EXT` / `LARGE_TUPLE_EXT`;
//! * lists: `NIL_EXT` when empty, `STRING_EXT` when every element is an integer in
//!   0..=255 and there are fewer than 65536 of them, otherwise `LIST_EXT` ending in `NIL_EXT`;
//! * maps: `MAP_EXT` with pairs in Erlang's *map-key order* (what `deterministic` emits).
//!
//! Map-key order is Erlang's term order `number < atom < tuple < map < [] < list <
//! binary` with one refinement that Erlang applies to map keys (the "exact" comparison
//! that keeps `1` and `1.0` distinct keys): every integer sorts before every float,
//! whatever their values, and this holds recursively inside compound keys. So
//! `#{3 => a, 2.0 => b}` encodes the key `3` first. Within each class values compare
//! numerically (`-0.0 == 0.0`), tuples by size then elements, maps by size then sorted
//! keys then values in key order, lists element-wise, atoms and binaries byte-wise.
//! Two keys that are equal in that order (which an Erlang map cannot hold, e.g. `0.0`
//! and `-0.0`) are refused as [`EtfError::DuplicateMapKey`].
//!
//! Untrusted input is bounded: nesting depth and total encoded size are checked by an
//! iterative pre-pass before anything recursive runs, so no input can overflow the
//! stack, and every failure is a typed [`EtfError`] rather than a panic. [`Term`] also
//! drops iteratively, so even a very deep term built in Rust is freed safely.

use sha2::{Digest, Sha256};
use std::cmp::Ordering;
use std::fmt;

/// First byte of every external term.
pub const VERSION_MAGIC: u8 = 131;
/// Erlang's limit on the length of an atom, in characters.
pub const MAX_ATOM_CHARS: usize = 255;
/// Default bound on nesting depth (containers inside containers).
pub const DEFAULT_MAX_DEPTH: usize = 512;
/// Default bound on the encoded size of one term, in bytes (256 MiB).
pub const DEFAULT_MAX_BYTES: usize = 256 << 20;
/// Version of the trajectory fingerprint computed by [`fingerprint_v1`].
pub const FINGERPRINT_VERSION: u8 = 1;
/// First element of the fingerprinted trajectory tuple.
pub const TRAJECTORY_TAG: &str = "mnemosyne_trajectory";

const NEW_FLOAT_EXT: u8 = 70;
const SMALL_INTEGER_EXT: u8 = 97;
const INTEGER_EXT: u8 = 98;
const SMALL_TUPLE_EXT: u8 = 104;
const LARGE_TUPLE_EXT: u8 = 105;
const NIL_EXT: u8 = 106;
const STRING_EXT: u8 = 107;
const LIST_EXT: u8 = 108;
const BINARY_EXT: u8 = 109;
const SMALL_BIG_EXT: u8 = 110;
const LARGE_BIG_EXT: u8 = 111;
const MAP_EXT: u8 = 116;
const ATOM_UTF8_EXT: u8 = 118;
const SMALL_ATOM_UTF8_EXT: u8 = 119;
/// `STRING_EXT` carries a 16-bit length.
const MAX_STRING_EXT_LEN: usize = 0xffff;

/// Encoded size of a float (`NEW_FLOAT_EXT`).
pub const FLOAT_SIZE: usize = 9;
/// Encoded size of the empty list (`NIL_EXT`), the least any list takes.
pub const NIL_SIZE: usize = 1;
/// Encoded size of a map's header (`MAP_EXT` and its pair count); the pairs follow it.
pub const MAP_HEADER_SIZE: usize = 5;
/// `LIST_EXT` with its 32-bit length, and the `NIL_EXT` tail.
const LIST_FRAME_SIZE: usize = 6;
/// `STRING_EXT` with its 16-bit length; one byte per element follows.
const STRING_HEADER_SIZE: usize = 3;

/// An Erlang term, as far as hippograph's metadata mapping needs one.
///
/// Equality (`PartialEq`) is structural, not Erlang's: `Int(5)` and an equivalent
/// `Big` differ here although they encode identically.
#[derive(Debug, Clone, PartialEq)]
pub enum Term {
    /// A byte string (`BINARY_EXT`); Python `str` (as UTF-8) and `bytes` map here.
    Binary(Vec<u8>),
    /// An integer that fits in 64 bits.
    Int(i64),
    /// An integer of any size: sign and little-endian magnitude. Leading zero bytes
    /// are allowed, and a value that fits a smaller encoding is encoded as Erlang
    /// would (the representation never leaks into the bytes).
    Big { negative: bool, magnitude: Vec<u8> },
    /// A finite float (NaN and infinities are refused by the encoder).
    Float(f64),
    /// An atom; `true`, `false` and `nil` are ordinary atoms.
    Atom(String),
    /// A proper list.
    List(Vec<Term>),
    /// A tuple.
    Tuple(Vec<Term>),
    /// A map, pairs in any order; the encoder sorts them.
    Map(Vec<(Term, Term)>),
}

impl Term {
    /// A binary holding the UTF-8 bytes of `s`.
    pub fn binary(s: &str) -> Term {
        Term::Binary(s.as_bytes().to_vec())
    }

    /// An atom named `name`.
    pub fn atom(name: &str) -> Term {
        Term::Atom(name.to_string())
    }

    fn has_children(&self) -> bool {
        match self {
            Term::List(items) | Term::Tuple(items) => !items.is_empty(),
            Term::Map(pairs) => !pairs.is_empty(),
            _ => false,
        }
    }
}

impl Drop for Term {
    /// Frees nested containers with an explicit stack so that dropping a term nested
    /// deeper than the thread's stack allows cannot crash the process.
    fn drop(&mut self) {
        if !self.has_children() {
            return;
        }
        let mut pending: Vec<Term> = Vec::new();
        detach_children(self, &mut pending);
        while let Some(mut term) = pending.pop() {
            detach_children(&mut term, &mut pending);
        }
    }
}

/// Moves the children of `term` that have children of their own onto `pending`;
/// leaf children are dropped in place (their drop does not recurse).
fn detach_children(term: &mut Term, pending: &mut Vec<Term>) {
    match term {
        Term::List(items) | Term::Tuple(items) if items.iter().any(Term::has_children) => pending.append(items),
        Term::Map(pairs) if pairs.iter().any(|(k, v)| k.has_children() || v.has_children()) => {
            for (k, v) in pairs.drain(..) {
                pending.push(k);
                pending.push(v);
            }
        }
        _ => {}
    }
}

/// Why a term could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EtfError {
    /// Containers are nested deeper than the configured limit.
    TooDeep { limit: usize },
    /// The encoding would exceed the configured size limit (bytes).
    TooLarge { limit: usize },
    /// A float is NaN or infinite; Erlang has no such values.
    NonFiniteFloat,
    /// An atom is longer than Erlang allows.
    AtomTooLong { chars: usize },
    /// A length does not fit the 32-bit field the format gives it.
    LengthOverflow { what: &'static str, len: usize },
    /// Two keys of one map are equal in Erlang's map-key order.
    DuplicateMapKey,
}

impl fmt::Display for EtfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EtfError::TooDeep { limit } => write!(f, "term is nested deeper than {limit} levels"),
            EtfError::TooLarge { limit } => write!(f, "term encodes to more than {limit} bytes"),
            EtfError::NonFiniteFloat => write!(f, "NaN and infinite floats have no Erlang representation"),
            EtfError::AtomTooLong { chars } => {
                write!(f, "atom of {chars} characters exceeds Erlang's limit of {MAX_ATOM_CHARS}")
            }
            EtfError::LengthOverflow { what, len } => {
                write!(f, "{what} of length {len} does not fit the external format's 32-bit length")
            }
            EtfError::DuplicateMapKey => write!(f, "map holds two keys that are equal as Erlang terms"),
        }
    }
}

impl std::error::Error for EtfError {}

/// Bounds applied to one encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Deepest allowed container nesting; the outermost term is at depth 0.
    pub max_depth: usize,
    /// Largest allowed encoding, in bytes, including the version byte.
    pub max_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_depth: DEFAULT_MAX_DEPTH, max_bytes: DEFAULT_MAX_BYTES }
    }
}

/// `term_to_binary(Term, [deterministic, {minor_version, 2}])` with default limits.
pub fn encode(term: &Term) -> Result<Vec<u8>, EtfError> {
    encode_with(term, Limits::default())
}

/// Like [`encode`], with explicit limits.
pub fn encode_with(term: &Term, limits: Limits) -> Result<Vec<u8>, EtfError> {
    let size = measure(term, 0, 1, limits)?;
    let mut enc = Encoder { out: Vec::with_capacity(size) };
    enc.out.push(VERSION_MAGIC);
    enc.term(term)?;
    Ok(enc.out)
}

/// The term hashed by fingerprint version 1:
/// `{mnemosyne_trajectory, 1, Goal, [{Obs, Act}, ...], Metadata}` with text as binaries.
pub fn trajectory_term(goal: &str, steps: &[(String, String)], metadata: Term) -> Term {
    Term::Tuple(vec![
        Term::atom(TRAJECTORY_TAG),
        Term::Int(i64::from(FINGERPRINT_VERSION)),
        Term::binary(goal),
        Term::List(steps.iter().map(|(o, a)| Term::Tuple(vec![Term::binary(o), Term::binary(a)])).collect()),
        metadata,
    ])
}

/// The external-format bytes of [`trajectory_term`], written without building it.
pub fn encode_trajectory_v1(goal: &str, steps: &[(String, String)], metadata: &Term) -> Result<Vec<u8>, EtfError> {
    let limits = Limits::default();
    check_len("step list", steps.len())?;
    // Version byte, tuple header, tag atom, version, goal, list header and tail.
    let mut size = 1
        + tuple_header_size(5)
        + atom_size(TRAJECTORY_TAG)
        + int_size(i64::from(FINGERPRINT_VERSION))
        + checked_binary_size(goal.len())?
        + LIST_FRAME_SIZE;
    for (obs, act) in steps {
        let step = tuple_header_size(2) + checked_binary_size(obs.len())? + checked_binary_size(act.len())?;
        size = size.checked_add(step).ok_or(EtfError::TooLarge { limit: limits.max_bytes })?;
    }
    // The metadata sits one level inside the outer tuple; `measure` also checks `size`.
    let size = measure(metadata, 1, size, limits)?;

    let mut enc = Encoder { out: Vec::with_capacity(size) };
    enc.out.push(VERSION_MAGIC);
    enc.out.extend_from_slice(&[SMALL_TUPLE_EXT, 5]);
    enc.atom(TRAJECTORY_TAG);
    enc.small_int(i64::from(FINGERPRINT_VERSION));
    enc.binary(goal.as_bytes());
    if steps.is_empty() {
        enc.out.push(NIL_EXT);
    } else {
        enc.out.push(LIST_EXT);
        enc.len32(steps.len());
        for (obs, act) in steps {
            enc.out.extend_from_slice(&[SMALL_TUPLE_EXT, 2]);
            enc.binary(obs.as_bytes());
            enc.binary(act.as_bytes());
        }
        enc.out.push(NIL_EXT);
    }
    enc.term(metadata)?;
    Ok(enc.out)
}

/// Fingerprint version 1 of a trajectory: SHA-256 of the external format of
/// `{mnemosyne_trajectory, 1, Goal, [{Obs, Act}, ...], Metadata}`.
///
/// The source id is deliberately not part of it: the digest names the payload, so
/// a resubmission under the same source can be recognised as identical or conflicting.
pub fn fingerprint_v1(goal: &str, steps: &[(String, String)], metadata: Term) -> Result<[u8; 32], EtfError> {
    let bytes = encode_trajectory_v1(goal, steps, &metadata)?;
    Ok(sha256(&bytes))
}

/// SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

// ---------------------------------------------------------------------------
// Integers

/// An integer in canonical form: `Small` whenever the value fits in an i64,
/// otherwise a trimmed magnitude (no high zero bytes) that does not.
#[derive(Clone, Copy)]
enum IntView<'a> {
    Small(i64),
    Big { negative: bool, magnitude: &'a [u8] },
}

fn int_view(term: &Term) -> Option<IntView<'_>> {
    match term {
        Term::Int(v) => Some(IntView::Small(*v)),
        Term::Big { negative, magnitude } => Some(big_view(*negative, magnitude)),
        _ => None,
    }
}

fn big_view(negative: bool, magnitude: &[u8]) -> IntView<'_> {
    let used = magnitude.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    let magnitude = &magnitude[..used];
    if used <= 8 {
        let mut le = [0u8; 8];
        le[..used].copy_from_slice(magnitude);
        let abs = i128::from(u64::from_le_bytes(le));
        if let Ok(small) = i64::try_from(if negative { -abs } else { abs }) {
            return IntView::Small(small);
        }
    }
    IntView::Big { negative, magnitude }
}

/// Sign and trimmed magnitude bytes of an i64 (kept in a fixed buffer).
fn small_parts(v: i64) -> (bool, [u8; 8], usize) {
    let le = v.unsigned_abs().to_le_bytes();
    let used = le.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    (v < 0, le, used)
}

fn view_size(view: IntView<'_>) -> usize {
    match view {
        IntView::Small(v) => int_size(v),
        IntView::Big { magnitude, .. } => big_size(magnitude.len()),
    }
}

fn cmp_ints(a: IntView<'_>, b: IntView<'_>) -> Ordering {
    if let (IntView::Small(x), IntView::Small(y)) = (a, b) {
        return x.cmp(&y);
    }
    let (a_neg, a_buf, a_len);
    let (b_neg, b_buf, b_len);
    let a_mag: &[u8] = match a {
        IntView::Small(v) => {
            (a_neg, a_buf, a_len) = small_parts(v);
            &a_buf[..a_len]
        }
        IntView::Big { negative, magnitude } => {
            a_neg = negative;
            magnitude
        }
    };
    let b_mag: &[u8] = match b {
        IntView::Small(v) => {
            (b_neg, b_buf, b_len) = small_parts(v);
            &b_buf[..b_len]
        }
        IntView::Big { negative, magnitude } => {
            b_neg = negative;
            magnitude
        }
    };
    // Zero has an empty magnitude and counts as non-negative.
    let a_neg = a_neg && !a_mag.is_empty();
    let b_neg = b_neg && !b_mag.is_empty();
    match (a_neg, b_neg) {
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        _ => {
            let by_abs = a_mag.len().cmp(&b_mag.len()).then_with(|| a_mag.iter().rev().cmp(b_mag.iter().rev()));
            if a_neg {
                by_abs.reverse()
            } else {
                by_abs
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Sizes and the bounded pre-pass
//
// The encoded size of each kind of term (the version byte aside). The pre-pass
// bounds a term with them; a caller that builds a `Term` from foreign data uses
// the same table to stop before an oversized term is built.

/// Encoded size of an atom named `name`.
pub fn atom_size(name: &str) -> usize {
    if name.len() <= 255 {
        2 + name.len()
    } else {
        3 + name.len()
    }
}

/// Encoded size of a binary of `len` bytes (the pre-pass refuses lengths beyond 32 bits).
pub fn binary_size(len: usize) -> usize {
    len.saturating_add(5)
}

/// Encoded size of an integer that fits in 64 bits.
pub fn int_size(v: i64) -> usize {
    if (0..=255).contains(&v) {
        2
    } else if i32::try_from(v).is_ok() {
        5
    } else {
        big_size(small_parts(v).2)
    }
}

/// Encoded size of an integer with `digits` bytes of magnitude (no high zero bytes)
/// that does not fit in 64 bits.
pub fn big_size(digits: usize) -> usize {
    if digits <= 255 {
        3 + digits
    } else {
        6 + digits
    }
}

/// Encoded size of a tuple's header; the elements follow it.
pub fn tuple_header_size(arity: usize) -> usize {
    if arity <= 255 {
        2
    } else {
        5
    }
}

/// Encoded size of the list `items`, whose elements encode to `elements` bytes on their
/// own: `[]`, a string of one byte per element, or a `LIST_EXT` holding the elements.
pub fn list_size(items: &[Term], elements: usize) -> usize {
    if items.is_empty() {
        NIL_SIZE
    } else if is_byte_string(items) {
        STRING_HEADER_SIZE + items.len()
    } else {
        elements.saturating_add(LIST_FRAME_SIZE)
    }
}

fn checked_binary_size(len: usize) -> Result<usize, EtfError> {
    check_len("binary", len)?;
    Ok(binary_size(len))
}

fn check_len(what: &'static str, len: usize) -> Result<(), EtfError> {
    if u32::try_from(len).is_err() {
        return Err(EtfError::LengthOverflow { what, len });
    }
    Ok(())
}

/// Whether Erlang would encode this (non-empty) list as `STRING_EXT`.
fn is_byte_string(items: &[Term]) -> bool {
    !items.is_empty()
        && items.len() <= MAX_STRING_EXT_LEN
        && items.iter().all(|t| matches!(int_view(t), Some(IntView::Small(v)) if (0..=255).contains(&v)))
}

/// Checks every bound and value rule without recursion and returns
/// `already + encoded size of term`; `depth` is the depth of `term` itself.
fn measure(term: &Term, depth: usize, already: usize, limits: Limits) -> Result<usize, EtfError> {
    let too_large = || EtfError::TooLarge { limit: limits.max_bytes };
    let mut total = already;
    let mut stack: Vec<(&Term, usize)> = vec![(term, depth)];
    while let Some((t, d)) = stack.pop() {
        if d > limits.max_depth {
            return Err(EtfError::TooDeep { limit: limits.max_depth });
        }
        let own = match t {
            Term::Binary(b) => checked_binary_size(b.len())?,
            Term::Int(v) => int_size(*v),
            Term::Big { negative, magnitude } => {
                let view = big_view(*negative, magnitude);
                if let IntView::Big { magnitude, .. } = view {
                    check_len("integer magnitude", magnitude.len())?;
                }
                view_size(view)
            }
            Term::Float(f) => {
                if !f.is_finite() {
                    return Err(EtfError::NonFiniteFloat);
                }
                FLOAT_SIZE
            }
            Term::Atom(name) => {
                let chars = name.chars().count();
                if chars > MAX_ATOM_CHARS {
                    return Err(EtfError::AtomTooLong { chars });
                }
                atom_size(name)
            }
            Term::List(items) => {
                check_len("list", items.len())?;
                if items.is_empty() {
                    NIL_SIZE
                } else if is_byte_string(items) {
                    STRING_HEADER_SIZE + items.len()
                } else {
                    stack.extend(items.iter().map(|c| (c, d + 1)));
                    LIST_FRAME_SIZE
                }
            }
            Term::Tuple(items) => {
                check_len("tuple", items.len())?;
                stack.extend(items.iter().map(|c| (c, d + 1)));
                tuple_header_size(items.len())
            }
            Term::Map(pairs) => {
                check_len("map", pairs.len())?;
                for (k, v) in pairs {
                    stack.push((k, d + 1));
                    stack.push((v, d + 1));
                }
                MAP_HEADER_SIZE
            }
        };
        total = total.checked_add(own).ok_or_else(too_large)?;
        if total > limits.max_bytes {
            return Err(too_large());
        }
    }
    Ok(total)
}

// ---------------------------------------------------------------------------
// Map-key order

/// Rank of a term's class in Erlang's map-key order (integers before floats).
fn class(term: &Term) -> u8 {
    match term {
        Term::Int(_) | Term::Big { .. } => 0,
        Term::Float(_) => 1,
        Term::Atom(_) => 2,
        Term::Tuple(_) => 3,
        Term::Map(_) => 4,
        Term::List(items) if items.is_empty() => 5,
        Term::List(_) => 6,
        Term::Binary(_) => 7,
    }
}

/// Erlang's exact (map-key) order. Recursion is bounded by the depth the pre-pass
/// has already checked.
fn cmp_terms(a: &Term, b: &Term) -> Ordering {
    let by_class = class(a).cmp(&class(b));
    if by_class != Ordering::Equal {
        return by_class;
    }
    match (a, b) {
        (Term::Float(x), Term::Float(y)) => x.partial_cmp(y).unwrap_or(Ordering::Equal),
        (Term::Atom(x), Term::Atom(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Term::Binary(x), Term::Binary(y)) => x.cmp(y),
        (Term::Tuple(x), Term::Tuple(y)) => x.len().cmp(&y.len()).then_with(|| cmp_seq(x, y)),
        (Term::List(x), Term::List(y)) => cmp_seq(x, y).then_with(|| x.len().cmp(&y.len())),
        (Term::Map(x), Term::Map(y)) => x.len().cmp(&y.len()).then_with(|| cmp_maps(x, y)),
        _ => match (int_view(a), int_view(b)) {
            (Some(x), Some(y)) => cmp_ints(x, y),
            _ => Ordering::Equal,
        },
    }
}

fn cmp_seq(x: &[Term], y: &[Term]) -> Ordering {
    x.iter().zip(y).map(|(a, b)| cmp_terms(a, b)).find(|o| o.is_ne()).unwrap_or(Ordering::Equal)
}

fn sorted_pairs(pairs: &[(Term, Term)]) -> Vec<&(Term, Term)> {
    let mut sorted: Vec<&(Term, Term)> = pairs.iter().collect();
    sorted.sort_by(|p, q| cmp_terms(&p.0, &q.0));
    sorted
}

/// Maps of equal size: keys in key order first, then values in key order.
fn cmp_maps(x: &[(Term, Term)], y: &[(Term, Term)]) -> Ordering {
    let (x, y) = (sorted_pairs(x), sorted_pairs(y));
    let keys = x.iter().zip(&y).map(|(p, q)| cmp_terms(&p.0, &q.0)).find(|o| o.is_ne());
    keys.or_else(|| x.iter().zip(&y).map(|(p, q)| cmp_terms(&p.1, &q.1)).find(|o| o.is_ne())).unwrap_or(Ordering::Equal)
}

// ---------------------------------------------------------------------------
// Writing

struct Encoder {
    out: Vec<u8>,
}

impl Encoder {
    /// Lengths were checked to fit in 32 bits by the pre-pass.
    fn len32(&mut self, len: usize) {
        self.out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
    }

    fn small_int(&mut self, v: i64) {
        if let Ok(byte) = u8::try_from(v) {
            self.out.extend_from_slice(&[SMALL_INTEGER_EXT, byte]);
        } else if let Ok(word) = i32::try_from(v) {
            self.out.push(INTEGER_EXT);
            self.out.extend_from_slice(&word.to_be_bytes());
        } else {
            let (negative, le, used) = small_parts(v);
            self.big(negative, &le[..used]);
        }
    }

    fn big(&mut self, negative: bool, magnitude: &[u8]) {
        if let Ok(n) = u8::try_from(magnitude.len()) {
            self.out.extend_from_slice(&[SMALL_BIG_EXT, n]);
        } else {
            self.out.push(LARGE_BIG_EXT);
            self.len32(magnitude.len());
        }
        self.out.push(u8::from(negative));
        self.out.extend_from_slice(magnitude);
    }

    fn atom(&mut self, name: &str) {
        if let Ok(n) = u8::try_from(name.len()) {
            self.out.extend_from_slice(&[SMALL_ATOM_UTF8_EXT, n]);
        } else {
            // At most 255 characters of at most 4 bytes each: fits in 16 bits.
            self.out.push(ATOM_UTF8_EXT);
            self.out.extend_from_slice(&u16::try_from(name.len()).unwrap_or(u16::MAX).to_be_bytes());
        }
        self.out.extend_from_slice(name.as_bytes());
    }

    fn binary(&mut self, bytes: &[u8]) {
        self.out.push(BINARY_EXT);
        self.len32(bytes.len());
        self.out.extend_from_slice(bytes);
    }

    fn term(&mut self, term: &Term) -> Result<(), EtfError> {
        match term {
            Term::Binary(b) => self.binary(b),
            Term::Int(_) | Term::Big { .. } => match int_view(term) {
                Some(IntView::Small(v)) => self.small_int(v),
                Some(IntView::Big { negative, magnitude }) => self.big(negative, magnitude),
                None => {}
            },
            Term::Float(f) => {
                self.out.push(NEW_FLOAT_EXT);
                self.out.extend_from_slice(&f.to_bits().to_be_bytes());
            }
            Term::Atom(name) => self.atom(name),
            Term::List(items) if items.is_empty() => self.out.push(NIL_EXT),
            Term::List(items) if is_byte_string(items) => {
                self.out.push(STRING_EXT);
                self.out.extend_from_slice(&u16::try_from(items.len()).unwrap_or(u16::MAX).to_be_bytes());
                for item in items {
                    if let Some(IntView::Small(v)) = int_view(item) {
                        self.out.push(u8::try_from(v).unwrap_or(0));
                    }
                }
            }
            Term::List(items) => {
                self.out.push(LIST_EXT);
                self.len32(items.len());
                for item in items {
                    self.term(item)?;
                }
                self.out.push(NIL_EXT);
            }
            Term::Tuple(items) => {
                if let Ok(n) = u8::try_from(items.len()) {
                    self.out.extend_from_slice(&[SMALL_TUPLE_EXT, n]);
                } else {
                    self.out.push(LARGE_TUPLE_EXT);
                    self.len32(items.len());
                }
                for item in items {
                    self.term(item)?;
                }
            }
            Term::Map(pairs) => {
                let sorted = sorted_pairs(pairs);
                if sorted.windows(2).any(|w| cmp_terms(&w[0].0, &w[1].0).is_eq()) {
                    return Err(EtfError::DuplicateMapKey);
                }
                self.out.push(MAP_EXT);
                self.len32(sorted.len());
                for (k, v) in sorted {
                    self.term(k)?;
                    self.term(v)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn enc(term: Term) -> String {
        hex(&encode(&term).expect("encodes"))
    }

    fn map(pairs: Vec<(Term, Term)>) -> Term {
        Term::Map(pairs)
    }

    fn steps(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(o, a)| (o.to_string(), a.to_string())).collect()
    }

    fn nested_lists(levels: usize) -> Term {
        let mut t = Term::List(vec![]);
        for _ in 0..levels {
            t = Term::List(vec![t]);
        }
        t
    }

    #[test]
    fn small_integers_use_one_byte() {
        assert_eq!(enc(Term::Int(0)), "836100");
        assert_eq!(enc(Term::Int(255)), "8361ff");
    }

    #[test]
    fn integers_outside_a_byte_use_32_bits() {
        assert_eq!(enc(Term::Int(256)), "836200000100");
        assert_eq!(enc(Term::Int(-1)), "8362ffffffff");
        assert_eq!(enc(Term::Int(i64::from(i32::MAX))), "83627fffffff");
        assert_eq!(enc(Term::Int(i64::from(i32::MIN))), "836280000000");
    }

    #[test]
    fn integers_beyond_32_bits_are_small_bigs() {
        assert_eq!(enc(Term::Int(2_147_483_648)), "836e040000000080");
        assert_eq!(enc(Term::Int(-2_147_483_649)), "836e040101000080");
        assert_eq!(enc(Term::Int(i64::MIN)), "836e08010000000000000080");
        assert_eq!(enc(Term::Int(i64::MAX)), "836e0800ffffffffffffff7f");
    }

    #[test]
    fn big_integers_encode_minimal_magnitude() {
        // 2^64 and -(2^70)
        let two_64 = Term::Big { negative: false, magnitude: vec![0, 0, 0, 0, 0, 0, 0, 0, 1] };
        assert_eq!(enc(two_64), "836e0900000000000000000001");
        let neg = Term::Big { negative: true, magnitude: vec![0, 0, 0, 0, 0, 0, 0, 0, 0x40, 0, 0] };
        assert_eq!(enc(neg), "836e0901000000000000000040");
    }

    #[test]
    fn big_integers_that_fit_encode_as_small() {
        assert_eq!(enc(Term::Big { negative: false, magnitude: vec![7, 0, 0] }), "836107");
        assert_eq!(enc(Term::Big { negative: true, magnitude: vec![1] }), "8362ffffffff");
        assert_eq!(enc(Term::Big { negative: true, magnitude: vec![] }), "836100");
    }

    #[test]
    fn huge_integers_use_large_big() {
        let magnitude = vec![1u8; 256];
        let bytes = encode(&Term::Big { negative: false, magnitude: magnitude.clone() }).unwrap();
        assert_eq!(&bytes[..7], &[131, LARGE_BIG_EXT, 0, 0, 1, 0, 0]);
        assert_eq!(&bytes[7..], &magnitude[..]);
    }

    #[test]
    fn floats_are_big_endian_ieee() {
        assert_eq!(enc(Term::Float(1.5)), "83463ff8000000000000");
        assert_eq!(enc(Term::Float(-0.25)), "8346bfd0000000000000");
    }

    #[test]
    fn non_finite_floats_are_refused() {
        for f in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(encode(&Term::Float(f)), Err(EtfError::NonFiniteFloat));
        }
    }

    #[test]
    fn byte_lists_are_strings() {
        assert_eq!(enc(Term::List(vec![Term::Int(104), Term::Int(105)])), "836b00026869");
    }

    #[test]
    fn lists_with_other_elements_are_list_ext() {
        assert_eq!(enc(Term::List(vec![Term::Int(1), Term::Int(256)])), "836c00000002610162000001006a");
        assert_eq!(enc(Term::List(vec![Term::Int(-1)])), "836c0000000162ffffffff6a");
        assert_eq!(enc(Term::List(vec![Term::Float(1.0)])), "836c00000001463ff00000000000006a");
    }

    #[test]
    fn byte_lists_of_65536_elements_are_list_ext() {
        let longest = encode(&Term::List(vec![Term::Int(1); 65535])).unwrap();
        assert_eq!(&longest[..4], &[131, STRING_EXT, 0xff, 0xff]);
        let too_long = encode(&Term::List(vec![Term::Int(1); 65536])).unwrap();
        assert_eq!(&too_long[..6], &[131, LIST_EXT, 0, 1, 0, 0]);
    }

    #[test]
    fn empty_containers() {
        assert_eq!(enc(Term::List(vec![])), "836a");
        assert_eq!(enc(Term::Tuple(vec![])), "836800");
        assert_eq!(enc(map(vec![])), "837400000000");
        assert_eq!(enc(Term::Binary(vec![])), "836d00000000");
    }

    #[test]
    fn atoms_are_utf8() {
        assert_eq!(enc(Term::atom("ok")), "8377026f6b");
        assert_eq!(enc(Term::atom("clé")), "837704636cc3a9");
    }

    #[test]
    fn long_utf8_atoms_use_a_16_bit_length() {
        let name = "é".repeat(200); // 200 characters, 400 bytes
        let bytes = encode(&Term::Atom(name.clone())).unwrap();
        assert_eq!(&bytes[..4], &[131, ATOM_UTF8_EXT, 1, 144]);
        assert_eq!(&bytes[4..], name.as_bytes());
    }

    #[test]
    fn atoms_over_255_characters_are_refused() {
        assert!(encode(&Term::Atom("a".repeat(255))).is_ok());
        assert_eq!(encode(&Term::Atom("a".repeat(256))), Err(EtfError::AtomTooLong { chars: 256 }));
    }

    #[test]
    fn large_tuples_use_32_bit_arity() {
        let bytes = encode(&Term::Tuple(vec![Term::Int(0); 256])).unwrap();
        assert_eq!(&bytes[..6], &[131, LARGE_TUPLE_EXT, 0, 0, 1, 0]);
    }

    #[test]
    fn map_keys_follow_erlang_term_order() {
        let m = map(vec![
            (Term::binary("b"), Term::Int(1)),
            (Term::Tuple(vec![Term::atom("x")]), Term::Int(4)),
            (Term::List(vec![Term::Int(300)]), Term::Int(9)),
            (Term::List(vec![]), Term::Int(3)),
            (map(vec![]), Term::Int(2)),
            (Term::atom("a"), Term::Int(8)),
            (Term::Float(2.0), Term::Int(5)),
            (Term::Int(1), Term::Int(7)),
            (Term::Tuple(vec![]), Term::Int(6)),
        ]);
        let keys: Vec<u8> = match &m {
            Term::Map(pairs) => sorted_pairs(pairs).iter().map(|p| class(&p.0)).collect(),
            _ => unreachable!(),
        };
        assert_eq!(keys, vec![0, 1, 2, 3, 3, 4, 5, 6, 7]);
    }

    #[test]
    fn map_keys_put_every_integer_before_every_float() {
        let m = map(vec![(Term::Float(2.0), Term::Int(0)), (Term::Int(3), Term::Int(0))]);
        assert_eq!(enc(m), "837400000002610361004640000000000000006100");
    }

    #[test]
    fn map_keys_put_integers_before_floats_inside_tuples() {
        let m = map(vec![
            (Term::Tuple(vec![Term::Float(1.0)]), Term::Int(0)),
            (Term::Tuple(vec![Term::Int(5)]), Term::Int(1)),
        ]);
        let bytes = encode(&m).unwrap();
        assert_eq!(&bytes[6..11], &[SMALL_TUPLE_EXT, 1, SMALL_INTEGER_EXT, 5, SMALL_INTEGER_EXT]);
    }

    #[test]
    fn map_integer_keys_compare_by_value_across_sizes() {
        let m = map(vec![
            (Term::Big { negative: false, magnitude: vec![0, 0, 0, 0, 0, 0, 0, 0, 1] }, Term::Int(0)),
            (Term::Int(-5), Term::Int(0)),
            (Term::Big { negative: true, magnitude: vec![0, 0, 0, 0, 0, 0, 0, 0, 1] }, Term::Int(0)),
            (Term::Int(7), Term::Int(0)),
        ]);
        let Term::Map(pairs) = &m else { unreachable!() };
        let order: Vec<String> = sorted_pairs(pairs).iter().map(|p| hex(&encode(&p.0).unwrap())).collect();
        assert_eq!(order, ["836e0901000000000000000001", "8362fffffffb", "836107", "836e0900000000000000000001"]);
    }

    #[test]
    fn map_keys_of_equal_tuples_size_compare_elementwise() {
        let a = Term::Tuple(vec![Term::atom("a"), Term::Int(2)]);
        let b = Term::Tuple(vec![Term::atom("a"), Term::Int(10)]);
        let c = Term::Tuple(vec![Term::atom("b")]);
        assert_eq!(cmp_terms(&a, &b), Ordering::Less);
        assert_eq!(cmp_terms(&c, &a), Ordering::Less);
    }

    #[test]
    fn lists_compare_elementwise_then_by_length() {
        let short = Term::List(vec![Term::Int(1)]);
        let long = Term::List(vec![Term::Int(1), Term::Int(0)]);
        let bigger_head = Term::List(vec![Term::Int(2)]);
        assert_eq!(cmp_terms(&short, &long), Ordering::Less);
        assert_eq!(cmp_terms(&long, &bigger_head), Ordering::Less);
    }

    #[test]
    fn maps_compare_by_size_then_keys_then_values() {
        let one = map(vec![(Term::Int(9), Term::Int(9))]);
        let two_small = map(vec![(Term::Int(1), Term::Int(0)), (Term::Int(2), Term::Int(0))]);
        let two_value = map(vec![(Term::Int(2), Term::Int(0)), (Term::Int(1), Term::Int(1))]);
        let two_keys = map(vec![(Term::Int(1), Term::Int(0)), (Term::Int(3), Term::Int(0))]);
        assert_eq!(cmp_terms(&one, &two_small), Ordering::Less);
        assert_eq!(cmp_terms(&two_small, &two_value), Ordering::Less);
        assert_eq!(cmp_terms(&two_value, &two_keys), Ordering::Less);
    }

    #[test]
    fn binaries_compare_bytewise_then_by_length() {
        assert_eq!(cmp_terms(&Term::binary("ab"), &Term::binary("b")), Ordering::Less);
        assert_eq!(cmp_terms(&Term::binary("a"), &Term::binary("ab")), Ordering::Less);
    }

    #[test]
    fn duplicate_map_keys_are_refused() {
        let m =
            map(vec![(Term::Int(5), Term::Int(0)), (Term::Big { negative: false, magnitude: vec![5] }, Term::Int(1))]);
        assert_eq!(encode(&m), Err(EtfError::DuplicateMapKey));
        let zeros = map(vec![(Term::Float(0.0), Term::Int(0)), (Term::Float(-0.0), Term::Int(1))]);
        assert_eq!(encode(&zeros), Err(EtfError::DuplicateMapKey));
    }

    #[test]
    fn size_table_matches_the_encoding() {
        let len = |t: Term| encode(&t).unwrap().len() - 1;
        assert_eq!(len(Term::atom("nil")), atom_size("nil"));
        assert_eq!(len(Term::Atom("é".repeat(200))), atom_size(&"é".repeat(200)));
        assert_eq!(len(Term::Binary(vec![1; 7])), binary_size(7));
        assert_eq!(len(Term::Float(0.5)), FLOAT_SIZE);
        for v in [0, 255, 256, -1, i64::from(i32::MAX) + 1, i64::MIN] {
            assert_eq!(len(Term::Int(v)), int_size(v), "{v}");
        }
        assert_eq!(len(Term::Big { negative: false, magnitude: vec![1; 300] }), big_size(300));
        assert_eq!(len(Term::Tuple(vec![])), tuple_header_size(0));
        assert_eq!(len(Term::Tuple(vec![Term::Int(0); 256])), tuple_header_size(256) + 256 * int_size(0));
        assert_eq!(len(map(vec![(Term::Int(1), Term::Int(2))])), MAP_HEADER_SIZE + 2 * int_size(1));
        for items in [vec![], vec![Term::Int(104), Term::Int(105)], vec![Term::Int(1), Term::Int(256)]] {
            let elements: usize = items.iter().map(|t| encode(t).unwrap().len() - 1).sum();
            assert_eq!(list_size(&items, elements), len(Term::List(items.clone())));
        }
    }

    #[test]
    fn nesting_at_the_limit_is_accepted() {
        assert!(encode(&nested_lists(DEFAULT_MAX_DEPTH)).is_ok());
    }

    #[test]
    fn nesting_past_the_limit_is_refused() {
        let err = encode(&nested_lists(DEFAULT_MAX_DEPTH + 1)).unwrap_err();
        assert_eq!(err, EtfError::TooDeep { limit: DEFAULT_MAX_DEPTH });
    }

    #[test]
    fn very_deep_terms_fail_and_drop_without_overflowing_the_stack() {
        let deep = nested_lists(1_000_000);
        assert_eq!(encode(&deep), Err(EtfError::TooDeep { limit: DEFAULT_MAX_DEPTH }));
        let deep_map = (0..200_000).fold(Term::Int(0), |t, _| map(vec![(Term::Int(0), t)]));
        assert!(matches!(encode(&deep_map), Err(EtfError::TooDeep { .. })));
    }

    #[test]
    fn size_limit_is_enforced() {
        let limits = Limits { max_depth: 8, max_bytes: 100 };
        assert!(encode_with(&Term::Binary(vec![0; 90]), limits).is_ok());
        assert_eq!(encode_with(&Term::Binary(vec![0; 100]), limits), Err(EtfError::TooLarge { limit: 100 }));
    }

    #[test]
    fn encode_trajectory_matches_encoding_the_term() {
        let meta = map(vec![(Term::binary("k"), Term::List(vec![Term::Int(1), Term::Float(0.5)]))]);
        let s = steps(&[("o1", "a1"), ("o2", "a2")]);
        let direct = encode_trajectory_v1("g", &s, &meta).unwrap();
        assert_eq!(direct, encode(&trajectory_term("g", &s, meta)).unwrap());
        assert_eq!(
            encode_trajectory_v1("g", &[], &map(vec![])).unwrap(),
            encode(&trajectory_term("g", &[], map(vec![]))).unwrap()
        );
    }

    #[test]
    fn golden_minimal() {
        let s = steps(&[("build fails", "read the log")]);
        let bytes = encode_trajectory_v1("fix the build", &s, &map(vec![])).unwrap();
        assert_eq!(hex(&bytes), "83680577146d6e656d6f73796e655f7472616a6563746f727961016d0000000d66697820746865206275696c646c0000000168026d0000000b6275696c64206661696c736d0000000c7265616420746865206c6f676a7400000000");
        assert_eq!(
            hex(&fingerprint_v1("fix the build", &s, map(vec![])).unwrap()),
            "c83bfc429ac24768d27e8ae389415f2eaef2f1b1125b6bbef2ffa4777e69dd1e"
        );
    }

    #[test]
    fn golden_meta_atom_keys() {
        let meta = map(vec![(Term::atom("source"), Term::binary("cli")), (Term::atom("attempt"), Term::Int(3))]);
        let digest = fingerprint_v1("g", &steps(&[("o", "a")]), meta).unwrap();
        assert_eq!(hex(&digest), "fe2e0b1bae2e99d3aedfcecc133141d73c962664b4010e1827bbbfb94a3fe74f");
    }

    #[test]
    fn golden_meta_mixed_key_types() {
        let meta = map(vec![
            (Term::binary("b"), Term::Int(1)),
            (Term::Int(1), Term::Int(7)),
            (Term::atom("a"), Term::Int(8)),
            (Term::Tuple(vec![Term::atom("x")]), Term::Int(4)),
            (Term::Float(2.0), Term::Int(5)),
            (Term::Tuple(vec![]), Term::Int(6)),
        ]);
        let bytes = encode_trajectory_v1("g", &steps(&[("o", "a")]), &meta).unwrap();
        assert_eq!(hex(&bytes), "83680577146d6e656d6f73796e655f7472616a6563746f727961016d00000001676c0000000168026d000000016f6d00000001616a7400000006610161074640000000000000006105770161610868006106680177017861046d00000001626101");
        let digest = fingerprint_v1("g", &steps(&[("o", "a")]), meta).unwrap();
        assert_eq!(hex(&digest), "7180454dc9316357ab847bfe9fb51157bbff2fdb41e3a603b009b89ffd1110f6");
    }

    #[test]
    fn golden_meta_bigints() {
        let two_64 = Term::Big { negative: false, magnitude: vec![0, 0, 0, 0, 0, 0, 0, 0, 1] };
        let neg_2_70 = Term::Big { negative: true, magnitude: vec![0, 0, 0, 0, 0, 0, 0, 0, 0x40] };
        // 10^40
        let ten_40 = Term::Big {
            negative: false,
            magnitude: vec![0, 0, 0, 0, 0, 0x61, 0xf5, 0xb9, 0xab, 0xbf, 0xa4, 0x5c, 0xc3, 0xf1, 0x29, 0x63, 0x1d],
        };
        let meta = map(vec![(Term::binary("a"), two_64), (Term::binary("b"), neg_2_70), (Term::binary("c"), ten_40)]);
        let digest = fingerprint_v1("g", &steps(&[("o", "a")]), meta).unwrap();
        assert_eq!(hex(&digest), "7badccf1e010ccb73b70fb4383537cfaedba4ef2e92bd89df9afc85831a77119");
    }

    #[test]
    fn golden_meta_list_of_small_ints() {
        let meta = map(vec![(Term::binary("codes"), Term::List(vec![Term::Int(104), Term::Int(105)]))]);
        let digest = fingerprint_v1("g", &steps(&[("o", "a")]), meta).unwrap();
        assert_eq!(hex(&digest), "aa65cfa9142ed3c064f49f68cb7a18d757aa1804241d7efa2cb668c18226d914");
    }

    #[test]
    fn fingerprint_metadata_depth_counts_the_outer_tuple() {
        let meta = nested_lists(DEFAULT_MAX_DEPTH - 1);
        assert!(fingerprint_v1("g", &steps(&[("o", "a")]), meta).is_ok());
        let meta = nested_lists(DEFAULT_MAX_DEPTH);
        assert_eq!(
            fingerprint_v1("g", &steps(&[("o", "a")]), meta),
            Err(EtfError::TooDeep { limit: DEFAULT_MAX_DEPTH })
        );
    }
}
