//! Keyword matching over a context store's raw node records, without decoding them into objects.
//!
//! A node record is one format byte (1) then a msgpack map; a document has ``"k": "doc"`` and its
//! text in ``"c"``, ``"a"`` and ``"o"`` (`hippograph.context.tree`). The Python search keeps a
//! document when ``rec.get("e", True)`` is truthy and, looking at content, abstract and overview
//! in that order, one of them is a string whose `str.casefold()` holds the (ASCII, casefolded)
//! needle. This module answers that exactly where it can and says `Unsure` otherwise, so the
//! caller decodes that record and decides as before (raising the errors it always raised):
//!
//! - a record msgpack would refuse, or one holding anything but nil, bools, numbers, strings,
//!   binaries, arrays and maps with scalar keys, is `Unsure`;
//! - casefolding maps an ASCII character to its lowercase and folds each character on its own, so
//!   ASCII-lowercasing the text's bytes and finding the needle there proves a match (multi-byte
//!   UTF-8 holds no ASCII byte); a text with non-ASCII characters and no such match is `Unsure`,
//!   since some of them fold to ASCII (K, ſ, ﬁ ...).

/// What the search does with one record.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict<'a> {
    /// Decoded fine and not kept: not a document, disabled, or no layer holds the needle.
    Skip,
    /// Kept: the document's fields as the Python search would return them.
    Match(Doc<'a>),
    /// Decide by decoding the record (odd types, non-ASCII text without a proven match, garbage).
    Unsure,
}

/// A kept document; `None` where the field is nil or missing.
#[derive(Debug, PartialEq, Eq)]
pub struct Doc<'a> {
    pub uri: String,
    pub content: Option<&'a str>,
    pub abstract_: Option<&'a str>,
    pub overview: Option<&'a str>,
    pub enabled: bool,
    pub group: &'a str,
}

const MAX_DEPTH: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Value<'a> {
    Nil,
    Bool(bool),
    Str(&'a str),
    /// Anything else msgpack decodes to a hashable scalar (numbers, binaries).
    Scalar,
    /// Arrays and maps (unhashable: as a map key they make the record `Unsure`).
    Container,
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    #[inline(always)]
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let got = self.data.get(self.at..end)?;
        self.at = end;
        Some(got)
    }

    #[inline(always)]
    fn byte(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    #[inline(always)]
    fn uint(&mut self, n: usize) -> Option<usize> {
        let mut v: usize = 0;
        for &b in self.take(n)? {
            v = v.checked_mul(256)?.checked_add(usize::from(b))?;
        }
        Some(v)
    }

    #[inline(always)]
    fn str(&mut self, n: usize) -> Option<Value<'a>> {
        std::str::from_utf8(self.take(n)?).ok().map(Value::Str)
    }

    /// One value, checked the way msgpack decodes it; `None` for anything `Unsure`.
    fn value(&mut self, depth: usize) -> Option<Value<'a>> {
        if depth > MAX_DEPTH {
            return None;
        }
        let tag = self.byte()?;
        match tag {
            0x00..=0x7f | 0xe0..=0xff => Some(Value::Scalar),
            0x80..=0x8f => self.map(usize::from(tag & 0x0f), depth).map(|()| Value::Container),
            0x90..=0x9f => self.array(usize::from(tag & 0x0f), depth),
            0xa0..=0xbf => self.str(usize::from(tag & 0x1f)),
            0xc0 => Some(Value::Nil),
            0xc2 => Some(Value::Bool(false)),
            0xc3 => Some(Value::Bool(true)),
            0xc4..=0xc6 => {
                let n = self.uint(1 << (tag - 0xc4))?;
                self.take(n).map(|_| Value::Scalar)
            }
            0xca..=0xd3 => {
                let n = match tag {
                    0xca => 4,
                    0xcb => 8,
                    0xcc..=0xcf => 1 << (tag - 0xcc),
                    _ => 1 << (tag - 0xd0),
                };
                self.take(n).map(|_| Value::Scalar)
            }
            0xd9..=0xdb => {
                let n = self.uint(1 << (tag - 0xd9))?;
                self.str(n)
            }
            0xdc | 0xdd => {
                let n = self.uint(2 << (tag - 0xdc))?;
                self.array(n, depth)
            }
            0xde | 0xdf => {
                let n = self.uint(2 << (tag - 0xde))?;
                self.map(n, depth).map(|()| Value::Container)
            }
            _ => None, // 0xc1 (never used) and the extension types
        }
    }

    fn array(&mut self, n: usize, depth: usize) -> Option<Value<'a>> {
        for _ in 0..n {
            self.value(depth + 1)?;
        }
        Some(Value::Container)
    }

    fn map(&mut self, n: usize, depth: usize) -> Option<()> {
        for _ in 0..n {
            if self.value(depth + 1)? == Value::Container {
                return None; // an unhashable key
            }
            self.value(depth + 1)?;
        }
        Some(())
    }
}

