//! The spool's file deleted under the running daemon (a user tidying files, a sync tool, an
//! `rm -rf` of the storage dir): what waits in it is written back to its path at once, and the
//! writer goes on in the file written back.
//!
//! Until then, what the daemon acknowledged lives only in a file no start reads (or, its `-wal`
//! deleted, in a log no checkpoint of the file it belongs to will read): a crash lost it all, and
//! so did the restart the refusal advised when the storage dir itself was gone (review116 #1,
//! #2). Written back through a temporary file renamed into place, so a kill mid-way leaves the
//! path empty or whole, never a half-written database.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use mneme_core::database_file::{beside, OpenedFile, DELETED, LOG_DELETED};
use rusqlite::Connection;

use super::SpoolError;
use crate::config::SpoolSync;

/// The spool's file as the writer has it open: renewed once a deleted one is written back.
pub(super) struct WatchedFile {
    opened: RwLock<Arc<OpenedFile>>,
    /// A restore was asked of the writer and is not done yet (asked once, not at every retain).
    asked: AtomicBool,
    /// Write-backs done since the start.
    written_back: AtomicU64,
    /// The last write-back failed for a full disk: a retain refused meanwhile is told so, with
    /// a 507, not to retry in a moment (review117 #5).
    full: AtomicBool,
}

impl WatchedFile {
    pub(super) fn new(opened: OpenedFile) -> Self {
        Self {
            opened: RwLock::new(Arc::new(opened)),
            asked: AtomicBool::new(false),
            written_back: AtomicU64::new(0),
            full: AtomicBool::new(false),
        }
    }

    /// The file as it is open now.
    pub(super) fn current(&self) -> Arc<OpenedFile> {
        self.opened.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// What became of the file as it is open now, cheaply (see [`OpenedFile::gone_cheaply`]):
    /// on the path of every retain, so read under the lock, not cloned.
    pub(super) fn gone_cheaply(&self) -> Option<&'static str> {
        self.opened.read().unwrap_or_else(|p| p.into_inner()).gone_cheaply()
    }

    /// Whether what became of the file (see [`OpenedFile::gone`]) is undone by a restore, and
    /// the writer was not asked yet: true once, until the restore is done.
    pub(super) fn ask_restore(&self, what: &str) -> bool {
        restorable(what) && !self.asked.swap(true, Ordering::AcqRel)
    }

    /// Whether the file or its log is gone in a way a restore undoes, now (two `stat`s): marked
    /// asked, so that a retain refused meanwhile sends no second request.
    pub(super) fn restore_due(&self) -> bool {
        self.current().gone().is_some_and(|what| restorable(what) && !self.asked.swap(true, Ordering::AcqRel))
    }

    /// Write-backs done since the start.
    pub(super) fn write_backs(&self) -> u64 {
        self.written_back.load(Ordering::Acquire)
    }

    /// Whether the last write-back failed for a full disk.
    pub(super) fn write_back_full(&self) -> bool {
        self.full.load(Ordering::Acquire)
    }

    fn renew(&self, opened: OpenedFile) {
        *self.opened.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(opened);
        self.full.store(false, Ordering::Release);
        self.asked.store(false, Ordering::Release);
    }
}

/// A file deleted, or its log, is the spool's own, and can be written back; a file put in its
/// place is someone's, and one emptied in place has lost its first pages for good.
fn restorable(what: &str) -> bool {
    what == DELETED || what == LOG_DELETED
}

/// Opens the spool's database with the settings its writer uses.
pub(super) fn connect(path: &Path, sync: SpoolSync) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    // Only this daemon's writer thread uses the spool: holding the lock for good spares two
    // fcntl calls a transaction and the shared-memory WAL index (and keeps other processes out).
    conn.pragma_update(None, "locking_mode", "EXCLUSIVE")?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // Emptied by a checkpoint, the log is cut back to this; without a limit it kept the
    // largest size a burst ever gave it.
    conn.pragma_update(None, "journal_size_limit", 16i64 << 20)?;
    conn.pragma_update(None, "synchronous", sync.pragma())?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    // A delivered or replaced row's bytes are zeroed, and so are the pages a long row's
    // overflow frees (FAST left those on the free list with their text: a transcript, which
    // the checkpoint then copied into the file); older log frames keep them until the log
    // is overwritten, or emptied at once after a forget or a clear (`erase_traces`).
    conn.pragma_update(None, "secure_delete", "ON")?;
    Ok(conn)
}

