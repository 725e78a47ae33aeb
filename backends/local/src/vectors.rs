//! The passages' vectors in memory, per bank, for exact search: a query is scored against every
//! vector of its bank with an int8 scan (see `mneme_embed::vector::dot_i8_rows`). Measured at
//! 100,000 passages on 2 cores, the scan takes a few milliseconds, well inside recall's budget,
//! and it is exact, so an ANN index (with its build time, memory and recall loss) buys nothing
//! at this size.
//!
//! Each vector knows the passage before it in its conversation: a passage's dense score is
//! smoothed with its predecessor's (the answer often follows the turn that asked).

use std::collections::HashMap;

use mneme_embed::vector::{dot_i8_rows, quantize, Quantized};

/// A passage's score is `(own + SMOOTH · previous) / (1 + SMOOTH)`.
const SMOOTH: f32 = 0.5;
/// No predecessor (or not one with a vector).
const NONE: u32 = u32::MAX;
/// A query's best passages include at most this many of one memory (a long transcript would
/// otherwise fill them).
pub(crate) const PER_MEMORY: usize = 2;

/// A vector to add: its passage, bank, predecessor and value.
pub(crate) struct NewVector {
    pub pid: i64,
    /// Its memory: a query's best passages include at most [`PER_MEMORY`] of one memory.
    pub memory_seq: i64,
    pub bank: String,
    pub prev_pid: Option<i64>,
    pub vector: Quantized,
}

/// The dense side of one query.
#[derive(Debug, Clone, Default)]
pub(crate) struct DenseScores {
    /// The best passages by smoothed score, best first: (pid, smoothed, own cosine).
    pub top: Vec<(i64, f32, f32)>,
    /// The smoothed score of each passage asked for (the lexical pool), where it has a vector.
    pub of: HashMap<i64, f32>,
    /// Lowest and highest smoothed score over the whole bank.
    pub min: f32,
    pub max: f32,
}

/// A query scored against a bank, before the lexical pool is known.
pub(crate) struct DenseScan {
    top: Vec<(i64, f32, f32)>,
    min: f32,
    max: f32,
    /// By position in the bank.
    smoothed: Vec<f32>,
    bank: usize,
    generation: u64,
}

/// Every vector of one model, by bank.
#[derive(Default)]
pub(crate) struct VectorIndex {
    dim: usize,
    /// Bumped whenever positions change (compaction, clear).
    generation: u64,
    banks: Vec<Bank>,
    bank_of: HashMap<String, usize>,
    /// pid → (bank, position).
    place: HashMap<i64, (usize, u32)>,
}

#[derive(Default)]
struct Bank {
    /// -1 where the passage was removed (skipped, compacted away later).
    pids: Vec<i64>,
    memories: Vec<i64>,
    prev: Vec<u32>,
    scales: Vec<f32>,
    data: Vec<i8>,
    dead: usize,
}

impl VectorIndex {
    /// An empty index of `dim`-long vectors.
    pub(crate) fn new(dim: usize) -> Self {
        Self { dim, ..Default::default() }
    }

    /// How many vectors it holds.
    pub(crate) fn len(&self) -> usize {
        self.place.len()
    }

    /// Every pid it holds.
    pub(crate) fn pids(&self) -> Vec<i64> {
        self.place.keys().copied().collect()
    }

    /// Adds (or replaces) a vector. A vector of another length than the index's is refused.
    pub(crate) fn add(&mut self, v: NewVector) -> bool {
        if self.dim == 0 {
            self.dim = v.vector.q.len();
        }
        if v.vector.q.len() != self.dim || self.dim == 0 {
            return false;
        }
        self.remove(&[v.pid]);
        let b = match self.bank_of.get(&v.bank) {
            Some(&b) => b,
            None => {
                self.banks.push(Bank::default());
                self.bank_of.insert(v.bank.clone(), self.banks.len() - 1);
                self.banks.len() - 1
            }
        };
        let prev = v.prev_pid.and_then(|p| self.place.get(&p)).filter(|(pb, _)| *pb == b).map_or(NONE, |(_, i)| *i);
        let bank = &mut self.banks[b];
        let pos = bank.pids.len() as u32;
        bank.pids.push(v.pid);
        bank.memories.push(v.memory_seq);
        bank.prev.push(prev);
        bank.scales.push(v.vector.scale);
        bank.data.extend_from_slice(&v.vector.q);
        self.place.insert(v.pid, (b, pos));
        true
    }

