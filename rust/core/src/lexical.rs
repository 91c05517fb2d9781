//! Lexical search: Unicode word tokens, lowercased, in an inverted index
//! scored with BM25 (k1 = 1.2, b = 0.75).
//!
//! Documents are numbered by their owner (small dense numbers, reused after a
//! removal). Postings are appended as documents arrive and carry the
//! document's generation, so a removal or a rewrite only marks its old
//! postings stale; they are dropped when stale ones outnumber live ones.
//! Collection statistics (document count, average length, document
//! frequencies) always describe exactly the live documents.

use std::collections::HashMap;
use unicode_segmentation::UnicodeSegmentation;

/// BM25 term-frequency saturation.
pub const K1: f32 = 1.2;
/// BM25 length normalisation.
pub const B: f32 = 0.75;

/// The lowercased Unicode words of `text` (UAX #29 word boundaries; punctuation and spaces dropped).
pub fn tokens(text: &str) -> Vec<String> {
    text.unicode_words().map(str::to_lowercase).collect()
}

#[derive(Clone, Copy)]
struct Posting {
    doc: u32,
    generation: u32,
    tf: u32,
}

struct Doc {
    generation: u32,
    /// (term, frequency), sorted by term.
    terms: Vec<(u32, u32)>,
    len: u32,
}

/// An inverted index over documents numbered by their owner.
#[derive(Default)]
pub struct LexicalIndex {
    vocab: HashMap<String, u32>,
    postings: Vec<Vec<Posting>>,
    df: Vec<u32>,
    docs: Vec<Option<Doc>>,
    generations: Vec<u32>,
    live: u32,
    total_len: u64,
    stale: usize,
    postings_len: usize,
}

/// A scored document.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scored {
    pub doc: u32,
    pub score: f32,
}

impl LexicalIndex {
    pub fn new() -> Self {
        Self::default()
    }

