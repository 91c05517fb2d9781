//! A context store's `put_document` with its jobs, and a job's claim or completion, as one plan
//! each: the records it reads, the writes it makes, byte for byte what the Python path
//! (`hippograph.context.tree.put_document`, `jobs.enqueue`, `jobs.claim`, `jobs.complete`) writes. The plan covers the common case (parents that are directories or
//! missing, a new document or one replacing a document, no stored vector); anything else, or a
//! stored record this reader does not take apart, answers `None` before a write is made, and the
//! Python path runs instead in the same transaction.

use crate::graph_write::FORMAT_VERSION;
use crate::plain::{write_plain, Plain};
use std::collections::HashMap;

/// The spaces a document write touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Space {
    Nodes,
    Vectors,
    Counters,
    Jobs,
    /// The job queue (`hippograph.context.jobs`): pending jobs by kind, jobs by URI under `BY_URI`.
    Queue,
    /// Running and failed jobs.
    State,
}

/// The queue space's range of jobs by URI.
const BY_URI: &[u8] = b"\x01";

/// One document write: the URI's segments, its layers (None: keep the stored one), its jobs
/// (kind, the payload's msgpack), the time in microseconds and the jobs' attempt limit.
pub struct Document<'a> {
    pub segments: &'a [String],
    pub content: &'a str,
    pub abstract_: Option<&'a str>,
    pub overview: Option<&'a str>,
    pub jobs: &'a [(String, Vec<u8>)],
    pub now_us: u64,
    pub max_attempts: i64,
}

/// The writes of a planned document, in the order the Python path makes them, and its revision.
pub struct Plan {
    pub puts: Vec<(Space, Vec<u8>, Vec<u8>)>,
    pub revision: u64,
}

const DOCS: &[u8] = b"docs";
const DIRS: &[u8] = b"dirs";
const TOP: &[u8] = b"top\x00";
const NEXT_ID: &[u8] = b"next_job";
const BY_STATUS: &[u8] = b"jobs\x00";
const PENDING: &[u8] = b"jobs\x00pending";
const BY_KIND: &[u8] = b"kind\x00";
const VEC: &str = "writing to a Vec cannot fail";
/// Nesting this reader follows in a stored record (deeper: the Python path decodes it).
const MAX_DEPTH: usize = 64;

/// A URI's key: its segments joined by 0x01, closed by 0x00.
pub fn node_key(segments: &[String]) -> Vec<u8> {
    let mut key = Vec::with_capacity(segments.iter().map(|s| s.len() + 1).sum());
    for (i, s) in segments.iter().enumerate() {
        if i > 0 {
            key.push(1);
        }
        key.extend_from_slice(s.as_bytes());
    }
    key.push(0);
    key
}

fn take<'b>(buf: &'b [u8], at: &mut usize, n: usize) -> Option<&'b [u8]> {
    let got = buf.get(*at..at.checked_add(n)?)?;
    *at += n;
    Some(got)
}

fn be(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b))
}

/// A container's entry count: in the marker's low four bits (fix forms), else in the 2 or 4
/// bytes after it (`wide`: the 16-bit form's marker, the 32-bit one's follows it).
fn entries(buf: &[u8], at: &mut usize, marker: u8, wide: u8) -> Option<usize> {
    Some(match marker {
        m if m == wide => be(take(buf, at, 2)?) as usize,
        m if m == wide + 1 => be(take(buf, at, 4)?) as usize,
        _ => usize::from(marker & 0x0f),
    })
}

