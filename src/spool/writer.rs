//! The writer thread: runs jobs in order and commits whatever arrived together in one
//! transaction (group commit), each job in a savepoint of its own.

use std::sync::mpsc;

use rusqlite::{params, Connection, Transaction};
use tokio::sync::OwnedSemaphorePermit;

use super::restore::Restorer;
use super::{CommitCounters, SpoolError, GROUP_MAX};

pub(super) type Finish = Box<dyn FnOnce(Result<(), SpoolError>) + Send>;

/// What the writer thread is sent. Each message holds a place in [`MAX_WAITING`] until it is done.
pub(super) enum Message {
    /// Run in the next transaction; answered once it is committed.
    Job(Job, OwnedSemaphorePermit),
    /// Remove a delivered batch, answering no one: done at the start of the next transaction
    /// (which runs before any later job), or alone after [`REMOVAL_WAIT`] without one.
    Remove(Removal, OwnedSemaphorePermit),
    /// Copy the log into the database and empty it (after the next transaction): the frames of
    /// rows deleted since would otherwise keep their text readable until overwritten.
    Checkpoint(Finish, OwnedSemaphorePermit),
    /// Commit what came before, close the connection and end the thread, then say so.
    Close(std::sync::mpsc::Sender<()>),
    /// The spool's file (or its log) was deleted under the daemon: write it back before the
    /// next transaction (see `restore`). Sent once until done, so it holds no place.
    Restore,
    /// Read, after the next transaction: it sees what was committed before it, and a commit that
    /// fails (a full disk) fails no read (review116 #3: the sessions read at a start, grouped
    /// with deliveries that could not write, stopped the start).
    Read(Read, OwnedSemaphorePermit),
}

/// A read, given the connection outside any transaction (or why it cannot be read now).
pub(super) type Read = Box<dyn FnOnce(Result<&Connection, SpoolError>) + Send>;

pub(super) struct Removal {
    pub(super) session_id: String,
    pub(super) batch_id: String,
    pub(super) seqs: std::ops::RangeInclusive<i64>,
}

