//! One graph write transaction planned in one pass: records encoded, links merged with the
//! stored ones, the change-log entry written.
//!
//! A [`GraphWrite`] is fed the operations of one write (nodes put or deleted, links added,
//! metadata put or deleted) and reads what it needs of the stored state through [`Stored`]: a
//! node's record, its links, whether it has metadata. It keeps its own view of every key it
//! changed, so it never reads back a key it wrote, and [`GraphWrite::finish`] hands back the
//! final value of every key the write touches (or its deletion). The store applies them in
//! its transaction; nothing is written before `finish`, so a rejected write leaves nothing.
//!
//! The record formats are the LMDB backend's (one format byte, then msgpack): a node is the
//! format byte, its type code and `[created_us, {field: value}]`; its links are
//! `{edge: [id, ...]}` with the ids sorted; an embedding is raw little-endian float32; the
//! change-log entry lists the ids the write touched, sorted. Links are undirected, so a link
//! is stored on both ends, and a node put again or deleted loses its links on both ends.

use rustc_hash::FxHashMap as HashMap;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};

/// The format byte every record starts with.
pub const FORMAT_VERSION: u8 = 1;
/// The edge types, by code: a link record names them by these words.
pub const EDGES: [&str; 4] = ["membership", "hierarchical", "provenance", "sibling"];
/// Ids whose UTF-8 form is longer than this are keyed by a hash (LMDB keys hold 511 bytes).
pub const MAX_PLAIN_KEY: usize = 480;
/// The first byte of a hashed key (never the first byte of UTF-8 text).
pub const LONG_KEY: u8 = 0xFF;

/// The named databases a write touches, coded in the order the backend lists its databases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Db {
    Info = 0,
    Nodes = 1,
    Emb = 2,
    Links = 3,
    Meta = 4,
    Log = 6,
    Longids = 7,
    /// Embeddings by number, appended (`info/vectors_next` holds the next number); `Emb` holds
    /// those of nodes written before numbers, by node key.
    Vectors = 8,
}

/// The `info` key of the next embedding number.
pub const VECTORS_NEXT: &[u8] = b"vectors_next";

/// Where a stored node's embedding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vector {
    /// A record written before numbers: in `Emb` under the node's key, if anywhere.
    Keyed,
    /// In `Vectors` under this number.
    Numbered(u64),
    /// None.
    Absent,
}

/// The key of embedding number `n` in `Vectors`.
pub fn vector_key(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

/// A type-specific field's value (the node model allows no others).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'a str),
}

/// A node to put, with its own links (`(edge code, other id)`, applied after every node of the
/// write is put, like the write's other links).
#[derive(Debug, Clone)]
pub struct NewNode<'a> {
    pub id: &'a str,
    pub type_code: u8,
    pub created_us: i64,
    pub fields: Vec<(&'a str, Value<'a>)>,
    pub embedding: Option<&'a [f32]>,
}

/// Why a write cannot be planned.
#[derive(Debug)]
pub enum WriteError<E> {
    /// Reading the stored state failed.
    Read(E),
    /// A stored record could not be decoded.
    Corrupt(String),
    /// The write contradicts the store (an embedding of another dimension, an unknown edge).
    Invalid(String),
}

/// The stored state a write reads, by key, as of the start of the write.
pub trait Stored {
    type Error;
    fn get(&mut self, db: Db, key: &[u8]) -> Result<Option<Vec<u8>>, Self::Error>;
}

/// The key of an id: its UTF-8 bytes, or a SHA-256 behind [`LONG_KEY`] when too long.
pub fn key_of(id: &str) -> Vec<u8> {
    if id.len() <= MAX_PLAIN_KEY {
        id.as_bytes().to_vec()
    } else {
        let mut key = Vec::with_capacity(33);
        key.push(LONG_KEY);
        key.extend_from_slice(&Sha256::digest(id.as_bytes()));
        key
    }
}

