//! Ids held as one UTF-8 blob and the end offset of each id (how saved columns and saved vector
//! indexes keep them), matched against each other without an object per id.
//!
//! Opening a store of a million nodes with its saved vector index pairs every saved label's id
//! with the row holding it; done per id in Python that alone took most of a second.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

/// Why two id lists could not be matched.
#[derive(Debug, PartialEq, Eq)]
pub enum IdsError {
    /// The end offsets do not step through the blob (decreasing, or past its end).
    Offsets(String),
    /// The list searched holds this id twice (its second position).
    Duplicate(usize),
}

impl std::fmt::Display for IdsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IdsError::Offsets(m) => f.write_str(m),
            IdsError::Duplicate(i) => write!(f, "id {i} repeats an earlier one"),
        }
    }
}

/// Ids over a blob: id `i` is `blob[ends[i-1]..ends[i]]` (from 0 for the first).
#[derive(Clone, Copy)]
pub struct Ids<'a> {
    blob: &'a [u8],
    ends: &'a [u64],
}

impl<'a> Ids<'a> {
    /// The ids of `blob`, once the offsets are checked to step through it.
    pub fn new(blob: &'a [u8], ends: &'a [u64]) -> Result<Self, IdsError> {
        let mut start = 0u64;
        for (i, &end) in ends.iter().enumerate() {
            if end < start || end > blob.len() as u64 {
                return Err(IdsError::Offsets(format!("id {i} ends at {end}, outside {start}..={}", blob.len())));
            }
            start = end;
        }
        Ok(Self { blob, ends })
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Id `i` (the offsets were checked in `new`).
    pub fn get(&self, i: usize) -> &'a [u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.blob[start..self.ends[i] as usize]
    }
}

const MIX: u64 = 0x9E37_79B9_7F4A_7C15;

/// A seeded hash of an id's bytes: eight bytes a step, then murmur3's finaliser. The seed is drawn
/// per table, so no fixed set of ids collides in every process.
fn hash(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = seed ^ (bytes.len() as u64).wrapping_mul(MIX);
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        h = (h ^ u64::from_le_bytes(w.try_into().expect("8 bytes"))).wrapping_mul(MIX).rotate_left(31);
    }
    let mut tail = [0u8; 8];
    tail[..words.remainder().len()].copy_from_slice(words.remainder());
    h = (h ^ u64::from_le_bytes(tail)).wrapping_mul(MIX);
    h ^= h >> 33;
    h = h.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    h ^= h >> 33;
    h = h.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    h ^ (h >> 33)
}

/// Distinct ids (an owned copy) with a table to find each one's position.
pub struct IdTable {
    blob: Vec<u8>,
    ends: Vec<u64>,
    slots: Vec<u32>,
    seed: u64,
}

impl IdTable {
    /// The table of `hay`; `IdsError::Duplicate` when an id repeats an earlier one.
    pub fn new(hay: Ids<'_>) -> Result<Self, IdsError> {
        if hay.len() >= u32::MAX as usize {
            return Err(IdsError::Offsets(format!("{} ids are more than a table holds", hay.len())));
        }
        let seed = RandomState::new().hash_one(hay.len());
        let size = (2 * hay.len()).next_power_of_two().max(16);
        let mask = size - 1;
        let mut slots = vec![0u32; size]; // a hay position + 1; 0: empty
        for i in 0..hay.len() {
            let id = hay.get(i);
            let mut at = hash(seed, id) as usize & mask;
            loop {
                match slots[at] {
                    0 => {
                        slots[at] = i as u32 + 1;
                        break;
                    }
                    s if hay.get(s as usize - 1) == id => return Err(IdsError::Duplicate(i)),
                    _ => at = (at + 1) & mask,
                }
            }
        }
        Ok(Self { blob: hay.blob.to_vec(), ends: hay.ends.to_vec(), slots, seed })
    }

    fn ids(&self) -> Ids<'_> {
        Ids { blob: &self.blob, ends: &self.ends }
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The position of `id` (None: not held).
    pub fn find(&self, id: &[u8]) -> Option<usize> {
        let (hay, mask) = (self.ids(), self.slots.len() - 1);
        let mut at = hash(self.seed, id) as usize & mask;
        loop {
            match self.slots[at] {
                0 => return None,
                s if hay.get(s as usize - 1) == id => return Some(s as usize - 1),
                _ => at = (at + 1) & mask,
            }
        }
    }

    /// For each id of `needles`, its position here (-1: not held). A needle equal to the id at its
    /// own position is taken without a lookup: lists saved from the same rows mostly line up.
    pub fn positions(&self, needles: Ids<'_>) -> Vec<i64> {
        let hay = self.ids();
        (0..needles.len())
            .map(|i| {
                let id = needles.get(i);
                if i < hay.len() && hay.get(i) == id {
                    i as i64
                } else {
                    self.find(id).map_or(-1, |at| at as i64)
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(ids: &[&str]) -> (Vec<u8>, Vec<u64>) {
        let mut ends = Vec::new();
        let mut out = Vec::new();
        for id in ids {
            out.extend_from_slice(id.as_bytes());
            ends.push(out.len() as u64);
        }
        (out, ends)
    }

    #[test]
    fn ids_read_each_id_and_refuse_bad_offsets() {
        let (b, e) = blob(&["a", "", "bcd"]);
        let ids = Ids::new(&b, &e).unwrap();
        assert_eq!((0..ids.len()).map(|i| ids.get(i)).collect::<Vec<_>>(), vec![&b"a"[..], b"", b"bcd"]);
        assert!(matches!(Ids::new(&b, &[2, 1]), Err(IdsError::Offsets(_))));
        assert!(matches!(Ids::new(&b, &[5]), Err(IdsError::Offsets(_))));
        assert!(Ids::new(&b, &[]).unwrap().is_empty());
    }

    #[test]
    fn a_table_finds_each_needle_aligned_or_not() {
        let (hb, he) = blob(&["x", "y", "z"]);
        let (nb, ne) = blob(&["x", "z", "w", "y", ""]);
        let table = IdTable::new(Ids::new(&hb, &he).unwrap()).unwrap();
        assert_eq!(table.positions(Ids::new(&nb, &ne).unwrap()), vec![0, 2, -1, 1, -1]);
        assert_eq!(table.positions(Ids::new(&[], &[]).unwrap()), Vec::<i64>::new());
        assert_eq!((table.len(), table.find(b"z"), table.find(b"q")), (3, Some(2), None));
        assert!(IdTable::new(Ids::new(&[], &[]).unwrap()).unwrap().is_empty());
    }

    #[test]
    fn a_table_matches_many_ids_of_every_length() {
        let hay: Vec<String> = (0..5000).map(|i| format!("node-{}", "x".repeat(i % 19)) + &i.to_string()).collect();
        let needles: Vec<String> = hay.iter().rev().cloned().chain(["absent".to_string()]).collect();
        let (hb, he) = blob(&hay.iter().map(String::as_str).collect::<Vec<_>>());
        let (nb, ne) = blob(&needles.iter().map(String::as_str).collect::<Vec<_>>());
        let got = IdTable::new(Ids::new(&hb, &he).unwrap()).unwrap().positions(Ids::new(&nb, &ne).unwrap());
        let want: Vec<i64> = (0..5000).rev().chain([-1]).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_table_refuses_a_repeated_id() {
        let (hb, he) = blob(&["x", "y", "x"]);
        assert!(matches!(IdTable::new(Ids::new(&hb, &he).unwrap()), Err(IdsError::Duplicate(2))));
    }
}
