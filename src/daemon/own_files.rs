//! The daemon's own files beside the spool — its pidfile (the single-instance lock, with the
//! address clients read) and its token — kept in place while it runs.
//!
//! Deleted under a running daemon (an `rm -rf` of the storage dir), the spool is written back
//! by its writer at once; without the other two the CLI and the hooks could not find the daemon
//! nor authenticate to it until a restart, and a second `mneme serve` would take a lock on a new
//! pidfile that nobody held. So every second the daemon looks (two `stat`s) and puts back what is
//! gone: the token it runs with, and a pidfile it locks again. (The spool's writer writes the
//! spool back by itself; the same look tells of it with a notice.)

use std::fs::{File, OpenOptions};
use std::net::SocketAddr;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::lock::MutexExt;

/// How often the files are looked at.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Looks refused in a row (a CLI command holds the pidfile's lock for a moment while it looks
/// for a daemon) before a lock another process keeps is said.
const REFUSALS_BEFORE_TELLING: u32 = 3;

/// The locked pidfile, and what it says.
pub(super) struct PidFile {
    path: PathBuf,
    /// Held for the daemon's life: the single-instance lock (replaced when the file is put back).
    file: Mutex<File>,
    /// The address recorded once listening (written again into a pidfile put back).
    addr: Mutex<Option<SocketAddr>>,
    /// Looks in a row that found the path's file locked by someone else.
    refused: Mutex<u32>,
}

impl PidFile {
    /// A pidfile this process has locked and written its pid into.
    pub(super) fn new(path: PathBuf, file: File) -> PidFile {
        PidFile { path, file: Mutex::new(file), addr: Mutex::new(None), refused: Mutex::new(0) }
    }

    /// Rewrites the pidfile as "pid\naddr\n" so the CLI finds a daemon bound to port 0.
    pub(super) fn record_addr(&self, addr: SocketAddr) {
        *self.addr.locked() = Some(addr);
        if let Err(e) = write_text(&self.file.locked(), &self.text()) {
            tracing::warn!("cannot record the address in the pidfile: {e}");
        }
    }

    fn text(&self) -> String {
        match *self.addr.locked() {
            Some(addr) => format!("{}\n{addr}\n", std::process::id()),
            None => format!("{}\n", std::process::id()),
        }
    }

    /// Whether the file at the path is the one this process holds.
    fn in_place(&self) -> bool {
        let held = self.file.locked().metadata();
        match (std::fs::symlink_metadata(&self.path), held) {
            (Ok(there), Ok(held)) => there.dev() == held.dev() && there.ino() == held.ino(),
            // Nothing to compare with: nothing to put back either.
            (Err(e), _) => e.kind() != std::io::ErrorKind::NotFound,
            (_, Err(_)) => true,
        }
    }

    /// Puts the pidfile back if it is gone (or another file took its place that nobody holds):
    /// opened, locked and written as a start does.
    fn put_back(&self) {
        if self.in_place() {
            *self.refused.locked() = 0;
            return;
        }
        let opened = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&self.path)
            .and_then(|f| if f.metadata()?.is_file() { Ok(f) } else { Err(not_a_file()) });
        let file = match opened {
            Ok(f) => f,
            Err(e) => return self.refuse(format_args!("cannot write it again: {e}")),
        };
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return self.refuse(format_args!(
                    "another process holds its lock (another mneme daemon started on this storage dir?)"
                ));
            }
            Err(std::fs::TryLockError::Error(e)) => return self.refuse(format_args!("cannot lock it: {e}")),
        }
        if let Err(e) = write_text(&file, &self.text()) {
            return self.refuse(format_args!("cannot write it again: {e}"));
        }
        *self.file.locked() = file;
        *self.refused.locked() = 0;
        tracing::warn!(path = %self.path.display(), "the pidfile was deleted under the running daemon; wrote it again");
    }

    fn refuse(&self, why: std::fmt::Arguments<'_>) {
        let mut refused = self.refused.locked();
        *refused += 1;
        if *refused == REFUSALS_BEFORE_TELLING {
            tracing::warn!(
                path = %self.path.display(),
                "the pidfile was deleted under the running daemon and {why}; the CLI cannot find this daemon (tried again every second)"
            );
        }
    }
}

