//! The synchronous SQLite store. Every method runs on a blocking thread (see [`crate::LocalBackend`]).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;

use mneme_core::{MemoryItem, MemoryType, Recalled, StoredMemory, TagsMatch};
use rusqlite::functions::FunctionFlags;
use rusqlite::{params, params_from_iter, Connection, OptionalExtension, TransactionBehavior};

use crate::dedupe::{self, ContentIndex};
use crate::error::OpenError;
use crate::fts;
use crate::passages;
use crate::recall::PassageCount;

/// Tag list separator (ASCII unit separator): cannot appear in a tag a user types.
const SEP: char = '\u{1f}';

/// Filters and bounds for [`Store::recall`].
#[derive(Debug, Clone)]
pub struct RecallFilter<'a> {
    /// Bank to search.
    pub bank: &'a str,
    /// Tag filter (empty = none).
    pub tags: &'a [String],
    /// How `tags` match.
    pub tags_match: TagsMatch,
    /// Memory types (empty = all), as their wire spelling.
    pub types: &'a [&'a str],
    /// Stop adding results once their text passes this many characters.
    pub max_chars: usize,
}

/// Counts for status.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    /// Rows in `memories`.
    pub memories: u64,
    /// Database + WAL size in bytes.
    pub bytes: u64,
    /// Passages (what recall ranks).
    pub passages: u64,
}

/// A page of an export. `LIMIT ?3 + 0`: an expression, so the bound value does not force a
/// re-prepare either.
const EXPORT_PAGE: &str = "SELECT seq, id, bank, content, context, kind, tags, metadata, document_id, created_at
     FROM memories WHERE seq > ?1 AND (?2 IS NULL OR bank = ?2) ORDER BY seq LIMIT ?3 + 0";

/// Indexes a batch's new passages in one statement, so FTS5 writes one segment per batch: their
/// own terms, and the terms of the passage before each as its context.
pub(crate) const INDEX_NEW_PASSAGES: &str = "INSERT INTO passages_fts(rowid, terms, ctx)
     SELECT p.pid, mneme_terms(p.text), mneme_terms(q.text)
     FROM passages p LEFT JOIN passages q ON q.pid = p.prev_pid WHERE p.pid BETWEEN ?1 AND ?2";

/// One SQLite connection to the memory database.
pub struct Store {
    pub(crate) conn: Connection,
    /// Where each content is stored, for the dedupe on retain (built on the first retain).
    contents: ContentIndex,
    /// The last passage stored for each (bank, session): the context of the session's next one.
    pub(crate) last_passage: HashMap<(String, String), i64>,
    /// FTS5's N, for the idf of query terms.
    pub(crate) passage_count: PassageCount,
    /// What this connection's writes changed, for the vector index (see [`Store::take_changes`]).
    pub(crate) changes: Changes,
}

/// Passages a connection added and removed since the changes were last taken.
#[derive(Debug, Default, PartialEq)]
pub struct Changes {
    /// The lowest pid added.
    pub first_added: Option<i64>,
    /// Removed passages.
    pub removed: Vec<i64>,
    /// Every passage was removed.
    pub removed_all: bool,
}

impl Changes {
    pub(crate) fn merge(&mut self, other: Changes) {
        self.first_added = match (self.first_added, other.first_added) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.removed.extend(other.removed);
        self.removed_all |= other.removed_all;
    }
}

/// A passage whose vector is to be computed.
#[derive(Debug, Clone)]
pub struct Unembedded {
    pub pid: i64,
    pub memory_seq: i64,
    pub bank: String,
    pub prev_pid: Option<i64>,
    pub text: String,
}

/// A stored vector, as the index loads it.
#[derive(Debug, Clone)]
pub struct StoredVector {
    pub pid: i64,
    pub memory_seq: i64,
    pub bank: String,
    pub prev_pid: Option<i64>,
    pub scale: f32,
    pub data: Vec<i8>,
}

