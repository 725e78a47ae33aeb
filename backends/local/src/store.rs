//! The synchronous SQLite store. Every method runs on a blocking thread (see [`crate::LocalBackend`]).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use mneme_core::{BackendError, MemoryItem, Recalled, StoredMemory, TagsMatch};
use rusqlite::functions::FunctionFlags;
use rusqlite::{params, params_from_iter, Connection, TransactionBehavior};

use crate::dedupe::ContentIndex;
use crate::error::OpenError;
use crate::fts;
use crate::passages;
use crate::recall::PassageCount;
use crate::retain::{retain_one, Documents, Writing};
use crate::rows::{decode_tags, encode_tags, push_tag_filter, recalled, stored_memory};
use crate::thesaurus::Thesaurus;

mod embeddings;
mod erasure;

pub use embeddings::{NewStoredVector, StoredVector, Unembedded};

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
    /// Stop adding results once their text costs this much: quarter tokens, as
    /// [`mneme_core::text::budget_units`] counts them (`max_tokens` × 4).
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

/// The memories an export page leads with: those after `?1` that are their document's first (or
/// have none), oldest first. `LIMIT ?3 + 0`: an expression, so the bound value does not force a
/// re-prepare either.
const EXPORT_LEADS: &str = "SELECT seq, id, bank, content, context, kind, tags, metadata, document_id, created_at
     FROM memories m WHERE seq > ?1 AND (?2 IS NULL OR bank = ?2)
         AND (document_id IS NULL OR NOT EXISTS (
             SELECT 1 FROM memories d WHERE d.bank = m.bank AND d.document_id = m.document_id AND d.seq < m.seq))
     ORDER BY seq LIMIT ?3 + 0";

/// The rest of a document, after its first memory, oldest first.
const EXPORT_REST_OF_DOCUMENT: &str =
    "SELECT seq, id, bank, content, context, kind, tags, metadata, document_id, created_at
     FROM memories WHERE bank = ?1 AND document_id = ?2 AND seq > ?3 ORDER BY seq";

/// A page of an export (see [`Store::export`]).
#[derive(Debug, Default)]
pub struct ExportRows {
    /// The memories, a document's together.
    pub memories: Vec<StoredMemory>,
    /// Where the next page starts (the last leading memory's sequence), when there may be one.
    pub next: Option<i64>,
}

/// Indexes a batch's new passages in one statement, so FTS5 writes one segment per batch: their
/// own terms (without the opening a passage repeats from the one before it in its memory, whose
/// terms are its context already), and the terms of the passage before each as its context.
pub(crate) const INDEX_NEW_PASSAGES: &str = "INSERT INTO passages_fts(rowid, terms, ctx)
     SELECT p.pid, mneme_own_terms(p.text, CASE WHEN q.memory_seq = p.memory_seq THEN q.text END), mneme_terms(q.text)
     FROM passages p LEFT JOIN passages q ON q.pid = p.prev_pid WHERE p.pid BETWEEN ?1 AND ?2";

/// Forgets the sessions' last passages among `removed`, on disk and in `last_passage`: such a
/// session's next turn then has no context rather than a passage that is gone (or the pid a
/// later passage is given, SQLite reusing the largest).
pub(crate) fn untail(
    tx: &Connection,
    removed: &[i64],
    last_passage: &mut HashMap<(String, String), i64>,
) -> rusqlite::Result<()> {
    if removed.is_empty() {
        return Ok(());
    }
    let mut untail = tx.prepare_cached("DELETE FROM session_tails WHERE pid = ?1")?;
    for pid in removed {
        untail.execute([pid])?;
    }
    let gone: HashSet<i64> = removed.iter().copied().collect();
    last_passage.retain(|_, pid| !gone.contains(pid));
    Ok(())
}