/// One msgpack value as the Python decoder reads it and its packer writes it again (integers as
/// their value, float32 as float64); None for extension types, invalid text, non-text map keys,
/// nesting past `MAX_DEPTH` or a short buffer.
pub fn read_plain(buf: &[u8], at: &mut usize, depth: usize) -> Option<Plain> {
    if depth > MAX_DEPTH {
        return None;
    }
    let marker = *take(buf, at, 1)?.first()?;
    let int = |v: i64| if v >= 0 { Plain::UInt(v as u64) } else { Plain::Int(v) };
    let text = |bytes: &[u8]| std::str::from_utf8(bytes).ok().map(|s| Plain::Str(s.to_owned()));
    Some(match marker {
        0x00..=0x7f => Plain::UInt(u64::from(marker)),
        0xe0..=0xff => Plain::Int(i64::from(marker as i8)),
        0xc0 => Plain::Nil,
        0xc2 => Plain::Bool(false),
        0xc3 => Plain::Bool(true),
        0xcc..=0xcf => Plain::UInt(be(take(buf, at, 1 << (marker - 0xcc))?)),
        0xd0 => int(i64::from(take(buf, at, 1)?[0] as i8)),
        0xd1 => int(i64::from(be(take(buf, at, 2)?) as u16 as i16)),
        0xd2 => int(i64::from(be(take(buf, at, 4)?) as u32 as i32)),
        0xd3 => int(be(take(buf, at, 8)?) as i64),
        0xca => Plain::Float(f64::from(f32::from_bits(be(take(buf, at, 4)?) as u32))),
        0xcb => Plain::Float(f64::from_bits(be(take(buf, at, 8)?))),
        0xa0..=0xbf => text(take(buf, at, usize::from(marker & 0x1f))?)?,
        0xd9..=0xdb => {
            let n = be(take(buf, at, 1 << (marker - 0xd9))?) as usize;
            text(take(buf, at, n)?)?
        }
        0xc4..=0xc6 => {
            let n = be(take(buf, at, 1 << (marker - 0xc4))?) as usize;
            Plain::Bin(take(buf, at, n)?.to_vec())
        }
        0x90..=0x9f | 0xdc | 0xdd => {
            let n = entries(buf, at, marker, 0xdc)?;
            let mut items = Vec::with_capacity(n.min(buf.len()));
            for _ in 0..n {
                items.push(read_plain(buf, at, depth + 1)?);
            }
            Plain::Array(items)
        }
        0x80..=0x8f | 0xde | 0xdf => {
            let n = entries(buf, at, marker, 0xde)?;
            let mut pairs = Vec::with_capacity(n.min(buf.len()));
            for _ in 0..n {
                let Plain::Str(key) = read_plain(buf, at, depth + 1)? else { return None };
                pairs.push((key, read_plain(buf, at, depth + 1)?));
            }
            Plain::Map(pairs)
        }
        _ => return None,
    })
}

/// A stored record (format byte, then one msgpack map), as (key, value) pairs; None when this
/// reader does not take it apart (the Python path then reads it, or reports it corrupt).
pub fn read_record(raw: &[u8]) -> Option<Vec<(String, Plain)>> {
    if raw.first() != Some(&FORMAT_VERSION) {
        return None;
    }
    let mut at = 1;
    match read_plain(raw, &mut at, 0)? {
        Plain::Map(pairs) if at == raw.len() => {
            let mut seen = std::collections::HashSet::with_capacity(pairs.len());
            // A key twice: Python keeps the last, in the first one's place; left to it.
            pairs.iter().all(|(k, _)| seen.insert(k.as_str())).then_some(pairs)
        }
        _ => None,
    }
}

fn field<'r>(rec: &'r [(String, Plain)], name: &str) -> Option<&'r Plain> {
    rec.iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

/// A record: the format byte, then the map of `pairs` in their order.
fn record<K: AsRef<str>>(pairs: &[(K, Plain)]) -> Vec<u8> {
    let mut out = vec![FORMAT_VERSION];
    rmp::encode::write_map_len(&mut out, pairs.len() as u32).expect(VEC);
    for (key, value) in pairs {
        rmp::encode::write_str(&mut out, key.as_ref()).expect(VEC);
        write_plain(&mut out, value);
    }
    out
}

fn str_or_nil(value: Option<&str>) -> Plain {
    value.map_or(Plain::Nil, |s| Plain::Str(s.to_owned()))
}

