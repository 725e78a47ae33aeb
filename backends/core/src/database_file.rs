//! A database file before SQLite opens it, and while it is open.
//!
//! Before: its kind, size and header are looked at before SQLite is given the file, because
//! opening it may destroy what is left (SQLite deletes the write-ahead log beside a database of
//! no pages, and a refused open of a damaged one closed with a checkpoint that did the same).
//! While open: [`OpenedFile`] tells the file or its log was deleted or replaced under the daemon.

use std::io::Read;
use std::path::Path;

/// Whether the database file at `path` was emptied since mneme wrote it: it is there with no
/// byte in it. SQLite reads an empty file as a new, empty database (and deletes its log), so a
/// spool or a store truncated to 0 bytes opened as a fresh one, and what it held was gone
/// without a word. mneme never leaves one empty: its first open sets WAL mode, which writes the
/// file's header before any write reaches the log. (A missing file is a new one, not an
/// emptied one.)
pub fn was_emptied(path: &Path) -> bool {
    std::fs::metadata(path).ok().filter(|m| m.is_file()).is_some_and(|m| m.len() == 0)
}

/// A database file an open is about to create: if the open fails before SQLite wrote its
/// header (a full disk: the file is made, its first page is not), the empty file, and the
/// shared-memory index and empty log beside it, are removed as the guard drops, unless
/// [`Creating::done`]. Left, the empty file was taken for one emptied under mneme at every
/// later start (see [`was_emptied`]): once the disk had room again, the start was refused,
/// saying what it held was gone (review112 #4).
#[must_use = "drop it after the open, or call done"]
pub struct Creating {
    path: Option<std::path::PathBuf>,
}

impl Creating {
    /// Before the open of `path`: armed only when nothing is there yet.
    pub fn new(path: &Path) -> Self {
        let absent = std::fs::symlink_metadata(path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound);
        Creating { path: absent.then(|| path.to_owned()) }
    }

    /// The open succeeded: the file stays whatever it holds.
    pub fn done(mut self) {
        self.path = None;
    }
}

impl Drop for Creating {
    fn drop(&mut self) {
        let Some(path) = self.path.take() else { return };
        if !was_emptied(&path) {
            return;
        }
        let beside = |suffix: &str| {
            let mut p = path.clone().into_os_string();
            p.push(suffix);
            std::path::PathBuf::from(p)
        };
        let _ = std::fs::remove_file(beside("-shm"));
        if was_emptied(&beside("-wal")) {
            let _ = std::fs::remove_file(beside("-wal"));
        }
        let _ = std::fs::remove_file(&path);
    }
}

/// Whether something other than a regular file is at `path` (a FIFO, a device, a folder):
/// SQLite's open of a FIFO waited for a writer for ever, and the daemon's start with it. Its
/// metadata alone (following links).
pub fn not_a_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file())
}

/// Why a database file [`not_a_file`] is not opened.
pub const NOT_A_FILE: &str = "it is not a regular file (a FIFO, a device or a folder): move it aside";

/// Why a database file [`was_emptied`] is not opened.
pub const EMPTIED: &str = "the file is empty (0 bytes), yet mneme wrote it: it was truncated, and what it held is gone from it (opened, it would be taken for a new, empty one, and SQLite would delete the write-ahead log beside it, `-wal`, which may hold part of it: move both aside together)";

/// What is wrong with the header of the database file at `path`, if it has one that is not an
/// SQLite database's (overwritten, or another kind of file): its magic string and the fixed
/// fields of the format (<https://www.sqlite.org/fileformat.html>, 1.3). `None` for a missing,
/// empty or unreadable file, or one that is not a regular file: those are told otherwise.
///
/// It reads through a descriptor of its own: call it only where the process has no SQLite
/// connection to the file open. Closing any descriptor of a file gives up every POSIX lock the
/// process holds on it, SQLite's included, and another process's connection then took itself
/// for the last one and deleted the log the daemon was writing to.
pub fn damaged_header(path: &Path) -> Option<String> {
    // Not opened unless a regular file: a FIFO's open waits for a writer ([`not_a_file`]).
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return None;
    }
    let mut file = std::fs::File::open(path).ok()?;
    let mut header = Vec::with_capacity(100);
    file.by_ref().take(100).read_to_end(&mut header).ok()?;
    if header.is_empty() {
        return None;
    }
    let why = if header.len() < 100 {
        format!("it is not a database: {} bytes long, shorter than a database's 100-byte header", header.len())
    } else if &header[..16] != b"SQLite format 3\0" {
        "it is not a database: its first bytes are not an SQLite database's header".to_owned()
    } else {
        let page_size = u32::from(u16::from_be_bytes([header[16], header[17]]));
        let page_size = if page_size == 1 { 65536 } else { page_size };
        let fixed = header[21] == 64 && header[22] == 32 && header[23] == 32;
        if !(512..=65536).contains(&page_size) || !page_size.is_power_of_two() || !fixed {
            "it is not a database: its header's page size or fixed fields are not SQLite's".to_owned()
        } else {
            return None;
        }
    };
    Some(format!(
        "{why}: it was overwritten or replaced (not opened, so that the write-ahead log beside it, `-wal`, is kept: move both aside together)"
    ))
}