/// An embedding's record: its values as little-endian float32, in one allocation.
pub fn embedding_bytes(values: &[f32]) -> Vec<u8> {
    let mut out = vec![0; values.len() * 4];
    for (bytes, x) in out.chunks_exact_mut(4).zip(values) {
        bytes.copy_from_slice(&x.to_le_bytes());
    }
    out
}

/// The change-log entries the write of entry `next` deletes, to keep the newest `log_keep`: none
/// most of the time, then a run of `log_keep / 64` (at most 64, at least 1) at once. Deleting the
/// oldest entry at every write would copy the log's first leaf page and its branch pages at
/// every commit, besides the last leaf that takes the new entry; a run deleted at once shares
/// those pages. The log then holds between `log_keep` and `log_keep + 63` entries, the newest
/// ones without a gap, which is what a reader catching up needs.
pub fn pruned(next: u64, log_keep: u64) -> Option<std::ops::RangeInclusive<u64>> {
    let run = (log_keep / 64).clamp(1, 64);
    match next.checked_sub(log_keep) {
        Some(last) if last > 0 && last % run == 0 => Some((last + 1).saturating_sub(run).max(1)..=last),
        _ => None,
    }
}

/// The links of one node, by edge code.
type EdgeSets = [BTreeSet<String>; 4];

fn write_str(out: &mut Vec<u8>, s: &str) {
    rmp::encode::write_str(out, s).expect("writing to a Vec cannot fail");
}

/// A node record: format byte, type code, msgpack `[created_us, vector, {field: value}]`, where
/// `vector` is the number of its embedding in `Vectors`, or nil without one. (A record written
/// before numbers is `[created_us, {field: value}]`, its embedding in `Emb` under its key.)
pub fn encode_node(node: &NewNode<'_>, vector: Option<u64>) -> Vec<u8> {
    let text: usize =
        node.fields.iter().map(|(name, v)| name.len() + if let Value::Str(s) = v { s.len() } else { 0 }).sum();
    let mut out = Vec::with_capacity(16 + text + 10 * node.fields.len());
    out.extend_from_slice(&[FORMAT_VERSION, node.type_code]);
    let w = &mut out;
    rmp::encode::write_array_len(w, 3).expect("vec");
    rmp::encode::write_sint(w, node.created_us).expect("vec");
    match vector {
        Some(n) => {
            rmp::encode::write_uint(w, n).expect("vec");
        }
        None => rmp::encode::write_nil(w).expect("vec"),
    }
    rmp::encode::write_map_len(w, node.fields.len() as u32).expect("vec");
    for (name, value) in &node.fields {
        write_str(w, name);
        match *value {
            Value::Nil => rmp::encode::write_nil(w).expect("vec"),
            Value::Bool(b) => rmp::encode::write_bool(w, b).expect("vec"),
            Value::Int(i) => {
                rmp::encode::write_sint(w, i).expect("vec");
            }
            Value::Float(f) => rmp::encode::write_f64(w, f).expect("vec"),
            Value::Str(s) => write_str(w, s),
        }
    }
    out
}

/// A links record: format byte, msgpack `{edge: [id, ...]}` over the non-empty edges.
pub fn encode_links(links: &EdgeSets) -> Vec<u8> {
    let ids: usize = links.iter().flatten().map(|id| id.len() + 2).sum();
    let mut out = Vec::with_capacity(8 + ids + 16 * links.len());
    out.push(FORMAT_VERSION);
    let used = links.iter().filter(|ids| !ids.is_empty()).count();
    rmp::encode::write_map_len(&mut out, used as u32).expect("vec");
    for (code, ids) in links.iter().enumerate().filter(|(_, ids)| !ids.is_empty()) {
        write_str(&mut out, EDGES[code]);
        rmp::encode::write_array_len(&mut out, ids.len() as u32).expect("vec");
        for id in ids {
            write_str(&mut out, id);
        }
    }
    out
}