/// Counters read once and written once with their final value.
struct Counters {
    values: HashMap<Vec<u8>, u64>,
    order: Vec<Vec<u8>>,
}

impl Counters {
    fn add<E>(
        &mut self,
        read: &mut impl FnMut(Space, &[u8]) -> Result<Option<Vec<u8>>, E>,
        name: Vec<u8>,
        delta: u64,
    ) -> Result<Option<u64>, E> {
        if !self.values.contains_key(&name) {
            let now = match read(Space::Counters, &name)? {
                None => 0,
                Some(raw) if raw.len() >= 8 => be(&raw[..8]),
                Some(_) => return Ok(None),
            };
            self.values.insert(name.clone(), now);
            self.order.push(name.clone());
        }
        let value = self.values.get_mut(&name).expect("inserted above");
        let Some(next) = value.checked_add(delta) else { return Ok(None) };
        *value = next;
        Ok(Some(next))
    }
}

/// Plans `doc`; `read(space, key)` returns what the transaction holds. `Ok(None)`: not a case
/// this plan covers (nothing is to be written; the Python path decides).
pub fn plan_document<E>(
    mut read: impl FnMut(Space, &[u8]) -> Result<Option<Vec<u8>>, E>,
    doc: &Document<'_>,
) -> Result<Option<Plan>, E> {
    let segments = doc.segments;
    if segments.is_empty() || doc.max_attempts < 0 {
        return Ok(None);
    }
    let mut counters = Counters { values: HashMap::new(), order: Vec::new() };
    let mut puts: Vec<(Space, Vec<u8>, Vec<u8>)> = Vec::new();
    let dir = record(&[("k", Plain::Str("dir".into())), ("e", Plain::Bool(true)), ("g", Plain::Str(String::new()))]);
    for depth in 1..segments.len() {
        let key = node_key(&segments[..depth]);
        match read(Space::Nodes, &key)? {
            None => {
                puts.push((Space::Nodes, key, dir.clone()));
                if counters.add(&mut read, DIRS.to_vec(), 1)?.is_none() {
                    return Ok(None);
                }
            }
            Some(raw) => match read_record(&raw) {
                Some(rec) if field(&rec, "k") == Some(&Plain::Str("dir".into())) => {}
                _ => return Ok(None), // a document above: the Python path refuses it by name
            },
        }
    }
    let key = node_key(segments);
    let old = match read(Space::Nodes, &key)? {
        None => None,
        Some(raw) => match read_record(&raw) {
            Some(rec) => match field(&rec, "k") {
                Some(Plain::Str(k)) if k != "dir" => Some(rec),
                _ => return Ok(None), // a directory becoming a document, or an odd record
            },
            None => return Ok(None),
        },
    };
    if read(Space::Vectors, &key)?.is_some() {
        return Ok(None); // the stored vector is retired by the Python path
    }
    let revision = match &old {
        None => {
            let top = [TOP, segments[0].as_bytes()].concat();
            for name in [DOCS.to_vec(), top] {
                if counters.add(&mut read, name, 1)?.is_none() {
                    return Ok(None);
                }
            }
            1
        }
        Some(rec) => match field(rec, "r") {
            None => 1,
            Some(Plain::UInt(r)) if *r < u64::MAX => r + 1,
            Some(_) => return Ok(None),
        },
    };
    let keep = |name: &str, given: Option<&str>, default: Plain| match (given, &old) {
        (Some(s), _) => Plain::Str(s.to_owned()),
        (None, None) => default,
        (None, Some(rec)) => field(rec, name).cloned().unwrap_or(default),
    };
    let node = record(&[
        ("k", Plain::Str("doc".into())),
        ("c", Plain::Str(doc.content.to_owned())),
        ("a", keep("a", doc.abstract_, Plain::Nil)),
        ("o", keep("o", doc.overview, Plain::Nil)),
        ("e", keep("e", None, Plain::Bool(true))),
        ("g", keep("g", None, Plain::Str(String::new()))),
        ("r", Plain::UInt(revision)),
        ("s", keep("s", None, Plain::Nil)),
    ]);
    puts.push((Space::Nodes, key.clone(), node));
    let uri = segments.join("/");
    for (kind, payload) in doc.jobs {
        let Some(id) = counters.add(&mut read, NEXT_ID.to_vec(), 1)? else { return Ok(None) };
        let mut rec = vec![FORMAT_VERSION];
        rmp::encode::write_map_len(&mut rec, 11).expect(VEC);
        rmp::encode::write_str(&mut rec, "k").expect(VEC);
        rmp::encode::write_str(&mut rec, kind).expect(VEC);
        rmp::encode::write_str(&mut rec, "p").expect(VEC);
        rec.extend_from_slice(payload);
        for (name, value) in [
            ("a", Plain::UInt(0)),
            ("m", Plain::UInt(doc.max_attempts as u64)),
            ("st", Plain::Str("pending".into())),
            ("ra", Plain::UInt(doc.now_us)),
            ("u", str_or_nil(Some(&uri))),
            ("r", Plain::UInt(revision)),
            ("e", Plain::Nil),
            ("c", Plain::UInt(doc.now_us)),
            ("t", Plain::UInt(doc.now_us)),
        ] {
            rmp::encode::write_str(&mut rec, name).expect(VEC);
            write_plain(&mut rec, &value);
        }
        let (ra, job) = (doc.now_us.to_be_bytes(), id.to_be_bytes());
        puts.push((Space::Jobs, job.to_vec(), rec));
        puts.push((Space::Queue, [kind.as_bytes(), b"\x00", &ra, &job].concat(), Vec::new()));
        for name in [PENDING.to_vec(), [BY_KIND, kind.as_bytes()].concat()] {
            if counters.add(&mut read, name, 1)?.is_none() {
                return Ok(None);
            }
        }
        puts.push((Space::Queue, [BY_URI, &key[..], &job].concat(), Vec::new()));
    }
    for name in counters.order {
        let value = counters.values[&name];
        puts.push((Space::Counters, name, value.to_be_bytes().to_vec()));
    }
    Ok(Some(Plan { puts, revision }))
}