/// A database file's path and identity (device and inode) when it was opened, and its
/// write-ahead log's, to tell either was deleted or replaced under the daemon: what is written
/// then goes to a file no later start reads (a log deleted under SQLite is written to all the
/// same, and gone at the next start with every commit it held).
#[derive(Debug)]
pub struct OpenedFile {
    path: std::path::PathBuf,
    identity: Option<(u64, u64)>,
    /// Beside the file the path leads to: SQLite keeps the log of a database reached through a
    /// symbolic link beside its target.
    log: std::path::PathBuf,
    log_identity: Option<(u64, u64)>,
    /// When the log was last looked at, in milliseconds since `opened_at` (see [`Self::gone`]).
    log_looked_at: std::sync::atomic::AtomicU64,
    /// What was found of the log, for good once found: 0 nothing, 1 deleted, 2 replaced.
    log_found: std::sync::atomic::AtomicU8,
    opened_at: std::time::Instant,
    /// Whether the file was seen holding something: one seen so and found empty since was
    /// emptied under the daemon (a new database in WAL mode is empty until its first checkpoint).
    seen_holding: std::sync::atomic::AtomicBool,
}

/// What [`OpenedFile::gone`] says of a file deleted under the daemon.
pub const DELETED: &str = "was deleted";

/// What [`OpenedFile::gone`] says of a file whose log was deleted under the daemon.
pub const LOG_DELETED: &str = "lost its write-ahead log (its -wal file was deleted)";

/// How often, at most, [`OpenedFile::gone_cheaply`] looks at the log: a `stat` of it on every retain
/// cost a quarter of the retain path's CPU (109 to 135 µs a retain, measured), and a log
/// deleted by hand is noticed within this all the same.
const LOG_LOOK_EVERY_MS: u64 = 100;

impl OpenedFile {
    /// The file at `path` and its log as they are now (just opened: a log SQLite has not made
    /// yet is not looked at).
    pub fn of(path: &Path) -> OpenedFile {
        let log = log_of(&std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned()));
        OpenedFile {
            path: path.to_owned(),
            identity: identity(path),
            log_identity: identity(&log),
            log,
            log_looked_at: std::sync::atomic::AtomicU64::new(0),
            log_found: std::sync::atomic::AtomicU8::new(0),
            opened_at: std::time::Instant::now(),
            seen_holding: std::sync::atomic::AtomicBool::new(std::fs::metadata(path).is_ok_and(|m| m.len() > 0)),
        }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What became of the file or its log since it was opened ("was deleted", "lost its
    /// write-ahead log …"), when either is no longer there under its path. A `stat` each.
    pub fn gone(&self) -> Option<&'static str> {
        self.file_gone().or_else(|| self.log_gone(true))
    }

