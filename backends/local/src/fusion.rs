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
//! - a partial lexical match yields further when the dense side's best stands out from its bank
//!   beyond what chance gives ([`standing`]): `c ← c · (1 − w · (1 − c))`, `w` from 0 (the best
//!   cosine where chance puts it) to 1 ([`STANDS_OUT`]). A match explaining the whole question
//!   (`c = 1`) keeps its weight; an incidental one (a paraphrase sharing a word or two with some
//!   other note) gives way to a confident dense side;
//! - `score = c · bm25 + (1 − c) · cosine`;
//! - the dense side's best passage is seated at most third, and where the lexical side explains
//!   under [`WEAK_LEXICAL`] of the question its second and third are seated at most fourth and
//!   fifth ([`SEATS`]);
//! - a passage found by the dense side alone must be similar enough to be worth showing
//!   ([`DENSE_FLOOR`]), stand out, or be among the dense side's first [`FOLLOWERS`] when its best
//!   is shown; the best is shown whenever some passage matches the question's words (the answer
//!   is not empty anyway), otherwise only past the floor or standing out, so a question about
//!   nothing the bank holds still finds nothing; where the lexical match explains the whole
//!   question (`c = 1`) only the dense best comes along (the rest weigh 0).

use std::collections::HashMap;

use crate::vectors::DenseScores;

/// The dense side's best passage is placed at least this high (1-based).
const SEAT: usize = 3;
/// Where the lexical side is weak ([`WEAK_LEXICAL`]), the dense side's first passages are placed
/// at least this high (1-based), in order: the best at [`SEAT`], the second and third right after.
/// A paraphrased question shares a word or two with many notes, and those incidental matches
/// pushed a fact the model ranked 2nd or 3rd out of the first five (coding dev set: 13 of 440
/// questions the vectors alone found in their top 5 and the hybrid did not).
const SEATS: [usize; 3] = [SEAT, SEAT + 1, SEAT + 2];
/// The lexical confidence (after yielding) under which [`SEATS`] applies. Measured at 0.25, 0.3
/// and 0.35 on the dev sets: coding hit@5 0.852 / 0.852 / 0.855 (0.839 without), LoCoMo turn
/// R@5 0.724 / 0.722 / 0.720 (0.725 without); conversations name their speakers, so their
/// questions rarely match this little.
const WEAK_LEXICAL: f64 = 0.25;
/// A passage only the dense side found, with a cosine below this, is left out: unrelated text
/// scores up to about this much with MiniLM, so without it any question would recall something.
/// It was 0.3 while the dense side ranked by plain cosine; once crowded passages yield (see
/// [`crate::neighbourhood`]) a paraphrase's fact is often the vectors' best at a cosine of
/// 0.25–0.3, and 0.25 found more of them on the coding dev set (hit@5 0.761 → 0.794) and on the
/// blind check set (0.686 → 0.732), LoCoMo unchanged, for one more result on average (35 of
/// up to 50) for a question about something else.
pub(crate) const DENSE_FLOOR: f32 = 0.25;