/// The fields of a node record the search reads; `None` where the record is `Unsure`.
#[derive(Default)]
struct Fields<'a> {
    kind: Option<Value<'a>>,
    content: Option<Value<'a>>,
    abstract_: Option<Value<'a>>,
    overview: Option<Value<'a>>,
    enabled: Option<Value<'a>>,
    group: Option<Value<'a>>,
}

fn fields(record: &[u8]) -> Option<Fields<'_>> {
    if record.first() != Some(&1) {
        return None;
    }
    let mut r = Reader { data: record, at: 1 };
    let tag = r.byte()?;
    let n = match tag {
        0x80..=0x8f => usize::from(tag & 0x0f),
        0xde => r.uint(2)?,
        0xdf => r.uint(4)?,
        _ => return None,
    };
    let mut f = Fields::default();
    for _ in 0..n {
        let key = r.value(1)?;
        if key == Value::Container {
            return None;
        }
        let value = r.value(1)?;
        if let Value::Str(name) = key {
            let slot = match name {
                "k" => &mut f.kind,
                "c" => &mut f.content,
                "a" => &mut f.abstract_,
                "o" => &mut f.overview,
                "e" => &mut f.enabled,
                "g" => &mut f.group,
                _ => continue,
            };
            *slot = Some(value); // a repeated key: the last one wins, as in a dict
        }
    }
    (r.at == record.len()).then_some(f)
}

/// Whether `text.casefold()` holds `needle` (ASCII, casefolded); `None` when only a full
/// casefold could tell.
fn holds(text: &str, needle: &[u8]) -> Option<bool> {
    let bytes = text.as_bytes();
    let found = match needle.split_first() {
        None => true,
        Some((&first, rest)) => {
            let upper = first.to_ascii_uppercase();
            bytes.len() >= needle.len()
                && (0..=bytes.len() - needle.len()).any(|i| {
                    let b = bytes[i];
                    (b == first || b == upper)
                        && bytes[i + 1..i + needle.len()].iter().zip(rest).all(|(a, n)| a.to_ascii_lowercase() == *n)
                })
        }
    };
    if found {
        Some(true)
    } else if text.is_ascii() {
        Some(false)
    } else {
        None
    }
}

/// A layer as the search reads it: `Some(None)` for nil or missing, `None` when `Unsure`.
fn layer<'a>(value: Option<Value<'a>>) -> Option<Option<&'a str>> {
    match value {
        None | Some(Value::Nil) => Some(None),
        Some(Value::Str(s)) => Some(Some(s)),
        _ => None,
    }
}

/// The URI a node key starts with (its segments, 0x01-separated, up to the first 0x00).
fn uri_of(key: &[u8]) -> Option<String> {
    let end = key.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&key[..end]).ok().map(|s| s.replace('\x01', "/"))
}

