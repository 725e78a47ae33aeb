//! The passages' vectors in memory, per bank, for exact search: a query is scored against every
//! vector of its bank with an int8 scan (see `mneme_embed::vector::dot_i8_rows`). Measured at
//! 100,000 passages on 2 cores, the scan takes a few milliseconds, well inside recall's budget,
//! and it is exact, so an ANN index (with its build time, memory and recall loss) buys nothing
//! at this size.
//!
//! Each vector knows the passage before it in its conversation: a passage's dense score is
//! smoothed with its predecessor's (the answer often follows the turn that asked). Each also
//! knows how crowded its neighbourhood is, which its score loses (see [`crate::neighbourhood`]);
//! the embedding thread measures a bank's neighbourhoods again when it has grown or shrunk by a
//! quarter, off the index's lock, and a passage added in between is measured as it is added.

use std::collections::HashMap;

use mneme_core::TagsMatch;
use mneme_embed::vector::{dot_i8, dot_i8_rows, quantize, Quantized};

use crate::neighbourhood::{self, crowding, Reference};

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
    /// What recall's filters look at.
    pub label: Label,
    pub vector: Quantized,
}

/// What a recall's filters look at in a passage's memory: its kind and its tags (encoded as the
/// store keeps them). The index keeps each distinct one once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct Label {
    pub kind: String,
    pub tags: String,
}

/// The filters of a recall, which the dense side applies before it ranks, as the lexical side
/// does: without them a project's passages found by meaning were crowded out of the best by
/// other projects' sharing its bank (the default scoping tags memories by project).
#[derive(Debug, Clone, Default)]
pub(crate) struct DenseFilter {
    pub tags: Vec<String>,
    pub tags_match: TagsMatch,
    /// Memory kinds, as their wire spelling (empty: all).
    pub types: Vec<String>,
}

impl DenseFilter {
    /// Whether it lets every passage through.
    fn is_open(&self) -> bool {
        self.tags.is_empty() && self.tags_match != TagsMatch::Exact && self.types.is_empty()
    }

    fn passes(&self, label: &Label) -> bool {
        (self.types.is_empty() || self.types.contains(&label.kind))
            && crate::rows::tags_pass(&label.tags, &self.tags, self.tags_match)
    }
}

/// The dense side of one query.
#[derive(Debug, Clone, Default)]
pub(crate) struct DenseScores {
    /// The best passages by score, best first: (pid, score, own cosine). A score is the
    /// passage's cosine less its neighbourhood's crowding, smoothed with its predecessor's.
    pub top: Vec<(i64, f32, f32)>,
    /// The smoothed score of each passage asked for (the lexical pool), where it has a vector.
    pub of: HashMap<i64, f32>,
    /// Lowest and highest smoothed score over the whole bank.
    pub min: f32,
    pub max: f32,
    /// Mean and standard deviation of the smoothed scores over the bank, and how many passages
    /// it holds: what chance gives, for telling a passage that stands out (see `fusion`).
    pub mean: f32,
    pub sd: f32,
    pub live: usize,
}

/// A query scored against a bank, before the lexical pool is known.
pub(crate) struct DenseScan {
    top: Vec<(i64, f32, f32)>,
    min: f32,
    max: f32,
    mean: f32,
    sd: f32,
    live: usize,
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
    /// Each distinct label once; positions refer to them by index.
    labels: Vec<Label>,
    label_of: HashMap<Label, u32>,
}

#[derive(Default)]
struct Bank {
    /// -1 where the passage was removed (skipped, compacted away later).
    pids: Vec<i64>,
    memories: Vec<i64>,
    /// Index into [`VectorIndex::labels`].
    labels: Vec<u32>,
    prev: Vec<u32>,
    scales: Vec<f32>,
    data: Vec<i8>,
    dead: usize,
    /// How crowded each passage's neighbourhood is (0 until measured).
    crowding: Vec<f32>,
    /// What the neighbourhoods were measured against.
    reference: Reference,
    /// Live passages when they were last measured (0: never).
    measured_at: usize,
    /// While loading: a stored vector of this bank came without its crowding.
    loaded_unmeasured: bool,
}

