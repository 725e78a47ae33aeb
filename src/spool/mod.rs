//! The durable spool: one SQLite database (WAL, `synchronous = FULL`) holding queued items, dead
//! letters, notices and sessions.
//!
//! All access goes through one writer thread that runs jobs in order and commits whatever jobs
//! arrived together in one transaction (group commit): a retain is answered only after its
//! transaction is fsynced, yet concurrent retains share one fsync.
//!
//! - [`items`]: the queue's rows: appending, batching for delivery, failures, dead letters, counts.
//! - [`notices`]: the notices users see (the newest are kept).
//! - [`records`]: what other layers keep here: sessions, the Hindsight API's records.
//! - `writer`: the writer thread and its group commit; `schema`: the tables and their migrations.

mod items;
mod notices;
mod records;
mod restore;
mod schema;
#[cfg(test)]
mod tests;
mod writer;

use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;

use rusqlite::{Connection, Transaction};
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

pub use items::{DeadLettered, NextBatch, OnceRecord, Spooled};
pub use notices::NoticeRow;
use schema::SCHEMA;
use writer::{run_in_savepoint, writer, Finish, Job, Message};

/// Jobs committed together at most.
const GROUP_MAX: usize = 512;
/// Jobs (and delivered-batch removals) waiting for the writer at most: callers beyond this wait
/// for a place (backpressure) instead of growing the writer's queue without bound.
const MAX_WAITING: usize = 4096;

