//! Erasing what a forget or a clear deleted from the disk too: the full-text index's segments
//! merged, the write-ahead log checkpointed and truncated, and the marker that keeps the debt
//! across a crash.

use std::path::Path;

use super::*;

impl Store {
    /// The file that says an erasure is owed to the store at `path` (see [`Store::erase_traces`]):
    /// a restart forgot the debt, and the forgotten text stayed until some later forget.
    pub fn erase_marker(path: &Path) -> std::path::PathBuf {
        let mut name = path.file_name().unwrap_or_default().to_owned();
        name.push("-erase-owed");
        path.with_file_name(name)
    }

    /// After a forget or a clear: what the deletions left readable on disk is rewritten. The
    /// full-text index keeps a deleted passage's terms in its segments until they are merged, so
    /// they are merged whole (~0.5 s at 100k passages, measured; forgetting is rare), and the
    /// log, which still holds the pages as they were, is checkpointed and truncated.
    /// On an error the erasure is owed ([`Self::traces_left`]) and tried again by
    /// [`Self::retry_erasure`]: the deletion it follows is committed either way.
    pub fn erase_traces(&mut self) -> rusqlite::Result<()> {
        if let Err(e) = self.conn.execute("INSERT INTO passages_fts(passages_fts) VALUES ('optimize')", []) {
            if !self.index_left {
                self.note_erasure_owed();
            }
            self.index_left = true;
            // The failed merge grew the log into whatever room there was (retains then found
            // none): given back.
            let _ = self.truncate_log();
            self.traces_left = true;
            return Err(e);
        }
        // Merged: the log is owed still. The marker `erased` wrote before the deletion goes
        // once it is emptied too: gone after the merge, a crash before the checkpoint (a full
        // disk refused it) left the forgotten text in the log for good.
        self.index_left = false;
        let truncated = self.truncate_log();
        if truncated.is_err() {
            self.traces_left = true;
        }
        self.settle_erasure();
        truncated
    }

    /// Writes, and syncs, the file that says an index merge is owed ([`Self::erase_marker`]).
    /// Called before a deletion the user asked for, so that a crash between its commit and the
    /// merge leaves the debt on disk (a restart then merges); removed by
    /// [`Self::settle_erasure`] once nothing is owed. A marker that cannot be written (the disk
    /// full to its last inode) is warned about: the deletion goes on, and the debt is kept in
    /// memory as before.
    pub fn note_erasure_owed(&self) {
        use std::os::unix::fs::OpenOptionsExt;
        let made = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            // A FIFO in its place fails (no reader) instead of blocking the writer for good.
            .custom_flags(libc::O_NONBLOCK)
            .open(&self.erase_marker)
            .and_then(|file| file.sync_all())
            .and_then(|()| match self.erase_marker.parent() {
                Some(dir) if !dir.as_os_str().is_empty() => std::fs::File::open(dir)?.sync_all(),
                _ => Ok(()),
            });
        if let Err(e) = made {
            tracing::warn!("cannot note an owed erasure in {}: {e}", self.erase_marker.display());
        }
    }

    /// Removes the marker [`Self::note_erasure_owed`] wrote, unless an erasure is still owed: a
    /// merge, or the log's checkpoint (a deletion that deleted nothing, or failed, owes none of
    /// its own; one that merged and emptied the log owes none either).
    pub fn settle_erasure(&self) {
        if self.index_left || self.traces_left {
            return;
        }
        match std::fs::remove_file(&self.erase_marker) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!("cannot remove {}: {e}", self.erase_marker.display())
            }
            _ => {}
        }
    }

    /// Whether the last erasure left traces on disk: part of the log, because a reader (a
    /// recall, the integrity check, `mneme doctor`, a backup) held it past the busy timeout, or
    /// the index's segments, because the merge failed (a full disk).
    pub fn traces_left(&self) -> bool {
        self.traces_left || self.index_left
    }

    /// Tries the erasure again, without waiting for readers (the writer calls it while
    /// [`Self::traces_left`], about once a second, until it goes through): the forgotten text
    /// stayed in the log until the next forget, however long that was, and a forget answered an
    /// error on a full disk though it had deleted, leaving its text in the index for good (a
    /// retry deleted nothing, so it erased nothing).
    pub fn retry_erasure(&mut self) -> rusqlite::Result<()> {
        self.conn.busy_timeout(std::time::Duration::ZERO)?;
        let tried = match self.index_left {
            true => self.erase_traces(),
            false => {
                let truncated = self.truncate_log().inspect_err(|_| self.traces_left = true);
                self.settle_erasure();
                truncated
            }
        };
        self.conn.busy_timeout(BUSY_TIMEOUT)?;
        tried
    }

    /// Checkpoints the log into the database and truncates it; notes whether readers kept it.
    fn truncate_log(&mut self) -> rusqlite::Result<()> {
        let busy = match self.conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get::<_, i64>(0)) {
            Ok(busy) => busy != 0,
            Err(rusqlite::Error::SqliteFailure(e, _)) if e.code == rusqlite::ErrorCode::DatabaseBusy => true,
            Err(e) => return Err(e),
        };
        self.traces_left = busy;
        Ok(())
    }
}
