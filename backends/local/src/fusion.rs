//! Hybrid ranking: the lexical (BM25) and dense (cosine) candidates of one query in one order.
//!
//! Measured on both dev sets (LoCoMo conversations, the coding-memory set; see
//! `benches/recall_quality.rs`): a fixed weight or rank fusion trades one for the other, because
//! in conversations a partial lexical match is usually right (names) while for a paraphrased
//! question it is incidental. So the lexical weight is set per query, from how much of the
//! question the best lexical match explains:
//!
//! - `c = min(1, best BM25 / Σ idf of every query term)`, where a term the store does not hold at
//!   all counts with the highest idf (a paraphrase's words are often nowhere in the store);
//! - each side min-max normalised (BM25 within its pool, the cosine over the whole bank);
//! - `score = c · bm25 + (1 − c) · cosine`;
//! - the dense side's best passage is seated at most third, and a passage found by the dense
//!   side alone must be similar enough to be worth showing ([`DENSE_FLOOR`]).

use std::collections::HashMap;

use crate::vectors::DenseScores;

/// The dense side's best passage is placed at least this high (1-based).
const SEAT: usize = 3;
/// A passage only the dense side found, with a cosine below this, is left out: unrelated text
/// scores up to about this much with MiniLM, so without it any question would recall something.
/// It was 0.3 while the dense side ranked by plain cosine; once crowded passages yield (see
/// [`crate::neighbourhood`]) a paraphrase's fact is often the vectors' best at a cosine of
/// 0.25–0.3, and 0.25 found more of them on the coding dev set (hit@5 0.761 → 0.794) and on the
/// blind check set (0.686 → 0.732), LoCoMo unchanged, for one more result on average (35 of
/// up to 50) for a question about something else.
pub(crate) const DENSE_FLOOR: f32 = 0.25;

/// One query's lexical side.
#[derive(Debug, Clone, Default)]
pub(crate) struct Lexical {
    /// The best matches of the bank (passing the filters), best first: (pid, BM25 score, higher is better).
    pub pool: Vec<(i64, f64)>,
    /// Σ idf over every query term, the unknown ones included.
    pub idf_mass: f64,
}

impl Lexical {
    /// How far the best lexical match explains the query, in [0, 1].
    pub(crate) fn confidence(&self) -> f64 {
        match self.pool.first() {
            Some((_, best)) if self.idf_mass > 0.0 => (best / self.idf_mass).clamp(0.0, 1.0),
            Some(_) => 1.0,
            None => 0.0,
        }
    }
}

/// The passages to show, best first, with their fused scores.
pub(crate) fn fuse(lexical: &Lexical, dense: Option<&DenseScores>) -> Vec<(i64, f64)> {
    let Some(dense) = dense.filter(|d| !d.top.is_empty()) else {
        return lexical.pool.clone();
    };
    let c = lexical.confidence();
    let (lo, hi) =
        lexical.pool.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (_, b)| (lo.min(*b), hi.max(*b)));
    let nb = |b: f64| if hi > lo { (b - lo) / (hi - lo) } else { 1.0 };
    let span = f64::from(dense.max - dense.min);
    let nd = |s: f32| if span > 0.0 { f64::from(s - dense.min) / span } else { 1.0 };
    let mut scored: HashMap<i64, (f64, usize)> = HashMap::new();
    for (rank, (pid, b)) in lexical.pool.iter().enumerate() {
        let d = dense.of.get(pid).map_or(0.0, |s| nd(*s));
        scored.insert(*pid, (c * nb(*b) + (1.0 - c) * d, rank));
    }
    let lexical_len = lexical.pool.len();
    for (i, (pid, smoothed, own)) in dense.top.iter().enumerate() {
        if scored.contains_key(pid) || *own < DENSE_FLOOR {
            continue;
        }
        scored.insert(*pid, ((1.0 - c) * nd(*smoothed), lexical_len + i));
    }
    let mut order: Vec<(i64, f64, usize)> = scored.into_iter().map(|(pid, (s, r))| (pid, s, r)).collect();
    // Ties keep the lexical order, then the dense one.
    order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.2.cmp(&b.2)));
    let mut out: Vec<(i64, f64)> = order.into_iter().map(|(pid, s, _)| (pid, s)).collect();
    if let Some((best, _, own)) = dense.top.first() {
        if *own >= DENSE_FLOOR || lexical.pool.iter().any(|(p, _)| p == best) {
            if let Some(at) = out.iter().position(|(p, _)| p == best) {
                if at >= SEAT {
                    let seated = out.remove(at);
                    out.insert(SEAT - 1, seated);
                }
            }
        }
    }
    out
}

/// The idf FTS5's BM25 uses: `ln((N − df + 0.5) / (df + 0.5))`, at least 1e-6; a term in no
/// passage gets the highest there is.
pub(crate) fn idf(passages: u64, df: u64) -> f64 {
    let (n, df) = (passages as f64, df as f64);
    ((n - df + 0.5) / (df + 0.5)).ln().max(1e-6)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dense(top: &[(i64, f32)], of: &[(i64, f32)]) -> DenseScores {
        DenseScores {
            top: top.iter().map(|(p, s)| (*p, *s, *s)).collect(),
            of: of.iter().copied().collect(),
            min: -0.1,
            max: top.first().map_or(0.0, |t| t.1),
        }
    }

    #[test]
    fn a_query_the_best_match_explains_is_ranked_lexically() {
        let lexical = Lexical { pool: vec![(1, 9.0), (2, 4.0), (3, 1.0)], idf_mass: 9.0 };
        assert_eq!(lexical.confidence(), 1.0);
        let d = dense(&[(3, 0.6), (2, 0.5), (1, 0.1)], &[(1, 0.1), (2, 0.5), (3, 0.6)]);
        let order: Vec<i64> = fuse(&lexical, Some(&d)).into_iter().map(|(p, _)| p).collect();
        assert_eq!(order, vec![1, 2, 3]);
    }

    #[test]
    fn a_paraphrase_is_ranked_by_meaning() {
        // One incidental shared word out of many unknown ones: low confidence.
        let lexical = Lexical { pool: vec![(1, 1.1), (2, 1.0)], idf_mass: 12.0 };
        assert!(lexical.confidence() < 0.1);
        let d = dense(&[(9, 0.62), (8, 0.35), (7, 0.2)], &[(1, 0.05), (2, 0.1)]);
        let order: Vec<i64> = fuse(&lexical, Some(&d)).into_iter().map(|(p, _)| p).collect();
        assert_eq!(order[0], 9, "{order:?}");
        assert!(!order.contains(&7), "below the floor, found by the dense side alone: {order:?}");
    }

    #[test]
    fn the_dense_best_is_seated_third_at_worst() {
        let lexical = Lexical { pool: (1..=6).map(|p| (p, 10.0 - p as f64)).collect(), idf_mass: 9.0 };
        let d = dense(&[(42, 0.4)], &[]);
        let order: Vec<i64> = fuse(&lexical, Some(&d)).into_iter().map(|(p, _)| p).collect();
        assert_eq!(order.iter().position(|p| *p == 42), Some(SEAT - 1), "{order:?}");
        // Without vectors (none yet, or the embedder down) the lexical order stands.
        assert_eq!(fuse(&lexical, None).len(), 6);
        assert_eq!(Lexical::default().confidence(), 0.0);
    }

    #[test]
    fn idf_matches_fts5() {
        assert!((idf(100, 1) - (99.5f64 / 1.5).ln()).abs() < 1e-12);
        assert_eq!(idf(10, 10), 1e-6);
        assert!(idf(100, 0) > idf(100, 1));
    }
}