/// A dense score this far beyond chance ([`standing`]) is trusted: a partial lexical match
/// yields to it, and a passage found by the dense side alone is shown under [`DENSE_FLOOR`].
/// Measured on the dev sets with full yielding at 1.25, 1.5 and 2, and the floor at 1.25, 1.3
/// and 1.5 (one threshold for both changed nothing against the best pair); see BENCHMARKS.md.
const STANDS_OUT: f32 = 1.25;
/// The least cosine of a dense find shown beside the words' matches under [`DENSE_FLOOR`] (the
/// best, and its first [`FOLLOWERS`]): below it the text is unrelated, and a question sharing
/// one word with one note brought back five more by "meaning" (a review's off-topic questions:
/// 6, 5, 5 and 6 results on a bank of 20 notes, then 6, 4, 2 and 5). Measured at 0.1 and 0.15:
/// 0.1 leaves both dev sets and the blind coding set where they were, 0.15 cost two coding
/// questions.
const SHOWN_BESIDE_WORDS: f32 = 0.1;
/// Once the dense side's best is worth showing, its first this many are shown whatever their
/// cosine (the fused order still places them): the question is about something the bank holds,
/// and a paraphrase's fact is often the vectors' 2nd–5th at a cosine under [`DENSE_FLOOR`].
const FOLLOWERS: usize = 5;
/// Banks smaller than this have too few scores for a mean and deviation to say what chance gives.
const MIN_BANK: usize = 100;

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
    let dense_best_stands_out = dense.top.first().map_or(0.0, |t| standing(dense, t.1));
    let c = c * (1.0 - dense_weight(dense_best_stands_out) * (1.0 - c));
    let mut scored: HashMap<i64, (f64, usize)> = HashMap::new();
    for (rank, (pid, b)) in lexical.pool.iter().enumerate() {
        let d = dense.of.get(pid).map_or(0.0, |s| nd(*s));
        scored.insert(*pid, (c * nb(*b) + (1.0 - c) * d, rank));
    }
    let lexical_len = lexical.pool.len();
    // A paraphrase's fact is often the model's best at a cosine under the floor; where some
    // passage matches the question's words the answer holds something anyway, and the dense best
    // joins it (seated third at most). Where nothing does, it must show it is not chance.
    let best_shown = dense.top.first().is_some_and(|t| {
        (!lexical.pool.is_empty() && t.2 >= SHOWN_BESIDE_WORDS)
            || t.2 >= DENSE_FLOOR
            || dense_best_stands_out >= STANDS_OUT
    });
    for (i, (pid, smoothed, own)) in dense.top.iter().enumerate() {
        let shown = *own >= DENSE_FLOOR
            || standing(dense, *smoothed) >= STANDS_OUT
            || (best_shown && i < FOLLOWERS && *own >= SHOWN_BESIDE_WORDS);
        let score = (1.0 - c) * nd(*smoothed);
        // Where the lexical side explains the whole question (c = 1), what only the dense side
        // found weighs nothing: its best may still be seated, the rest would only fill the budget.
        if scored.contains_key(pid) || !shown || (score <= 0.0 && i > 0) {
            continue;
        }
        scored.insert(*pid, (score, lexical_len + i));
    }
    let mut order: Vec<(i64, f64, usize)> = scored.into_iter().map(|(pid, (s, r))| (pid, s, r)).collect();
    // Ties keep the lexical order, then the dense one.
    order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.2.cmp(&b.2)));
    let mut out: Vec<(i64, f64)> = order.into_iter().map(|(pid, s, _)| (pid, s)).collect();
    if best_shown {
        let seated = if c < WEAK_LEXICAL { &SEATS[..] } else { &SEATS[..1] };
        for ((pid, _, _), seat) in dense.top.iter().zip(seated) {
            // In order: seating the second never moves the best, which sits higher.
            if let Some(at) = out.iter().position(|(p, _)| p == pid) {
                if at >= *seat {
                    let moved = out.remove(at);
                    out.insert(seat - 1, moved);
                }
            }
        }
    }
    out
}

/// How far a dense score stands above the bank, against what chance gives: its distance from the
/// bank's mean in standard deviations, over `√(2 ln n)` (about the largest of n normal draws).
/// Around 1 for the best passage of a question the bank holds nothing on, well above it for a
/// passage that truly answers. 0 in a bank too small for the statistics to mean anything.
fn standing(dense: &DenseScores, score: f32) -> f32 {
    if dense.live < MIN_BANK || dense.sd <= 0.0 {
        return 0.0;
    }
    let chance = (2.0 * (dense.live as f32).ln()).sqrt();
    (score - dense.mean) / dense.sd / chance
}