/// The verdict on the node at `key` with stored `record` for the casefolded ASCII `needle`.
pub fn keyword<'a>(key: &[u8], record: &'a [u8], needle: &[u8]) -> Verdict<'a> {
    if !needle.is_ascii() {
        return Verdict::Unsure;
    }
    let Some(f) = fields(record) else { return Verdict::Unsure };
    match f.kind {
        None => return Verdict::Unsure, // `rec["k"]` raises
        Some(Value::Str("doc")) => {}
        Some(_) => return Verdict::Skip,
    }
    let Some(uri) = uri_of(key) else { return Verdict::Unsure };
    let enabled = match f.enabled {
        None | Some(Value::Bool(true)) => true,
        Some(Value::Nil | Value::Bool(false)) => return Verdict::Skip,
        Some(_) => return Verdict::Unsure,
    };
    let mut kept = false;
    for value in [f.content, f.abstract_, f.overview] {
        match layer(value) {
            None => return Verdict::Unsure,
            Some(None) => {}
            Some(Some(text)) => match holds(text, needle) {
                None => return Verdict::Unsure,
                Some(false) => {}
                Some(true) => {
                    kept = true;
                    break;
                }
            },
        }
    }
    if !kept {
        return Verdict::Skip;
    }
    let (Some(content), Some(abstract_), Some(overview)) = (layer(f.content), layer(f.abstract_), layer(f.overview))
    else {
        return Verdict::Unsure;
    };
    let group = match f.group {
        None => "",
        Some(Value::Str(g)) => g,
        Some(_) => return Verdict::Unsure,
    };
    Verdict::Match(Doc { uri, content, abstract_, overview, enabled, group })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(pairs: &[(&str, Option<&str>)]) -> Vec<u8> {
        let mut out = vec![1u8];
        rmp::encode::write_map_len(&mut out, pairs.len() as u32).unwrap();
        for (k, v) in pairs {
            rmp::encode::write_str(&mut out, k).unwrap();
            match v {
                Some(s) => rmp::encode::write_str(&mut out, s).unwrap(),
                None => rmp::encode::write_nil(&mut out).unwrap(),
            }
        }
        out
    }

    const KEY: &[u8] = b"proj\x01docs\x01d1\x00";

    #[test]
    fn ascii_match_and_miss() {
        let rec = record(&[("k", Some("doc")), ("c", Some("Tea and COFFEE")), ("a", None)]);
        match keyword(KEY, &rec, b"coffee") {
            Verdict::Match(d) => {
                assert_eq!(d.uri, "proj/docs/d1");
                assert_eq!(d.content, Some("Tea and COFFEE"));
                assert_eq!(d.abstract_, None);
                assert!(d.enabled);
                assert_eq!(d.group, "");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(keyword(KEY, &rec, b"milk"), Verdict::Skip);
    }

    #[test]
    fn directories_and_disabled_documents_are_skipped() {
        assert_eq!(keyword(KEY, &record(&[("k", Some("dir"))]), b"x"), Verdict::Skip);
        let mut rec = record(&[("k", Some("doc")), ("c", Some("x"))]);
        rec[1] += 1;
        rec.push(0xa1);
        rec.push(b'e');
        rec.push(0xc2);
        assert_eq!(keyword(KEY, &rec, b"x"), Verdict::Skip);
    }

    #[test]
    fn non_ascii_text_is_unsure_unless_proven() {
        let kelvin = record(&[("k", Some("doc")), ("c", Some("\u{212a}elvin"))]);
        assert_eq!(keyword(KEY, &kelvin, b"kelvin"), Verdict::Unsure);
        assert!(matches!(keyword(KEY, &kelvin, b"elvin"), Verdict::Match(_)));
    }

    #[test]
    fn garbage_is_unsure() {
        let rec = record(&[("k", Some("doc")), ("c", Some("x"))]);
        assert_eq!(keyword(KEY, &rec[..rec.len() - 1], b"x"), Verdict::Unsure);
        let mut extra = rec.clone();
        extra.push(0xc0);
        assert_eq!(keyword(KEY, &extra, b"x"), Verdict::Unsure);
        assert_eq!(keyword(b"no-terminator", &rec, b"x"), Verdict::Unsure);
        assert_eq!(keyword(KEY, &record(&[("c", Some("x"))]), b"x"), Verdict::Unsure);
        let mut version = rec.clone();
        version[0] = 2;
        assert_eq!(keyword(KEY, &version, b"x"), Verdict::Unsure);
    }
}