    /// [`Self::gone`] for a path as hot as every retain: the log is looked at every
    /// [`LOG_LOOK_EVERY_MS`] at most (a `stat` of it on every retain cost a quarter of the
    /// retain's CPU). Retains in the moments after a log is deleted by hand may still go into it.
    pub fn gone_cheaply(&self) -> Option<&'static str> {
        self.file_gone().or_else(|| self.log_gone(false))
    }

    fn file_gone(&self) -> Option<&'static str> {
        use std::os::unix::fs::MetadataExt;
        use std::sync::atomic::Ordering::Relaxed;
        let opened = self.identity?;
        match std::fs::metadata(&self.path) {
            // Its folder gone, or a file put in the folder's place (review123 #5: taken for
            // healthy, retains were acknowledged into the deleted file, and a kill lost them).
            Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => {
                Some(DELETED)
            }
            Ok(m) if (m.dev(), m.ino()) != opened => Some("was replaced by another file"),
            // Truncated in place (review106 #5): what is written now lands after a hole where
            // the database's first pages were, and no later start can read it.
            Ok(m) if m.len() == 0 && self.seen_holding.load(Relaxed) => Some("was emptied (truncated to 0 bytes)"),
            Ok(m) => {
                if m.len() > 0 && !self.seen_holding.load(Relaxed) {
                    self.seen_holding.store(true, Relaxed);
                }
                None
            }
            Err(_) => None,
        }
    }

    /// What was found of the log: looked at now when `always`, else every
    /// [`LOG_LOOK_EVERY_MS`] at most; once found, for good.
    fn log_gone(&self, always: bool) -> Option<&'static str> {
        use std::sync::atomic::Ordering::Relaxed;
        let now = self.opened_at.elapsed().as_millis() as u64;
        let last = self.log_looked_at.load(Relaxed);
        let due = always || last == 0 || now.saturating_sub(last) >= LOG_LOOK_EVERY_MS;
        if self.log_found.load(Relaxed) == 0 && due {
            self.log_looked_at.store(now.max(1), Relaxed);
            match changed(self.log_identity, &self.log) {
                Some(true) => self.log_found.store(1, Relaxed),
                Some(false) => self.log_found.store(2, Relaxed),
                None => {}
            }
        }
        match self.log_found.load(Relaxed) {
            1 => Some(LOG_DELETED),
            2 => Some("had its write-ahead log (its -wal file) replaced"),
            _ => None,
        }
    }
}

/// Whether the file at `path` changed since it had the identity `opened`: `Some(true)` deleted,
/// `Some(false)` replaced. One `stat`.
fn changed(opened: Option<(u64, u64)>, path: &Path) -> Option<bool> {
    use std::os::unix::fs::MetadataExt;
    let opened = opened?;
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(true),
        Ok(m) if (m.dev(), m.ino()) != opened => Some(false),
        _ => None,
    }
}

/// The device and inode of the file at `path`, if there is one.
fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The write-ahead log SQLite keeps beside the database at `path`.
pub fn log_of(path: &Path) -> std::path::PathBuf {
    beside(path, "-wal")
}