fn not_a_file() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, "it is not a regular file")
}

fn write_text(file: &File, text: &str) -> std::io::Result<()> {
    file.set_len(0)?;
    file.write_all_at(text.as_bytes(), 0)
}

/// The token file, written again with the token the daemon runs with when it is gone (or holds
/// another while the daemon holds the storage dir).
pub(super) struct TokenFile {
    pub(super) path: PathBuf,
    pub(super) token: String,
}

impl TokenFile {
    /// Writes the token back when it is gone, or when another one took its place while this
    /// daemon holds the storage dir's lock (`holding`): a second `mneme serve` started while the
    /// files were gone wrote its own and stopped, and the CLI and the hooks were refused (401)
    /// until a restart (review123 #1).
    fn put_back(&self, holding: bool) {
        let why = match crate::files::read_token(&self.path) {
            Ok(None) => "was deleted under the running daemon",
            Ok(Some(token)) if holding && token != self.token => "held another token than the running daemon's",
            // This daemon's, or not to be read safely (a link, another user's): left alone.
            _ => return,
        };
        match super::startup::write_token(&self.path, &self.token) {
            Ok(()) => tracing::warn!(path = %self.path.display(), "the token file {why}; wrote the daemon's again"),
            Err(e) => tracing::debug!("cannot write the token again: {e}"),
        }
    }
}

/// The storage dir's files the daemon puts back: its pidfile and its token.
pub(super) struct OwnFiles {
    pub(super) dir: PathBuf,
    pub(super) pidfile: PidFile,
    pub(super) token: TokenFile,
}

impl OwnFiles {
    /// Puts back the storage dir (0700), the pidfile and the token if they were deleted. Not
    /// into a folder put in its place that a start would refuse (another user's, or one others
    /// may write in: review123 #4).
    fn put_back(&self) {
        match std::fs::symlink_metadata(&self.dir) {
            Ok(m) if crate::files::storage_dir_refusal(&self.dir, &m).is_some() => return,
            Ok(_) => {}
            Err(_) if super::startup::create_private_dir(&self.dir).is_err() => return,
            Err(_) => {}
        }
        self.pidfile.put_back();
        self.token.put_back(self.pidfile.in_place());
    }
}

/// Every [`LOOK_EVERY`], puts back what was deleted of the daemon's own files, and tells of a
/// spool its writer wrote back, until `stop`.
pub(super) async fn keep(files: Arc<OwnFiles>, queue: crate::queue::Queue, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(LOOK_EVERY) => {}
        }
        let files = files.clone();
        // File system calls off the async workers (a storage dir on a slow disk).
        let _ = tokio::task::spawn_blocking(move || files.put_back()).await;
        queue.tell_spool_written_back().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locked_file(path: &std::path::Path) -> File {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).unwrap();
        file.try_lock().unwrap();
        file
    }

    /// A pidfile another process locked in its place (a second daemon started while it was
    /// gone) is left to it; one nobody holds is taken, and says this daemon's pid and address.
    #[test]
    fn a_pidfile_put_back_is_locked_and_never_taken_from_its_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mneme.pid");
        let pidfile = PidFile::new(path.clone(), locked_file(&path));
        pidfile.record_addr("127.0.0.1:4242".parse().unwrap());
        std::fs::remove_file(&path).unwrap();
        let other = locked_file(&path);
        std::fs::write(&path, "1\n").unwrap();
        pidfile.put_back();
        assert!(!pidfile.in_place());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "1\n");
        drop(other);
        pidfile.put_back();
        assert!(pidfile.in_place());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("{}\n127.0.0.1:4242\n", std::process::id()));
        let probe = File::open(&path).unwrap();
        assert!(matches!(probe.try_lock_shared(), Err(std::fs::TryLockError::WouldBlock)), "locked again");
    }
}