impl Store {
    /// Opens (creating if needed) the database at `path`, in WAL mode, migrated.
    pub fn open(path: &Path) -> Result<Self, OpenError> {
        let mut conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // Statement and savepoint journals in memory, not in temporary files.
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        register_functions(&conn)?;
        crate::schema::migrate(&mut conn)?;
        Ok(Self {
            conn,
            contents: ContentIndex::default(),
            last_passage: HashMap::new(),
            passage_count: PassageCount::default(),
            changes: Changes::default(),
        })
    }

    /// See [`crate::check`].
    pub fn check(path: &Path) -> Result<u64, OpenError> {
        use rusqlite::OpenFlags;
        let conn =
            Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        crate::schema::check_version(version as usize)?;
        let verdict: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
        if verdict != "ok" {
            return Err(OpenError::Damaged(verdict));
        }
        if version == 0 {
            return Ok(0);
        }
        Ok(conn.query_row("SELECT count(*) FROM memories", [], |r| r.get::<_, i64>(0)).map(|n| n as u64)?)
    }

    /// Stores a batch in one transaction. Items whose id is already stored are skipped; identical
    /// content in the same bank is stored once (its tags merged); items carrying a document id
    /// replace the stored rows of that document that are not part of this batch.
    /// Returns how many rows were inserted.
    pub fn retain(&mut self, bank: &str, items: &[MemoryItem]) -> rusqlite::Result<usize> {
        let mut results = self.retain_batches(&[(bank, items)])?;
        results.pop().expect("one result per batch")
    }

    /// Stores several batches (bank, items) in one transaction, each as [`Store::retain`] would:
    /// a batch that fails is rolled back alone and gets its error; the others are committed
    /// together (one commit instead of one each). `Err` when the transaction itself fails.
    pub fn retain_batches(
        &mut self,
        batches: &[(&str, &[MemoryItem])],
    ) -> rusqlite::Result<Vec<rusqlite::Result<usize>>> {
        self.passage_count.reset();
        let results = self.retain_in_transaction(batches);
        if !matches!(&results, Ok(r) if r.iter().all(Result::is_ok)) {
            // Something rolled back: rows the map no longer lists may exist again.
            self.contents.invalidate();
            self.last_passage.clear();
        }
        results
    }

    fn retain_in_transaction(
        &mut self,
        batches: &[(&str, &[MemoryItem])],
    ) -> rusqlite::Result<Vec<rusqlite::Result<usize>>> {
        let Store { conn, contents, last_passage, changes, .. } = self;
        // IMMEDIATE: the write lock is taken before the dedupe map is checked against other
        // connections' changes, so none can slip in between.
        let mut tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        if contents.refresh(&tx)? {
            last_passage.clear(); // another connection wrote: look sessions up afresh
        }
        let mut w = Writing { contents, last_passage, changes: Changes::default() };
        if let [(bank, items)] = batches {
            // Alone, the batch is the transaction: no savepoint needed.
            let n = retain_one(&tx, &mut w, bank, items);
            if n.is_ok() {
                tx.commit()?;
                changes.merge(w.changes);
            }
            return Ok(vec![n]);
        }
        let mut results = Vec::with_capacity(batches.len());
        let mut committed = Changes::default();
        for (bank, items) in batches {
            let savepoint = tx.savepoint()?;
            match retain_one(&savepoint, &mut w, bank, items) {
                Ok(n) => {
                    savepoint.commit()?;
                    committed.merge(std::mem::take(&mut w.changes));
                    results.push(Ok(n));
                }
                Err(e) => {
                    w.changes = Changes::default();
                    results.push(Err(e)); // dropping the savepoint rolls it back
                }
            }
        }
        tx.commit()?;
        changes.merge(committed);
        Ok(results)
    }

