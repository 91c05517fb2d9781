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

/// `token.to_lowercase()` into `out` (cleared first), without allocating for ASCII words.
fn lowercase_into(token: &str, out: &mut String) {
    out.clear();
    if token.is_ascii() {
        out.extend(token.bytes().map(|b| char::from(b.to_ascii_lowercase())));
    } else {
        out.push_str(&token.to_lowercase());
    }
}

#[derive(Clone, Copy)]
struct Posting {
    doc: u32,
    generation: u32,
    tf: u32,
}

#[derive(Clone, Copy, Default)]
struct Slot {
    generation: u32,
    len: u32,
}

struct Doc {
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
    /// Per document number: the generation its live postings carry (advanced on removal too, so
    /// a removed document's postings match nothing) and its length; what a walk reads per posting.
    slots: Vec<Slot>,
    live: u32,
    total_len: u64,
    stale: usize,
    postings_len: usize,
}

/// One query word's part in a document's BM25 score ([`LexicalIndex::explain`]).
#[derive(Clone, Debug, PartialEq)]
pub struct TermPart {
    pub word: String,
    pub idf: f32,
    /// How often the word occurs in the document.
    pub tf: u32,
    /// `idf × tf × (K1 + 1) / (tf + K1 × (1 − B + B × len / average length))`.
    pub weight: f32,
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
            self.slots.resize(at + 1, Slot::default());
        }
        let generation = self.slots[at].generation.wrapping_add(1);
        let mut ids: Vec<u32> = Vec::new();
        let mut word = String::new();
        for token in text.unicode_words() {
            lowercase_into(token, &mut word);
            let term = match self.vocab.get(word.as_str()) {
                Some(&term) => term,
                None => {
                    let term = self.vocab.len() as u32;
                    self.vocab.insert(word.clone(), term);
                    self.postings.push(Vec::new());
                    self.df.push(0);
                    term
                }
            };
            ids.push(term);
        }
        let len = ids.len() as u32;
        ids.sort_unstable();
        let mut terms: Vec<(u32, u32)> = Vec::new();
        for term in ids {
            match terms.last_mut() {
                Some((last, tf)) if *last == term => *tf += 1,
                _ => terms.push((term, 1)),
            }
        }
        for &(term, tf) in &terms {
            self.postings[term as usize].push(Posting { doc, generation, tf });
            self.df[term as usize] += 1;
        }
        self.postings_len += terms.len();
        self.live += 1;
        self.total_len += u64::from(len);
        self.docs[at] = Some(Doc { terms, len });
        self.slots[at] = Slot { generation, len };
    }

    /// Forgets document `doc`; false when it was not indexed.
    pub fn remove(&mut self, doc: u32) -> bool {
        let Some(old) = self.docs.get_mut(doc as usize).and_then(Option::take) else {
            return false;
        };
        let slot = &mut self.slots[doc as usize];
        *slot = Slot { generation: slot.generation.wrapping_add(1), len: 0 };
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
        let slots = &self.slots;
        for list in &mut self.postings {
            list.retain(|p| slots[p.doc as usize].generation == p.generation);
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

    /// BM25's length normalisation `K1 * (1 - B + B * len / avg)` as `c0 + c1 * len`.
    fn length_terms(&self) -> (f32, f32) {
        let avg = self.average_length().max(f32::MIN_POSITIVE);
        (K1 * (1.0 - B), K1 * B / avg)
    }

    fn term_score(&self, idf: f32, tf: u32, len: u32) -> f32 {
        let (c0, c1) = self.length_terms();
        let tf = tf as f32;
        idf * tf * (K1 + 1.0) / (tf + c0 + c1 * len as f32)
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
            _ => self.score_postings(&terms, allowed, k),
        };
        top(found, k)
    }

    /// What document `doc`'s BM25 score for `query` is made of: each query word it holds, in the
    /// order [`search`](Self::search) adds them (so the parts sum to its score exactly), with the
    /// word's idf, its count in the document and its part of the score; then the document's length
    /// and the score. `None` for a document the index does not hold.
    pub fn explain(&self, query: &str, doc: u32) -> Option<(Vec<TermPart>, u32, f32)> {
        let Some(Some(d)) = self.docs.get(doc as usize) else { return None };
        let mut words: Vec<(u32, String)> =
            tokens(query).into_iter().filter_map(|w| self.vocab.get(&w).map(|&t| (t, w))).collect();
        words.sort_unstable();
        words.dedup_by_key(|(t, _)| *t);
        let terms = self.query_terms(query);
        let mut parts = Vec::new();
        let mut score = 0.0f32;
        for ((term, idf), (_, word)) in terms.iter().zip(words.iter().filter(|(t, _)| self.df[*t as usize] > 0)) {
            if let Ok(i) = d.terms.binary_search_by_key(term, |&(t, _)| t) {
                let weight = self.term_score(*idf, d.terms[i].1, d.len);
                score += weight;
                parts.push(TermPart { word: word.clone(), idf: *idf, tf: d.terms[i].1, weight });
            }
        }
        Some((parts, d.len, score))
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

    /// Walks the postings of the query's words, rarest first, accumulating per document; once the
    /// words left could not lift an unseen document to the k-th score found so far (MaxScore), they
    /// are looked up in the documents already found instead, and documents that can no longer reach
    /// the k-th score are dropped. The survivors are scored afresh in query order, so every path
    /// gives the same sums.
    fn score_postings(&self, terms: &[(u32, f32)], allowed: Option<&[u32]>, k: usize) -> Vec<Scored> {
        let mask = allowed.map(|subset| {
            let mut mask = vec![false; self.docs.len()];
            for &doc in subset {
                if let Some(m) = mask.get_mut(doc as usize) {
                    *m = true;
                }
            }
            mask
        });
        let mut order: Vec<(u32, f32)> = terms.to_vec();
        order.sort_by_key(|&(t, _)| (self.postings[t as usize].len(), t));
        // `left[i]`: the most the words from order[i] on can add to one document.
        let mut left = vec![0.0f32; order.len() + 1];
        for i in (0..order.len()).rev() {
            left[i] = left[i + 1] + order[i].1 * (K1 + 1.0);
        }
        let mut acc = vec![0.0f32; self.docs.len()];
        let mut touched: Vec<u32> = Vec::new();
        let mut kth = 0.0f32;
        let mut walked = 0;
        for (i, &(term, idf)) in order.iter().enumerate() {
            if touched.len() >= k && below(left[i], kth) {
                break;
            }
            self.walk(term, idf, mask.as_deref(), &mut acc, Some(&mut touched));
            walked = i + 1;
            kth = kth_score(touched.iter().map(|&d| acc[d as usize]), k);
        }
        let mut alive = touched;
        for (i, &(term, idf)) in order.iter().enumerate().skip(walked) {
            alive.retain(|&doc| !below(acc[doc as usize] + left[i], kth));
            if self.postings[term as usize].len() <= WALK_OVER_LOOKUP * alive.len() {
                self.walk(term, idf, mask.as_deref(), &mut acc, None);
            } else {
                for &doc in &alive {
                    let Some(d) = &self.docs[doc as usize] else { continue };
                    if let Ok(j) = d.terms.binary_search_by_key(&term, |&(t, _)| t) {
                        acc[doc as usize] += self.term_score(idf, d.terms[j].1, d.len);
                    }
                }
            }
            kth = kth_score(alive.iter().map(|&d| acc[d as usize]), k);
        }
        alive.retain(|&doc| !below(acc[doc as usize], kth));
        self.score_subset(terms, &alive)
    }

    /// Adds `term`'s part to the live, allowed documents of its postings: every one when `touched`
    /// is given (which learns the new ones), else only those already found.
    fn walk(&self, term: u32, idf: f32, mask: Option<&[bool]>, acc: &mut [f32], mut touched: Option<&mut Vec<u32>>) {
        let (c0, c1) = self.length_terms();
        for p in &self.postings[term as usize] {
            let at = p.doc as usize;
            let slot = self.slots[at];
            if slot.generation != p.generation || mask.is_some_and(|m| !m[at]) {
                continue;
            }
            if acc[at] == 0.0 {
                match touched.as_deref_mut() {
                    Some(found) => found.push(p.doc),
                    None => continue,
                }
            }
            let tf = p.tf as f32;
            acc[at] += idf * tf * (K1 + 1.0) / (tf + c0 + c1 * slot.len as f32);
        }
    }
}

/// A word's postings are walked rather than looked up in each document still in the running while
/// they are at most this many times as many (a lookup is a binary search in the document's words).
const WALK_OVER_LOOKUP: usize = 8;

/// `bound` is surely below `kth`, whatever the order the sums behind either were added in.
fn below(bound: f32, kth: f32) -> bool {
    bound * (1.0 + 1e-4) < kth
}

/// The k-th largest of `scores` (0 when there are fewer than k).
fn kth_score(scores: impl Iterator<Item = f32>, k: usize) -> f32 {
    let mut all: Vec<f32> = scores.collect();
    if all.len() < k || k == 0 {
        return 0.0;
    }
    let (_, kth, _) = all.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
    *kth
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

    #[test]
    fn explanations_sum_to_the_search_scores() {
        let mut ix = LexicalIndex::new();
        let texts = ["the cat sat on the mat", "a cat and a dog", "dogs chase cats", "the mat is red", "cat cat cat"];
        for (i, t) in texts.iter().enumerate() {
            ix.set(i as u32, t);
        }
        for query in ["cat mat", "the dog", "red cat the", "nothing here", "CAT"] {
            for hit in ix.search(query, None, 10) {
                let (parts, len, score) = ix.explain(query, hit.doc).unwrap();
                assert_eq!(score, hit.score, "{query} doc {}", hit.doc);
                assert_eq!(len as usize, tokens(texts[hit.doc as usize]).len());
                assert!(parts.iter().all(|p| tokens(query).contains(&p.word) && p.tf > 0 && p.weight > 0.0));
            }
        }
        assert!(ix.explain("cat", 99).is_none());
    }

    fn index(texts: &[&str]) -> LexicalIndex {
        let mut ix = LexicalIndex::new();
        for (i, t) in texts.iter().enumerate() {
            ix.set(i as u32, t);
        }
        ix
    }

    #[test]
    fn indexed_words_are_the_query_words() {
        // Final sigma lowercases by position; the index and a query must agree on it.
        let ix = index(&["ΟΔΟΣ Straße ÉCOLE"]);
        for word in ["οδος", "ΟΔΟΣ", "straße", "école"] {
            assert_eq!(ix.search(word, None, 1).len(), 1, "{word}");
        }
        assert!(ix.search("οδοσ", None, 1).is_empty());
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
        let by_postings = ix.score_postings(&ix.query_terms("common w3 tail1"), Some(&subset), 1000);
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

    #[test]
    fn pruned_walk_finds_what_scoring_every_document_finds() {
        // Zipf-like words over varied lengths, queries mixing common and rare words, many k.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let word = |r: u64| format!("w{}", (r as f64).sqrt() as u64);
        // "common" is in nine documents of ten: rarer words walked first leave few documents in the
        // running, and its postings are then looked up in them rather than walked.
        let texts: Vec<String> = (0..2000)
            .map(|_| {
                let mut words: Vec<String> = (0..3 + next(30)).map(|_| word(next(40_000))).collect();
                if next(10) > 0 {
                    words.extend((0..1 + next(3)).map(|_| "common".to_string()));
                }
                words.join(" ")
            })
            .collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let mut ix = index(&refs);
        for doc in (0..2000).step_by(7) {
            ix.remove(doc);
        }
        let every: Vec<u32> = (0..2000).collect();
        let subset: Vec<u32> = (0..2000).filter(|d| d % 3 == 0).collect();
        for round in 0..200 {
            let mut query = (0..1 + next(5)).map(|_| word(next(40_000))).collect::<Vec<_>>().join(" ");
            if round % 2 == 0 {
                query.push_str(" common");
            }
            let terms = ix.query_terms(&query);
            let k = 1 + (round % 40) as usize;
            for allowed in [None, Some(&subset[..])] {
                let all = ix.score_subset(&terms, allowed.unwrap_or(&every));
                assert_eq!(top(ix.score_postings(&terms, allowed, k), k), top(all, k), "{query} k={k}");
            }
        }
    }
}