    /// Forgets passages (deleted ones). Unknown pids are ignored.
    pub(crate) fn remove(&mut self, pids: &[i64]) {
        let mut touched = Vec::new();
        for pid in pids {
            if let Some((b, pos)) = self.place.remove(pid) {
                let bank = &mut self.banks[b];
                bank.pids[pos as usize] = -1;
                bank.dead += 1;
                touched.push(b);
            }
        }
        touched.dedup();
        for b in touched {
            if self.banks[b].dead > 64 && self.banks[b].dead * 4 > self.banks[b].pids.len() {
                self.compact(b);
            }
        }
    }

    /// Forgets everything.
    pub(crate) fn clear(&mut self) {
        let (dim, generation) = (self.dim, self.generation + 1);
        *self = Self { generation, ..Self::new(dim) };
    }

    /// Scores `query` (unit length) against every vector of `bank`: the `k` best, and the
    /// scores of the passages in `wanted`.
    #[cfg(test)]
    pub(crate) fn search(&self, bank: &str, query: &[f32], k: usize, wanted: &[i64]) -> Option<DenseScores> {
        self.scan(bank, query, k).map(|scan| self.finish(scan, wanted))
    }

    /// The scan of [`VectorIndex::search`], before the lexical pool is known (recall runs it
    /// beside the lexical side).
    pub(crate) fn scan(&self, bank: &str, query: &[f32], k: usize) -> Option<DenseScan> {
        let b = *self.bank_of.get(bank)?;
        let bank = &self.banks[b];
        if query.len() != self.dim || bank.pids.len() == bank.dead {
            return None;
        }
        let q = quantize(query);
        let mut dots = Vec::with_capacity(bank.pids.len());
        dot_i8_rows(&q.q, &bank.data, &mut dots);
        let own: Vec<f32> = dots.iter().zip(&bank.scales).map(|(d, s)| *d as f32 * s * q.scale).collect();
        let mut smoothed = Vec::with_capacity(own.len());
        let (mut min, mut max) = (f32::INFINITY, f32::NEG_INFINITY);
        for (i, s) in own.iter().enumerate() {
            let p = bank.prev[i];
            let prev = if p != NONE && bank.pids[p as usize] >= 0 { own[p as usize] } else { *s };
            let v = (s + SMOOTH * prev) / (1.0 + SMOOTH);
            if bank.pids[i] >= 0 {
                min = min.min(v);
                max = max.max(v);
            }
            smoothed.push(v);
        }
        let mut order: Vec<u32> = (0..own.len() as u32).filter(|&i| bank.pids[i as usize] >= 0).collect();
        let by_score = |a: &u32, b: &u32| smoothed[*b as usize].total_cmp(&smoothed[*a as usize]);
        // Enough candidates that k remain after the per-memory cap, almost always.
        let wide = k * 4;
        if order.len() > wide {
            order.select_nth_unstable_by(wide, by_score);
            order.truncate(wide);
        }
        order.sort_by(by_score);
        let mut per_memory: HashMap<i64, usize> = HashMap::new();
        let top = order
            .iter()
            .filter(|&&i| {
                let n = per_memory.entry(bank.memories[i as usize]).or_default();
                *n += 1;
                *n <= PER_MEMORY
            })
            .take(k)
            .map(|&i| (bank.pids[i as usize], smoothed[i as usize], own[i as usize]))
            .collect();
        Some(DenseScan { top, min, max, smoothed, bank: b, generation: self.generation })
    }

    /// A scan's scores with those of `wanted` (when the index was compacted since, positions
    /// moved: they are left out).
    pub(crate) fn finish(&self, scan: DenseScan, wanted: &[i64]) -> DenseScores {
        let of = if scan.generation == self.generation {
            wanted
                .iter()
                .filter_map(|pid| match self.place.get(pid) {
                    Some(&(pb, pos)) if pb == scan.bank => scan.smoothed.get(pos as usize).map(|s| (*pid, *s)),
                    _ => None,
                })
                .collect()
        } else {
            HashMap::new()
        };
        DenseScores { top: scan.top, of, min: scan.min, max: scan.max }
    }