    /// Live documents.
    pub fn len(&self) -> usize {
        self.live as usize
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Mean token count of the live documents (0 when there are none).
    pub fn average_length(&self) -> f32 {
        if self.live == 0 {
            0.0
        } else {
            self.total_len as f32 / self.live as f32
        }
    }

    /// Indexes `text` as document `doc`, replacing what `doc` held.
    pub fn set(&mut self, doc: u32, text: &str) {
        self.remove(doc);
        let at = doc as usize;
        if self.docs.len() <= at {
            self.docs.resize_with(at + 1, || None);
            self.generations.resize(at + 1, 0);
        }
        let generation = self.generations[at].wrapping_add(1);
        self.generations[at] = generation;
        let mut counts: HashMap<u32, u32> = HashMap::new();
        let mut len = 0u32;
        for token in tokens(text) {
            let next = self.vocab.len() as u32;
            let term = *self.vocab.entry(token).or_insert(next);
            if term as usize == self.postings.len() {
                self.postings.push(Vec::new());
                self.df.push(0);
            }
            *counts.entry(term).or_insert(0) += 1;
            len += 1;
        }
        let mut terms: Vec<(u32, u32)> = counts.into_iter().collect();
        terms.sort_unstable();
        for &(term, tf) in &terms {
            self.postings[term as usize].push(Posting { doc, generation, tf });
            self.df[term as usize] += 1;
        }
        self.postings_len += terms.len();
        self.live += 1;
        self.total_len += u64::from(len);
        self.docs[at] = Some(Doc { generation, terms, len });
    }

    /// Forgets document `doc`; false when it was not indexed.
    pub fn remove(&mut self, doc: u32) -> bool {
        let Some(old) = self.docs.get_mut(doc as usize).and_then(Option::take) else {
            return false;
        };
        for &(term, _) in &old.terms {
            self.df[term as usize] -= 1;
        }
        self.stale += old.terms.len();
        self.live -= 1;
        self.total_len -= u64::from(old.len);
        if self.stale > 1024 && self.stale > self.postings_len - self.stale {
            self.compact();
        }
        true
    }

    fn compact(&mut self) {
        let docs = &self.docs;
        for list in &mut self.postings {
            list.retain(|p| matches!(&docs[p.doc as usize], Some(d) if d.generation == p.generation));
        }
        self.postings_len -= self.stale;
        self.stale = 0;
    }

    fn query_terms(&self, query: &str) -> Vec<(u32, f32)> {
        let n = self.live as f32;
        let mut seen: Vec<u32> = tokens(query).iter().filter_map(|t| self.vocab.get(t).copied()).collect();
        seen.sort_unstable();
        seen.dedup();
        seen.into_iter()
            .filter(|&t| self.df[t as usize] > 0)
            .map(|t| {
                let df = self.df[t as usize] as f32;
                (t, (1.0 + (n - df + 0.5) / (df + 0.5)).ln())
            })
            .collect()
    }

    fn term_score(&self, idf: f32, tf: u32, len: u32) -> f32 {
        let avg = self.average_length().max(f32::MIN_POSITIVE);
        let tf = tf as f32;
        idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len as f32 / avg))
    }

    /// The BM25 score of every document matching a word of `query`, restricted to `allowed` when
    /// given, best first (ties by document number). At most `k` results, plus any tied with the k-th:
    /// the caller breaks those ties its own way.
    pub fn search(&self, query: &str, allowed: Option<&[u32]>, k: usize) -> Vec<Scored> {
        let terms = self.query_terms(query);
        if terms.is_empty() || k == 0 {
            return Vec::new();
        }
        let scanned: usize = terms.iter().map(|&(t, _)| self.postings[t as usize].len()).sum();
        let found = match allowed {
            Some(subset) if subset.len().saturating_mul(terms.len()) < scanned => self.score_subset(&terms, subset),
            _ => self.score_postings(&terms, allowed),
        };
        top(found, k)
    }

    /// Scores the few allowed documents one by one (a scope much smaller than the postings).
    fn score_subset(&self, terms: &[(u32, f32)], subset: &[u32]) -> Vec<Scored> {
        let mut out = Vec::new();
        for &doc in subset {
            let Some(Some(d)) = self.docs.get(doc as usize) else { continue };
            let mut score = 0.0f32;
            for &(term, idf) in terms {
                if let Ok(i) = d.terms.binary_search_by_key(&term, |&(t, _)| t) {
                    score += self.term_score(idf, d.terms[i].1, d.len);
                }
            }
            if score > 0.0 {
                out.push(Scored { doc, score });
            }
        }
        out
    }

    /// Walks the postings of the query's words, accumulating per document.
    fn score_postings(&self, terms: &[(u32, f32)], allowed: Option<&[u32]>) -> Vec<Scored> {
        let mask = allowed.map(|subset| {
            let mut mask = vec![false; self.docs.len()];
            for &doc in subset {
                if let Some(m) = mask.get_mut(doc as usize) {
                    *m = true;
                }
            }
            mask
        });
        let mut acc = vec![0.0f32; self.docs.len()];
        let mut touched = Vec::new();
        for &(term, idf) in terms {
            for p in &self.postings[term as usize] {
                let at = p.doc as usize;
                let Some(d) = &self.docs[at] else { continue };
                if d.generation != p.generation || mask.as_ref().is_some_and(|m| !m[at]) {
                    continue;
                }
                if acc[at] == 0.0 {
                    touched.push(p.doc);
                }
                acc[at] += self.term_score(idf, p.tf, d.len);
            }
        }
        touched.into_iter().map(|doc| Scored { doc, score: acc[doc as usize] }).filter(|s| s.score > 0.0).collect()
    }
}

fn better(a: &Scored, b: &Scored) -> std::cmp::Ordering {
    b.score.total_cmp(&a.score).then(a.doc.cmp(&b.doc))
}