/// How long a removal waits for a transaction to ride on.
const REMOVAL_WAIT: std::time::Duration = std::time::Duration::from_millis(20);
/// ... and how long after a transaction could not begin (a full disk).
const REMOVAL_RETRY: std::time::Duration = std::time::Duration::from_secs(1);
/// A job: given the open transaction, runs and returns what to do once the commit is known;
/// given the error that kept the transaction from opening, answers with it.
pub(super) type Job = Box<dyn FnOnce(Result<&Transaction<'_>, SpoolError>) -> Option<Finish> + Send>;

/// A job's statements succeed or fail together without failing the jobs it is grouped with.
pub(super) fn run_in_savepoint<T>(
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

/// Returns who asked for the close ([`Message::Close`]), to be told once `conn` is dropped.
pub(super) fn writer(
    conn: &mut Connection,
    rx: mpsc::Receiver<Message>,
    counters: &CommitCounters,
    restorer: &Restorer,
) -> Option<std::sync::mpsc::Sender<()>> {
    // Places are given back when a message is done: after its transaction.
    let mut removals: Vec<(Removal, OwnedSemaphorePermit)> = Vec::new();
    // After a transaction could not begin, removals alone are retried less eagerly.
    let mut removal_wait = REMOVAL_WAIT;
    // When the removals waiting began to wait: they wait `removal_wait` from then, not from the
    // last message (a removal every few ms, with no job among them, held them all back until a
    // gap in the stream).
    let mut removals_since = std::time::Instant::now();
    let mut failures = FailureLog::default();
    // An erasure of the log that could not be done (a full disk) is owed until it is: tried
    // again after every commit and each second the writer is idle, so a forget's text leaves
    // the log as soon as there is room. Owed at start too: a daemon stopped owing one (killed,
    // or the disk still full) left the text in the log it opens.
    let mut erase_owed = true;
    // Who asked for the close ([`Message::Close`]), told once the connection is closed.
    let mut closing = None;
    // Written back but not opened again (see `Restorer::restore`): no transaction begins on
    // `conn` until it is.
    let mut unopened = false;
    // When the file was last looked at (see `LOOK_EVERY`), and an owed erasure last tried.
    let mut looked = std::time::Instant::now();
    let mut erase_tried: Option<std::time::Instant> = None;
    // A restore decided (by the writer's look or a `Restore` message) and not done yet: kept
    // across a removal's wait, which begins the loop again (a look's decision was dropped there,
    // and with the request marked taken nobody asked again: review117 #1).
    let mut restore = false;
    loop {
        let first = match removals.is_empty() {
            true => rx.recv_timeout(LOOK_EVERY),
            false => rx.recv_timeout(removal_wait.saturating_sub(removals_since.elapsed())),
        };
        let mut group = Vec::new();
        let mut checkpoints = Vec::new();
        let mut closed = false;
        let mut reads = Vec::new();
        // The file (or its log) deleted is written back within `LOOK_EVERY`, whether or not a
        // retain noticed it: a retain acknowledged in the moments before the retains' own look
        // went into the deleted log, and a kill then lost it (review116 #2, its `wal` case).
        if looked.elapsed() >= LOOK_EVERY {
            looked = std::time::Instant::now();
            restore |= restorer.due();
        }
        match first {
            Ok(Message::Restore) => restore = true,
            Ok(Message::Read(read, place)) => reads.push((read, place)),
            Ok(Message::Close(ack)) => {
                closing = Some(ack);
                closed = true;
            }
            Ok(Message::Job(job, place)) => group.push((job, place)),
            Ok(Message::Checkpoint(done, place)) => checkpoints.push((done, place)),
            Ok(Message::Remove(r, place)) => {
                if removals.is_empty() {
                    removals_since = std::time::Instant::now();
                }
                removals.push((r, place));
                if removals_since.elapsed() < removal_wait {
                    continue; // wait a little for a job to ride on
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) if removals.is_empty() && !restore => {
                if erase_owed && erase_tried.is_none_or(|t| t.elapsed() >= ERASE_RETRY) {
                    erase_tried = Some(std::time::Instant::now());
                    erase_owed = unopened || erase_log(conn).is_err();
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {} // the removals go alone, or the restore
            Err(mpsc::RecvTimeoutError::Disconnected) if removals.is_empty() => return closing,
            Err(mpsc::RecvTimeoutError::Disconnected) => closed = true, // last removals, then stop
        }
        while group.len() < GROUP_MAX {
            match rx.try_recv() {
                Ok(Message::Job(job, place)) => group.push((job, place)),
                Ok(Message::Remove(r, place)) => removals.push((r, place)),
                Ok(Message::Checkpoint(done, place)) => checkpoints.push((done, place)),
                Ok(Message::Restore) => restore = true,
                Ok(Message::Read(read, place)) => reads.push((read, place)),
                Ok(Message::Close(ack)) => {
                    closing = Some(ack);
                    closed = true;
                    break;
                }
                Err(_) => break,
            }
        }
        // Before the group: what it commits goes into the file written back.
        let reopened = match (std::mem::take(&mut restore), unopened) {
            (_, true) => restorer.reconnect(conn),
            (true, false) => restorer.restore(conn),
            (false, false) => Ok(()),
        };
        unopened = reopened.is_err();
        let began = reopened.and_then(|()| begin(conn));
        let tx = match began {
            Ok(tx) => tx,
            Err(e) => {
                // The writer never gives up: every job hears why, and the next message tries
                // again (a full disk that has room again, a transient I/O error, the spool
                // written back and not opened yet).
                failures.log(format_args!("spool: cannot begin a transaction: {e}"));
                for (job, _place) in group {
                    job(Err(e.clone()));
                }
                for (done, _place) in checkpoints {
                    done(Err(e.clone()));
                }
                // A transaction that cannot begin keeps no read from the file, unless it is not
                // open again yet.
                for (read, _place) in reads {
                    read(if unopened { Err(e.clone()) } else { Ok(&*conn) });
                }
                if closed {
                    // Nobody sends any more: the removals are resent after a restart.
                    return closing;
                }
                removal_wait = REMOVAL_RETRY;
                removals_since = std::time::Instant::now();
                continue; // removals stay and ride on a later transaction
            }
        };
        removal_wait = REMOVAL_WAIT;
        // Kept until the commit is known: a commit that fails (a full disk) loses them, and
        // the delivered batch stayed spooled until a restart resent it, bringing back what had
        // been forgotten of it meanwhile.
        let riding = std::mem::take(&mut removals);
        for (r, _place) in &riding {
            supersede_dead_letters(&tx, r);
            // One statement: it needs no savepoint to fail alone.
            let removed = tx
                .prepare_cached("DELETE FROM items WHERE session_id = ? AND seq BETWEEN ? AND ? AND batch_id = ?")
                .and_then(|mut s| s.execute(params![r.session_id, r.seqs.start(), r.seqs.end(), r.batch_id]));
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
                // A full disk, an I/O error or no memory makes SQLite roll back the whole
                // transaction, not the failing job's savepoint: the jobs after it would each
                // commit on their own (a savepoint outside a transaction begins one) and then
                // hear the group's failed commit, a retain acknowledged as refused and stored.
                if tx.is_autocommit() {
                    return job(Err(rolled_back()));
                }
                job(Ok(&tx))
            })
            .collect();
        // (A transaction that only ran before reads wrote nothing: not a commit to count.)
        let wrote = !places.is_empty() || !riding.is_empty();
        let commit = tx.commit().map_err(SpoolError::from);
        if commit.is_ok() {
            if wrote {
                counters.committed(places.len());
            }
            failures.recovered();
        }
        if let Err(e) = &commit {
            failures.log(format_args!("spool: commit failed: {e}"));
            // A failed COMMIT (a full disk) can leave the transaction open: close it, so the
            // next one can begin.
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
        }
        if commit.is_err() {
            removals = riding; // they ride on the next transaction
            removal_wait = REMOVAL_RETRY;
            removals_since = std::time::Instant::now();
        } else {
            drop(riding);
        }
        for finish in finishers {
            finish(commit.clone());
        }
        drop(places);
        if checkpoints.is_empty() && erase_owed && commit.is_ok() {
            erase_owed = erase_log(conn).is_err();
        }
        for (done, _place) in checkpoints {
            let erased = erase_log(conn);
            erase_owed = erased.is_err();
            done(erased);
        }
        for (read, _place) in reads {
            read(Ok(&*conn));
        }
        if closed {
            return closing;
        }
    }
}

/// How often an owed erasure of the log is tried again while the writer is idle.
const ERASE_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// How often the writer looks whether its file or log was deleted (two `stat`s), idle or busy.
const LOOK_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Copies the log into the file and empties it (`wal_checkpoint(TRUNCATE)`), so that no old log
/// frame keeps the text of a row deleted since. `Err` when it could not complete (a full disk).
pub(super) fn erase_log(conn: &Connection) -> Result<(), SpoolError> {
    let busy: i64 = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))?;
    if busy != 0 {
        let code = rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY);
        let why = "the log could not be emptied".to_owned();
        return Err(rusqlite::Error::SqliteFailure(code, Some(why)).into());
    }
    Ok(())
}

/// What a job hears when an earlier job of its group made SQLite roll the transaction back.
fn rolled_back() -> SpoolError {
    let code = rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT);
    let why = "an earlier write of its group failed and SQLite rolled the group back (a full disk, an I/O error): nothing of it was stored";
    SpoolError::from(rusqlite::Error::SqliteFailure(code, Some(why.into())))
}