    /// The most recent memories of a bank passing a tag filter, newest first.
    pub fn recent(&self, bank: &str, tags: &[String], limit: usize) -> rusqlite::Result<Vec<Recalled>> {
        let mut sql =
            String::from(
            "SELECT content, kind, created_at, tags, id, document_id, context, metadata FROM memories m WHERE m.bank = ?1",
        );
        let mut args = vec![bank.to_owned()];
        push_tag_filter(&mut sql, &mut args, tags, TagsMatch::Any);
        sql.push_str(&format!(" ORDER BY seq DESC LIMIT {limit}"));
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(params_from_iter(args.iter()), |row| recalled(row, 0))?;
        rows.collect()
    }

    /// Deletes a bank's memories; with tags, only those carrying one of them. Returns the count.
    pub fn clear_scope(&mut self, bank: &str, tags: &[String]) -> rusqlite::Result<u64> {
        let mut filter = String::from("m.bank = ?1");
        let mut args = vec![bank.to_owned()];
        push_tag_filter(&mut filter, &mut args, tags, TagsMatch::AnyStrict);
        let args: Vec<&dyn rusqlite::ToSql> = args.iter().map(|a| a as &dyn rusqlite::ToSql).collect();
        self.delete_memories(&filter, &args)
    }

    /// Deletes the memories `WHERE filter` (over `memories AS m`, with `args`) and what hangs off
    /// them: their passages with the passages' FTS rows and vectors (the triggers), and the
    /// session tails that pointed at those passages (a session's next turn then has no context
    /// rather than a dangling one). Returns how many memories went.
    pub(crate) fn delete_memories(&mut self, filter: &str, args: &[&dyn rusqlite::ToSql]) -> rusqlite::Result<u64> {
        self.passage_count.reset();
        let tx = self.conn.transaction()?;
        let removed: Vec<i64> = tx
            .prepare(&format!("SELECT p.pid FROM passages p JOIN memories m ON m.seq = p.memory_seq WHERE {filter}"))?
            .query_map(args, |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let n = tx.execute(&format!("DELETE FROM memories AS m WHERE {filter}"), args)? as u64;
        {
            let mut untail = tx.prepare("DELETE FROM session_tails WHERE pid = ?1")?;
            for pid in &removed {
                untail.execute([pid])?;
            }
        }
        tx.commit()?;
        let gone: HashSet<i64> = removed.iter().copied().collect();
        self.last_passage.retain(|_, pid| !gone.contains(pid));
        self.changes.merge(Changes { removed, ..Changes::default() });
        Ok(n)
    }

    /// Deletes every memory. Returns the count.
    pub fn clear_all(&mut self) -> rusqlite::Result<u64> {
        self.passage_count.reset();
        let tx = self.conn.transaction()?;
        let n = tx.execute("DELETE FROM memories", [])? as u64;
        tx.execute("DELETE FROM session_tails", [])?;
        tx.commit()?;
        self.last_passage.clear();
        self.changes.merge(Changes { removed_all: true, ..Changes::default() });
        Ok(n)
    }

    /// What this connection's writes changed since the last call.
    pub fn take_changes(&mut self) -> Changes {
        std::mem::take(&mut self.changes)
    }

    /// Up to `limit` passages after `after` without a vector of `model`, in pid order.
    pub fn unembedded(&self, model: &str, after: i64, limit: usize) -> rusqlite::Result<Vec<Unembedded>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT p.pid, m.bank, p.prev_pid, p.text, p.memory_seq FROM passages p CROSS JOIN memories m ON m.seq = p.memory_seq
             WHERE p.pid > ?1 AND NOT EXISTS (SELECT 1 FROM passage_vectors v WHERE v.pid = p.pid AND v.model = ?2)
             ORDER BY p.pid LIMIT ?3 + 0",
        )?;
        let rows = stmt.query_map(params![after, model, limit as i64], |r| {
            Ok(Unembedded {
                pid: r.get(0)?,
                bank: r.get(1)?,
                prev_pid: r.get(2)?,
                text: r.get(3)?,
                memory_seq: r.get(4)?,
            })
        })?;
        rows.collect()
    }

    /// Stores vectors of `model` for passages that still hold the text they were computed from.
    /// Returns, for each, whether it was stored.
    pub fn put_vectors(&mut self, model: &str, vectors: &[(&Unembedded, f32, &[i8])]) -> rusqlite::Result<Vec<bool>> {
        let tx = self.conn.transaction()?;
        let mut stored = Vec::with_capacity(vectors.len());
        {
            let mut put = tx.prepare_cached(
                "INSERT OR REPLACE INTO passage_vectors (pid, model, dim, scale, data)
                 SELECT ?1, ?2, length(?4), ?3, ?4 WHERE EXISTS (SELECT 1 FROM passages WHERE pid = ?1 AND text = ?5)",
            )?;
            for (p, scale, data) in vectors {
                let bytes: Vec<u8> = data.iter().map(|x| *x as u8).collect();
                stored.push(put.execute(params![p.pid, model, f64::from(*scale), bytes, p.text])? == 1);
            }
        }
        tx.commit()?;
        Ok(stored)
    }

    /// Which of `pids` have no passage (any more).
    pub fn missing_passages(&self, pids: &[i64]) -> rusqlite::Result<Vec<i64>> {
        if pids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = pids.iter().map(i64::to_string).collect();
        let mut stmt =
            self.conn.prepare("SELECT value FROM json_each(?1) WHERE value NOT IN (SELECT pid FROM passages)")?;
        let rows = stmt.query_map([format!("[{}]", ids.join(","))], |r| r.get(0))?;
        rows.collect()
    }

    /// Deletes the vectors of these passages (to be computed again).
    pub fn drop_vectors(&mut self, pids: &[i64]) -> rusqlite::Result<()> {
        let tx = self.conn.transaction()?;
        {
            let mut drop = tx.prepare_cached("DELETE FROM passage_vectors WHERE pid = ?")?;
            for pid in pids {
                drop.execute([pid])?;
            }
        }
        tx.commit()
    }

    /// Every stored vector of `model`, a page at a time after pid `after`.
    pub fn vectors(&self, model: &str, after: i64, limit: usize) -> rusqlite::Result<Vec<StoredVector>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT v.pid, m.bank, p.prev_pid, v.scale, v.data, p.memory_seq FROM passage_vectors v
             CROSS JOIN passages p ON p.pid = v.pid CROSS JOIN memories m ON m.seq = p.memory_seq
             WHERE v.pid > ?1 AND v.model = ?2 ORDER BY v.pid LIMIT ?3 + 0",
        )?;
        let rows = stmt.query_map(params![after, model, limit as i64], |r| {
            let bytes: Vec<u8> = r.get(4)?;
            Ok(StoredVector {
                pid: r.get(0)?,
                bank: r.get(1)?,
                prev_pid: r.get(2)?,
                memory_seq: r.get(5)?,
                scale: r.get::<_, f64>(3)? as f32,
                data: bytes.into_iter().map(|b| b as i8).collect(),
            })
        })?;
        rows.collect()
    }

    /// Up to `limit` memories after sequence `after`, oldest first, optionally of one bank.
    pub fn export(&self, bank: Option<&str>, after: i64, limit: usize) -> rusqlite::Result<Vec<(i64, StoredMemory)>> {
        let mut stmt = self.conn.prepare_cached(EXPORT_PAGE)?;
        let rows = stmt.query_map(params![after, bank, limit as i64], |r| Ok((r.get(0)?, stored_memory(r)?)))?;
        rows.collect()
    }

    /// Memory count and size on disk.
    pub fn stats(&self) -> rusqlite::Result<Stats> {
        let memories: i64 = self.conn.query_row("SELECT count(*) FROM memories", [], |r| r.get(0))?;
        let pages: i64 = self.conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
        let page_size: i64 = self.conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        let wal = self.conn.path().and_then(|p| std::fs::metadata(format!("{p}-wal")).ok()).map_or(0, |m| m.len());
        let passages: i64 = self.conn.query_row("SELECT count(*) FROM passages", [], |r| r.get(0))?;
        Ok(Stats { memories: memories as u64, bytes: (pages * page_size) as u64 + wal, passages: passages as u64 })
    }

    /// The underlying connection (benchmarks compare against a bare FTS5 query on it).
    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}