impl Bank {
    fn live(&self) -> usize {
        self.pids.len() - self.dead
    }

    /// Positions of the passages not removed.
    fn live_positions(&self) -> Vec<u32> {
        (0..self.pids.len() as u32).filter(|&p| self.pids[p as usize] >= 0).collect()
    }

    fn row(&self, pos: usize, dim: usize) -> &[i8] {
        &self.data[pos * dim..(pos + 1) * dim]
    }

    /// Whether its neighbourhoods are due to be measured (again): never measured, or grown or
    /// shrunk by a quarter (and by 8 passages: a small bank costs little to measure, and between
    /// two measures the passages added are measured against the reference of the first).
    fn unmeasured(&self) -> bool {
        let (live, at) = (self.live(), self.measured_at);
        live > 0 && (at == 0 || live > at + at / 4 + 8 || live < at - at / 4)
    }

    /// How crowded the neighbourhood of the passage at `pos` is, against the bank's reference.
    fn crowding_of(&self, pos: usize, dim: usize) -> f32 {
        self.crowding_against(self.row(pos, dim), self.scales[pos], Some(pos), dim)
    }

    /// How crowded the neighbourhood of a vector (`row` × `scale`) is, against the bank's
    /// reference, leaving out the passage at `except` (itself).
    fn crowding_against(&self, row: &[i8], scale: f32, except: Option<usize>, dim: usize) -> f32 {
        let cosines = self.reference.positions.iter().filter_map(|&p| {
            let p = p as usize;
            (Some(p) != except && p < self.pids.len() && self.pids[p] >= 0)
                .then(|| dot_i8(row, self.row(p, dim)) as f32 * scale * self.scales[p])
        });
        crowding(cosines, self.reference.k)
    }
}

/// A bank's reference, copied (see [`VectorIndex::reference_copy`]).
pub(crate) struct ReferenceCopy {
    rows: Vec<i8>,
    scales: Vec<f32>,
    k: usize,
    dim: usize,
}

impl ReferenceCopy {
    /// How crowded the neighbourhood of `v` would be in the bank, against its reference.
    pub(crate) fn crowding_for(&self, v: &Quantized) -> Option<f32> {
        if v.q.len() != self.dim || self.dim == 0 {
            return None;
        }
        let cosines =
            self.rows.chunks_exact(self.dim).zip(&self.scales).map(|(row, s)| dot_i8(&v.q, row) as f32 * v.scale * s);
        Some(crowding(cosines, self.k))
    }
}

/// A bank's neighbourhoods to measure, off the index's lock: its reference's rows, copied.
pub(crate) struct NeighbourhoodJob {
    bank: usize,
    generation: u64,
    /// Positions measured: those the bank had when the job began.
    len: usize,
    live: usize,
    reference: Reference,
    rows: Vec<i8>,
    scales: Vec<f32>,
    dim: usize,
}

/// Rows of a bank, copied for a [`NeighbourhoodJob`]: (position, row, scale) of the live ones.
pub(crate) struct Rows {
    rows: Vec<(u32, Vec<i8>, f32)>,
}

impl NeighbourhoodJob {
    /// Positions the job measures.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The crowding of each row, by position (0 for removed ones), appended to `out`.
    pub(crate) fn measure(&self, chunk: &Rows, out: &mut Vec<(u32, f32)>) {
        let mut dots = Vec::with_capacity(self.reference.positions.len());
        for (pos, row, scale) in &chunk.rows {
            dots.clear();
            dot_i8_rows(row, &self.rows, &mut dots);
            let cosines = dots
                .iter()
                .zip(&self.scales)
                .zip(&self.reference.positions)
                .filter(|(_, p)| **p != *pos)
                .map(|((d, s), _)| *d as f32 * s * scale);
            out.push((*pos, crowding(cosines, self.reference.k)));
        }
    }
}

impl VectorIndex {
    /// An empty index of `dim`-long vectors.
    pub(crate) fn new(dim: usize) -> Self {
        Self { dim, ..Default::default() }
    }