/// Where a job moves: claimed (running, one more attempt) or done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Move {
    Claim,
    Complete,
}

/// The writes of a job's move, and its record afterwards.
pub struct MovePlan {
    pub deletes: Vec<(Space, Vec<u8>)>,
    pub puts: Vec<(Space, Vec<u8>, Vec<u8>)>,
    pub record: Vec<u8>,
}

/// Sets `name` where the record has it, else appends it (a Python dict's `update`).
fn set(rec: &mut Vec<(String, Plain)>, name: &str, value: Plain) {
    match rec.iter_mut().find(|(k, _)| k == name) {
        Some(pair) => pair.1 = value,
        None => rec.push((name.to_owned(), value)),
    }
}

/// The key a job of status `st` is indexed under, when it is one of the indexed statuses.
fn index_key(rec: &[(String, Plain)], st: &str, id: u64) -> Option<Option<(Space, Vec<u8>)>> {
    let job = id.to_be_bytes();
    Some(match st {
        "pending" => {
            let (Some(Plain::Str(kind)), Some(Plain::UInt(ra))) = (field(rec, "k"), field(rec, "ra")) else {
                return None;
            };
            Some((Space::Queue, [kind.as_bytes(), b"\x00", &ra.to_be_bytes(), &job].concat()))
        }
        "running" | "failed" => {
            let Some(Plain::UInt(t)) = field(rec, "t") else { return None };
            Some((Space::State, [st.as_bytes(), b"\x00", &t.to_be_bytes(), &job].concat()))
        }
        _ => None,
    })
}