/// Drops the dead letters of a document that a delivered batch has since replaced (an item of
/// the same bank and document, not an append, queued after them): put back by `mneme retry`, an
/// older transcript of a session would replace the newer one. A dead letter replacing a document
/// the batch added to becomes an append. One statement each, as the removal.
fn supersede_dead_letters(tx: &Transaction<'_>, r: &Removal) {
    let superseded = tx
        .prepare_cached(
            "DELETE FROM dead_letters WHERE document_id IS NOT NULL AND EXISTS (
                 SELECT 1 FROM items i WHERE i.session_id = ? AND i.seq BETWEEN ? AND ? AND i.batch_id = ?
                     AND i.append = 0 AND i.document_id = dead_letters.document_id
                     AND i.bank = dead_letters.bank AND i.seq > dead_letters.seq)",
        )
        .and_then(|mut s| s.execute(params![r.session_id, r.seqs.start(), r.seqs.end(), r.batch_id]));
    match superseded {
        Ok(0) => {}
        Ok(n) => {
            tracing::info!(session = r.session_id, "{n} dead letters replaced by a newer version of their document")
        }
        // They stay dead letters: `mneme retry` can still put them back.
        Err(e) => tracing::warn!(session = r.session_id, "cannot drop superseded dead letters: {e}"),
    }
    // A dead replace of a document the batch added to since: put back, it would wipe what was
    // added. It adds to the document too, then.
    let appended = tx
        .prepare_cached(
            "UPDATE dead_letters SET append = 1 WHERE document_id IS NOT NULL AND append = 0 AND EXISTS (
                 SELECT 1 FROM items i WHERE i.session_id = ? AND i.seq BETWEEN ? AND ? AND i.batch_id = ?
                     AND i.append = 1 AND i.document_id = dead_letters.document_id
                     AND i.bank = dead_letters.bank AND i.seq > dead_letters.seq)",
        )
        .and_then(|mut s| s.execute(params![r.session_id, r.seqs.start(), r.seqs.end(), r.batch_id]));
    if let Err(e) = appended {
        tracing::warn!(session = r.session_id, "cannot turn dead replaces into appends: {e}");
    }
}