/// Adds `mneme_terms(text)` (see [`fts::index_terms`]; NULL gives '') to a connection: the
/// indexing statements and migrations call it.
pub fn register_functions(conn: &Connection) -> rusqlite::Result<()> {
    conn.create_scalar_function(
        "mneme_terms",
        1,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| Ok(ctx.get::<Option<String>>(0)?.map_or_else(String::new, |t| fts::index_terms(&t))),
    )
}

/// What a write needs besides the transaction.
struct Writing<'a> {
    contents: &'a mut ContentIndex,
    last_passage: &'a mut HashMap<(String, String), i64>,
    /// This batch's changes (kept only if it commits).
    changes: Changes,
}

/// One batch of [`Store::retain_batches`], inside its savepoint.
fn retain_one(tx: &Connection, w: &mut Writing<'_>, bank: &str, items: &[MemoryItem]) -> rusqlite::Result<usize> {
    let mut inserted = 0;
    let mut new_pids = None;
    let mut tails: HashMap<(String, String), i64> = HashMap::new();
    {
        let documents: BTreeSet<&str> = items.iter().filter_map(|i| i.document_id.as_deref()).collect();
        for doc in documents {
            let keep: Vec<&str> =
                items.iter().filter(|i| i.document_id.as_deref() == Some(doc)).map(|i| i.id.as_str()).collect();
            let placeholders = vec!["?"; keep.len()].join(",");
            let sql = format!("DELETE FROM memories WHERE bank = ? AND document_id = ? AND id NOT IN ({placeholders})");
            let mut args: Vec<&str> = vec![bank, doc];
            args.extend(keep);
            let removed: Vec<i64> = tx
                .prepare_cached(&format!(
                    "SELECT p.pid FROM passages p JOIN memories m ON m.seq = p.memory_seq
                     WHERE m.bank = ? AND m.document_id = ? AND m.id NOT IN ({placeholders})"
                ))?
                .query_map(params_from_iter(args.iter()), |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            w.changes.removed.extend(removed);
            tx.execute(&sql, params_from_iter(args))?;
        }
        let mut exists = tx.prepare_cached("SELECT 1 FROM memories WHERE id = ?")?;
        let mut candidate = tx.prepare_cached("SELECT bank, content, tags FROM memories WHERE seq = ?")?;
        let mut merge = tx.prepare_cached("UPDATE memories SET tags = ? WHERE seq = ?")?;
        let mut insert = tx.prepare_cached(
            "INSERT INTO memories (id, bank, content, content_hash, context, kind, tags, metadata, document_id, created_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )?;
        let mut insert_passage =
            tx.prepare_cached("INSERT INTO passages (memory_seq, ord, text, prev_pid) VALUES (?, ?, ?, ?)")?;
        for item in items {
            if exists.exists([&item.id])? {
                continue;
            }
            let hash = dedupe::content_hash(&item.content);
            let key = dedupe::key(bank, hash);
            let mut dup = None;
            for seq in w.contents.candidates(key) {
                let row: Option<(String, String, String)> =
                    candidate.query_row([seq], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).optional()?;
                match row {
                    Some((b, content, tags)) if b == bank && content == item.content => {
                        dup = Some((seq, tags));
                        break;
                    }
                    _ => w.contents.remove(key, seq), // gone, or a hash collision
                }
            }
            if let Some((seq, tags)) = dup {
                let merged = merge_tags(&tags, &item.tags);
                if merged != tags {
                    merge.execute(params![merged, seq])?;
                }
                continue;
            }
            let metadata = serde_json::to_string(&item.metadata).expect("string map serializes");
            insert.execute(params![
                item.id,
                bank,
                item.content,
                hash,
                item.context,
                item.kind.as_str(),
                encode_tags(&item.tags),
                metadata,
                item.document_id,
                item.timestamp,
            ])?;
            let seq = tx.last_insert_rowid();
            w.contents.add(key, seq);
            // Its passages, each knowing the one before it in the conversation: the previous
            // passage of the memory, or for a conversation's turns (experiences) the last
            // passage of the session's previous turns. Facts (world) stand alone: the fact
            // retained before one in a session is no context for it.
            let session = (item.kind == MemoryType::Experience)
                .then(|| item.metadata.get("session_id").map(|s| (bank.to_owned(), s.clone())))
                .flatten();
            let mut prev = match &session {
                Some(key) => last_passage_of(tx, w.last_passage, key)?,
                None => None,
            };
            for (ord, text) in passages::split(&item.content).into_iter().enumerate() {
                insert_passage.execute(params![seq, ord as i64, text, prev])?;
                let pid = tx.last_insert_rowid();
                new_pids = Some(new_pids.map_or((pid, pid), |(first, _): (i64, i64)| (first, pid)));
                prev = Some(pid);
            }
            if let (Some(key), Some(pid)) = (session, prev) {
                tails.insert(key.clone(), pid);
                w.last_passage.insert(key, pid);
            }
            inserted += 1;
        }
    }
    // New passages take increasing pids above every older one: one range covers the batch.
    let mut put_tail =
        tx.prepare_cached("INSERT OR REPLACE INTO session_tails (bank, session, pid) VALUES (?, ?, ?)")?;
    for ((bank, session), pid) in tails {
        put_tail.execute(params![bank, session, pid])?;
    }
    if let Some((first, last)) = new_pids {
        tx.prepare_cached(INDEX_NEW_PASSAGES)?.execute([first, last])?;
        w.changes.first_added = Some(w.changes.first_added.map_or(first, |f| f.min(first)));
    }
    Ok(inserted)
}

/// The last passage of a session in a bank, from the map, else from `session_tails`.
fn last_passage_of(
    tx: &Connection,
    map: &mut HashMap<(String, String), i64>,
    key: &(String, String),
) -> rusqlite::Result<Option<i64>> {
    if let Some(pid) = map.get(key) {
        return Ok(Some(*pid));
    }
    let found: Option<i64> = tx
        .prepare_cached("SELECT pid FROM session_tails WHERE bank = ?1 AND session = ?2")?
        .query_row(params![key.0, key.1], |r| r.get(0))
        .optional()?;
    if let Some(pid) = found {
        map.insert(key.clone(), pid);
    }
    Ok(found)
}

/// A result from the columns content, kind, created_at, tags, id, document_id, context, metadata
/// starting at `first`.
pub(crate) fn recalled(row: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<Recalled> {
    Ok(Recalled {
        text: row.get(first)?,
        kind: row.get(first + 1)?,
        mentioned_at: row.get(first + 2)?,
        tags: decode_tags(&row.get::<_, String>(first + 3)?),
        score: None,
        id: Some(row.get(first + 4)?),
        document_id: row.get(first + 5)?,
        context: row.get(first + 6)?,
        metadata: serde_json::from_str(&row.get::<_, String>(first + 7)?).unwrap_or_default(),
    })
}

pub(crate) fn push_type_filter(sql: &mut String, args: &mut Vec<String>, types: &[&str]) {
    if types.is_empty() {
        return;
    }
    let start = args.len() + 1;
    let marks: Vec<String> = (0..types.len()).map(|i| format!("?{}", start + i)).collect();
    sql.push_str(&format!(" AND m.kind IN ({})", marks.join(",")));
    args.extend(types.iter().map(|t| (*t).to_owned()));
}

/// Appends Hindsight's tag-match semantics as SQL over the encoded `tags` column.
pub(crate) fn push_tag_filter(sql: &mut String, args: &mut Vec<String>, tags: &[String], mode: TagsMatch) {
    if tags.is_empty() {
        return;
    }
    let start = args.len() + 1;
    let tests: Vec<String> = (0..tags.len()).map(|i| format!("instr(m.tags, ?{}) > 0", start + i)).collect();
    let joined = match mode {
        TagsMatch::Any | TagsMatch::AnyStrict => tests.join(" OR "),
        TagsMatch::All | TagsMatch::AllStrict => tests.join(" AND "),
    };
    match mode {
        TagsMatch::Any | TagsMatch::All => sql.push_str(&format!(" AND (m.tags = '' OR ({joined}))")),
        TagsMatch::AnyStrict | TagsMatch::AllStrict => sql.push_str(&format!(" AND ({joined})")),
    }
    args.extend(tags.iter().map(|t| format!("{SEP}{t}{SEP}")));
}

fn encode_tags(tags: &[String]) -> String {
    let clean: Vec<&str> = tags.iter().map(|t| t.as_str()).filter(|t| !t.is_empty() && !t.contains(SEP)).collect();
    if clean.is_empty() {
        return String::new();
    }
    format!("{SEP}{}{SEP}", clean.join(&SEP.to_string()))
}

/// A memory from a row of `seq, id, bank, content, context, kind, tags, metadata, document_id,
/// created_at` (the export's columns).
pub(crate) fn stored_memory(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredMemory> {
    let kind: String = r.get(5)?;
    let metadata: String = r.get(7)?;
    Ok(StoredMemory {
        id: r.get(1)?,
        bank: r.get(2)?,
        content: r.get(3)?,
        context: r.get(4)?,
        kind: kind.parse().unwrap_or_default(),
        tags: decode_tags(&r.get::<_, String>(6)?),
        metadata: serde_json::from_str(&metadata).unwrap_or_default(),
        document_id: r.get(8)?,
        created_at: r.get(9)?,
    })
}

fn decode_tags(encoded: &str) -> Vec<String> {
    encoded.split(SEP).filter(|t| !t.is_empty()).map(str::to_owned).collect()
}

fn merge_tags(encoded: &str, more: &[String]) -> String {
    let mut tags = decode_tags(encoded);
    for t in more {
        if !tags.contains(t) {
            tags.push(t.clone());
        }
    }
    encode_tags(&tags)
}

#[cfg(test)]
mod tests {
    use rusqlite::StatementStatus;

    use super::*;
    use crate::recall::{RANKED_POOL, RANKED_POOL_SIZE};

    fn item(id: usize, content: &str, doc: Option<&str>) -> MemoryItem {
        MemoryItem {
            document_id: doc.map(str::to_owned),
            ..MemoryItem::new(format!("item-{id}"), content, "2026-01-01T00:00:00.000Z")
        }
    }

    fn find(store: &Store, query: &str) -> Vec<String> {
        let filter = RecallFilter { bank: "b", tags: &[], tags_match: TagsMatch::Any, types: &[], max_chars: 100_000 };
        store.recall(query, &filter).unwrap().into_iter().map(|r| r.text).collect()
    }

    fn segments(store: &Store) -> i64 {
        store.conn.query_row("SELECT count(DISTINCT segid) FROM passages_fts_idx", [], |r| r.get(0)).unwrap()
    }

    #[test]
    fn a_store_from_a_newer_mneme_is_refused_by_open_and_check() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.db");
        drop(Store::open(&path).unwrap());
        let newer = crate::schema::VERSION + 1;
        Connection::open(&path).unwrap().pragma_update(None, "user_version", newer as i64).unwrap();
        for e in [Store::open(&path).err().unwrap(), Store::check(&path).unwrap_err()] {
            assert!(
                matches!(e, OpenError::NewerSchema { found, known } if found == newer && known == newer - 1),
                "{e:?}"
            );
            assert!(e.to_string().contains("is newer than this mneme supports"), "{e}");
        }
    }

    #[test]
    fn a_batch_is_indexed_as_one_segment() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("m.db")).unwrap();
        let batch: Vec<MemoryItem> =
            (0..16).map(|i| item(i, &format!("walrus number{i} likes herring"), None)).collect();
        assert_eq!(store.retain("b", &batch).unwrap(), 16);
        assert_eq!(segments(&store), 1, "one FTS5 segment for the whole batch");
        assert_eq!(find(&store, "walrus").len(), 16);
        assert_eq!(find(&store, "number7"), vec!["walrus number7 likes herring".to_owned()]);

        // A document that replaces its previous version: the old row leaves the index, the new
        // one (which may reuse the deleted row's seq) enters it.
        store.retain("b", &[item(100, "draft one about otters", Some("doc"))]).unwrap();
        store.retain("b", &[item(101, "draft two about otters", Some("doc"))]).unwrap();
        assert_eq!(find(&store, "otters"), vec!["draft two about otters".to_owned()]);
        assert!(find(&store, "one").is_empty());
        // A resend indexes nothing twice.
        assert_eq!(store.retain("b", &batch).unwrap(), 0);
        assert_eq!(find(&store, "walrus").len(), 16);
    }

    #[test]
    fn duplicates_are_found_across_connections_and_after_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.db");
        let mut a = Store::open(&path).unwrap();
        let mut b = Store::open(&path).unwrap();
        let count = |s: &Store, text: &str| -> i64 {
            s.conn.query_row("SELECT count(*) FROM memories WHERE content = ?", [text], |r| r.get(0)).unwrap()
        };
        a.retain("b", &[item(1, "the build uses sccache", None)]).unwrap(); // a's map is built now
        b.retain("b", &[item(2, "deploys go through staging", None)]).unwrap();
        // a learns of b's row through data_version, not through its own map.
        assert_eq!(a.retain("b", &[item(3, "deploys go through staging", None)]).unwrap(), 0);
        assert_eq!(count(&a, "deploys go through staging"), 1);
        // Another bank keeps its own copy.
        assert_eq!(a.retain("other", &[item(4, "deploys go through staging", None)]).unwrap(), 1);
        // A deleted row leaves a stale entry behind: the content is stored again.
        a.clear_all().unwrap();
        assert_eq!(a.retain("b", &[item(5, "the build uses sccache", None)]).unwrap(), 1);
        assert_eq!(a.retain("b", &[item(6, "the build uses sccache", None)]).unwrap(), 0);
        assert_eq!(count(&a, "the build uses sccache"), 1);
    }

    #[test]
    fn hot_statements_are_not_re_prepared() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("m.db")).unwrap();
        for round in 0..3 {
            let batch: Vec<MemoryItem> =
                (0..4).map(|i| item(round * 10 + i, &format!("gecko {round} {i}"), None)).collect();
            store.retain("b", &batch).unwrap();
            assert!(!find(&store, &format!("gecko {round}")).is_empty());
        }
        store.export(None, 0, 2).unwrap();
        store.export(None, 2, 3).unwrap();
        for sql in [RANKED_POOL, INDEX_NEW_PASSAGES, EXPORT_PAGE] {
            let stmt = store.conn.prepare_cached(sql).unwrap();
            assert_eq!(stmt.get_status(StatementStatus::RePrepare), 0, "{sql}");
        }
        assert!(RANKED_POOL.ends_with(&format!("LIMIT {RANKED_POOL_SIZE}")));
    }
}