/// Plans `step` of job `id` at `now_us`; `Ok(None)`: not a case this plan covers (no such job, a
/// record it does not take apart, a claim of a job that is not pending, a counter it cannot
/// move): nothing is to be written, the Python path decides. A completion of a job done already
/// writes nothing and answers its record.
pub fn plan_move<E>(
    mut read: impl FnMut(Space, &[u8]) -> Result<Option<Vec<u8>>, E>,
    id: u64,
    step: Move,
    now_us: u64,
) -> Result<Option<MovePlan>, E> {
    let job = id.to_be_bytes().to_vec();
    let Some(raw) = read(Space::Jobs, &job)? else { return Ok(None) };
    let Some(mut rec) = read_record(&raw) else { return Ok(None) };
    let Some(Plain::Str(before)) = field(&rec, "st").cloned() else { return Ok(None) };
    let after = match step {
        Move::Claim if before == "pending" => "running",
        Move::Claim => return Ok(None),
        Move::Complete if before == "done" => {
            return Ok(Some(MovePlan { deletes: Vec::new(), puts: Vec::new(), record: raw }));
        }
        Move::Complete => "done",
    };
    let mut plan = MovePlan { deletes: Vec::new(), puts: Vec::new(), record: Vec::new() };
    let Some(old_index) = index_key(&rec, &before, id) else { return Ok(None) };
    if let Some((space, key)) = old_index {
        plan.deletes.push((space, key));
    }
    set(&mut rec, "st", Plain::Str(after.to_owned()));
    match step {
        Move::Claim => {
            let Some(Plain::UInt(a)) = field(&rec, "a") else { return Ok(None) };
            let Some(a) = a.checked_add(1) else { return Ok(None) };
            set(&mut rec, "a", Plain::UInt(a));
        }
        Move::Complete => set(&mut rec, "e", Plain::Nil),
    }
    set(&mut rec, "t", Plain::UInt(now_us));
    // Running jobs have no counter: they are counted from their range of the state space.
    for (status, delta) in [(before.as_str(), -1i64), (after, 1)].into_iter().filter(|(s, _)| *s != "running") {
        let name = [BY_STATUS, status.as_bytes()].concat();
        let value = match read(Space::Counters, &name)? {
            None => 0,
            Some(raw) if raw.len() >= 8 => be(&raw[..8]),
            Some(_) => return Ok(None),
        };
        match value.checked_add_signed(delta) {
            None => return Ok(None), // below zero: the Python path reports it
            Some(0) => plan.deletes.push((Space::Counters, name)),
            Some(v) => plan.puts.push((Space::Counters, name, v.to_be_bytes().to_vec())),
        }
    }
    let Some(new_index) = index_key(&rec, after, id) else { return Ok(None) };
    if let Some((space, key)) = new_index {
        plan.puts.push((space, key, Vec::new()));
    }
    plan.record = record(&rec);
    plan.puts.push((Space::Jobs, job, plan.record.clone()));
    Ok(Some(plan))
}

/// The start of `kind`'s keys in the job queue.
pub fn queue_head(kind: &str) -> Vec<u8> {
    [kind.as_bytes(), b"\x00"].concat()
}

