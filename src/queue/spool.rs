//! The durable spool: one SQLite database (WAL, `synchronous = FULL`) holding queued items, dead
//! letters, notices and sessions.
//!
//! All access goes through one writer thread that runs jobs in order and commits whatever jobs
//! arrived together in one transaction (group commit): a retain is answered only after its
//! transaction is fsynced, yet concurrent retains share one fsync.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;

use mneme_core::{MemoryItem, MemoryType};
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

/// Jobs committed together at most.
const GROUP_MAX: usize = 512;
/// Jobs (and delivered-batch removals) waiting for the writer at most: callers beyond this wait
/// for a place (backpressure) instead of growing the writer's queue without bound.
const MAX_WAITING: usize = 4096;

const SCHEMA: &[&str] = &[
    r#"
CREATE TABLE items (
    session_id   TEXT NOT NULL,
    seq          INTEGER NOT NULL,       -- arrival order; never reused while a row holds it
    id           TEXT NOT NULL,
    bank         TEXT NOT NULL,
    tags         TEXT NOT NULL,      -- JSON array
    content      TEXT NOT NULL,
    context      TEXT,
    kind         TEXT NOT NULL,
    document_id  TEXT,
    metadata     TEXT NOT NULL,      -- JSON object
    enqueued_at  TEXT NOT NULL,
    batch_id     TEXT,               -- fixed at the first delivery attempt: resends reuse it
    attempts     INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT,
    -- Clustered by session: an append touches one B-tree (one or two pages a commit).
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE TABLE dead_letters (
    seq          INTEGER PRIMARY KEY,
    id           TEXT NOT NULL UNIQUE,
    session_id   TEXT NOT NULL,
    bank         TEXT NOT NULL,
    tags         TEXT NOT NULL,
    content      TEXT NOT NULL,
    context      TEXT,
    kind         TEXT NOT NULL,
    document_id  TEXT,
    metadata     TEXT NOT NULL,
    enqueued_at  TEXT NOT NULL,
    batch_id     TEXT,
    attempts     INTEGER NOT NULL,
    last_error   TEXT,
    failed_at    TEXT NOT NULL
);
CREATE TABLE notices (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    at           TEXT NOT NULL,
    level        TEXT NOT NULL,
    source       TEXT NOT NULL,
    session_id   TEXT,
    message      TEXT NOT NULL
);
CREATE TABLE sessions (
    id           TEXT PRIMARY KEY,
    record       TEXT NOT NULL       -- JSON, owned by the session layer
);
"#,
    r#"
-- Small objects other layers keep (the Hindsight API's bank profiles and mental models).
CREATE TABLE records (
    kind         TEXT NOT NULL,
    key          TEXT NOT NULL,
    record       TEXT NOT NULL,      -- JSON, owned by the layer that wrote it
    PRIMARY KEY (kind, key)
) WITHOUT ROWID;
"#,
];

const ITEM_COLUMNS: &str =
    "seq, id, session_id, bank, tags, content, context, kind, document_id, metadata, enqueued_at, batch_id, attempts";

/// A spool failure. Cloned because one commit answers every job that shared it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SpoolError {
    /// The disk (or the file system's quota) is full: nothing was written.
    #[error("the disk holding the spool is full ({0})")]
    Full(#[source] Arc<rusqlite::Error>),
    /// SQLite or the file system failed.
    #[error("spool: {0}")]
    Sql(#[source] Arc<rusqlite::Error>),
    /// The file is not a spool this mneme can use.
    #[error("spool: {0}")]
    Unusable(String),
    /// The writer thread is gone (the daemon is stopping).
    #[error("spool: the writer thread stopped")]
    Stopped,
}

impl SpoolError {
    /// Whether the disk is full.
    pub fn is_full(&self) -> bool {
        matches!(self, SpoolError::Full(_))
    }
}

impl From<rusqlite::Error> for SpoolError {
    fn from(e: rusqlite::Error) -> Self {
        match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DiskFull) => SpoolError::Full(Arc::new(e)),
            _ => SpoolError::Sql(Arc::new(e)),
        }
    }
}

/// An item waiting in the spool.
#[derive(Debug, Clone, PartialEq)]
pub struct Spooled {
    /// Order of arrival.
    pub seq: i64,
    /// The session whose queue it is in.
    pub session_id: String,
    /// The bank it goes to.
    pub bank: String,
    /// The item (its tags are the scope's tags).
    pub item: MemoryItem,
    /// The delivery it belongs to, once one was attempted.
    pub batch_id: Option<String>,
    /// Failed deliveries so far.
    pub attempts: u32,
}

/// A notice row.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NoticeRow {
    /// Increasing id.
    pub id: i64,
    /// RFC 3339 UTC.
    pub at: String,
    /// `info`, `warning` or `error`.
    pub level: String,
    /// Who raised it (a backend name, `config`, `queue`).
    pub source: String,
    /// The session it concerns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// For the user.
    pub message: String,
}