/// The best `k` of `found` and every one tied with the k-th, best first.
fn top(mut found: Vec<Scored>, k: usize) -> Vec<Scored> {
    if found.len() > k {
        found.select_nth_unstable_by(k - 1, better);
        let kth = found[k - 1].score;
        let (head, tail) = found.split_at_mut(k);
        let mut ties: Vec<Scored> = tail.iter().copied().filter(|s| s.score == kth).collect();
        let mut kept = head.to_vec();
        kept.append(&mut ties);
        found = kept;
    }
    found.sort_unstable_by(better);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(texts: &[&str]) -> LexicalIndex {
        let mut ix = LexicalIndex::new();
        for (i, t) in texts.iter().enumerate() {
            ix.set(i as u32, t);
        }
        ix
    }

    #[test]
    fn tokens_are_lowercased_unicode_words() {
        assert_eq!(
            tokens("Hello, WORLD! Straße café-au-lait 3.5"),
            ["hello", "world", "straße", "café", "au", "lait", "3.5"]
        );
        assert!(tokens(" ,.;! ").is_empty());
    }

    #[test]
    fn bm25_matches_the_formula() {
        let ix = index(&["apple banana", "apple apple cherry", "durian"]);
        let got = ix.search("apple", None, 10);
        let avg = 6.0 / 3.0;
        let idf = (1.0f32 + (3.0 - 2.0 + 0.5) / (2.0 + 0.5)).ln();
        let score = |tf: f32, len: f32| idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * len / avg));
        assert_eq!(got.iter().map(|s| s.doc).collect::<Vec<_>>(), [1, 0]);
        assert!((got[0].score - score(2.0, 3.0)).abs() < 1e-6);
        assert!((got[1].score - score(1.0, 2.0)).abs() < 1e-6);
    }

    #[test]
    fn case_and_unknown_words() {
        let ix = index(&["Vegetarian, allergic to PEANUTS"]);
        assert_eq!(ix.search("peanuts", None, 5).len(), 1);
        assert!(ix.search("walnuts", None, 5).is_empty());
        assert!(ix.search("", None, 5).is_empty());
    }

    #[test]
    fn removal_and_rewrite_update_statistics_and_hide_old_postings() {
        let mut ix = index(&["red fox", "red hen", "blue jay"]);
        ix.set(0, "green frog");
        assert_eq!(ix.search("fox", None, 5), []);
        assert_eq!(ix.search("frog", None, 5)[0].doc, 0);
        assert!(ix.remove(1));
        assert!(!ix.remove(1));
        assert_eq!(ix.search("red", None, 5), []);
        assert_eq!(ix.len(), 2);
        let fresh = index(&["green frog", "", "blue jay"]);
        // Statistics describe only the live documents: the same scores as an index built afresh
        // (the empty document counts in `fresh`, so compare against one without it).
        let mut again = LexicalIndex::new();
        again.set(0, "green frog");
        again.set(2, "blue jay");
        assert_eq!(ix.search("jay", None, 5), again.search("jay", None, 5));
        assert_eq!(fresh.len(), 3);
    }

    #[test]
    fn subset_and_postings_paths_agree() {
        let texts: Vec<String> = (0..300).map(|i| format!("w{} common w{} tail{}", i % 7, i % 11, i % 3)).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let ix = index(&refs);
        let subset: Vec<u32> = (0..300).filter(|i| i % 5 == 0).collect();
        let by_subset = ix.score_subset(&ix.query_terms("common w3 tail1"), &subset);
        let by_postings = ix.score_postings(&ix.query_terms("common w3 tail1"), Some(&subset));
        assert_eq!(top(by_subset, 1000), top(by_postings, 1000));
        let few = ix.search("w3 w5", Some(&[3, 5, 8]), 10);
        assert!(few.iter().all(|s| [3, 5, 8].contains(&s.doc)));
    }

    #[test]
    fn ties_at_the_cut_are_all_returned() {
        let ix = index(&["same words", "same words", "same words", "other"]);
        assert_eq!(ix.search("same", None, 1).len(), 3);
    }

    #[test]
    fn compaction_keeps_answers() {
        let mut ix = LexicalIndex::new();
        for round in 0..5u32 {
            for doc in 0..1000u32 {
                ix.set(doc, &format!("word{} round{}", doc % 10, round));
            }
        }
        assert!(ix.stale <= ix.postings_len);
        assert_eq!(ix.search("round4", None, 2000).len(), 1000);
        assert!(ix.search("round3", None, 10).is_empty());
    }
}