/// The (due time, job id) of queue key `key` under `head` when it is due by `now_us`
/// (`Some(None)`: not one of `head`'s keys, or not due); None for a key of `head`'s that is not
/// a queue key (the Python path decides).
pub fn due_in_queue(head: &[u8], key: &[u8], now_us: u64) -> Option<Option<(u64, u64)>> {
    let Some(rest) = key.strip_prefix(head) else { return Some(None) };
    if rest.len() != 16 {
        return None;
    }
    let (ra, id) = (be(&rest[..8]), be(&rest[8..]));
    Some((ra <= now_us).then_some((ra, id)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain_bytes(v: &Plain) -> Vec<u8> {
        let mut out = Vec::new();
        write_plain(&mut out, v);
        out
    }

    #[test]
    fn values_read_back_as_they_were_written() {
        let values = [
            Plain::Nil,
            Plain::Bool(true),
            Plain::UInt(0),
            Plain::UInt(127),
            Plain::UInt(128),
            Plain::UInt(70_000),
            Plain::UInt(u64::MAX),
            Plain::Int(-1),
            Plain::Int(-33),
            Plain::Int(-200),
            Plain::Int(i64::MIN),
            Plain::Float(1.5),
            Plain::Str("é".repeat(40)),
            Plain::Bin(vec![1, 2, 3]),
            Plain::Array(vec![Plain::UInt(1), Plain::Str("x".into())]),
            Plain::Map(vec![("a".into(), Plain::Map(vec![("b".into(), Plain::Nil)]))]),
        ];
        for v in values {
            let bytes = plain_bytes(&v);
            let mut at = 0;
            assert_eq!(read_plain(&bytes, &mut at, 0), Some(v.clone()));
            assert_eq!(at, bytes.len());
        }
    }

    #[test]
    fn odd_encodings_read_as_the_python_decoder_reads_them() {
        // int8 holding 5, int16 holding -2, float32 1.5, uint16 holding 3: values, not forms.
        for (bytes, want) in [
            (vec![0xd0, 5], Plain::UInt(5)),
            (vec![0xd1, 0xff, 0xfe], Plain::Int(-2)),
            (vec![0xca, 0x3f, 0xc0, 0, 0], Plain::Float(1.5)),
            (vec![0xcd, 0, 3], Plain::UInt(3)),
        ] {
            assert_eq!(read_plain(&bytes, &mut 0, 0), Some(want));
        }
        for bad in [vec![0xc1], vec![0xd4, 1, 2], vec![0xa2, 0xff, 0xfe], vec![0x81, 1, 2], vec![0xdc, 0, 5]] {
            assert_eq!(read_plain(&bad, &mut 0, 0), None, "{bad:?}");
        }
        let deep: Vec<u8> = std::iter::repeat_n(0x91u8, 100).chain([0xc0]).collect();
        assert_eq!(read_plain(&deep, &mut 0, 0), None);
    }

    #[test]
    fn a_new_document_creates_its_parents_and_counts_them() {
        let segments: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let jobs = vec![("embed".to_string(), vec![0x80])];
        let doc = Document {
            segments: &segments,
            content: "text",
            abstract_: None,
            overview: Some("o"),
            jobs: &jobs,
            now_us: 5,
            max_attempts: 3,
        };
        let plan = plan_document(|_, _| Ok::<_, ()>(None), &doc).unwrap().unwrap();
        assert_eq!(plan.revision, 1);
        let keys: Vec<(Space, Vec<u8>)> = plan.puts.iter().map(|(s, k, _)| (*s, k.clone())).collect();
        assert_eq!(keys[0], (Space::Nodes, b"a\x00".to_vec()));
        assert_eq!(keys[1], (Space::Nodes, b"a\x01b\x00".to_vec()));
        assert_eq!(keys[2], (Space::Nodes, b"a\x01b\x01c\x00".to_vec()));
        let counter =
            |name: &[u8]| plan.puts.iter().find(|(s, k, _)| *s == Space::Counters && k == name).map(|(_, _, v)| be(v));
        assert_eq!(counter(DIRS), Some(2));
        assert_eq!(counter(DOCS), Some(1));
        assert_eq!(counter(b"top\x00a"), Some(1));
        assert_eq!(counter(NEXT_ID), Some(1));
        assert_eq!(counter(b"kind\x00embed"), Some(1));
    }

    #[test]
    fn what_the_plan_does_not_cover_is_left_to_the_python_path() {
        let segments: Vec<String> = ["a", "b"].iter().map(|s| s.to_string()).collect();
        let doc = Document {
            segments: &segments,
            content: "t",
            abstract_: None,
            overview: None,
            jobs: &[],
            now_us: 1,
            max_attempts: 1,
        };
        let dir = record(&[("k", Plain::Str("dir".into()))]);
        let file = record(&[("k", Plain::Str("doc".into()))]);
        let cases: [(&[u8], Vec<u8>, Space); 4] = [
            (b"a\x00", file.clone(), Space::Nodes),       // a document above
            (b"a\x01b\x00", dir.clone(), Space::Nodes),   // a directory becoming a document
            (b"a\x01b\x00", vec![1, 0xc1], Space::Nodes), // a record this reader cannot take apart
            (b"a\x01b\x00", vec![1], Space::Vectors),     // a stored vector to retire
        ];
        for (key, value, space) in cases {
            let got = plan_document(
                |s, k| {
                    Ok::<_, ()>(
                        (s == space && k == key)
                            .then(|| value.clone())
                            .or_else(|| (s == Space::Nodes && k == b"a\x00").then(|| dir.clone())),
                    )
                },
                &doc,
            );
            assert!(got.unwrap().is_none(), "{key:?} in {space:?}");
        }
    }

    #[test]
    fn a_claim_moves_a_pending_job_to_running_and_its_completion_to_done() {
        let job = record(&[
            ("k", Plain::Str("embed".into())),
            ("a", Plain::UInt(0)),
            ("st", Plain::Str("pending".into())),
            ("ra", Plain::UInt(7)),
            ("e", Plain::Str("x".into())),
            ("t", Plain::UInt(7)),
        ]);
        let pending = [BY_STATUS, b"pending"].concat();
        let reads = |stored: Vec<u8>| {
            move |space: Space, key: &[u8]| {
                Ok::<_, ()>(match space {
                    Space::Jobs if key == 3u64.to_be_bytes() => Some(stored.clone()),
                    Space::Counters => Some(1u64.to_be_bytes().to_vec()),
                    _ => None,
                })
            }
        };
        let claimed = plan_move(reads(job.clone()), 3, Move::Claim, 9).unwrap().unwrap();
        let queue = [b"embed\x00".as_slice(), &7u64.to_be_bytes(), &3u64.to_be_bytes()].concat();
        assert!(claimed.deletes.contains(&(Space::Queue, queue)));
        assert!(claimed.deletes.contains(&(Space::Counters, pending.clone())), "a counter back at zero goes");
        let rec = read_record(&claimed.record).unwrap();
        assert_eq!(field(&rec, "st"), Some(&Plain::Str("running".into())));
        assert_eq!(field(&rec, "a"), Some(&Plain::UInt(1)));
        assert_eq!(field(&rec, "t"), Some(&Plain::UInt(9)));
        let state = [b"running\x00".as_slice(), &9u64.to_be_bytes(), &3u64.to_be_bytes()].concat();
        assert!(claimed.puts.iter().any(|(s, k, _)| *s == Space::State && *k == state));
        let counters = |plan: &MovePlan| {
            let mut names: Vec<Vec<u8>> =
                plan.puts.iter().filter(|(s, _, _)| *s == Space::Counters).map(|p| p.1.clone()).collect();
            names.extend(plan.deletes.iter().filter(|(s, _)| *s == Space::Counters).map(|d| d.1.clone()));
            names
        };
        assert_eq!(counters(&claimed), vec![pending.clone()], "running jobs are counted from their range");
        let done = plan_move(reads(claimed.record.clone()), 3, Move::Complete, 11).unwrap().unwrap();
        assert!(done.deletes.contains(&(Space::State, state)));
        assert_eq!(counters(&done), vec![[BY_STATUS, b"done"].concat()]);
        let rec = read_record(&done.record).unwrap();
        assert_eq!((field(&rec, "st"), field(&rec, "e")), (Some(&Plain::Str("done".into())), Some(&Plain::Nil)));
        let again = plan_move(reads(done.record.clone()), 3, Move::Complete, 12).unwrap().unwrap();
        assert!(again.puts.is_empty() && again.deletes.is_empty() && again.record == done.record);
        assert!(plan_move(reads(done.record), 3, Move::Claim, 12).unwrap().is_none(), "only a pending job is claimed");
        assert!(plan_move(reads(job), 4, Move::Complete, 12).unwrap().is_none(), "no such job");
    }
}
