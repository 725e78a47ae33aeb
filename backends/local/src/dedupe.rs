//! Finding a stored memory with the same content in the same bank, without an on-disk index.
//!
//! An index on a content hash is written at a random place for every new memory: with a batch of
//! 16 it dirtied ~20 pages per commit, two thirds of what a delivery wrote. Instead the writing
//! connection keeps, in memory, where each (bank, content) hash is stored (about 20 bytes a
//! memory), and checks a candidate row before calling it a duplicate. So the map may hold stale
//! entries (deleted rows, a rolled-back transaction) without harm; it must never miss a row, and
//! it is rebuilt from the table when another connection changed the database
//! (`PRAGMA data_version`), checked inside the write transaction, and after a rollback.

use mneme_core::text::fnv1a;
use std::collections::HashMap;

use rusqlite::Connection;

/// Content hash → row seqs, for the rows of one database.
#[derive(Default)]
pub(crate) struct ContentIndex {
    /// The first row of each key (almost every key has one).
    first: HashMap<u64, i64>,
    /// Further rows of a key: the same content in other documents of the bank (each document
    /// owns its rows), hash collisions and stale entries.
    more: HashMap<u64, Vec<i64>>,
    /// `data_version` when the map was last made current; `None`: build it before use.
    data_version: Option<i64>,
}

impl ContentIndex {
    /// Makes the map current. Call inside the write transaction, before looking anything up.
    /// Returns whether it was rebuilt (another connection wrote, or a rollback came before).
    pub(crate) fn refresh(&mut self, conn: &Connection) -> rusqlite::Result<bool> {
        let version: i64 = conn.query_row("PRAGMA data_version", [], |r| r.get(0))?;
        if self.data_version == Some(version) {
            return Ok(false);
        }
        self.first.clear();
        self.more.clear();
        let mut rows = conn.prepare("SELECT seq, bank, content_hash FROM memories")?;
        let mut rows = rows.query([])?;
        while let Some(r) = rows.next()? {
            let bank: String = r.get(1)?;
            self.add(key(&bank, r.get(2)?), r.get(0)?);
        }
        self.data_version = Some(version);
        Ok(true)
    }

    /// After a rollback the map may lack rows that exist again: rebuild it before the next use.
    pub(crate) fn invalidate(&mut self) {
        self.data_version = None;
        self.first.clear();
        self.more.clear();
    }

    /// The rows that may hold this key's content.
    pub(crate) fn candidates(&self, key: u64) -> Vec<i64> {
        let mut seqs: Vec<i64> = self.first.get(&key).copied().into_iter().collect();
        if let Some(more) = self.more.get(&key) {
            seqs.extend(more);
        }
        seqs
    }

    /// Records a stored row.
    pub(crate) fn add(&mut self, key: u64, seq: i64) {
        match self.first.get(&key) {
            None => {
                self.first.insert(key, seq);
            }
            Some(&s) if s == seq => {}
            Some(_) => {
                let more = self.more.entry(key).or_default();
                if !more.contains(&seq) {
                    more.push(seq);
                }
            }
        }
    }

    /// Drops an entry whose row is gone or holds other content.
    pub(crate) fn remove(&mut self, key: u64, seq: i64) {
        if let Some(more) = self.more.get_mut(&key) {
            more.retain(|&s| s != seq);
            if more.is_empty() {
                self.more.remove(&key);
            }
        }
        if self.first.get(&key) == Some(&seq) {
            self.first.remove(&key);
            if let Some(next) = self.more.get_mut(&key).and_then(|m| m.pop()) {
                self.first.insert(key, next);
                if self.more.get(&key).is_some_and(Vec::is_empty) {
                    self.more.remove(&key);
                }
            }
        }
    }
}

/// The stored `content_hash` column: 64-bit FNV-1a of the content, stable across Rust versions
/// (std's hasher is not); a candidate's content is then compared in full.
pub(crate) fn content_hash(content: &str) -> i64 {
    fnv1a(content.as_bytes()) as i64
}

/// The map key of a content in a bank (from the stored `content_hash`, so the map can be built
/// without reading the contents).
pub(crate) fn key(bank: &str, content_hash: i64) -> u64 {
    (fnv1a(bank.as_bytes()) ^ content_hash as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_rows_and_forget_stale_ones() {
        let mut index = ContentIndex::default();
        index.add(7, 1);
        index.add(7, 2);
        index.add(7, 2);
        index.add(8, 3);
        assert_eq!(index.candidates(7), vec![1, 2]);
        index.remove(7, 1);
        assert_eq!(index.candidates(7), vec![2]);
        index.remove(7, 2);
        assert!(index.candidates(7).is_empty());
        assert_eq!(index.candidates(8), vec![3]);
        assert_ne!(key("a", 5), key("b", 5));
        assert_ne!(key("a", 5), key("a", 6));
    }
}