/// Opens the next transaction, first closing one a failure left open. (Through a shared borrow:
/// the reads given the connection when it cannot begin need one too; only this thread uses
/// the connection, and no transaction is open once the one left is rolled back.)
fn begin(conn: &Connection) -> Result<Transaction<'_>, SpoolError> {
    if !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    Ok(conn.unchecked_transaction()?)
}

/// The spool's write failures as the log shows them: the first of an episode, then at most one a
/// minute with how many were left out (a full disk refuses every retain, and logging each one
/// twice wrote thousands of lines), and a line when commits succeed again.
#[derive(Default)]
struct FailureLog {
    last: Option<std::time::Instant>,
    left_out: u64,
}

impl FailureLog {
    const EVERY: std::time::Duration = std::time::Duration::from_secs(60);

    fn log(&mut self, what: std::fmt::Arguments<'_>) {
        if self.last.is_some_and(|t| t.elapsed() < Self::EVERY) {
            self.left_out += 1;
            return;
        }
        match self.left_out {
            0 => tracing::error!("{what}"),
            n => tracing::error!("{what} ({n} more failures in the last minute not logged)"),
        }
        self.last = Some(std::time::Instant::now());
        self.left_out = 0;
    }

    fn recovered(&mut self) {
        if self.last.take().is_some() {
            tracing::info!("spool: commits succeed again");
            self.left_out = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FailureLog;

    #[test]
    fn an_episode_of_failures_is_logged_once_a_minute() {
        let mut log = FailureLog::default();
        for _ in 0..1000 {
            log.log(format_args!("disk full"));
        }
        assert_eq!(log.left_out, 999, "one line, the rest counted");
        log.recovered();
        assert!(log.last.is_none() && log.left_out == 0);
        log.log(format_args!("disk full again"));
        assert_eq!(log.left_out, 0, "a new episode is logged at once");
    }
}
