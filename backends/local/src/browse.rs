//! Browsing the store one memory at a time: the last stored first by bank and tags, one memory with its
//! passages, and forgetting a memory or a whole document (the web view and `mneme forget`).

use mneme_core::{StoredMemory, TagsMatch};
use rusqlite::{params, params_from_iter, OptionalExtension};

use crate::rows::{push_tag_filter, stored_memory};
use crate::store::Store;

/// The export's columns, for [`stored_memory`].
const COLUMNS: &str =
    "m.seq, m.id, m.bank, m.content, m.context, m.kind, m.tags, m.metadata, m.document_id, m.created_at";

/// One memory, its passages in order and how many memories share its document.
pub type Detail = (StoredMemory, Vec<String>, u64);

impl Store {
    /// Up to `limit` memories stored before sequence `before` (all when `None`), the last first, of
    /// one bank or of all, carrying every tag in `tags`. Walks `memories_bank_seq` (or the
    /// primary key) backwards, so a page costs the same at any depth.
    pub fn browse(
        &self,
        bank: Option<&str>,
        tags: &[String],
        before: Option<i64>,
        limit: usize,
    ) -> rusqlite::Result<Vec<(i64, StoredMemory)>> {
        let mut sql = format!("SELECT {COLUMNS} FROM memories m WHERE m.seq < CAST(?1 AS INTEGER)");
        let mut args = vec![before.unwrap_or(i64::MAX).to_string()];
        if let Some(bank) = bank {
            args.push(bank.to_owned());
            sql.push_str(&format!(" AND m.bank = ?{}", args.len()));
        }
        push_tag_filter(&mut sql, &mut args, tags, TagsMatch::AllStrict);
        sql.push_str(&format!(" ORDER BY m.seq DESC LIMIT {}", limit.max(1)));
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(params_from_iter(args.iter()), |r| Ok((r.get(0)?, stored_memory(r)?)))?;
        rows.collect()
    }

    /// Every bank with its memory count, by name.
    pub fn banks(&self) -> rusqlite::Result<Vec<(String, u64)>> {
        let mut stmt = self.conn.prepare_cached("SELECT bank, count(*) FROM memories GROUP BY bank ORDER BY bank")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))?;
        rows.collect()
    }

    /// The memory with this id (in `bank`, when given), its passages and its document's size.
    pub fn memory(&self, id: &str, bank: Option<&str>) -> rusqlite::Result<Option<Detail>> {
        let found = self
            .conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM memories m WHERE m.id = ?1 AND (?2 IS NULL OR m.bank = ?2)"
            ))?
            .query_row(params![id, bank], |r| Ok((r.get::<_, i64>(0)?, stored_memory(r)?)))
            .optional()?;
        let Some((seq, memory)) = found else { return Ok(None) };
        let passages = self
            .conn
            .prepare_cached("SELECT text FROM passages WHERE memory_seq = ?1 ORDER BY ord")?
            .query_map([seq], |r| r.get(0))?
            .collect::<rusqlite::Result<Vec<String>>>()?;
        let document_memories = match &memory.document_id {
            Some(doc) => self.conn.query_row(
                "SELECT count(*) FROM memories WHERE bank = ?1 AND document_id = ?2",
                params![memory.bank, doc],
                |r| r.get::<_, i64>(0),
            )? as u64,
            None => 1,
        };
        Ok(Some((memory, passages, document_memories)))
    }

    /// Deletes the memory with this id (in `bank`, when given). Returns how many were deleted.
    pub fn forget_memory(&mut self, id: &str, bank: Option<&str>) -> rusqlite::Result<u64> {
        self.delete_memories("m.id = ?1 AND (?2 IS NULL OR m.bank = ?2)", &[&id, &bank])
    }

    /// Deletes every memory of a document in a bank. Returns how many were deleted.
    pub fn forget_document(&mut self, bank: &str, document_id: &str) -> rusqlite::Result<u64> {
        self.delete_memories("m.bank = ?1 AND m.document_id = ?2", &[&bank, &document_id])
    }
}
