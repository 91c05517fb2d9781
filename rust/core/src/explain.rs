//! Explanations: the numbers a row's score was made of, taken from the kernels and the value
//! function the scans themselves run, so an explanation can never disagree with a ranking.

use crate::scoring::{normalise_queries, relevance_of_rows, MetaColumns, ShapeError, Stored, ValueParams, ValueParts};

/// The parts of the listed rows' scores, one entry per row in their order.
#[derive(Debug, Clone, PartialEq)]
pub struct Explained {
    /// Row-major `rows × queries`: each query vector's similarity to the row (clamped to [0, 1]).
    pub similarities: Vec<f32>,
    /// The relevance the scans computed: the largest of the row's similarities.
    pub relevance: Vec<f32>,
    /// The value function's factors, `None` for a row without metadata (its score is its relevance).
    pub parts: Vec<Option<ValueParts>>,
    /// The default value function's score.
    pub score: Vec<f64>,
}

/// Explains the listed `rows` against `queries` (row-major `m × dim`) at `now`.
pub fn explain_rows(
    stored: Stored<'_>,
    queries: &[f32],
    meta: MetaColumns<'_>,
    now: f64,
    params: &ValueParams,
    rows: &[u32],
) -> Result<Explained, ShapeError> {
    let n = stored.rows()?;
    meta.check(n)?;
    let relevance = relevance_of_rows(stored, queries, rows)?;
    let dim = stored.dim;
    let m = queries.len().checked_div(dim).unwrap_or(0);
    let mut similarities = vec![0.0f32; rows.len() * m];
    if m > 0 {
        let unit = normalise_queries(queries, dim);
        for (&r, out) in rows.iter().zip(similarities.chunks_exact_mut(m)) {
            stored.similarities(r as usize, &unit, out);
        }
    }
    let parts: Vec<Option<ValueParts>> =
        rows.iter().map(|&r| meta.row(r as usize).map(|row| ValueParts::of(row, now, params))).collect();
    let score = relevance
        .iter()
        .zip(&parts)
        .map(|(&rel, part)| part.map_or(f64::from(rel), |v| v.score(f64::from(rel))))
        .collect();
    Ok(Explained { similarities, relevance, parts, score })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scoring::{default_value, row_norms, scan_default, scan_default_shadowed, Gate, ScanRequest};
    use crate::shadow::{encode_rows, Shadow};

    fn matrix(n: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut x = seed;
        (0..n * dim)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((x >> 33) as f32 / (1u64 << 31) as f32) - 0.5
            })
            .collect()
    }

    struct Usage {
        has: Vec<u8>,
        ts: Vec<f64>,
        ac: Vec<f64>,
        rc: Vec<f64>,
        cr: Vec<f64>,
    }

    impl Usage {
        fn new(n: usize) -> Self {
            let f = |k: usize| (0..n).map(|i| ((i * k) % 7) as f64).collect::<Vec<f64>>();
            Usage {
                has: (0..n).map(|i| u8::from(i % 5 != 0)).collect(),
                ts: (0..n).map(|i| 1e9 - 3600.0 * (i % 300) as f64).collect(),
                ac: f(3),
                rc: f(2),
                cr: (0..n).map(|i| (i % 3) as f64 - 1.0).collect(),
            }
        }

        fn columns(&self) -> MetaColumns<'_> {
            MetaColumns {
                has_meta: &self.has,
                timestamp: &self.ts,
                access_count: &self.ac,
                reward_count: &self.rc,
                cumulative_reward: &self.cr,
            }
        }
    }

    /// Every query count from one to past two blocks of either precision's kernels.
    #[test]
    fn explanations_recombine_to_the_scans_scores() {
        let (n, dim) = (300, 37);
        let data = matrix(n, dim, 7);
        let norms = row_norms(&data, dim);
        let (half, _) = encode_rows(&data, dim);
        let usage = Usage::new(n);
        let p = ValueParams::default();
        let now = 1e9;
        for m in 1..=13 {
            let queries = matrix(m, dim, 100 + m as u64);
            for stored in [Stored::new(&data, &norms, dim), Stored::half(&half, &norms, dim)] {
                let req = ScanRequest {
                    stored,
                    queries: &queries,
                    meta: usage.columns(),
                    rank: None,
                    now,
                    params: p,
                    threshold: 0.0,
                    gate: Gate::Score,
                    top_k: 40,
                };
                let hits = scan_default(&req).unwrap();
                if stored.half.is_none() {
                    let (bits, residual) = encode_rows(&data, dim);
                    let shadow = Shadow { data: &bits, residual: &residual, dim };
                    assert_eq!(scan_default_shadowed(&req, shadow).unwrap(), hits);
                }
                let rows: Vec<u32> = hits.iter().map(|&(r, _)| r as u32).collect();
                let got = explain_rows(stored, &queries, usage.columns(), now, &p, &rows).unwrap();
                for (i, &(r, score)) in hits.iter().enumerate() {
                    assert_eq!(got.score[i], score, "row {r}, {m} queries");
                    let sims = &got.similarities[i * m..(i + 1) * m];
                    let best = sims.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    assert_eq!(best, got.relevance[i], "row {r}, {m} queries");
                    let rel = f64::from(got.relevance[i]);
                    let meta = usage.columns().row(r);
                    assert_eq!(default_value(rel, meta, now, &p), score);
                    match got.parts[i] {
                        None => assert_eq!(score, rel),
                        Some(v) => assert_eq!(rel * v.recency * (v.frequency * v.reward), score),
                    }
                }
            }
        }
    }

    #[test]
    fn rows_past_the_end_are_refused() {
        let data = matrix(4, 8, 1);
        let norms = row_norms(&data, 8);
        let usage = Usage::new(4);
        let stored = Stored::new(&data, &norms, 8);
        let err = explain_rows(stored, &data[..8], usage.columns(), 0.0, &ValueParams::default(), &[4]);
        assert!(err.is_err());
    }
}