fn read_str(data: &mut &[u8]) -> Result<String, String> {
    let len = rmp::decode::read_str_len(data).map_err(|e| format!("{e:?}"))? as usize;
    if data.len() < len {
        return Err("truncated string".into());
    }
    let (text, rest) = data.split_at(len);
    *data = rest;
    String::from_utf8(text.to_vec()).map_err(|_| "an id is not UTF-8".to_string())
}

/// The links of a stored links record.
pub fn decode_links(data: &[u8]) -> Result<EdgeSets, String> {
    let corrupt = |why: String| format!("corrupt links record: {why}");
    match data.first() {
        None => return Err(corrupt("empty".into())),
        Some(&FORMAT_VERSION) => {}
        Some(v) => return Err(corrupt(format!("format version {v}, this hippograph reads {FORMAT_VERSION}"))),
    }
    let mut rest = &data[1..];
    let mut links = EdgeSets::default();
    let edges = rmp::decode::read_map_len(&mut rest).map_err(|e| corrupt(format!("{e:?}")))?;
    for _ in 0..edges {
        let edge = read_str(&mut rest).map_err(corrupt)?;
        let code = EDGES.iter().position(|e| *e == edge).ok_or_else(|| corrupt(format!("unknown edge {edge:?}")))?;
        let count = rmp::decode::read_array_len(&mut rest).map_err(|e| corrupt(format!("{e:?}")))?;
        for _ in 0..count {
            links[code].insert(read_str(&mut rest).map_err(corrupt)?);
        }
    }
    if !rest.is_empty() {
        return Err(corrupt("trailing bytes".into()));
    }
    Ok(links)
}

/// The type code of a stored node record.
fn type_code_of(data: &[u8]) -> Result<u8, String> {
    match data {
        [FORMAT_VERSION, code, ..] => Ok(*code),
        [] | [_] => Err("corrupt node record: too short".into()),
        [v, ..] => Err(format!("node record has format version {v}; this hippograph reads {FORMAT_VERSION}")),
    }
}

/// Where the embedding of the node of stored record `data` is.
pub fn vector_of(data: &[u8]) -> Result<Vector, String> {
    let corrupt = |why: String| format!("corrupt node record: {why}");
    type_code_of(data)?;
    let mut rest = &data[2..];
    match rmp::decode::read_array_len(&mut rest).map_err(|e| corrupt(format!("{e:?}")))? {
        2 => Ok(Vector::Keyed),
        3 => {
            let _: i64 = rmp::decode::read_int(&mut rest).map_err(|e| corrupt(format!("{e:?}")))?;
            if rest.first() == Some(&0xc0) {
                Ok(Vector::Absent)
            } else {
                rmp::decode::read_int(&mut rest).map(Vector::Numbered).map_err(|e| corrupt(format!("{e:?}")))
            }
        }
        n => Err(corrupt(format!("an array of {n}"))),
    }
}

/// One write transaction's plan: see the module documentation.
#[derive(Debug, Default)]
pub struct GraphWrite {
    /// Node type code and where its embedding is, per id this write read or changed (`None`: no node).
    nodes: HashMap<String, Option<(u8, Vector)>>,
    /// The next embedding number, once read; whether this write took any.
    next_vector: Option<u64>,
    took_vectors: bool,
    links: HashMap<String, EdgeSets>,
    meta: HashMap<String, bool>,
    touched: BTreeSet<String>,
    /// The final value of every key written (`None`: deleted).
    writes: BTreeMap<(Db, Vec<u8>), Option<Vec<u8>>>,
}

type Result_<T, S> = Result<T, WriteError<<S as Stored>::Error>>;

/// A key's final value (`None`: deleted), in the database it belongs to.
pub type Write = (Db, Vec<u8>, Option<Vec<u8>>);

impl GraphWrite {
    pub fn new() -> Self {
        Self::default()
    }

