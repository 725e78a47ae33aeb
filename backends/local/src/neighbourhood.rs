//! How crowded a passage's neighbourhood is, to take out of its dense score.
//!
//! Nearest-neighbour search in a sentence-embedding space has hubs: passages close to many
//! others (boilerplate notes, templated records, small talk) score high against almost any
//! question and crowd out the one passage that answers it. Cross-domain similarity local
//! scaling (CSLS, Conneau et al. 2018, "Word translation without parallel data") corrects for
//! it: a passage's score is its cosine minus half the mean cosine of its `K` nearest neighbours.
//! Both halves of that rule are the paper's (`K` = 10, weight ½), not fitted to our sets.
//!
//! Measured in `recall_quality` (see docs/BENCHMARKS.md): the vectors alone find far more of the
//! coding set's paraphrases, and LoCoMo's conversations gain too, since their small talk is a
//! hub of its own.
//!
//! The neighbours are exact up to [`REFERENCE`] passages a bank. Past that, a passage's
//! neighbourhood is measured against an evenly spaced sample of the bank, with `K` scaled to the
//! sample (the sample's `K · sample / bank` nearest stand for the bank's `K`), which keeps the
//! work per passage bounded (`REFERENCE` dot products).

/// Neighbours averaged (the paper's `K`).
pub(crate) const NEIGHBOURS: usize = 10;
/// A passage's dense score loses this much of its neighbourhood's mean cosine (CSLS's ½).
pub(crate) const WEIGHT: f32 = 0.5;
/// At most this many passages of a bank are measured against.
pub(crate) const REFERENCE: usize = 4096;
/// Neighbours this close are the same text stored twice, not a crowd: not counted.
const SAME_TEXT: f32 = 0.98;

/// The passages a bank's neighbourhoods are measured against, and how many of them count.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reference {
    /// Positions in the bank (those of removed passages are skipped when measuring).
    pub positions: Vec<u32>,
    /// Nearest reference passages averaged.
    pub k: usize,
}

impl Reference {
    /// An evenly spaced sample of at most [`REFERENCE`] of `live` (a bank's live positions): all
    /// of them up to [`REFERENCE`], else exactly [`REFERENCE`].
    pub(crate) fn sample(live: &[u32]) -> Self {
        let n = live.len();
        let positions: Vec<u32> =
            if n <= REFERENCE { live.to_vec() } else { (0..REFERENCE).map(|i| live[i * n / REFERENCE]).collect() };
        let scaled = (NEIGHBOURS * positions.len()) as f64 / live.len().max(1) as f64;
        Self { k: (scaled.round() as usize).clamp(1, NEIGHBOURS), positions }
    }
}

/// The mean of the `k` highest cosines in `cosines` (a passage against its reference, itself
/// and its copies left out by the caller or by [`SAME_TEXT`]); 0 when there are none.
pub(crate) fn crowding(cosines: impl Iterator<Item = f32>, k: usize) -> f32 {
    let mut best: Vec<f32> = Vec::with_capacity(k + 1);
    for c in cosines.filter(|c| *c < SAME_TEXT) {
        if best.len() < k {
            best.push(c);
            if best.len() == k {
                best.sort_by(|a, b| b.total_cmp(a));
            }
        } else if k > 0 && c > best[k - 1] {
            let at = best.partition_point(|b| *b >= c);
            best.insert(at, c);
            best.pop();
        }
    }
    if best.is_empty() {
        0.0
    } else {
        best.iter().sum::<f32>() / best.len() as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crowding_is_the_mean_of_the_nearest_without_copies() {
        let cosines = [0.1, 0.9, 0.5, 0.99, 0.7, 0.3];
        assert!((crowding(cosines.iter().copied(), 3) - (0.9 + 0.7 + 0.5) / 3.0).abs() < 1e-6);
        assert!((crowding(cosines.iter().copied(), 1) - 0.9).abs() < 1e-6, "0.99 is the same text");
        assert!((crowding([0.2, 0.4].into_iter(), 10) - 0.3).abs() < 1e-6, "fewer than k: all of them");
        assert_eq!(crowding(std::iter::empty(), 10), 0.0);
    }

    #[test]
    fn a_small_bank_is_its_own_reference_and_a_large_one_is_sampled() {
        let small: Vec<u32> = (0..500).collect();
        let r = Reference::sample(&small);
        assert_eq!((r.positions.len(), r.k), (500, NEIGHBOURS));
        let large: Vec<u32> = (0..100_000).map(|i| i * 2).collect();
        let r = Reference::sample(&large);
        assert_eq!(r.positions.len(), REFERENCE);
        assert_eq!(r.k, 1, "the sample's nearest stands for the bank's ten");
        let gaps: Vec<u32> = r.positions.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|g| (48..=50).contains(g)), "evenly spaced: {:?}", &gaps[..8]);
        let r = Reference::sample(&(0..6055).collect::<Vec<_>>());
        assert_eq!((r.positions.len(), r.k), (REFERENCE, 7), "the whole budget is used");
    }
}