    /// The length of its vectors (0 until the first is added).
    pub(crate) fn dim(&self) -> usize {
        self.dim
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
        self.add_measured(v, None)
    }

    /// [`VectorIndex::add`], with the crowding of its neighbourhood when it was measured beforehand
    /// ([`ReferenceCopy::crowding_for`], off the lock, so the write lock is held for less).
    pub(crate) fn add_measured(&mut self, v: NewVector, crowding: Option<f32>) -> bool {
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
        let label = self.intern(v.label);
        let bank = &mut self.banks[b];
        let pos = bank.pids.len() as u32;
        bank.pids.push(v.pid);
        bank.memories.push(v.memory_seq);
        bank.labels.push(label);
        bank.prev.push(prev);
        bank.scales.push(v.vector.scale);
        bank.data.extend_from_slice(&v.vector.q);
        let crowding = match crowding {
            Some(c) if bank.measured_at > 0 => c,
            _ if bank.measured_at > 0 => bank.crowding_of(pos as usize, self.dim),
            _ => 0.0,
        };
        bank.crowding.push(crowding);
        self.place.insert(v.pid, (b, pos));
        true
    }

    fn intern(&mut self, label: Label) -> u32 {
        if let Some(&i) = self.label_of.get(&label) {
            return i;
        }
        self.labels.push(label.clone());
        self.label_of.insert(label, self.labels.len() as u32 - 1);
        self.labels.len() as u32 - 1
    }

    /// Gives the passages of these memories (memory seq → encoded tags) their tags as they are
    /// now (a retain of the same text merged its tags into the memory's).
    pub(crate) fn retag(&mut self, retagged: &HashMap<i64, String>) {
        if retagged.is_empty() {
            return;
        }
        for b in 0..self.banks.len() {
            for pos in 0..self.banks[b].pids.len() {
                let Some(tags) = retagged.get(&self.banks[b].memories[pos]) else { continue };
                let kind = self.labels[self.banks[b].labels[pos] as usize].kind.clone();
                let label = self.intern(Label { kind, tags: tags.clone() });
                self.banks[b].labels[pos] = label;
            }
        }
    }

    /// Adds a stored vector with the crowding stored with it, while loading the index; then
    /// [`VectorIndex::loaded`].
    pub(crate) fn add_loaded(&mut self, v: NewVector, crowding: Option<f32>) -> bool {
        let pid = v.pid;
        if !self.add(v) {
            return false;
        }
        let (b, pos) = self.place[&pid];
        let bank = &mut self.banks[b];
        match crowding {
            Some(c) => bank.crowding[pos as usize] = c,
            None => bank.loaded_unmeasured = true,
        }
        true
    }

    /// Ends a load: a bank whose every vector came with its crowding counts as measured now,
    /// against an even sample of it (what [`Reference::sample`] takes when it is measured); the
    /// others are left unmeasured, with no crowding at all until they are.
    pub(crate) fn loaded(&mut self) {
        for bank in &mut self.banks {
            let live = bank.live_positions();
            if bank.loaded_unmeasured || live.is_empty() {
                bank.crowding.iter_mut().for_each(|c| *c = 0.0);
            } else {
                bank.reference = Reference::sample(&live);
                bank.measured_at = live.len();
            }
            bank.loaded_unmeasured = false;
        }
    }

    /// The crowding of every live passage of bank `b`, (pid, crowding), to be stored.
    pub(crate) fn crowding_of_bank(&self, b: usize) -> Vec<(i64, f32)> {
        let Some(bank) = self.banks.get(b) else { return Vec::new() };
        bank.pids.iter().zip(&bank.crowding).filter(|(pid, _)| **pid >= 0).map(|(pid, c)| (*pid, *c)).collect()
    }

    /// How crowded the neighbourhood of `v` would be in `bank`, against its reference; `None`
    /// while the bank has none (never measured).
    #[cfg(test)]
    pub(crate) fn crowding_for(&self, bank: &str, v: &Quantized) -> Option<f32> {
        self.reference_copy(bank)?.crowding_for(v)
    }