    fn node_state<S: Stored>(&mut self, store: &mut S, id: &str) -> Result_<Option<(u8, Vector)>, S> {
        if let Some(known) = self.nodes.get(id) {
            return Ok(*known);
        }
        let state = match store.get(Db::Nodes, &key_of(id)).map_err(WriteError::Read)? {
            None => None,
            Some(data) => Some((
                type_code_of(&data).map_err(WriteError::Corrupt)?,
                vector_of(&data).map_err(WriteError::Corrupt)?,
            )),
        };
        self.nodes.insert(id.to_string(), state);
        Ok(state)
    }

    fn node_type<S: Stored>(&mut self, store: &mut S, id: &str) -> Result_<Option<u8>, S> {
        Ok(self.node_state(store, id)?.map(|(code, _)| code))
    }

    /// Deletes the embedding of stored node `id` (`vector`: where its record says it is).
    fn drop_vector(&mut self, id: &str, vector: Vector) {
        match vector {
            Vector::Keyed => self.write(Db::Emb, key_of(id), None),
            Vector::Numbered(n) => self.write(Db::Vectors, vector_key(n).to_vec(), None),
            Vector::Absent => {}
        }
    }

    /// The next embedding number (read from `info` once per write).
    fn take_vector<S: Stored>(&mut self, store: &mut S) -> Result_<u64, S> {
        let next = match self.next_vector {
            Some(n) => n,
            None => match store.get(Db::Info, VECTORS_NEXT).map_err(WriteError::Read)? {
                None => 1,
                Some(raw) => <[u8; 8]>::try_from(raw.as_slice())
                    .map(u64::from_be_bytes)
                    .map_err(|_| WriteError::Corrupt(format!("corrupt info/vectors_next: {} bytes", raw.len())))?,
            },
        };
        self.next_vector = Some(next + 1);
        self.took_vectors = true;
        Ok(next)
    }

    /// Whether a node `id` exists, as this write leaves it so far.
    pub fn exists<S: Stored>(&mut self, store: &mut S, id: &str) -> Result_<bool, S> {
        Ok(self.node_type(store, id)?.is_some())
    }

    fn links_of<S: Stored>(&mut self, store: &mut S, id: &str) -> Result_<&mut EdgeSets, S> {
        if !self.links.contains_key(id) {
            let stored = match store.get(Db::Links, &key_of(id)).map_err(WriteError::Read)? {
                None => EdgeSets::default(),
                Some(data) => decode_links(&data).map_err(WriteError::Corrupt)?,
            };
            self.links.insert(id.to_string(), stored);
        }
        Ok(self.links.get_mut(id).expect("inserted above"))
    }

    fn write(&mut self, db: Db, key: Vec<u8>, value: Option<Vec<u8>>) {
        self.writes.insert((db, key), value);
    }

    /// The key of `id`, recording the full id when the key is a hash.
    fn remember(&mut self, id: &str) -> Vec<u8> {
        let key = key_of(id);
        if key.first() == Some(&LONG_KEY) {
            self.write(Db::Longids, key.clone(), Some(id.as_bytes().to_vec()));
        }
        key
    }

    fn unlink_all<S: Stored>(&mut self, store: &mut S, id: &str) -> Result_<(), S> {
        let own = std::mem::take(self.links_of(store, id)?);
        for (code, others) in own.iter().enumerate() {
            for other in others {
                if self.links_of(store, other)?[code].remove(id) {
                    self.touched.insert(other.clone());
                }
            }
        }
        Ok(())
    }