/// Removed passages stop being the context of the passages after them, in the index too (those
/// are indexed again without it): a forgotten memory's words must not find its neighbour.
pub(crate) fn unlink_context(tx: &Connection, removed: &[i64]) -> rusqlite::Result<()> {
    // A passage comes after its context: only later pids are read.
    let Some(first) = removed.iter().min() else { return Ok(()) };
    let ids = format!("[{}]", removed.iter().map(i64::to_string).collect::<Vec<_>>().join(","));
    let orphans: Vec<i64> = tx
        .prepare_cached("SELECT pid FROM passages WHERE pid > ?1 AND prev_pid IN (SELECT value FROM json_each(?2))")?
        .query_map(params![first, ids], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut unlink = tx.prepare_cached("UPDATE passages SET prev_pid = NULL WHERE pid = ?1")?;
    let mut unindex = tx.prepare_cached("DELETE FROM passages_fts WHERE rowid = ?1")?;
    let mut index = tx.prepare_cached(INDEX_NEW_PASSAGES)?;
    for orphan in orphans {
        unlink.execute([orphan])?;
        unindex.execute([orphan])?;
        index.execute([orphan, orphan])?;
    }
    Ok(())
}

/// How long a connection waits for another holding the database (a reader, for a checkpoint).
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// How long an upgrade of the schema waits for the store's write lock: another process may be
/// upgrading it (a daemon's start and `mneme migrate` at once), which takes seconds on a large
/// store, and the step it waits for is then found done (review76 #3: the second failed after 5 s
/// with "database is locked", taken for damage).
const UPGRADE_BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// Brings the store's schema up to this mneme's, saying so in the log: on a large store the
/// first start after an upgrade indexes many passages again, for seconds before the daemon
/// answers (review76 #2). A new store is made whatever `upgrade` says.
fn upgrade_schema(conn: &mut Connection, path: &Path, upgrade: crate::Upgrade) -> Result<(), OpenError> {
    let found: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let (found, known) = (found as usize, crate::schema::VERSION);
    if found == 0 || found >= known {
        return crate::schema::migrate(conn);
    }
    if upgrade == crate::Upgrade::Refused {
        return Err(OpenError::OlderSchema { found, known });
    }
    tracing::info!(
        "upgrading the local store {} from schema {found} to {known} (this mneme's first opening of it; a large store takes a while)",
        path.display()
    );
    let started = std::time::Instant::now();
    conn.busy_timeout(UPGRADE_BUSY_TIMEOUT)?;
    crate::schema::migrate(conn)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    tracing::info!("upgraded the local store in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

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
    /// The words a query's words may also match (the built-in list unless told otherwise).
    pub(crate) thesaurus: Arc<Thesaurus>,
    /// The last erasure left part of the log in place (a reader held it): see
    /// [`Store::retry_erasure`].
    traces_left: bool,
    /// The last erasure could not merge the full-text index (a full disk, a lock held past the
    /// busy timeout): the deleted passages' terms are still in its segments. Kept across a
    /// restart by a file beside the store ([`Store::erase_marker`]), as an owed checkpoint is.
    index_left: bool,
    /// `{store}-erase-owed`: there while an index merge or the log's checkpoint is owed.
    erase_marker: std::path::PathBuf,
    /// The file as it was opened, to tell it was deleted or replaced under the daemon.
    opened: OpenedFile,
}

/// The store's file as it was opened: one deleted or replaced since is refused writes.
#[derive(Debug)]
pub(crate) struct OpenedFile(mneme_core::database_file::OpenedFile);

impl OpenedFile {
    pub(crate) fn of(path: &Path) -> OpenedFile {
        OpenedFile(mneme_core::database_file::OpenedFile::of(path))
    }

    /// `Err` when the file was deleted or replaced since it was opened: what the store wrote
    /// now would go to a file no later start reads, so a write is refused instead, as an outage
    /// (the retain queue keeps what it holds, uses no attempts, and delivers it after a restart).
    pub(crate) fn still_there(&self) -> Result<(), BackendError> {
        match self.0.gone() {
            None => Ok(()),
            Some(what) => Err(BackendError::Unavailable {
                reason: format!(
                    "the local store {} {what} while mneme had it open: restart mneme (what the queue holds is delivered then)",
                    self.0.path().display()
                ),
                retry_after: None,
            }),
        }
    }
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
    /// Memories whose tags changed (a retain of the same text merged its tags): seq → the
    /// encoded tags they have now.
    pub retagged: HashMap<i64, String>,
}

impl Changes {
    pub(crate) fn merge(&mut self, other: Changes) {
        self.first_added = match (self.first_added, other.first_added) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.removed.extend(other.removed);
        self.removed_all |= other.removed_all;
        self.retagged.extend(other.retagged);
    }
}

/// Sessions whose last passage the writer keeps in memory at most (see `retain_in_transaction`).
const LAST_PASSAGES_KEPT: usize = 4096;

/// Refuses a store file that SQLite must not be given: not a regular file (a FIFO's open waits
/// for a writer), or emptied (opened, SQLite takes it for a new one and deletes the log that
/// holds its last commits). Its metadata alone: no descriptor of the file is opened here (see
/// [`check_header`]).
fn unusable(path: &Path) -> Result<(), OpenError> {
    use mneme_core::database_file::{not_a_file, was_emptied, NOT_A_FILE};
    if not_a_file(path) {
        return Err(OpenError::Overwritten(NOT_A_FILE.to_owned()));
    }
    match was_emptied(path) {
        true => Err(OpenError::Emptied),
        false => Ok(()),
    }
}

/// Refuses a store file whose header is not SQLite's, before SQLite opens it. Only for a process
/// with no connection to the file open: it reads the header through a descriptor of its own,
/// and closing one gives up every lock the process holds on the file (POSIX locks are the
/// process's), SQLite's included. Done beside a running store (a reader's open, the integrity
/// check), it left the daemon's connections unlocked, and `mneme doctor`'s connection, finding
/// itself the last, deleted the log the daemon was writing to.
pub(crate) fn check_header(path: &Path) -> Result<(), OpenError> {
    mneme_core::database_file::damaged_header(path).map_or(Ok(()), |why| Err(OpenError::Overwritten(why)))
}

/// The write-ahead log's size once a checkpoint has emptied it: without a limit it keeps the
/// largest size it ever reached (67 MB beside a 25 MB store after a burst of sessions).
const WAL_SIZE_KEPT: i64 = 16 << 20;

impl Store {
    /// Opens (creating if needed) the database at `path`, in WAL mode, migrated.
    pub fn open(path: &Path) -> Result<Self, OpenError> {
        Self::open_with(path, crate::Upgrade::Allowed)
    }

    /// [`Store::open`], a store of an earlier schema upgraded only if `upgrade` allows it.
    pub fn open_with(path: &Path, upgrade: crate::Upgrade) -> Result<Self, OpenError> {
        unusable(path)?;
        // Removed again if this open fails before SQLite wrote to it (review112 #4).
        let creating = mneme_core::database_file::Creating::new(path);
        let mut conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "journal_size_limit", WAL_SIZE_KEPT)?;
        // FULL: a commit is on disk before it returns. The retain queue removes a delivered
        // batch from its spool once the delivery returns, so a commit that a power loss could
        // still roll back (NORMAL) would lose memories the spool no longer holds. The deliveries
        // share their commits, and the daemon bench measured no cost (alternating with NORMAL:
        // 5,285, 6,177, 6,032 retains/s against 4,796, 6,864, 6,201).
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // Statement and savepoint journals in memory, not in temporary files.
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        // Deleted rows are overwritten with zeros, free pages included: a forgotten memory does
        // not stay readable in the file (see `erase_traces` for the index and the log).
        conn.pragma_update(None, "secure_delete", "ON")?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        register_functions(&conn)?;
        upgrade_schema(&mut conn, path, upgrade)?;
        creating.done();
        let erase_marker = Self::erase_marker(path);
        let owed = erase_marker.exists();
        Ok(Self {
            conn,
            contents: ContentIndex::default(),
            last_passage: HashMap::new(),
            passage_count: PassageCount::default(),
            changes: Changes::default(),
            thesaurus: Thesaurus::builtin(),
            traces_left: owed,
            index_left: owed,
            erase_marker,
            opened: OpenedFile::of(path),
        })
    }

    /// See [`OpenedFile::still_there`].
    pub fn still_there(&self) -> Result<(), BackendError> {
        self.opened.still_there()
    }

    /// This store with `thesaurus` in place of the built-in one, for recall.
    pub fn with_thesaurus(mut self, thesaurus: Arc<Thesaurus>) -> Self {
        self.thesaurus = thesaurus;
        self
    }

    /// See [`crate::check`].
    pub fn check(path: &Path) -> Result<u64, OpenError> {
        use rusqlite::OpenFlags;
        unusable(path)?;
        let conn =
            Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
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
    /// content in the same bank and document (or outside any) is stored once (its tags merged);
    /// items carrying a document id
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
        self.write_batches(batches, Documents::Replace)
    }

    /// Stores imported memories in one transaction, as [`Store::retain`] does except that a
    /// memory with a document id joins its document: the document's stored memories stay, so a
    /// document read back across several pages (or files) arrives whole.
    pub fn import(&mut self, bank: &str, items: &[MemoryItem]) -> rusqlite::Result<usize> {
        self.import_banks(&[(bank, items)])
    }

    /// [`Store::import`] of memories of several banks, all in one transaction: all of them or,
    /// on an error (a full disk), none (a request answered 507 had stored the banks before the
    /// one that failed).
    pub fn import_banks(&mut self, banks: &[(&str, &[MemoryItem])]) -> rusqlite::Result<usize> {
        self.passage_count.reset();
        let (tx, mut w, changes) = self.begin_writing(Documents::Join)?;
        let written = banks.iter().try_fold(0, |n, (bank, items)| Ok(n + retain_one(&tx, &mut w, bank, items)?));
        let committed = written.and_then(|n| tx.commit().map(|()| n));
        if committed.is_ok() {
            changes.merge(w.changes);
        } else {
            // Rolled back: rows the map no longer lists may exist again.
            w.contents.invalidate();
            w.last_passage.clear();
        }
        committed
    }

    /// An immediate transaction and what a batch writes with, and the connection's changes to
    /// merge a committed batch's into.
    fn begin_writing(
        &mut self,
        documents: Documents,
    ) -> rusqlite::Result<(rusqlite::Transaction<'_>, Writing<'_>, &mut Changes)> {
        let Store { conn, contents, last_passage, changes, .. } = self;
        // IMMEDIATE: the write lock is taken before the dedupe map is checked against other
        // connections' changes, so none can slip in between.
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        // Another connection wrote: look sessions up afresh. Past LAST_PASSAGES_KEPT sessions,
        // too: the map is a cache of `session_tails`, and it gained an entry for every session
        // that ever retained a conversation (160 B each, for the daemon's life).
        if contents.refresh(&tx)? || last_passage.len() > LAST_PASSAGES_KEPT {
            last_passage.clear();
        }
        Ok((tx, Writing { documents, contents, last_passage, changes: Changes::default() }, changes))
    }

    fn write_batches(
        &mut self,
        batches: &[(&str, &[MemoryItem])],
        documents: Documents,
    ) -> rusqlite::Result<Vec<rusqlite::Result<usize>>> {
        self.passage_count.reset();
        let results = self.retain_in_transaction(batches, documents);
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
        documents: Documents,
    ) -> rusqlite::Result<Vec<rusqlite::Result<usize>>> {
        let (mut tx, mut w, changes) = self.begin_writing(documents)?;
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
                    // A full disk, an I/O error or no memory makes SQLite roll back the whole
                    // transaction, not the savepoint: the batches before this one are gone too,
                    // and those after would each commit on their own (a savepoint outside a
                    // transaction begins one) while the group's commit failed for all.
                    if savepoint.is_autocommit() {
                        return Ok(rolled_back_with(e, batches.len()));
                    }
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
        // Facts, not experiences: a session's transcript is the newest memory after every turn,
        // and filled the list with turn frames cut mid-word (recall finds them when asked).
        let mut sql = String::from(
            "SELECT content, kind, created_at, tags, id, document_id, context, metadata FROM memories m
             WHERE m.bank = ?1 AND m.kind <> 'experience'",
        );
        let mut args = vec![bank.to_owned()];
        push_tag_filter(&mut sql, &mut args, tags, TagsMatch::Any);
        sql.push_str(&format!(" ORDER BY seq DESC LIMIT {limit}"));
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(params_from_iter(args.iter()), |row| recalled(row, 0))?;
        rows.collect()
    }

    /// Deletes a bank's memories; with tags, only those carrying one of them. A memory another
    /// project holds too (the same text retained there is stored once, its tags merged) loses
    /// the cleared tags instead, and stays that project's. Returns how many were deleted.
    pub fn clear_scope(&mut self, bank: &str, tags: &[String]) -> rusqlite::Result<u64> {
        let mut filter = String::from("m.bank = ?1");
        let mut args = vec![bank.to_owned()];
        push_tag_filter(&mut filter, &mut args, tags, TagsMatch::AnyStrict);
        let args: Vec<&dyn rusqlite::ToSql> = args.iter().map(|a| a as &dyn rusqlite::ToSql).collect();
        if !tags.is_empty() {
            // Untagged, they no longer match the filter the deletion uses.
            self.untag_shared(&filter, &args, tags)?;
        }
        self.delete_memories(&filter, &args)
    }

    /// Takes `tags` off the memories `WHERE filter` that another project's tag keeps.
    fn untag_shared(&mut self, filter: &str, args: &[&dyn rusqlite::ToSql], tags: &[String]) -> rusqlite::Result<()> {
        // Immediate: a read that becomes a write is not given the busy timeout (SQLite calls the
        // busy handler only to begin), so beside another process's write (`mneme migrate --to
        // local` while the daemon runs) it failed at once as "database is locked".
        let tx = self.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let matched: Vec<(i64, String)> = tx
            .prepare(&format!("SELECT m.seq, m.tags FROM memories AS m WHERE {filter}"))?
            .query_map(args, |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let mut retagged = HashMap::new();
        for (seq, encoded) in matched {
            let cleared = |t: &String| tags.iter().any(|c| crate::rows::stored_tag(c) == t.as_str());
            let left: Vec<String> = decode_tags(&encoded).into_iter().filter(|t| !cleared(t)).collect();
            if left.iter().any(|t| t.starts_with(mneme_core::PROJECT_TAG_PREFIX)) {
                let encoded = encode_tags(&left);
                tx.execute("UPDATE memories SET tags = ?1 WHERE seq = ?2", params![encoded, seq])?;
                retagged.insert(seq, encoded);
            }
        }
        tx.commit()?;
        self.changes.merge(Changes { retagged, ..Changes::default() });
        Ok(())
    }

    /// Deletes the memories `WHERE filter` (over `memories AS m`, with `args`) and what hangs off
    /// them: their passages with the passages' FTS rows and vectors (the triggers), the
    /// session tails that pointed at those passages (a session's next turn then has no context
    /// rather than a dangling one), and their place as the context of the passages after them
    /// (those are indexed again without it). Returns how many memories went.
    pub(crate) fn delete_memories(&mut self, filter: &str, args: &[&dyn rusqlite::ToSql]) -> rusqlite::Result<u64> {
        self.passage_count.reset();
        // Immediate, as in `untag_shared`: it reads, then writes.
        let tx = self.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let removed: Vec<i64> = tx
            .prepare(&format!("SELECT p.pid FROM passages p JOIN memories m ON m.seq = p.memory_seq WHERE {filter}"))?
            .query_map(args, |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let n = tx.execute(&format!("DELETE FROM memories AS m WHERE {filter}"), args)? as u64;
        let mut last_passage = self.last_passage.clone();
        untail(&tx, &removed, &mut last_passage)?;
        unlink_context(&tx, &removed)?;
        tx.commit()?;
        self.last_passage = last_passage;
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

    /// Up to `limit` memories after sequence `after`, optionally of one bank, oldest first and a
    /// document's together: each document follows its first memory whole (one larger than
    /// `limit` is a page of its own). A document's later memories (appends) are not next to its
    /// first by sequence, and a target that stores a document as what one request holds of it
    /// (Hindsight) kept only the last part sent.
    pub fn export(&self, bank: Option<&str>, after: i64, limit: usize) -> rusqlite::Result<ExportRows> {
        let mut leads = self.conn.prepare_cached(EXPORT_LEADS)?;
        let mut rest_of = self.conn.prepare_cached(EXPORT_REST_OF_DOCUMENT)?;
        let mut page = ExportRows::default();
        let mut led = 0;
        let rows =
            leads.query_map(params![after, bank, limit as i64], |r| Ok((r.get::<_, i64>(0)?, stored_memory(r)?)))?;
        for row in rows {
            let (seq, first) = row?;
            let rest: Vec<StoredMemory> = match &first.document_id {
                Some(document) => {
                    rest_of.query_map(params![first.bank, document, seq], stored_memory)?.collect::<Result<_, _>>()?
                }
                None => Vec::new(),
            };
            if !page.memories.is_empty() && page.memories.len() + 1 + rest.len() > limit {
                return Ok(page); // `next` stays at the last document shown whole
            }
            page.memories.push(first);
            page.memories.extend(rest);
            page.next = Some(seq);
            led += 1;
        }
        if led < limit {
            page.next = None; // no memory leads after these
        }
        Ok(page)
    }

    /// Memory count and size on disk.
    pub fn stats(&self) -> rusqlite::Result<Stats> {
        let memories: i64 = self.conn.query_row("SELECT count(*) FROM memories", [], |r| r.get(0))?;
        let passages: i64 = self.conn.query_row("SELECT count(*) FROM passages", [], |r| r.get(0))?;
        // The files' lengths: `page_count` counts the pages still only in the WAL too, so with the
        // WAL's length added they were counted twice, and the size fell to a third at the next
        // checkpoint with nothing deleted (review65 #4).
        let on_disk = |path: &str| std::fs::metadata(path).map_or(0, |m| m.len());
        let bytes = match self.conn.path().filter(|p| !p.is_empty()) {
            Some(path) => on_disk(path) + on_disk(&format!("{path}-wal")),
            None => {
                let pages: i64 = self.conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
                let page_size: i64 = self.conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
                (pages * page_size) as u64
            }
        };
        Ok(Stats { memories: memories as u64, bytes, passages: passages as u64 })
    }

    /// The underlying connection (benchmarks compare against a bare FTS5 query on it).
    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}

/// Adds `mneme_terms(text)` (see [`fts::index_terms`]; NULL gives '') and
/// `mneme_own_terms(text, previous)` (the terms of [`passages::own_text`]) to a connection: the
/// indexing statements and migrations call them.
pub fn register_functions(conn: &Connection) -> rusqlite::Result<()> {
    conn.create_scalar_function(
        "mneme_terms",
        1,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| Ok(ctx.get::<Option<String>>(0)?.map_or_else(String::new, |t| fts::index_terms(&t))),
    )?;
    conn.create_scalar_function(
        "mneme_split_differs",
        1,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| Ok(ctx.get::<Option<String>>(0)?.is_some_and(|t| fts::split_differs(&t))),
    )?;
    conn.create_scalar_function(
        "mneme_own_terms",
        2,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            let (text, previous): (String, Option<String>) = (ctx.get(0)?, ctx.get(1)?);
            Ok(fts::index_terms(passages::own_text(&text, previous.as_deref())))
        },
    )
}

/// The answers of a group whose transaction SQLite rolled back on `cause` (a full disk, an I/O
/// error): every batch failed with it, none stored.
fn rolled_back_with(cause: rusqlite::Error, batches: usize) -> Vec<rusqlite::Result<usize>> {
    let code = match &cause {
        rusqlite::Error::SqliteFailure(f, _) => *f,
        _ => rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
    };
    let why = format!("rolled back with its group: {cause}");
    (0..batches).map(|_| Err(rusqlite::Error::SqliteFailure(code, Some(why.clone())))).collect()
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