/// Queue sizes for status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SpoolCounts {
    /// Items waiting.
    pub spooled: u64,
    /// Dead letters.
    pub dead: u64,
}

type Finish = Box<dyn FnOnce(Result<(), SpoolError>) + Send>;

/// What the writer thread is sent. Each message holds a place in [`MAX_WAITING`] until it is done.
enum Message {
    /// Run in the next transaction; answered once it is committed.
    Job(Job, OwnedSemaphorePermit),
    /// Remove a delivered batch, answering no one: done at the start of the next transaction
    /// (which runs before any later job), or alone after [`REMOVAL_WAIT`] without one.
    Remove(Removal, OwnedSemaphorePermit),
}

struct Removal {
    session_id: String,
    batch_id: String,
    seqs: std::ops::RangeInclusive<i64>,
}

/// How long a removal waits for a transaction to ride on.
const REMOVAL_WAIT: std::time::Duration = std::time::Duration::from_millis(20);
/// ... and how long after a transaction could not begin (a full disk).
const REMOVAL_RETRY: std::time::Duration = std::time::Duration::from_secs(1);
/// A job: given the open transaction, runs and returns what to do once the commit is known;
/// given the error that kept the transaction from opening, answers with it.
type Job = Box<dyn FnOnce(Result<&Transaction<'_>, SpoolError>) -> Option<Finish> + Send>;

/// Handle to the spool's writer thread. Cheap to clone.
#[derive(Clone)]
pub struct Spool {
    jobs: mpsc::Sender<Message>,
    /// Places for messages waiting for the writer (see [`MAX_WAITING`]).
    places: Arc<Semaphore>,
    /// The next item sequence number; only the writer thread advances it, in commit order.
    next_seq: Arc<AtomicI64>,
}

impl Spool {
    /// Opens (creating) the spool database, fsyncing every commit, and starts its writer thread.
    pub fn open(path: &Path) -> Result<Spool, SpoolError> {
        Self::open_with(path, crate::config::SpoolSync::Full)
    }

    /// Opens the spool with the given durability of a commit.
    pub fn open_with(path: &Path, sync: crate::config::SpoolSync) -> Result<Spool, SpoolError> {
        let mut conn = Connection::open(path)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        // Only this daemon's writer thread uses the spool: holding the lock for good spares two
        // fcntl calls a transaction and the shared-memory WAL index (and keeps other processes out).
        conn.pragma_update(None, "locking_mode", "EXCLUSIVE")?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", sync.pragma())?;
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version as usize > SCHEMA.len() {
            return Err(SpoolError::Unusable(format!(
                "schema version {version} was written by a newer mneme (this one knows {})",
                SCHEMA.len()
            )));
        }
        for (v, sql) in SCHEMA.iter().enumerate().skip(version as usize) {
            let tx = conn.transaction()?;
            tx.execute_batch(sql)?;
            tx.pragma_update(None, "user_version", (v + 1) as i64)?;
            tx.commit()?;
        }
        let max_seq: i64 = conn.query_row(
            "SELECT max(coalesce((SELECT max(seq) FROM items), 0), coalesce((SELECT max(seq) FROM dead_letters), 0))",
            [],
            |r| r.get(0),
        )?;
        // Unbounded only in type: every message holds one of `places` until it is done.
        let (jobs, rx) = mpsc::channel::<Message>();
        thread::Builder::new()
            .name("mneme-spool".into())
            .spawn(move || writer(conn, rx))
            .map_err(|e| SpoolError::Unusable(format!("cannot start the spool's writer thread: {e}")))?;
        Ok(Spool {
            jobs,
            places: Arc::new(Semaphore::new(MAX_WAITING)),
            next_seq: Arc::new(AtomicI64::new(max_seq + 1)),
        })
    }

    /// Checks a spool file that no daemon has open: that it is a spool database this mneme can
    /// read and that SQLite finds it sound. Returns its counts.
    pub fn check(path: &Path) -> Result<SpoolCounts, SpoolError> {
        use rusqlite::OpenFlags;
        let conn =
            Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version as usize > SCHEMA.len() {
            return Err(SpoolError::Unusable(format!("schema version {version} was written by a newer mneme")));
        }
        let verdict: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
        if verdict != "ok" {
            return Err(SpoolError::Unusable(format!("SQLite finds it damaged: {verdict}")));
        }
        if version == 0 {
            return Ok(SpoolCounts::default());
        }
        let spooled: i64 = conn.query_row("SELECT count(*) FROM items", [], |r| r.get(0))?;
        let dead: i64 = conn.query_row("SELECT count(*) FROM dead_letters", [], |r| r.get(0))?;
        Ok(SpoolCounts { spooled: spooled as u64, dead: dead as u64 })
    }

    async fn place(&self) -> Result<OwnedSemaphorePermit, SpoolError> {
        self.places.clone().acquire_owned().await.map_err(|_| SpoolError::Stopped)
    }

    /// Runs `f` in the writer's next transaction and answers once that transaction is committed.
    pub async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, SpoolError> {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |t| match t {
            Ok(t) => {
                let result = run_in_savepoint(t, f);
                Some(Box::new(move |commit: Result<(), SpoolError>| {
                    let _ = tx.send(commit.and(result));
                }) as Finish)
            }
            Err(e) => {
                let _ = tx.send(Err(e));
                None
            }
        });
        let place = self.place().await?;
        #[cfg(not(test))]
        {
            self.jobs.send(Message::Job(job, place)).map_err(|_| SpoolError::Stopped)?;
            rx.await.map_err(|_| SpoolError::Stopped)?
        }
        // Under tokio's paused test clock, an async wait on another thread lets the clock jump
        // ahead while the disk works; a running blocking task inhibits that auto-advance.
        #[cfg(test)]
        {
            let jobs = self.jobs.clone();
            tokio::task::spawn_blocking(move || {
                jobs.send(Message::Job(job, place)).map_err(|_| SpoolError::Stopped)?;
                rx.blocking_recv().map_err(|_| SpoolError::Stopped)?
            })
            .await
            .map_err(|_| SpoolError::Stopped)?
        }
    }

    /// Appends items to a session's queue; returns once they are on disk.
    pub async fn append(&self, session_id: &str, bank: &str, items: Vec<MemoryItem>) -> Result<(), SpoolError> {
        let (session_id, bank) = (session_id.to_owned(), bank.to_owned());
        let next_seq = self.next_seq.clone();
        self.call(move |t| {
            let mut stmt = t.prepare_cached(
                "INSERT INTO items (seq, id, session_id, bank, tags, content, context, kind, document_id, metadata, enqueued_at)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )?;
            for item in &items {
                stmt.execute(params![
                    next_seq.fetch_add(1, Ordering::Relaxed),
                    item.id,
                    session_id,
                    bank,
                    json(&item.tags),
                    item.content,
                    item.context,
                    item.kind.as_str(),
                    item.document_id,
                    json(&item.metadata),
                    item.timestamp,
                ])?;
            }
            Ok(())
        })
        .await
    }

    /// The next delivery of a session: the batch already attempted, if any, else up to `max`
    /// oldest items of one scope, which get a new batch id. Empty when nothing waits.
    pub async fn next_batch(&self, session_id: &str, max: usize) -> Result<Vec<Spooled>, SpoolError> {
        let session_id = session_id.to_owned();
        self.call(move |t| {
            // Batches are assigned oldest first, so an attempted batch is always at the front.
            let existing: Option<String> = t
                .prepare_cached("SELECT batch_id FROM items WHERE session_id = ? ORDER BY seq LIMIT 1")?
                .query_row([&session_id], |r| r.get(0))
                .optional()?
                .flatten();
            if let Some(batch) = existing {
                let mut stmt = t.prepare_cached(&format!(
                    "SELECT {ITEM_COLUMNS} FROM items WHERE session_id = ? AND batch_id = ? ORDER BY seq"
                ))?;
                let rows = stmt.query_map([&session_id, &batch], read_item)?;
                return rows.collect();
            }
            // `LIMIT ? + 0`: a bare bound LIMIT makes SQLite (built with STAT4) re-prepare the
            // statement on every run.
            let mut stmt = t.prepare_cached(&format!(
                "SELECT {ITEM_COLUMNS} FROM items WHERE session_id = ? AND batch_id IS NULL ORDER BY seq LIMIT ? + 0"
            ))?;
            let mut rows: Vec<Spooled> =
                stmt.query_map(params![session_id, max as i64], read_item)?.collect::<Result<_, _>>()?;
            // One delivery goes to one scope: cut at the first item of another bank or tag set.
            if let Some(first) = rows.first().cloned() {
                let cut = rows
                    .iter()
                    .position(|r| r.bank != first.bank || r.item.tags != first.item.tags)
                    .unwrap_or(rows.len());
                rows.truncate(cut);
            }
            let batch = crate::ids::new_id();
            if let (Some(first), Some(last)) = (rows.first(), rows.last()) {
                // The rows are consecutive in this session's queue: one ranged update marks them.
                t.prepare_cached("UPDATE items SET batch_id = ? WHERE session_id = ? AND seq BETWEEN ? AND ?")?
                    .execute(params![batch, session_id, first.seq, last.seq])?;
            }
            for r in &mut rows {
                r.batch_id = Some(batch.clone());
            }
            Ok(rows)
        })
        .await
    }

    /// Removes a delivered batch, whose items have the sequence numbers `seqs` (a batch is
    /// consecutive in its session's queue; the range keeps a long backlog from being scanned).
    ///
    /// Returns at once: the removal rides on the writer's next transaction instead of paying
    /// for a commit and a sync of its own. Every later spool call sees it done. Should it be
    /// lost (a crash first), the batch is resent under the same batch id, which stores nothing
    /// twice.
    pub async fn delivered(&self, session_id: &str, batch_id: &str, seqs: std::ops::RangeInclusive<i64>) {
        let removal = Removal { session_id: session_id.to_owned(), batch_id: batch_id.to_owned(), seqs };
        let sent = match self.place().await {
            Ok(place) => self.jobs.send(Message::Remove(removal, place)).is_ok(),
            Err(_) => false,
        };
        if !sent {
            tracing::warn!(session_id, "spool writer stopped; batch {batch_id} stays spooled and is resent");
        }
    }

    /// Records a failed attempt; returns the batch's attempt count.
    pub async fn failed(&self, session_id: &str, batch_id: &str, reason: &str) -> Result<u32, SpoolError> {
        let (session_id, batch_id, reason) = (session_id.to_owned(), batch_id.to_owned(), reason.to_owned());
        self.call(move |t| {
            t.execute(
                "UPDATE items SET attempts = attempts + 1, last_error = ? WHERE session_id = ? AND batch_id = ?",
                params![reason, session_id, batch_id],
            )?;
            t.query_row(
                "SELECT coalesce(max(attempts), 0) FROM items WHERE session_id = ? AND batch_id = ?",
                [&session_id, &batch_id],
                |r| r.get(0),
            )
        })
        .await
    }

    /// Moves a batch to the dead letters.
    pub async fn dead_letter(&self, session_id: &str, batch_id: &str, reason: &str) -> Result<(), SpoolError> {
        let (session_id, batch_id, reason) = (session_id.to_owned(), batch_id.to_owned(), reason.to_owned());
        let now = mneme_core::time::rfc3339(std::time::SystemTime::now());
        self.call(move |t| {
            t.execute(
                "INSERT OR IGNORE INTO dead_letters (seq, id, session_id, bank, tags, content, context, kind, document_id, metadata,
                     enqueued_at, batch_id, attempts, last_error, failed_at)
                 SELECT seq, id, session_id, bank, tags, content, context, kind, document_id, metadata,
                     enqueued_at, batch_id, attempts, ?, ? FROM items WHERE session_id = ? AND batch_id = ?",
                params![reason, now, session_id, batch_id],
            )?;
            t.execute("DELETE FROM items WHERE session_id = ? AND batch_id = ?", [&session_id, &batch_id]).map(|_| ())
        })
        .await
    }

    /// Puts every dead letter back in its session's queue (keeping its batch id, so a batch the
    /// server did store after all is not stored twice). Returns the sessions touched and the count.
    pub async fn requeue_dead(&self) -> Result<(Vec<String>, u64), SpoolError> {
        self.call(|t| {
            let n = t.execute(
                "INSERT OR IGNORE INTO items (seq, id, session_id, bank, tags, content, context, kind, document_id, metadata,
                     enqueued_at, batch_id, attempts, last_error)
                 SELECT seq, id, session_id, bank, tags, content, context, kind, document_id, metadata,
                     enqueued_at, batch_id, 0, last_error FROM dead_letters ORDER BY seq",
                [],
            )?;
            let sessions = distinct_sessions(t, "dead_letters")?;
            t.execute("DELETE FROM dead_letters", [])?;
            Ok((sessions, n as u64))
        })
        .await
    }

    /// Sessions with items waiting, and how many each has.
    pub async fn waiting(&self) -> Result<BTreeMap<String, u64>, SpoolError> {
        self.call(|t| {
            let mut stmt = t.prepare("SELECT session_id, count(*) FROM items GROUP BY session_id")?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))?;
            rows.collect()
        })
        .await
    }

    /// Per session: items spooled and dead letters (sessions with neither are left out).
    pub async fn counts_by_session(&self) -> Result<BTreeMap<String, SpoolCounts>, SpoolError> {
        self.call(|t| {
            let mut out: BTreeMap<String, SpoolCounts> = BTreeMap::new();
            for (table, dead) in [("items", false), ("dead_letters", true)] {
                let mut stmt = t.prepare(&format!("SELECT session_id, count(*) FROM {table} GROUP BY session_id"))?;
                let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64)))?;
                for row in rows {
                    let (session, n) = row?;
                    let c = out.entry(session).or_default();
                    if dead {
                        c.dead = n;
                    } else {
                        c.spooled = n;
                    }
                }
            }
            Ok(out)
        })
        .await
    }

    /// Deletes the waiting items (and dead letters) of one session, or of all.
    pub async fn discard(&self, session_id: Option<&str>) -> Result<u64, SpoolError> {
        let session_id = session_id.map(str::to_owned);
        self.call(move |t| {
            let n = match &session_id {
                Some(s) => {
                    t.execute("DELETE FROM dead_letters WHERE session_id = ?", [s])?;
                    t.execute("DELETE FROM items WHERE session_id = ?", [s])?
                }
                None => {
                    t.execute("DELETE FROM dead_letters", [])?;
                    t.execute("DELETE FROM items", [])?
                }
            };
            Ok(n as u64)
        })
        .await
    }

    /// Totals for status.
    pub async fn counts(&self) -> Result<SpoolCounts, SpoolError> {
        self.call(|t| {
            let spooled: i64 = t.query_row("SELECT count(*) FROM items", [], |r| r.get(0))?;
            let dead: i64 = t.query_row("SELECT count(*) FROM dead_letters", [], |r| r.get(0))?;
            Ok(SpoolCounts { spooled: spooled as u64, dead: dead as u64 })
        })
        .await
    }

    /// Stores a notice, keeping the newest `keep`; returns it with its id.
    pub async fn add_notice(&self, mut notice: NoticeRow, keep: usize) -> Result<NoticeRow, SpoolError> {
        self.call(move |t| {
            t.execute(
                "INSERT INTO notices (at, level, source, session_id, message) VALUES (?, ?, ?, ?, ?)",
                params![notice.at, notice.level, notice.source, notice.session_id, notice.message],
            )?;
            notice.id = t.last_insert_rowid();
            t.execute("DELETE FROM notices WHERE id <= ?", [notice.id - keep as i64])?;
            Ok(notice)
        })
        .await
    }

    /// Notices with an id above `after`, oldest first.
    pub async fn notices_after(&self, after: i64, limit: usize) -> Result<Vec<NoticeRow>, SpoolError> {
        self.call(move |t| {
            let mut stmt = t.prepare_cached(
                "SELECT id, at, level, source, session_id, message FROM notices WHERE id > ? ORDER BY id LIMIT ? + 0",
            )?;
            let rows = stmt.query_map(params![after, limit as i64], |r| {
                Ok(NoticeRow {
                    id: r.get(0)?,
                    at: r.get(1)?,
                    level: r.get(2)?,
                    source: r.get(3)?,
                    session_id: r.get(4)?,
                    message: r.get(5)?,
                })
            })?;
            rows.collect()
        })
        .await
    }

    /// The newest notice id (0 when none).
    pub async fn last_notice_id(&self) -> Result<i64, SpoolError> {
        self.call(|t| t.query_row("SELECT coalesce(max(id), 0) FROM notices", [], |r| r.get(0))).await
    }

    /// Saves a session record (JSON owned by the session layer).
    pub async fn save_session(&self, id: &str, record: String) -> Result<(), SpoolError> {
        let id = id.to_owned();
        self.call(move |t| {
            t.execute("INSERT INTO sessions (id, record) VALUES (?, ?) ON CONFLICT(id) DO UPDATE SET record = excluded.record", params![id, record])
                .map(|_| ())
        })
        .await
    }

    /// Forgets a session record.
    pub async fn delete_session(&self, id: &str) -> Result<(), SpoolError> {
        let id = id.to_owned();
        self.call(move |t| t.execute("DELETE FROM sessions WHERE id = ?", [&id]).map(|_| ())).await
    }

    /// Saves (replacing) a record of `kind` under `key`.
    pub async fn save_record(&self, kind: &'static str, key: &str, record: String) -> Result<(), SpoolError> {
        let key = key.to_owned();
        self.call(move |t| {
            t.execute(
                "INSERT INTO records (kind, key, record) VALUES (?, ?, ?) ON CONFLICT(kind, key) DO UPDATE SET record = excluded.record",
                params![kind, key, record],
            )
            .map(|_| ())
        })
        .await
    }

    /// Deletes a record; whether there was one.
    pub async fn delete_record(&self, kind: &'static str, key: &str) -> Result<bool, SpoolError> {
        let key = key.to_owned();
        self.call(move |t| {
            t.execute("DELETE FROM records WHERE kind = ? AND key = ?", params![kind, key]).map(|n| n > 0)
        })
        .await
    }

    /// The record of `kind` under exactly `key`, if any.
    pub async fn record(&self, kind: &'static str, key: &str) -> Result<Option<String>, SpoolError> {
        let key = key.to_owned();
        self.call(move |t| {
            t.prepare_cached("SELECT record FROM records WHERE kind = ? AND key = ?")?
                .query_row(params![kind, key], |r| r.get(0))
                .optional()
        })
        .await
    }

    /// The records of `kind` whose key starts with `prefix`, by key.
    pub async fn records(&self, kind: &'static str, prefix: &str) -> Result<Vec<(String, String)>, SpoolError> {
        let prefix = prefix.to_owned();
        self.call(move |t| {
            let mut stmt = t.prepare_cached(
                "SELECT key, record FROM records WHERE kind = ?1 AND substr(key, 1, length(?2)) = ?2 ORDER BY key",
            )?;
            let rows = stmt.query_map(params![kind, prefix], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect()
        })
        .await
    }

    /// Every saved session record.
    pub async fn sessions(&self) -> Result<Vec<(String, String)>, SpoolError> {
        self.call(|t| {
            let mut stmt = t.prepare("SELECT id, record FROM sessions")?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect()
        })
        .await
    }
}