/// What the writer needs to give the spool its file back.
pub(super) struct Restorer {
    pub(super) path: PathBuf,
    pub(super) sync: SpoolSync,
    pub(super) file: Arc<WatchedFile>,
    /// When a failed restore was last logged: tried every 100 ms, it is logged once a minute
    /// (a full disk wrote an error line at every try: review117 #5).
    pub(super) failure_logged: std::sync::Mutex<Option<std::time::Instant>>,
}

impl Restorer {
    /// Writes the spool back to its path if it was deleted (or empties its deleted log into the
    /// file), and opens `conn` on the result. Runs on the writer thread between transactions,
    /// so no job writes while it runs. `Err` when the file is back but could not be opened
    /// again: `conn` must not be used then until [`Self::reconnect`] succeeds. A restore that
    /// fails before it wrote anything is logged, and asked again by the next retain refused.
    pub(super) fn restore(&self, conn: &mut Connection) -> Result<(), SpoolError> {
        let what = self.file.current().gone();
        let written = match what {
            Some(DELETED) if !self.path.exists() => self.write_back(conn),
            // Every commit into the file itself, which is still at its path: the log the
            // connection writes to is one no later open reads.
            Some(LOG_DELETED) => super::writer::erase_log(conn),
            _ => {
                self.file.asked.store(false, Ordering::Release);
                return Ok(());
            }
        };
        let what = what.unwrap_or(DELETED);
        if let Err(e) = written {
            self.file.full.store(e.is_full(), Ordering::Release);
            let mut logged = self.failure_logged.lock().unwrap_or_else(|p| p.into_inner());
            if logged.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(60)) {
                *logged = Some(std::time::Instant::now());
                tracing::error!(
                    "the spool file {} {what}, and cannot be written back yet (tried again every 100 ms): {e}",
                    self.path.display()
                );
            }
            // Asked again by the next retain it refuses.
            self.file.asked.store(false, Ordering::Release);
            return Ok(());
        }
        // Closed before the file is opened again: the old connection's close removes the log at
        // its path, which would otherwise be the new connection's. Emptied above, it holds
        // nothing, and a start that found it beside the file written back would ignore it.
        drop(std::mem::replace(conn, Connection::open_in_memory().expect("an in-memory database opens")));
        self.reconnect(conn)?;
        self.file.written_back.fetch_add(1, Ordering::AcqRel);
        *self.failure_logged.lock().unwrap_or_else(|p| p.into_inner()) = None;
        tracing::warn!(
            "the spool file {} {what} while mneme ran: written back, with what waited in it; retains are accepted again",
            self.path.display()
        );
        Ok(())
    }

    /// Whether a restore is due (see [`WatchedFile::restore_due`]).
    pub(super) fn due(&self) -> bool {
        self.file.restore_due()
    }

    /// Opens `conn` on the file at the path again (after [`Self::restore`] failed to).
    pub(super) fn reconnect(&self, conn: &mut Connection) -> Result<(), SpoolError> {
        *conn = connect(&self.path, self.sync)?;
        self.file.renew(OpenedFile::of(&self.path));
        Ok(())
    }

    /// Copies the open database to its path (its folder made again, private, if it went too):
    /// to a temporary file first (`.restoring`), synced and renamed `.restored` once whole, then
    /// (the log at the path emptied, as it is the deleted file's) renamed into place. A start
    /// after a kill mid-way finds the whole copy and puts it in place, or a copy cut short and
    /// removes it (see [`recover_write_back`]); the log is emptied only once the copy is whole,
    /// so a kill before leaves it for the start to refuse (review117 #3: emptied first, it let a
    /// start after a kill mid-copy make a new, empty spool without a word).
    fn write_back(&self, conn: &Connection) -> Result<(), SpoolError> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let dir = self.path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        match std::fs::symlink_metadata(dir) {
            Err(_) => {
                std::fs::create_dir_all(dir).map_err(io_error)?;
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io_error)?;
            }
            // A folder put in its place that a start would refuse (another user's, or one others
            // may write in) is not written into (review123 #4).
            Ok(m) => {
                if let Some(problem) = crate::files::storage_dir_refusal(dir, &m) {
                    return Err(io_error(std::io::Error::new(
                        std::io::ErrorKind::PermissionDenied,
                        problem.to_string(),
                    )));
                }
            }
        }
        let (temporary, whole) = (beside(&self.path, RESTORING), beside(&self.path, RESTORED));
        let _ = std::fs::remove_file(&temporary);
        // Made private and empty first (VACUUM INTO takes an empty file): the copy is never
        // readable by others, whatever the folder's mode.
        let made = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temporary);
        let copied = made.map_err(io_error).and_then(|_| {
            conn.execute("VACUUM INTO ?1", [temporary.to_string_lossy()])?;
            std::fs::File::open(&temporary).and_then(|f| f.sync_all()).map_err(io_error)?;
            std::fs::rename(&temporary, &whole).map_err(io_error)?;
            sync_dir(dir)?;
            // Beside the copy put in place, the deleted file's log must hold nothing.
            super::writer::erase_log(conn)?;
            std::fs::rename(&whole, &self.path).map_err(io_error)?;
            sync_dir(dir)
        });
        if copied.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        copied
    }
}

