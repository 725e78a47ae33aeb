//! Notices: what the user should know (a batch that failed, dead letters, a bad config), kept in
//! the spool across restarts (newest [`KEEP`]) and broadcast live for `GET /v1/notices/stream`.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::sync::broadcast;

use crate::lock::MutexExt;
use crate::spool::{NoticeRow, Spool};

/// Notices kept in history.
pub const KEEP: usize = 1000;
/// Notices that could not be stored (a full disk) kept in memory until they can be, at most.
const UNSAVED_MAX: usize = 100;

/// How serious a notice is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// For information (a backend switched, dead letters requeued).
    Info,
    /// Something was not stored yet or will be retried.
    Warning,
    /// Something needs the user.
    Error,
}

impl Level {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Info => "info",
            Level::Warning => "warning",
            Level::Error => "error",
        }
    }
}

/// The notice log.
#[derive(Clone)]
pub struct Notices {
    spool: Spool,
    live: broadcast::Sender<NoticeRow>,
    /// Notices the spool could not take, oldest first: stored before the next one that it can.
    unsaved: Arc<Mutex<Vec<NoticeRow>>>,
}

impl Notices {
    /// A log stored in `spool`.
    pub fn new(spool: Spool) -> Self {
        let (live, _) = broadcast::channel(256);
        Self { spool, live, unsaved: Arc::new(Mutex::new(Vec::new())) }
    }

    /// Records and broadcasts a notice; also logs it. Never fails: a notice that cannot be stored
    /// (a full disk) is still logged and broadcast (with id 0), and stored once the spool takes
    /// notices again.
    pub async fn emit(
        &self,
        level: Level,
        source: &str,
        session_id: Option<&str>,
        message: impl Into<String>,
    ) -> NoticeRow {
        let row = NoticeRow {
            id: 0,
            at: mneme_core::time::rfc3339(SystemTime::now()),
            level: level.as_str().into(),
            source: source.into(),
            session_id: session_id.map(str::to_owned),
            message: message.into(),
        };
        // A notice may quote an id a client chose: a newline in it must not forge a log line.
        let logged = mneme_core::text::escape_controls_in_line(&row.message);
        match level {
            Level::Info => tracing::info!(source, session_id, "notice: {logged}"),
            Level::Warning => tracing::warn!(source, session_id, "notice: {logged}"),
            Level::Error => tracing::error!(source, session_id, "notice: {logged}"),
        }
        self.store_unsaved().await;
        let row = match self.spool.add_notice(row.clone(), KEEP).await {
            Ok(stored) => stored,
            Err(e) => {
                tracing::error!("cannot store notice: {e}");
                let mut unsaved = self.unsaved.locked();
                if unsaved.len() == UNSAVED_MAX {
                    unsaved.remove(0);
                }
                unsaved.push(row.clone());
                row
            }
        };
        let _ = self.live.send(row.clone());
        row
    }

    /// Stores what an earlier emit could not, in order; what fails again is kept for later.
    async fn store_unsaved(&self) {
        let pending = std::mem::take(&mut *self.unsaved.locked());
        for (i, notice) in pending.iter().enumerate() {
            if self.spool.add_notice(notice.clone(), KEEP).await.is_err() {
                let mut unsaved = self.unsaved.locked();
                unsaved.splice(0..0, pending[i..].iter().cloned());
                let excess = unsaved.len().saturating_sub(UNSAVED_MAX);
                unsaved.drain(..excess);
                return;
            }
        }
    }

    /// Notices after `after`, oldest first.
    pub async fn after(&self, after: i64, limit: usize) -> Result<Vec<NoticeRow>, crate::spool::SpoolError> {
        self.spool.notices_after(after, limit).await
    }

    /// [`Notices::after`], then the notices the spool could not store yet (id 0), newest last:
    /// while the disk is full, the notice saying so is one of them, and the one a user looking
    /// at the notices most needs. A read the full disk makes fail answers with them alone.
    pub async fn after_with_unsaved(
        &self,
        after: i64,
        limit: usize,
    ) -> Result<Vec<NoticeRow>, crate::spool::SpoolError> {
        let stored = self.after(after, limit).await;
        let unsaved = self.unsaved.locked().clone();
        let mut rows = match stored {
            Ok(rows) => rows,
            Err(e) if unsaved.is_empty() => return Err(e),
            Err(e) => {
                tracing::debug!("cannot read the stored notices: {e}");
                Vec::new()
            }
        };
        let room = limit.saturating_sub(rows.len()).min(unsaved.len());
        rows.extend_from_slice(&unsaved[unsaved.len() - room..]);
        Ok(rows)
    }

    /// The newest notice id.
    pub async fn last_id(&self) -> i64 {
        self.spool.last_notice_id().await.unwrap_or(0)
    }

    /// Live notices from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<NoticeRow> {
        self.live.subscribe()
    }
}