fn distinct_sessions(t: &Transaction<'_>, table: &str) -> rusqlite::Result<Vec<String>> {
    let mut stmt = t.prepare(&format!("SELECT DISTINCT session_id FROM {table}"))?;
    let rows = stmt.query_map([], |r| r.get(0))?;
    rows.collect()
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("plain data serializes")
}

fn read_item(r: &rusqlite::Row<'_>) -> rusqlite::Result<Spooled> {
    let bad = |i: usize, e: String| rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, e.into());
    let tags: String = r.get(4)?;
    let kind: String = r.get(7)?;
    let metadata: String = r.get(9)?;
    Ok(Spooled {
        seq: r.get(0)?,
        session_id: r.get(2)?,
        bank: r.get(3)?,
        item: MemoryItem {
            id: r.get(1)?,
            content: r.get(5)?,
            context: r.get(6)?,
            timestamp: r.get(10)?,
            metadata: serde_json::from_str(&metadata).map_err(|e| bad(9, e.to_string()))?,
            tags: serde_json::from_str(&tags).map_err(|e| bad(4, e.to_string()))?,
            document_id: r.get(8)?,
            kind: kind.parse::<MemoryType>().map_err(|e| bad(7, e))?,
        },
        batch_id: r.get(11)?,
        attempts: r.get::<_, i64>(12)? as u32,
    })
}

