//! Candidate pairs for consolidation: similar nodes that share a group.
//!
//! Groups (the members of one tag) are given in CSR form: `members` holds row
//! indices, group `g` spans `members[offsets[g]..offsets[g + 1]]`. Every pair
//! inside a group whose cosine exceeds the threshold is a candidate; a greedy
//! matching then gives each row at most one partner, best pairs first.

use crate::scoring::{ShapeError, Stored};
use rayon::prelude::*;
use std::cmp::Ordering;

/// A candidate pair `(a, b)` with `a < b` (row indices) and their cosine.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pair {
    pub a: u32,
    pub b: u32,
    pub cosine: f32,
}

fn dot(x: &[f32], y: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let full = x.len() - x.len() % 8;
    for (cx, cy) in x[..full].chunks_exact(8).zip(y[..full].chunks_exact(8)) {
        for l in 0..8 {
            acc[l] += cx[l] * cy[l];
        }
    }
    acc.iter().sum::<f32>() + x[full..].iter().zip(&y[full..]).map(|(a, b)| a * b).sum::<f32>()
}

/// All in-group pairs with cosine strictly above `threshold`, each pair once.
pub fn group_pairs(
    stored: Stored<'_>,
    members: &[u32],
    offsets: &[usize],
    threshold: f32,
) -> Result<Vec<Pair>, ShapeError> {
    let n = stored.rows()?;
    let dim = stored.dim;
    if offsets.windows(2).any(|w| w[0] > w[1]) || offsets.last().is_some_and(|&l| l > members.len()) {
        return Err(ShapeError("group offsets must be non-decreasing and within members".into()));
    }
    if let Some(&bad) = members.iter().find(|&&m| m as usize >= n) {
        return Err(ShapeError(format!("member row {bad} is out of range for {n} rows")));
    }
    let row = |i: u32| &stored.data[i as usize * dim..(i as usize + 1) * dim];
    let cosine = |a: u32, b: u32| {
        let (na, nb) = (stored.norms[a as usize], stored.norms[b as usize]);
        (na > 0.0 && nb > 0.0 && dim > 0).then(|| dot(row(a), row(b)) / (na * nb))
    };
    let mut pairs: Vec<Pair> = offsets
        .par_windows(2)
        .flat_map_iter(|w| {
            let group = &members[w[0]..w[1]];
            let mut found = Vec::new();
            for (i, &x) in group.iter().enumerate() {
                for &y in &group[i + 1..] {
                    if x == y {
                        continue;
                    }
                    if let Some(c) = cosine(x, y).filter(|&c| c > threshold) {
                        found.push(Pair { a: x.min(y), b: x.max(y), cosine: c });
                    }
                }
            }
            found
        })
        .collect();
    pairs.sort_unstable_by_key(|p| (p.a, p.b));
    pairs.dedup_by(|p, q| p.a == q.a && p.b == q.b);
    Ok(pairs)
}

/// The pairs best cosine first, ties by `(a, b)` ascending.
pub fn by_similarity(mut pairs: Vec<Pair>) -> Vec<Pair> {
    pairs.sort_unstable_by(|p, q| {
        q.cosine.partial_cmp(&p.cosine).unwrap_or(Ordering::Equal).then_with(|| (p.a, p.b).cmp(&(q.a, q.b)))
    });
    pairs
}

/// Greedy matching: best cosine first (ties by `(a, b)` ascending), each row used once.
pub fn greedy_matching(pairs: Vec<Pair>, rows: usize) -> Vec<Pair> {
    let pairs = by_similarity(pairs);
    let mut used = vec![false; rows];
    let mut out = Vec::new();
    for p in pairs {
        let (a, b) = (p.a as usize, p.b as usize);
        if a < rows && b < rows && !used[a] && !used[b] {
            used[a] = true;
            used[b] = true;
            out.push(p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scoring::row_norms;

    fn pairs_of(data: &[f32], dim: usize, members: &[u32], offsets: &[usize], t: f32) -> Vec<(u32, u32)> {
        let norms = row_norms(data, dim);
        let stored = Stored::new(data, &norms, dim);
        group_pairs(stored, members, offsets, t).unwrap().iter().map(|p| (p.a, p.b)).collect()
    }

    #[test]
    fn only_pairs_within_a_group_and_above_threshold() {
        let data = [1.0, 0.0, 0.99, 0.1, 1.0, 0.01, 0.0, 1.0];
        assert_eq!(pairs_of(&data, 2, &[0, 1, 3, 2], &[0, 3, 4], 0.9), vec![(0, 1)]);
        assert_eq!(pairs_of(&data, 2, &[0, 1, 2], &[0, 3], 0.9), vec![(0, 1), (0, 2), (1, 2)]);
    }

    #[test]
    fn pairs_in_several_groups_are_reported_once() {
        let data = [1.0, 0.0, 1.0, 0.0];
        assert_eq!(pairs_of(&data, 2, &[0, 1, 1, 0], &[0, 2, 4], 0.5), vec![(0, 1)]);
    }

    #[test]
    fn threshold_is_strict_and_zero_vectors_never_pair() {
        let data = [1.0, 0.0, 1.0, 0.0, 0.0, 0.0];
        assert!(pairs_of(&data, 2, &[0, 1], &[0, 2], 1.0).is_empty());
        assert!(pairs_of(&data, 2, &[0, 2], &[0, 2], -0.5).is_empty());
    }

    #[test]
    fn greedy_matching_takes_best_partner_first() {
        let pairs =
            vec![Pair { a: 0, b: 1, cosine: 0.8 }, Pair { a: 1, b: 2, cosine: 0.95 }, Pair { a: 0, b: 3, cosine: 0.7 }];
        let got: Vec<_> = greedy_matching(pairs, 4).iter().map(|p| (p.a, p.b)).collect();
        assert_eq!(got, vec![(1, 2), (0, 3)]);
    }

    #[test]
    fn by_similarity_orders_best_first_then_by_rows() {
        let pairs =
            vec![Pair { a: 2, b: 3, cosine: 0.9 }, Pair { a: 0, b: 1, cosine: 0.9 }, Pair { a: 0, b: 2, cosine: 0.99 }];
        let got: Vec<_> = by_similarity(pairs).iter().map(|p| (p.a, p.b)).collect();
        assert_eq!(got, vec![(0, 2), (0, 1), (2, 3)]);
    }

    #[test]
    fn bad_groups_are_shape_errors() {
        let data = [1.0, 0.0];
        let norms = row_norms(&data, 2);
        let stored = Stored::new(&data, &norms, 2);
        assert!(group_pairs(stored, &[5], &[0, 1], 0.0).is_err());
        assert!(group_pairs(stored, &[0], &[0, 3], 0.0).is_err());
    }
}