    /// `bank`'s reference rows, copied, to measure new vectors against without holding the
    /// index's lock: the embedding thread runs at the lowest priority, and a busy machine could
    /// keep it from finishing a measure for seconds while the store's writer (every delivery)
    /// and every recall waited for the lock. `None` while the bank has no reference.
    pub(crate) fn reference_copy(&self, bank: &str) -> Option<ReferenceCopy> {
        let bank = &self.banks[*self.bank_of.get(bank)?];
        if bank.measured_at == 0 {
            return None;
        }
        let live =
            bank.reference.positions.iter().map(|&p| p as usize).filter(|&p| p < bank.pids.len() && bank.pids[p] >= 0);
        let mut rows = Vec::with_capacity(bank.reference.positions.len() * self.dim);
        let mut scales = Vec::with_capacity(bank.reference.positions.len());
        for p in live {
            rows.extend_from_slice(bank.row(p, self.dim));
            scales.push(bank.scales[p]);
        }
        Some(ReferenceCopy { rows, scales, k: bank.reference.k, dim: self.dim })
    }

    /// Banks whose neighbourhoods are due to be measured.
    pub(crate) fn unmeasured_banks(&self) -> Vec<usize> {
        (0..self.banks.len()).filter(|&b| self.banks[b].unmeasured()).collect()
    }

    /// A job measuring bank `b`'s neighbourhoods, with a fresh reference.
    pub(crate) fn neighbourhood_job(&self, b: usize) -> Option<NeighbourhoodJob> {
        let bank = self.banks.get(b)?;
        let live = bank.live_positions();
        let reference = Reference::sample(&live);
        let mut rows = Vec::with_capacity(reference.positions.len() * self.dim);
        for &p in &reference.positions {
            rows.extend_from_slice(bank.row(p as usize, self.dim));
        }
        let scales = reference.positions.iter().map(|&p| bank.scales[p as usize]).collect();
        Some(NeighbourhoodJob {
            bank: b,
            generation: self.generation,
            len: bank.pids.len(),
            live: live.len(),
            reference,
            rows,
            scales,
            dim: self.dim,
        })
    }

    /// Rows `from..to` of the job's bank, copied; `None` when positions moved since it began.
    pub(crate) fn rows(&self, job: &NeighbourhoodJob, from: usize, to: usize) -> Option<Rows> {
        if job.generation != self.generation {
            return None;
        }
        let bank = &self.banks[job.bank];
        let rows = (from..to.min(bank.pids.len()))
            .filter(|&p| bank.pids[p] >= 0)
            .map(|p| (p as u32, bank.row(p, job.dim).to_vec(), bank.scales[p]))
            .collect();
        Some(Rows { rows })
    }

    /// Keeps a finished job's measures (unless positions moved since it began); passages added
    /// meanwhile are measured against its reference here.
    pub(crate) fn install(&mut self, job: NeighbourhoodJob, measured: Vec<(u32, f32)>) -> bool {
        if job.generation != self.generation {
            return false;
        }
        let dim = self.dim;
        let bank = &mut self.banks[job.bank];
        for (pos, c) in measured {
            bank.crowding[pos as usize] = c;
        }
        bank.reference = job.reference;
        bank.measured_at = job.live.max(1);
        for pos in job.len..bank.pids.len() {
            bank.crowding[pos] = bank.crowding_of(pos, dim);
        }
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
        self.scan(bank, query, k, &DenseFilter::default()).map(|scan| self.finish(scan, wanted))
    }