    /// Puts `node` (replacing a stored node of that id, whose links it drops on both ends).
    pub fn put_node<S: Stored>(&mut self, store: &mut S, node: &NewNode<'_>) -> Result_<(), S> {
        let key = self.remember(node.id);
        if let Some((_, vector)) = self.node_state(store, node.id)? {
            self.unlink_all(store, node.id)?;
            self.drop_vector(node.id, vector);
        }
        let vector = match node.embedding {
            None => Vector::Absent,
            Some(values) => {
                let n = self.take_vector(store)?;
                self.write(Db::Vectors, vector_key(n).to_vec(), Some(embedding_bytes(values)));
                Vector::Numbered(n)
            }
        };
        let number = if let Vector::Numbered(n) = vector { Some(n) } else { None };
        self.write(Db::Nodes, key, Some(encode_node(node, number)));
        self.nodes.insert(node.id.to_string(), Some((node.type_code, vector)));
        self.links.insert(node.id.to_string(), EdgeSets::default());
        self.touched.insert(node.id.to_string());
        Ok(())
    }

    /// Links `a` and `b` by edge `code` when both exist and differ.
    pub fn link<S: Stored>(&mut self, store: &mut S, a: &str, b: &str, code: u8) -> Result_<(), S> {
        let code = usize::from(code);
        if code >= EDGES.len() {
            return Err(WriteError::Invalid(format!("unknown edge code {code}")));
        }
        if a == b || !self.exists(store, a)? || !self.exists(store, b)? {
            return Ok(());
        }
        for (one, other) in [(a, b), (b, a)] {
            if self.links_of(store, one)?[code].insert(other.to_string()) {
                self.touched.insert(one.to_string());
            }
        }
        Ok(())
    }

    /// Deletes node `id` with its links on both ends (its metadata stays).
    pub fn delete_node<S: Stored>(&mut self, store: &mut S, id: &str) -> Result_<(), S> {
        let Some((_, vector)) = self.node_state(store, id)? else { return Ok(()) };
        self.unlink_all(store, id)?;
        self.drop_vector(id, vector);
        let key = key_of(id);
        for db in [Db::Nodes, Db::Links] {
            self.write(db, key.clone(), None);
        }
        self.nodes.insert(id.to_string(), None);
        self.links.remove(id);
        self.touched.insert(id.to_string());
        Ok(())
    }

    fn has_meta<S: Stored>(&mut self, store: &mut S, id: &str) -> Result_<bool, S> {
        if let Some(known) = self.meta.get(id) {
            return Ok(*known);
        }
        let present = store.get(Db::Meta, &key_of(id)).map_err(WriteError::Read)?.is_some();
        self.meta.insert(id.to_string(), present);
        Ok(present)
    }

    /// Deletes the metadata of `id`, if it has any.
    pub fn delete_meta<S: Stored>(&mut self, store: &mut S, id: &str) -> Result_<(), S> {
        if self.has_meta(store, id)? {
            self.write(Db::Meta, key_of(id), None);
            self.meta.insert(id.to_string(), false);
            self.touched.insert(id.to_string());
        }
        Ok(())
    }

    /// Puts the encoded metadata record of `id`.
    pub fn put_meta(&mut self, id: &str, record: Vec<u8>) {
        let key = self.remember(id);
        self.write(Db::Meta, key, Some(record));
        self.meta.insert(id.to_string(), true);
        self.touched.insert(id.to_string());
    }

    /// Whether `id` is a node of one of `orphan_codes` with no link left.
    pub fn is_orphan<S: Stored>(&mut self, store: &mut S, id: &str, orphan_codes: &[u8]) -> Result_<bool, S> {
        match self.node_type(store, id)? {
            Some(code) if orphan_codes.contains(&code) => Ok(self.links_of(store, id)?.iter().all(BTreeSet::is_empty)),
            _ => Ok(false),
        }
    }