/// At the writer's end, a spool file still deleted (its restore failed) is written back from the
/// open connection: what waited in it would be in a file no start reads (review106 #1). A file
/// put in its place is left alone: it is someone's.
pub(super) fn written_back_if_deleted(conn: &mut Connection, restorer: &Restorer) {
    let opened = restorer.file.current();
    if opened.gone() != Some(DELETED) || restorer.path.exists() {
        return;
    }
    let waiting: i64 = conn.query_row("SELECT count(*) FROM items", [], |r| r.get(0)).unwrap_or(-1);
    match restorer.write_back(conn) {
        Ok(()) => tracing::warn!(
            "the spool file {} was deleted while mneme ran: written back as mneme stops, with the {waiting} retains that wait in it",
            restorer.path.display()
        ),
        Err(e) => tracing::error!(
            "the spool file {} was deleted while mneme ran, and cannot be written back ({e}): the {waiting} retains that wait in it are lost",
            restorer.path.display()
        ),
    }
}

/// The suffixes of a write-back's copy: being written, and whole.
const RESTORING: &str = ".restoring";
const RESTORED: &str = ".restored";

fn sync_dir(dir: &Path) -> Result<(), SpoolError> {
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io_error)
}

/// At a start, what a write-back killed mid-way left (see [`Restorer::write_back`]): a whole copy
/// with no spool at the path is put in place (the log beside it was the deleted file's, whose
/// frames the copy holds: removed); a copy cut short is removed, said at the error level. The
/// spool at the path is left as it is.
pub(super) fn recover_write_back(path: &Path) {
    let (temporary, whole) = (beside(path, RESTORING), beside(path, RESTORED));
    if whole.exists() && !path.exists() {
        let log = mneme_core::database_file::log_of(path);
        let put = std::fs::remove_file(&log)
            .or_else(|e| if e.kind() == std::io::ErrorKind::NotFound { Ok(()) } else { Err(e) })
            .and_then(|()| std::fs::rename(&whole, path));
        match put {
            Ok(()) => tracing::warn!(
                "the spool file {} was written back whole as a killed daemon left it, and is put in place",
                path.display()
            ),
            Err(e) => tracing::error!("cannot put the spool written back ({}) in place: {e}", whole.display()),
        }
    }
    if temporary.exists() {
        let _ = std::fs::remove_file(&temporary);
        let _ = std::fs::remove_file(beside(&temporary, "-journal"));
        tracing::error!(
            "a copy of the spool file {} cut short by a kill while it was written back ({}) is removed: what waited in the deleted file and is not in its log is lost",
            path.display(),
            temporary.display()
        );
    }
}

fn io_error(e: std::io::Error) -> SpoolError {
    let code = match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => rusqlite::ffi::SQLITE_FULL,
        _ => rusqlite::ffi::SQLITE_IOERR,
    };
    SpoolError::from(rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), Some(e.to_string())))
}