    /// The scan of [`VectorIndex::search`], before the lexical pool is known (recall runs it
    /// beside the lexical side), over the passages that pass `filter` (the best, and what
    /// chance gives among them).
    pub(crate) fn scan(&self, bank: &str, query: &[f32], k: usize, filter: &DenseFilter) -> Option<DenseScan> {
        let b = *self.bank_of.get(bank)?;
        let bank = &self.banks[b];
        if query.len() != self.dim || bank.pids.len() == bank.dead {
            return None;
        }
        let allowed: Option<Vec<bool>> =
            (!filter.is_open()).then(|| self.labels.iter().map(|l| filter.passes(l)).collect());
        let counts = |i: usize| bank.pids[i] >= 0 && allowed.as_ref().is_none_or(|a| a[bank.labels[i] as usize]);
        let q = quantize(query);
        let mut dots = Vec::with_capacity(bank.pids.len());
        dot_i8_rows(&q.q, &bank.data, &mut dots);
        // One vector of the bank's length: the plain cosine, needed for the few best only (the
        // dense floor), is the score plus what its crowding took.
        let cosine = |i: usize| dots[i] as f32 * bank.scales[i] * q.scale;
        let own: Vec<f32> = (0..dots.len()).map(|i| cosine(i) - neighbourhood::WEIGHT * bank.crowding[i]).collect();
        let mut smoothed = Vec::with_capacity(own.len());
        let (mut min, mut max) = (f32::INFINITY, f32::NEG_INFINITY);
        let (mut sum, mut sumsq) = (0f64, 0f64);
        for (i, s) in own.iter().enumerate() {
            let p = bank.prev[i];
            let prev = if p != NONE && bank.pids[p as usize] >= 0 { own[p as usize] } else { *s };
            let v = (s + SMOOTH * prev) / (1.0 + SMOOTH);
            if counts(i) {
                min = min.min(v);
                max = max.max(v);
                sum += f64::from(v);
                sumsq += f64::from(v) * f64::from(v);
            }
            smoothed.push(v);
        }
        let order: Vec<u32> = (0..own.len() as u32).filter(|&i| counts(i as usize)).collect();
        if order.is_empty() {
            return None;
        }
        let by_score = |a: &u32, b: &u32| smoothed[*b as usize].total_cmp(&smoothed[*a as usize]);
        // Enough candidates that k remain after the per-memory cap, almost always; more when
        // a few long transcripts fill them (two passages of each count).
        let mut wide = k * 4;
        let top = loop {
            let mut best = order.clone();
            if best.len() > wide {
                best.select_nth_unstable_by(wide, by_score);
                best.truncate(wide);
            }
            best.sort_by(by_score);
            let mut per_memory: HashMap<i64, usize> = HashMap::new();
            let top: Vec<(i64, f32, f32)> = best
                .iter()
                .filter(|&&i| {
                    let n = per_memory.entry(bank.memories[i as usize]).or_default();
                    *n += 1;
                    *n <= PER_MEMORY
                })
                .take(k)
                .map(|&i| (bank.pids[i as usize], smoothed[i as usize], cosine(i as usize)))
                .collect();
            if top.len() == k || best.len() == order.len() {
                break top;
            }
            wide *= 8;
        };
        let live = order.len();
        let mean = sum / live.max(1) as f64;
        let sd = (sumsq / live.max(1) as f64 - mean * mean).max(0.0).sqrt();
        let (mean, sd) = (mean as f32, sd as f32);
        Some(DenseScan { top, min, max, mean, sd, live, smoothed, bank: b, generation: self.generation })
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
        DenseScores { top: scan.top, of, min: scan.min, max: scan.max, mean: scan.mean, sd: scan.sd, live: scan.live }
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
            bank.labels.push(old.labels[i]);
            bank.prev.push(old.prev[i]);
            bank.scales.push(old.scales[i]);
            bank.data.extend_from_slice(&old.data[i * dim..(i + 1) * dim]);
            bank.crowding.push(old.crowding[i]);
        }
        for p in &mut bank.prev {
            if *p != NONE {
                *p = new_pos[*p as usize];
            }
        }
        // The measures stand until the next (the bank shrank by a quarter: it is due); the
        // reference follows its passages.
        bank.reference = Reference {
            positions: old.reference.positions.iter().map(|&p| new_pos[p as usize]).filter(|&p| p != NONE).collect(),
            k: old.reference.k,
        };
        bank.measured_at = old.measured_at;
        for (i, pid) in bank.pids.iter().enumerate() {
            self.place.insert(*pid, (b, i as u32));
        }
        self.banks[b] = bank;
    }
}

#[cfg(test)]
#[path = "vectors_tests.rs"]
mod tests;