    /// The write's final key values: the links of every node whose links it read or changed,
    /// the dimension when the store gets its first (`new_dim` over a store of `stored_dim`), and
    /// when anything changed, the change counter `seq + 1` with its change-log entry (the entry
    /// `log_keep` older deleted).
    pub fn finish<S: Stored>(
        mut self,
        store: &mut S,
        stored_dim: Option<u32>,
        new_dim: Option<u32>,
        seq: u64,
        log_keep: u64,
    ) -> Result_<Vec<Write>, S> {
        let links = std::mem::take(&mut self.links);
        for (id, sets) in &links {
            if self.exists(store, id)? {
                self.write(Db::Links, key_of(id), Some(encode_links(sets)));
            }
        }
        if let (None, Some(dim)) = (stored_dim, new_dim) {
            self.write(Db::Info, b"dim".to_vec(), Some(dim.to_be_bytes().to_vec()));
        }
        if let (true, Some(next)) = (self.took_vectors, self.next_vector) {
            self.write(Db::Info, VECTORS_NEXT.to_vec(), Some(next.to_be_bytes().to_vec()));
        }
        if !self.touched.is_empty() {
            let next = seq + 1;
            self.write(Db::Info, b"seq".to_vec(), Some(next.to_be_bytes().to_vec()));
            let mut entry = Vec::new();
            rmp::encode::write_array_len(&mut entry, self.touched.len() as u32).expect("vec");
            for id in &self.touched {
                write_str(&mut entry, id);
            }
            self.write(Db::Log, next.to_be_bytes().to_vec(), Some(entry));
            for old in pruned(next, log_keep).into_iter().flatten() {
                self.write(Db::Log, old.to_be_bytes().to_vec(), None);
            }
        }
        Ok(self.writes.into_iter().map(|((db, key), value)| (db, key, value)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    #[derive(Default)]
    struct Map(HashMap<(Db, Vec<u8>), Vec<u8>>, usize);

    impl Stored for Map {
        type Error = Infallible;
        fn get(&mut self, db: Db, key: &[u8]) -> Result<Option<Vec<u8>>, Infallible> {
            self.1 += 1;
            Ok(self.0.get(&(db, key.to_vec())).cloned())
        }
    }

    impl Map {
        fn apply(&mut self, writes: Vec<Write>) {
            for (db, key, value) in writes {
                match value {
                    Some(v) => self.0.insert((db, key), v),
                    None => self.0.remove(&(db, key)),
                };
            }
        }
        fn links(&self, id: &str) -> EdgeSets {
            self.0.get(&(Db::Links, key_of(id))).map(|d| decode_links(d).unwrap()).unwrap_or_default()
        }
    }

    fn node(id: &str) -> NewNode<'_> {
        NewNode { id, type_code: 3, created_us: -5, fields: vec![("label", Value::Str(id))], embedding: None }
    }

    #[test]
    fn links_are_stored_on_both_ends_and_dropped_when_a_node_is_put_again() {
        let mut store = Map::default();
        let mut w = GraphWrite::new();
        for id in ["a", "b", "c"] {
            w.put_node(&mut store, &node(id)).unwrap();
        }
        w.link(&mut store, "a", "b", 0).unwrap();
        w.link(&mut store, "a", "c", 2).unwrap();
        w.link(&mut store, "a", "missing", 2).unwrap();
        w.link(&mut store, "a", "a", 2).unwrap();
        let writes = w.finish(&mut store, None, None, 0, 10).unwrap();
        store.apply(writes);
        assert_eq!(store.links("b")[0], BTreeSet::from(["a".to_string()]));
        assert_eq!(store.links("a")[2], BTreeSet::from(["c".to_string()]));
        assert!(store.links("a")[1].is_empty());

        let mut w = GraphWrite::new();
        w.put_node(&mut store, &node("a")).unwrap();
        let writes = w.finish(&mut store, None, None, 1, 10).unwrap();
        store.apply(writes);
        assert!(store.links("b").iter().all(BTreeSet::is_empty));
        assert!(store.links("c").iter().all(BTreeSet::is_empty));
        let log = store.0.get(&(Db::Log, 2u64.to_be_bytes().to_vec())).unwrap();
        assert_eq!(log, &[0x93, 0xa1, b'a', 0xa1, b'b', 0xa1, b'c']);
    }

    #[test]
    fn delete_and_orphans() {
        let mut store = Map::default();
        let mut w = GraphWrite::new();
        for id in ["t", "x"] {
            w.put_node(&mut store, &node(id)).unwrap();
        }
        w.link(&mut store, "t", "x", 0).unwrap();
        w.put_meta("t", vec![1, 2]);
        let writes = w.finish(&mut store, None, None, 0, 1).unwrap();
        store.apply(writes);
        let mut w = GraphWrite::new();
        assert!(!w.is_orphan(&mut store, "t", &[3]).unwrap());
        w.delete_node(&mut store, "x").unwrap();
        assert!(w.is_orphan(&mut store, "t", &[3]).unwrap());
        assert!(!w.is_orphan(&mut store, "t", &[4]).unwrap());
        w.delete_node(&mut store, "t").unwrap();
        w.delete_meta(&mut store, "t").unwrap();
        let writes = w.finish(&mut store, None, None, 1, 1).unwrap();
        assert!(writes.contains(&(Db::Log, 1u64.to_be_bytes().to_vec(), None)), "the entry log_keep older goes");
        store.apply(writes);
        assert!(!store.0.keys().any(|(db, _)| matches!(db, Db::Nodes | Db::Links | Db::Meta | Db::Emb)));
    }

    #[test]
    fn the_log_is_pruned_in_runs_that_keep_the_newest_entries() {
        assert_eq!(pruned(5, 10), None);
        assert_eq!(pruned(12, 10), Some(2..=2), "a short log loses its oldest entry at every write");
        assert_eq!(pruned(50_064, 50_000), Some(1..=64));
        assert_eq!(pruned(50_065, 50_000), None);
        for log_keep in [1, 3, 64, 200, 50_000] {
            let mut oldest = 1;
            for next in 1..=log_keep + 700 {
                for old in pruned(next, log_keep).into_iter().flatten() {
                    assert_eq!(old, oldest, "runs follow each other without a gap");
                    oldest += 1;
                }
                let kept = next + 1 - oldest;
                assert!(kept >= log_keep.min(next) && kept < log_keep + 64, "{next} keeps {kept} of {log_keep}");
            }
        }
    }

    #[test]
    fn long_ids_are_hashed_and_remembered() {
        let long = "é".repeat(300);
        let key = key_of(&long);
        assert_eq!((key.len(), key[0]), (33, LONG_KEY));
        let mut store = Map::default();
        let mut w = GraphWrite::new();
        w.put_node(&mut store, &NewNode { embedding: Some(&[1.0, -2.0]), ..node(&long) }).unwrap();
        let writes = w.finish(&mut store, None, Some(2), 0, 10).unwrap();
        assert!(writes.contains(&(Db::Longids, key.clone(), Some(long.as_bytes().to_vec()))));
        assert!(writes.contains(&(Db::Info, b"dim".to_vec(), Some(vec![0, 0, 0, 2]))));
        let emb: Vec<u8> = [1.0f32, -2.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert!(writes.contains(&(Db::Vectors, vector_key(1).to_vec(), Some(emb))));
        assert!(writes.contains(&(Db::Info, VECTORS_NEXT.to_vec(), Some(2u64.to_be_bytes().to_vec()))));
        let record = writes.iter().find(|(db, k, _)| *db == Db::Nodes && *k == key).unwrap().2.clone().unwrap();
        assert_eq!(vector_of(&record).unwrap(), Vector::Numbered(1));
    }

    #[test]
    fn embeddings_are_numbered_and_a_replaced_or_deleted_node_drops_its_own() {
        let mut store = Map::default();
        // A node written before numbers: `[created_us, {}]`, its embedding under its key in `Emb`.
        store.0.insert((Db::Nodes, b"old".to_vec()), vec![1, 3, 0x92, 0x00, 0x80]);
        store.0.insert((Db::Emb, b"old".to_vec()), vec![0; 8]);
        store.0.insert((Db::Info, VECTORS_NEXT.to_vec()), 7u64.to_be_bytes().to_vec());
        assert_eq!(vector_of(&store.0[&(Db::Nodes, b"old".to_vec())]).unwrap(), Vector::Keyed);
        let mut w = GraphWrite::new();
        let values = [1.0f32, 2.0];
        for id in ["old", "new", "bare"] {
            let embedding = (id != "bare").then_some(&values[..]);
            w.put_node(&mut store, &NewNode { embedding, ..node(id) }).unwrap();
        }
        let writes = w.finish(&mut store, Some(2), Some(2), 0, 10).unwrap();
        assert!(writes.contains(&(Db::Emb, b"old".to_vec(), None)), "the keyed embedding goes");
        for n in [7u64, 8] {
            assert!(writes.iter().any(|(db, k, v)| *db == Db::Vectors && *k == vector_key(n) && v.is_some()));
        }
        assert!(writes.contains(&(Db::Info, VECTORS_NEXT.to_vec(), Some(9u64.to_be_bytes().to_vec()))));
        store.apply(writes);
        let state = |store: &Map, id: &str| vector_of(&store.0[&(Db::Nodes, id.as_bytes().to_vec())]).unwrap();
        assert_eq!((state(&store, "old"), state(&store, "new")), (Vector::Numbered(7), Vector::Numbered(8)));
        assert_eq!(state(&store, "bare"), Vector::Absent);
        let mut w = GraphWrite::new();
        w.put_node(&mut store, &NewNode { embedding: Some(&values), ..node("old") }).unwrap();
        w.put_node(&mut store, &NewNode { embedding: Some(&values), ..node("old") }).unwrap();
        w.delete_node(&mut store, "new").unwrap();
        let writes = w.finish(&mut store, Some(2), Some(2), 1, 10).unwrap();
        store.apply(writes);
        let vectors: Vec<u64> = store
            .0
            .keys()
            .filter(|(db, _)| *db == Db::Vectors)
            .map(|(_, k)| u64::from_be_bytes(k.as_slice().try_into().unwrap()))
            .collect();
        assert_eq!(vectors, vec![10], "a node put twice in one write keeps only its last number");
        assert_eq!(state(&store, "old"), Vector::Numbered(10));
        assert!(!store.0.keys().any(|(db, _)| *db == Db::Emb));
    }

    #[test]
    fn nothing_changed_writes_nothing() {
        let mut store = Map::default();
        let mut w = GraphWrite::new();
        w.delete_node(&mut store, "none").unwrap();
        w.delete_meta(&mut store, "none").unwrap();
        assert!(w.finish(&mut store, Some(3), Some(3), 7, 10).unwrap().is_empty());
    }

    #[test]
    fn a_key_is_read_once() {
        let mut store = Map::default();
        let mut w = GraphWrite::new();
        for _ in 0..3 {
            assert!(!w.exists(&mut store, "a").unwrap());
        }
        assert_eq!(store.1, 1);
    }

    #[test]
    fn corrupt_links_are_reported() {
        let mut store = Map::default();
        store.0.insert((Db::Nodes, b"a".to_vec()), vec![1, 3, 0x92, 0x00, 0x80]);
        store.0.insert((Db::Links, b"a".to_vec()), vec![1, 0x81, 0xa1, b'z', 0x90]);
        let mut w = GraphWrite::new();
        let err = w.delete_node(&mut store, "a").unwrap_err();
        assert!(matches!(err, WriteError::Corrupt(m) if m.contains("unknown edge")));
        assert!(decode_links(&[2]).is_err());
        store.0.insert((Db::Nodes, b"b".to_vec()), vec![1, 3]);
        let err = GraphWrite::new().delete_node(&mut store, "b").unwrap_err();
        assert!(matches!(err, WriteError::Corrupt(m) if m.contains("corrupt node record")));
        assert!(decode_links(&[1, 0x80, 0]).is_err());
        assert_eq!(decode_links(&encode_links(&EdgeSets::default())).unwrap(), EdgeSets::default());
    }
}