/// How much a partial lexical match yields to the dense side, in [0, 1]: nothing while the
/// dense best is where chance would put it, all of it once it stands out by [`STANDS_OUT`].
fn dense_weight(standing: f32) -> f64 {
    f64::from(((standing - 1.0) / (STANDS_OUT - 1.0)).clamp(0.0, 1.0))
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
            mean: 0.0,
            sd: 0.1,
            live: 100,
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
        // Below the floor, found by the dense side alone, but a runner-up of a best worth showing.
        assert!(order.contains(&7), "{order:?}");
        // Under the floor, not standing out: shown beside the words' matches (the answer is not
        // empty anyway), but alone they are not worth an answer.
        let d = dense(&[(9, 0.2), (8, 0.15)], &[(1, 0.05), (2, 0.1)]);
        let order: Vec<i64> = fuse(&lexical, Some(&d)).into_iter().map(|(p, _)| p).collect();
        assert!(order.contains(&9) && order.contains(&8) && order.len() == 4, "{order:?}");
        let nothing = Lexical { pool: vec![], idf_mass: 12.0 };
        assert!(fuse(&nothing, Some(&d)).is_empty(), "nothing the vectors found is worth showing alone");
    }

    #[test]
    fn under_a_weak_lexical_match_the_dense_runners_up_are_seated_too() {
        // Six incidental matches, each explaining a tenth of the question; the vectors' first
        // three are other passages, scored under the lexical pool's.
        let lexical = Lexical { pool: (1..=6).map(|p| (p, 1.2 - 0.01 * p as f64)).collect(), idf_mass: 12.0 };
        assert!(lexical.confidence() < WEAK_LEXICAL);
        let of: Vec<(i64, f32)> = (1..=6).map(|p| (p, 0.5)).collect();
        let d = dense(&[(7, 0.4), (8, 0.39), (9, 0.38)], &of);
        let order: Vec<i64> = fuse(&lexical, Some(&d)).into_iter().map(|(p, _)| p).collect();
        assert_eq!(order[..5], [1, 2, 7, 8, 9], "{order:?}");
        // A lexical match that explains the question seats only the dense best.
        let strong = Lexical { pool: lexical.pool.clone(), idf_mass: 1.2 };
        let order: Vec<i64> = fuse(&strong, Some(&d)).into_iter().map(|(p, _)| p).collect();
        assert_eq!(order[..4], [1, 2, 7, 3], "{order:?}");
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

    /// Dense scores in a bank of `live` passages whose scores have mean 0 and deviation 0.05.
    fn dense_in_bank(top: &[(i64, f32, f32)], of: &[(i64, f32)], live: usize) -> DenseScores {
        DenseScores {
            top: top.to_vec(),
            of: of.iter().copied().collect(),
            min: -0.2,
            max: top.first().map_or(0.0, |t| t.1),
            mean: 0.0,
            sd: 0.05,
            live,
        }
    }

    #[test]
    fn a_partial_lexical_match_yields_to_a_dense_best_that_stands_out() {
        // The lexical best explains half the question; the dense side's best is another passage.
        let lexical = Lexical { pool: vec![(1, 5.0), (2, 4.9), (3, 4.8), (4, 1.0)], idf_mass: 10.0 };
        let order = |d: &DenseScores| -> Vec<i64> { fuse(&lexical, Some(d)).into_iter().map(|(p, _)| p).collect() };
        let of = [(1, 0.05), (2, 0.05), (3, 0.05), (4, 0.0)];
        // 0.13 is 2.6 deviations above the mean of 10,000 passages: where chance puts the best.
        let by_chance = dense_in_bank(&[(9, 0.13, 0.4)], &of, 10_000);
        assert!((standing(&by_chance, 0.13) - 0.61).abs() < 0.01);
        assert_eq!(order(&by_chance)[..3], [1, 2, 9], "seated third, no higher");
        // 0.3 is 6 deviations above: far beyond chance, so the lexical matches give way.
        let standing_out = dense_in_bank(&[(9, 0.3, 0.4)], &of, 10_000);
        assert!(standing(&standing_out, 0.3) > STANDS_OUT);
        assert_eq!(order(&standing_out)[0], 9);
        // A match that explains the whole question keeps its place.
        let whole = Lexical { pool: vec![(1, 10.0), (2, 4.9)], idf_mass: 10.0 };
        assert_eq!(fuse(&whole, Some(&standing_out))[0].0, 1);
    }

    #[test]
    fn a_dense_find_under_the_floor_is_shown_alone_when_it_stands_out() {
        let lexical = Lexical { pool: vec![], idf_mass: 10.0 };
        let shown = |d: &DenseScores| fuse(&lexical, Some(d)).iter().any(|(p, _)| *p == 9);
        // Cosine 0.2 (under the floor), score 6 deviations above the mean of its bank.
        assert!(shown(&dense_in_bank(&[(9, 0.3, 0.2)], &[], 10_000)));
        // Where chance would put it, or in a bank too small to tell, it is left out.
        assert!(!shown(&dense_in_bank(&[(9, 0.13, 0.2)], &[], 10_000)));
        assert!(!shown(&dense_in_bank(&[(9, 0.3, 0.2)], &[], MIN_BANK - 1)));
    }

    #[test]
    fn the_dense_best_shown_brings_its_runners_up() {
        let lexical = Lexical { pool: vec![], idf_mass: 10.0 };
        let top: Vec<(i64, f32, f32)> = (0..8).map(|i| (10 + i, 0.12 - 0.001 * i as f32, 0.2)).collect();
        let shown = |d: &DenseScores| -> Vec<i64> {
            let mut p: Vec<i64> = fuse(&lexical, Some(d)).into_iter().map(|(p, _)| p).filter(|p| *p >= 10).collect();
            p.sort();
            p
        };
        // The best under the floor: none of them.
        assert!(shown(&dense_in_bank(&top, &[], 10_000)).is_empty());
        // The best over it: the first FOLLOWERS, not the rest.
        let mut over = top.clone();
        over[0].2 = 0.4;
        assert_eq!(shown(&dense_in_bank(&over, &[], 10_000)), (10..10 + FOLLOWERS as i64).collect::<Vec<_>>());
    }

    #[test]
    fn a_dense_find_of_an_unrelated_text_is_not_shown_beside_word_matches() {
        // One incidental shared word: the words' matches are shown, weak as they are.
        let lexical = Lexical { pool: vec![(1, 1.1), (2, 1.0)], idf_mass: 12.0 };
        let ids = |d: &DenseScores| -> Vec<i64> { fuse(&lexical, Some(d)).into_iter().map(|(p, _)| p).collect() };
        // Cosines where unrelated texts stand: none of them joins them.
        assert_eq!(ids(&dense(&[(9, 0.08), (8, 0.06), (7, 0.05)], &[(1, 0.05), (2, 0.04)])), [1, 2]);
        // A paraphrase's fact under the floor still does, without the unrelated ones after it.
        let shown = ids(&dense(&[(9, 0.12), (8, 0.06)], &[(1, 0.05), (2, 0.04)]));
        assert!(shown.contains(&9) && !shown.contains(&8), "{shown:?}");
    }

    #[test]
    fn a_whole_lexical_match_brings_only_the_dense_best() {
        // The lexical match explains the whole question: the passages only the dense side found
        // weigh nothing, and only its best (which may be seated) comes along.
        let whole = Lexical { pool: vec![(1, 10.0)], idf_mass: 10.0 };
        let top: Vec<(i64, f32, f32)> = (0..8).map(|i| (10 + i, 0.3 - 0.01 * i as f32, 0.4)).collect();
        let ids: Vec<i64> = fuse(&whole, Some(&dense_in_bank(&top, &[], 10_000))).into_iter().map(|(p, _)| p).collect();
        assert_eq!(ids, [1, 10]);
    }

    #[test]
    fn idf_matches_fts5() {
        assert!((idf(100, 1) - (99.5f64 / 1.5).ln()).abs() < 1e-12);
        assert_eq!(idf(10, 10), 1e-6);
        assert!(idf(100, 0) > idf(100, 1));
    }
}