/// `path` with `suffix` added to its name: a database's log, journal or copy beside it.
pub fn beside(path: &Path, suffix: &str) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    std::path::PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_seen_holding_pages_and_truncated_since_was_emptied() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("spool.db");
        std::fs::write(&db, b"pages").unwrap();
        let opened = OpenedFile::of(&db);
        assert_eq!(opened.gone(), None);
        std::fs::OpenOptions::new().write(true).open(&db).unwrap().set_len(0).unwrap();
        assert_eq!(opened.gone(), Some("was emptied (truncated to 0 bytes)"));
        // Empty when opened (a new database in WAL mode): empty is fine until it is seen holding
        // something.
        let new = dir.path().join("new.db");
        std::fs::write(&new, b"").unwrap();
        let opened = OpenedFile::of(&new);
        assert_eq!(opened.gone_cheaply(), None);
        std::fs::write(&new, b"checkpointed").unwrap();
        assert_eq!(opened.gone_cheaply(), None);
        std::fs::OpenOptions::new().write(true).open(&new).unwrap().set_len(0).unwrap();
        assert_eq!(opened.gone_cheaply(), Some("was emptied (truncated to 0 bytes)"));
    }

    #[test]
    fn a_file_an_open_created_and_left_empty_is_removed_unless_done() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("x.db");
        {
            let _creating = Creating::new(&db);
            std::fs::write(&db, b"").unwrap();
            std::fs::write(dir.path().join("x.db-shm"), b"index").unwrap();
            std::fs::write(dir.path().join("x.db-wal"), b"").unwrap();
        }
        assert!(!db.exists() && !dir.path().join("x.db-shm").exists() && !dir.path().join("x.db-wal").exists());
        // Done, or a file that was there before, or one written: left as it is.
        let creating = Creating::new(&db);
        std::fs::write(&db, b"").unwrap();
        creating.done();
        assert!(db.exists());
        drop(Creating::new(&db));
        assert!(db.exists(), "there before the open");
        std::fs::remove_file(&db).unwrap();
        {
            let _creating = Creating::new(&db);
            std::fs::write(&db, b"SQLite format 3\0").unwrap();
        }
        assert!(db.exists(), "its header written");
    }

    #[test]
    fn a_file_left_empty_was_emptied_whatever_its_log_holds() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("spool.db");
        assert!(!was_emptied(&db), "a new file");
        std::fs::write(&db, b"").unwrap();
        assert!(was_emptied(&db));
        // SQLite deletes the log of a database of no pages when it opens it: refused all the same.
        std::fs::write(dir.path().join("spool.db-wal"), b"frames").unwrap();
        assert!(was_emptied(&db));
        std::fs::write(&db, b"SQLite format 3\0").unwrap();
        assert!(!was_emptied(&db));
        assert!(!was_emptied(dir.path()), "a folder is another problem");
    }

    #[test]
    fn a_header_that_is_not_sqlites_is_told() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("m.db");
        assert_eq!(damaged_header(&db), None, "a new file");
        std::fs::write(&db, b"").unwrap();
        assert_eq!(damaged_header(&db), None, "an emptied one is told otherwise");
        // A WAL database's header: magic, page size 4096, WAL versions, no reserve, the fixed
        // payload fractions.
        let mut sound = b"SQLite format 3\0".to_vec();
        sound.extend_from_slice(&[0x10, 0x00, 2, 2, 0, 64, 32, 32]);
        sound.resize(4096, 0);
        std::fs::write(&db, &sound).unwrap();
        assert_eq!(damaged_header(&db), None, "a sound database");
        let mut overwritten = sound.clone();
        overwritten[..16].copy_from_slice(b"garbage garbage!");
        std::fs::write(&db, &overwritten).unwrap();
        assert!(damaged_header(&db).unwrap().contains("first bytes"));
        let mut fields = sound.clone();
        fields[21] = 0;
        std::fs::write(&db, &fields).unwrap();
        assert!(damaged_header(&db).unwrap().contains("fixed fields"));
        std::fs::write(&db, &sound[..50]).unwrap();
        assert!(damaged_header(&db).unwrap().contains("50 bytes"));
        assert_eq!(damaged_header(dir.path()), None, "a folder is another problem");
    }

    #[test]
    fn a_file_deleted_or_replaced_since_its_open_is_told() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("m.db");
        std::fs::write(&db, b"one").unwrap();
        let opened = OpenedFile::of(&db);
        assert_eq!(opened.gone(), None);
        std::fs::write(&db, b"edited in place").unwrap();
        assert_eq!(opened.gone(), None, "the same file");
        std::fs::write(dir.path().join("other"), b"two").unwrap();
        std::fs::rename(dir.path().join("other"), &db).unwrap();
        assert_eq!(opened.gone(), Some("was replaced by another file"));
        std::fs::remove_file(&db).unwrap();
        assert_eq!(opened.gone(), Some("was deleted"));
        assert_eq!(OpenedFile::of(&db).gone(), None, "one missing at its open is a new one");
        // Its log.
        std::fs::write(&db, b"one").unwrap();
        std::fs::write(dir.path().join("m.db-wal"), b"frames").unwrap();
        let opened = OpenedFile::of(&db);
        std::fs::write(dir.path().join("m.db-wal"), b"").unwrap();
        assert_eq!(opened.gone(), None, "a log emptied in place (a checkpoint) is the same");
        assert_eq!(opened.gone_cheaply(), None);
        std::fs::remove_file(dir.path().join("m.db-wal")).unwrap();
        assert_eq!(opened.gone_cheaply(), None, "looked at a moment ago");
        std::thread::sleep(std::time::Duration::from_millis(LOG_LOOK_EVERY_MS + 10));
        assert!(opened.gone_cheaply().unwrap().contains("write-ahead log"));
        assert!(opened.gone().unwrap().contains("write-ahead log"), "found for good");
        // Reached through a link: the log beside its target, where SQLite keeps it.
        let real = dir.path().join("elsewhere");
        std::fs::create_dir(&real).unwrap();
        std::fs::write(real.join("r.db"), b"one").unwrap();
        std::fs::write(real.join("r.db-wal"), b"frames").unwrap();
        std::os::unix::fs::symlink(real.join("r.db"), dir.path().join("link.db")).unwrap();
        let opened = OpenedFile::of(&dir.path().join("link.db"));
        std::fs::remove_file(real.join("r.db-wal")).unwrap();
        assert!(opened.gone().unwrap().contains("write-ahead log"));
    }
}