    /// Drops a bank's removed slots; positions change, so predecessor links are re-pointed.
    fn compact(&mut self, b: usize) {
        let dim = self.dim;
        self.generation += 1;
        let old = std::mem::take(&mut self.banks[b]);
        let mut new_pos = vec![NONE; old.pids.len()];
        let mut bank = Bank::default();
        for (i, pid) in old.pids.iter().enumerate() {
            if *pid < 0 {
                continue;
            }
            new_pos[i] = bank.pids.len() as u32;
            bank.pids.push(*pid);
            bank.memories.push(old.memories[i]);
            bank.prev.push(old.prev[i]);
            bank.scales.push(old.scales[i]);
            bank.data.extend_from_slice(&old.data[i * dim..(i + 1) * dim]);
        }
        for p in &mut bank.prev {
            if *p != NONE {
                *p = new_pos[*p as usize];
            }
        }
        for (i, pid) in bank.pids.iter().enumerate() {
            self.place.insert(*pid, (b, i as u32));
        }
        self.banks[b] = bank;
    }
}

#[cfg(test)]
mod tests {
    use mneme_embed::vector::normalize;

    use super::*;

    fn unit(seed: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..16).map(|i| (((i + 1) * (seed + 3) * 7919) % 113) as f32 - 56.0).collect();
        normalize(&mut v);
        v
    }

    fn add(index: &mut VectorIndex, pid: i64, bank: &str, prev: Option<i64>, v: &[f32]) {
        assert!(index.add(NewVector { pid, memory_seq: pid, bank: bank.into(), prev_pid: prev, vector: quantize(v) }));
    }

    #[test]
    fn finds_the_nearest_in_the_bank_only() {
        let mut index = VectorIndex::new(16);
        for pid in 0..50 {
            add(&mut index, pid, "a", None, &unit(pid as usize));
        }
        add(&mut index, 100, "b", None, &unit(7));
        let hits = index.search("a", &unit(7), 3, &[1, 100]).unwrap();
        assert_eq!(hits.top[0].0, 7);
        assert!((hits.top[0].2 - 1.0).abs() < 0.02, "{:?}", hits.top[0]);
        assert_eq!(hits.top.len(), 3);
        assert!(hits.of.contains_key(&1) && !hits.of.contains_key(&100), "the other bank's passage is not scored");
        assert!(hits.min <= hits.max);
        assert!(index.search("nobody", &unit(7), 3, &[]).is_none());
        let short =
            NewVector { pid: 5, memory_seq: 5, bank: "a".into(), prev_pid: None, vector: quantize(&[1.0, 0.0]) };
        assert!(!index.add(short));
    }

    #[test]
    fn a_passage_is_smoothed_with_its_predecessor_and_removal_survives_compaction() {
        let mut index = VectorIndex::new(16);
        let q = unit(1);
        add(&mut index, 1, "a", None, &q); // the question's turn
        add(&mut index, 2, "a", Some(1), &unit(2)); // the answer, after it
        add(&mut index, 3, "a", None, &unit(2)); // the same text, standalone
        let hits = index.search("a", &q, 3, &[]).unwrap();
        let score = |pid| hits.top.iter().find(|t| t.0 == pid).unwrap().1;
        assert!(score(2) > score(3), "the predecessor's match lifts the answer");
        for pid in 100..300 {
            add(&mut index, pid, "a", None, &unit(pid as usize));
        }
        index.remove(&(100..300).collect::<Vec<_>>());
        assert_eq!(index.len(), 3);
        assert_eq!(index.banks[0].pids.len(), 3, "compacted");
        let again = index.search("a", &q, 3, &[]).unwrap();
        assert_eq!(again.top.iter().map(|t| t.0).collect::<Vec<_>>(), hits.top.iter().map(|t| t.0).collect::<Vec<_>>());
        assert!((again.top[1].1 - hits.top[1].1).abs() < 1e-6, "links re-pointed");
        index.clear();
        assert_eq!(index.len(), 0);
    }
}