/// A spool failure. Cloned because one commit answers every job that shared it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SpoolError {
    /// The disk (or the file system's quota) is full: nothing was written.
    #[error("the disk holding the spool is full ({0})")]
    Full(#[source] Arc<rusqlite::Error>),
    /// SQLite or the file system failed.
    #[error("spool: {0}")]
    Sql(#[source] Arc<rusqlite::Error>),
    /// The file was written by a newer mneme.
    #[error("spool: schema version {found} was written by a newer mneme (this one knows {known})")]
    NewerSchema {
        /// The file's schema version.
        found: i64,
        /// The newest this mneme knows.
        known: usize,
    },
    /// SQLite's check finds the file damaged.
    #[error("spool: SQLite finds it damaged: {0}")]
    Damaged(String),
    /// The writer thread could not be started.
    #[error("spool: cannot start the spool's writer thread: {0}")]
    Thread(#[source] Arc<std::io::Error>),
    /// The writer thread is gone (the daemon is stopping).
    #[error("spool: the writer thread stopped")]
    Stopped,
    /// The file is there but empty: truncated since mneme wrote it.
    #[error("{}", mneme_core::database_file::EMPTIED)]
    Emptied,
    /// The file's header is not an SQLite database's: overwritten or replaced.
    #[error("spool: {0}")]
    Overwritten(String),
    /// The file was deleted or replaced while the daemon had it open.
    #[error("the spool file {} {what} while mneme had it open: {}", path.display(), gone_advice(what, *full))]
    Gone {
        /// The spool's path.
        path: std::path::PathBuf,
        /// "was deleted", "was replaced by another file", "was emptied (truncated to 0 bytes)".
        what: &'static str,
        /// Its write-back failed for a full disk (the last try).
        full: bool,
    },
}

impl SpoolError {
    /// Whether the disk is full.
    pub fn is_full(&self) -> bool {
        matches!(self, SpoolError::Full(_) | SpoolError::Gone { full: true, .. })
    }

    /// Whether the file could not be written or read for a reason of the disk or the file's
    /// mode (an I/O error, a read-only file or folder), not of what was asked.
    pub fn is_io(&self) -> bool {
        use rusqlite::ErrorCode as C;
        let SpoolError::Sql(e) = self else { return false };
        matches!(
            e.sqlite_error_code(),
            Some(
                C::SystemIoFailure
                    | C::ReadOnly
                    | C::CannotOpen
                    | C::PermissionDenied
                    | C::DatabaseCorrupt
                    | C::NotADatabase
            )
        )
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

/// Queue sizes for status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SpoolCounts {
    /// Items waiting.
    pub spooled: u64,
    /// Dead letters.
    pub dead: u64,
}

/// How the writer's group commit is doing, for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommitCounts {
    /// Transactions committed (each one fsync with `queue.sync = "full"`).
    pub commits: u64,
    /// Jobs those transactions carried (an accepted retain is one job).
    pub jobs: u64,
}

/// The writer thread's side of [`CommitCounts`].
#[derive(Default)]
pub(super) struct CommitCounters {
    commits: AtomicU64,
    jobs: AtomicU64,
}

impl CommitCounters {
    pub(super) fn committed(&self, jobs: usize) {
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.jobs.fetch_add(jobs as u64, Ordering::Relaxed);
    }
}

/// Handle to the spool's writer thread. Cheap to clone.
#[derive(Clone)]
pub struct Spool {
    jobs: mpsc::Sender<Message>,
    /// Places for messages waiting for the writer (see [`MAX_WAITING`]).
    places: Arc<Semaphore>,
    /// The next item sequence number; only the writer thread advances it, in commit order.
    next_seq: Arc<AtomicI64>,
    /// Updated by the writer after each commit.
    commit_counters: Arc<CommitCounters>,
    /// The file as it is open, to tell it was deleted or replaced under the daemon.
    file: Arc<restore::WatchedFile>,
}

/// Refuses a spool file that SQLite must not be given: not a regular file (a FIFO's open
/// waits for a writer), emptied, or its header overwritten (opening either may delete the log
/// that holds its last commits).
fn unusable(path: &Path) -> Result<(), SpoolError> {
    use mneme_core::database_file::{damaged_header, not_a_file, was_emptied, NOT_A_FILE};
    Spool::orphaned_log(path)?;
    if not_a_file(path) {
        return Err(SpoolError::Overwritten(NOT_A_FILE.to_owned()));
    }
    if was_emptied(path) {
        return Err(SpoolError::Emptied);
    }
    damaged_header(path).map_or(Ok(()), |why| Err(SpoolError::Overwritten(why)))
}

/// What mneme does, and the user may do, about a spool file gone under the daemon (see
/// [`SpoolError::Gone`]).
fn gone_advice(what: &str, full: bool) -> &'static str {
    match what {
        mneme_core::database_file::DELETED | mneme_core::database_file::LOG_DELETED if full => {
            "mneme cannot write it back, with what it acknowledged before, for the disk is full: free some space (it is written back, and retains accepted, as soon as there is room)"
        }
        mneme_core::database_file::DELETED | mneme_core::database_file::LOG_DELETED => {
            "mneme writes it back to its path, with what it acknowledged before: retry in a moment (restart mneme if this goes on)"
        }
        _ => "restart mneme (it reads the file now at that path: what waited in the one it had open may be lost)",
    }
}

impl Spool {
    /// Opens (creating) the spool database, fsyncing every commit, and starts its writer thread.
    pub fn open(path: &Path) -> Result<Spool, SpoolError> {
        Self::open_with(path, crate::config::SpoolSync::Full)
    }

    /// Opens the spool with the given durability of a commit.
    pub fn open_with(path: &Path, sync: crate::config::SpoolSync) -> Result<Spool, SpoolError> {
        restore::recover_write_back(path);
        unusable(path)?;
        // Removed again if this open fails before SQLite wrote to it (review112 #4).
        let creating = mneme_core::database_file::Creating::new(path);
        let mut conn = restore::connect(path, sync)?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version as usize > SCHEMA.len() {
            return Err(SpoolError::NewerSchema { found: version, known: SCHEMA.len() });
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
        creating.done();
        // Unbounded only in type: every message holds one of `places` until it is done.
        let (jobs, rx) = mpsc::channel::<Message>();
        let commit_counters = Arc::new(CommitCounters::default());
        let counters = commit_counters.clone();
        let file = Arc::new(restore::WatchedFile::new(mneme_core::database_file::OpenedFile::of(path)));
        let restorer =
            restore::Restorer { path: path.to_owned(), sync, file: file.clone(), failure_logged: Default::default() };
        thread::Builder::new()
            .name("mneme-spool".into())
            .spawn(move || {
                let mut conn = conn;
                let asked = writer(&mut conn, rx, &counters, &restorer);
                restore::written_back_if_deleted(&mut conn, &restorer);
                drop(conn);
                // Told once the connection is closed (its close checkpoints the log).
                if let Some(asked) = asked {
                    let _ = asked.send(());
                }
            })
            .map_err(|e| SpoolError::Thread(Arc::new(e)))?;
        Ok(Spool {
            jobs,
            places: Arc::new(Semaphore::new(MAX_WAITING)),
            next_seq: Arc::new(AtomicI64::new(max_seq + 1)),
            commit_counters,
            file,
        })
    }

    /// `Err` when the spool's file was deleted or replaced under the daemon: what it would
    /// acknowledge now is written to a file no later start reads (a retain is refused instead).
    /// A deleted one is written back by the writer, asked here (see `restore`): refused until it is.
    pub fn still_there(&self) -> Result<(), SpoolError> {
        match self.file.gone_cheaply() {
            Some(what) => {
                if self.file.ask_restore(what) {
                    let _ = self.jobs.send(Message::Restore);
                }
                Err(SpoolError::Gone { path: self.path(), what, full: self.file.write_back_full() })
            }
            None => Ok(()),
        }
    }

    /// `Err` when a log is at the spool's path without its database: the database was deleted
    /// under a daemon that then stopped before it could write it back (a crash), and SQLite,
    /// given the path, would make a new database and drop the log with the acknowledged
    /// retains it holds.
    pub fn orphaned_log(path: &Path) -> Result<(), SpoolError> {
        let log = mneme_core::database_file::log_of(path);
        if path.exists() || !std::fs::metadata(&log).is_ok_and(|m| m.len() > 0) {
            return Ok(());
        }
        Err(SpoolError::Overwritten(format!(
            "its write-ahead log {} is there without the database it belongs to (deleted while mneme ran, which then stopped before it could write it back): SQLite would drop the log, and the retains in it",
            log.display()
        )))
    }

    /// How many times the spool's file (or its log) was written back after a deletion since the
    /// start.
    pub fn write_backs(&self) -> u64 {
        self.file.write_backs()
    }

    /// The spool's file.
    pub fn path(&self) -> std::path::PathBuf {
        self.file.current().path().to_owned()
    }

    /// Checks a spool file that no daemon has open: that it is a spool database this mneme can
    /// read and that SQLite finds it sound. Returns its counts.
    pub fn check(path: &Path) -> Result<SpoolCounts, SpoolError> {
        unusable(path)?;
        use rusqlite::OpenFlags;
        let conn =
            Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version as usize > SCHEMA.len() {
            return Err(SpoolError::NewerSchema { found: version, known: SCHEMA.len() });
        }
        let verdict: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
        if verdict != "ok" {
            return Err(SpoolError::Damaged(verdict));
        }
        if version == 0 {
            return Ok(SpoolCounts::default());
        }
        let spooled: i64 = conn.query_row("SELECT count(*) FROM items", [], |r| r.get(0))?;
        let dead: i64 = conn.query_row("SELECT count(*) FROM dead_letters", [], |r| r.get(0))?;
        Ok(SpoolCounts { spooled: spooled as u64, dead: dead as u64 })
    }

    /// Transactions committed so far and the jobs they carried.
    pub fn commit_counts(&self) -> CommitCounts {
        CommitCounts {
            commits: self.commit_counters.commits.load(Ordering::Relaxed),
            jobs: self.commit_counters.jobs.load(Ordering::Relaxed),
        }
    }

    /// Whether no job or removal is waiting for the writer or running: every place is free.
    /// (The queue's tests wait for this before they move their clock.)
    pub fn idle(&self) -> bool {
        self.places.available_permits() == MAX_WAITING
    }

    async fn place(&self) -> Result<OwnedSemaphorePermit, SpoolError> {
        self.places.clone().acquire_owned().await.map_err(|_| SpoolError::Stopped)
    }

    /// Runs `f` in the writer's next transaction and answers once that transaction is committed.
    /// Its statements succeed or fail together (in a savepoint) without failing the jobs it
    /// shares the transaction with.
    pub async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, SpoolError> {
        self.submit(move |t| run_in_savepoint(t, f)).await
    }

    /// [`Spool::call`] for a job of one statement, without the savepoint: a statement succeeds
    /// or fails whole by itself (SQLite undoes a failed statement's changes), and the savepoint
    /// would cost two more statements on the path of every retain.
    async fn call_one_statement<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, SpoolError> {
        self.submit(move |t| f(t).map_err(SpoolError::from)).await
    }

    /// Runs `f` on the spool after the writer's next transaction, outside any transaction: it
    /// sees what was committed before it was asked, and no failed commit of others fails it.
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, SpoolError> {
        let (tx, rx) = oneshot::channel();
        let read: writer::Read = Box::new(move |conn| {
            let _ = tx.send(conn.and_then(|c| f(c).map_err(SpoolError::from)));
        });
        let place = self.place().await?;
        self.jobs.send(Message::Read(read, place)).map_err(|_| SpoolError::Stopped)?;
        rx.await.map_err(|_| SpoolError::Stopped)?
    }

    /// Commits what was sent before, closes the connection and ends the writer thread, waiting
    /// for it at most `wait`: the daemon calls it as it stops. The thread used to end on its own
    /// once the last handle went, and the process could end first, its close's checkpoint cut
    /// short: the log repairs that at the next start, unless it was lost (deleted under the
    /// daemon), and then the spool was malformed. Used after, the spool refuses.
    pub async fn close(&self, wait: std::time::Duration) {
        let (asked, closed) = std::sync::mpsc::channel();
        if self.jobs.send(writer::Message::Close(asked)).is_ok() {
            let _ = tokio::task::spawn_blocking(move || closed.recv_timeout(wait)).await;
        }
    }

    /// Empties the spool's log into its file (`wal_checkpoint(TRUNCATE)`): after a forget or a
    /// clear, so the text of rows delivered or discarded before is not left readable in old log
    /// frames (the rows themselves, and the pages they freed, are zeroed: `secure_delete`).
    pub async fn erase_traces(&self) -> Result<(), SpoolError> {
        let (tx, rx) = oneshot::channel();
        let done: Finish = Box::new(move |r| {
            let _ = tx.send(r);
        });
        let place = self.place().await?;
        self.jobs.send(Message::Checkpoint(done, place)).map_err(|_| SpoolError::Stopped)?;
        rx.await.map_err(|_| SpoolError::Stopped)?
    }

    async fn submit<T: Send + 'static>(
        &self,
        run: impl FnOnce(&Transaction<'_>) -> Result<T, SpoolError> + Send + 'static,
    ) -> Result<T, SpoolError> {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |t| match t {
            Ok(t) => {
                let result = run(t);
                Some(Box::new(move |commit: Result<(), SpoolError>| {
                    // The job's own failure first: a full disk it hit is said as such (507), not
                    // as the failed commit that followed from it.
                    let _ = tx.send(result.and_then(|v| commit.map(|()| v)));
                }) as Finish)
            }
            Err(e) => {
                let _ = tx.send(Err(e));
                None
            }
        });
        let place = self.place().await?;
        self.jobs.send(Message::Job(job, place)).map_err(|_| SpoolError::Stopped)?;
        rx.await.map_err(|_| SpoolError::Stopped)?
    }
}