/// A job's statements succeed or fail together without failing the jobs it is grouped with.
fn run_in_savepoint<T>(
    t: &Transaction<'_>,
    f: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<T>,
) -> Result<T, SpoolError> {
    t.prepare_cached("SAVEPOINT job")?.execute([])?;
    match f(t) {
        Ok(v) => {
            t.prepare_cached("RELEASE job")?.execute([])?;
            Ok(v)
        }
        Err(e) => {
            let _ = t.execute_batch("ROLLBACK TO job; RELEASE job");
            Err(e.into())
        }
    }
}

fn writer(mut conn: Connection, rx: mpsc::Receiver<Message>) {
    // Places are given back when a message is done: after its transaction.
    let mut removals: Vec<(Removal, OwnedSemaphorePermit)> = Vec::new();
    // After a transaction could not begin, removals alone are retried less eagerly.
    let mut removal_wait = REMOVAL_WAIT;
    loop {
        let first = if removals.is_empty() {
            rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected)
        } else {
            rx.recv_timeout(removal_wait)
        };
        let mut group = Vec::new();
        let mut closed = false;
        match first {
            Ok(Message::Job(job, place)) => group.push((job, place)),
            Ok(Message::Remove(r, place)) => {
                removals.push((r, place));
                continue; // wait a little for a job to ride on
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {} // the removals go alone
            Err(mpsc::RecvTimeoutError::Disconnected) if removals.is_empty() => return,
            Err(mpsc::RecvTimeoutError::Disconnected) => closed = true, // last removals, then stop
        }
        while group.len() < GROUP_MAX {
            match rx.try_recv() {
                Ok(Message::Job(job, place)) => group.push((job, place)),
                Ok(Message::Remove(r, place)) => removals.push((r, place)),
                Err(_) => break,
            }
        }
        let tx = match begin(&mut conn) {
            Ok(tx) => tx,
            Err(e) => {
                // The writer never gives up: every job hears why, and the next message tries
                // again (a full disk that has room again, a transient I/O error).
                tracing::error!("spool: cannot begin a transaction: {e}");
                for (job, _place) in group {
                    job(Err(e.clone()));
                }
                if closed {
                    return; // nobody sends any more: the removals are resent after a restart
                }
                removal_wait = REMOVAL_RETRY;
                continue; // removals stay and ride on a later transaction
            }
        };
        removal_wait = REMOVAL_WAIT;
        for (r, _place) in removals.drain(..) {
            let removed = run_in_savepoint(&tx, |t| {
                t.prepare_cached("DELETE FROM items WHERE session_id = ? AND seq BETWEEN ? AND ? AND batch_id = ?")?
                    .execute(params![r.session_id, r.seqs.start(), r.seqs.end(), r.batch_id])
            });
            if let Err(e) = removed {
                // The batch stays spooled and is resent under its batch id: nothing stored twice.
                tracing::error!(session = r.session_id, "cannot remove delivered batch {}: {e}", r.batch_id);
            }
        }
        let mut places = Vec::with_capacity(group.len());
        let finishers: Vec<Finish> = group
            .into_iter()
            .filter_map(|(job, place)| {
                places.push(place);
                job(Ok(&tx))
            })
            .collect();
        let commit = tx.commit().map_err(SpoolError::from);
        if let Err(e) = &commit {
            tracing::error!("spool: commit failed: {e}");
            // A failed COMMIT (a full disk) can leave the transaction open: close it, so the
            // next one can begin.
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
        }
        for finish in finishers {
            finish(commit.clone());
        }
        drop(places);
        if closed {
            return;
        }
    }
}

/// Opens the next transaction, first closing one a failure left open.
fn begin(conn: &mut Connection) -> Result<Transaction<'_>, SpoolError> {
    if !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    Ok(conn.transaction()?)
}
