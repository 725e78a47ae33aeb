//! Deleting memories: one session's scope, or everything; what is spooled for them goes too.

use mneme_core::{ClearWhat, Scope};
use serde::Serialize;

use super::{SessionError, Sessions};
use crate::notices::Level;

/// What `clear` touches.
#[derive(Debug, Clone, Default)]
pub struct ClearRequest {
    /// One session's scope.
    pub session_id: Option<String>,
    /// Everything.
    pub all: bool,
    /// Also the server's memories (hindsight).
    pub remote: bool,
}

/// What `clear` did.
#[derive(Debug, Clone, Serialize)]
pub struct ClearOutcome {
    /// Memories deleted from the store, where known.
    pub deleted: Option<u64>,
    /// Spooled items dropped.
    pub discarded: u64,
    /// One line for the user.
    pub message: String,
}

impl Sessions {
    /// A memory or document of `bank` (of any bank: `None`) was forgotten: the recalled blocks
    /// and the backend's instructions the sessions of that bank keep (served with every prompt,
    /// and saved in the spool) may quote it, so they are dropped, to be asked again.
    pub async fn forgotten(&self, bank: Option<&str>) -> Result<(), crate::spool::SpoolError> {
        // Counted first: a recall or a backend's instructions asked before now, and answered
        // after, is not kept either.
        self.inner.forgets.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.update_each(|s| {
            if bank.is_some_and(|b| s.scope.bank != b) || (s.block.is_none() && s.instructions.is_none()) {
                return false;
            }
            s.block = None;
            s.recalled = false;
            s.instructions = None;
            true
        })
        .await
    }
    /// Deletes memories: one session's scope, or everything; spooled items go too.
    pub async fn clear(&self, req: ClearRequest) -> Result<ClearOutcome, SessionError> {
        let backend = self.backend();
        let (scope, what, one_scope) = match (&req.session_id, req.all) {
            (Some(_), true) => return Err(SessionError::Invalid("give either session_id or all, not both".into())),
            (None, false) => {
                return Err(SessionError::Invalid(
                    "say what to clear: session_id for one session's scope, or all: true".into(),
                ))
            }
            (Some(id), false) => (self.get(id)?.scope, ClearWhat::Scope, true),
            (None, true) => (Scope { bank: self.settings().base_bank(), tags: vec![] }, ClearWhat::All, false),
        };
        // `remote` only means something where there is a server.
        let what = if req.remote && backend.capabilities().clears_remotely { ClearWhat::Remote } else { what };
        let queue = &self.inner.queue;
        let (discarded, report) = if one_scope {
            queue.discard_scope_then(&scope, backend.clear(&scope, what)).await?
        } else {
            queue.discard_then(None, backend.clear(&scope, what)).await?
        };
        let report = report?;
        self.update_each(|s| {
            if !(req.all || s.scope == scope) {
                return false;
            }
            s.block = None;
            s.recalled = false;
            s.pending = None;
            s.instructions = None;
            // The conversation so far was cleared with the rest: automatic retain goes on from
            // the next turn, in a document of its own, instead of storing it again.
            let seen = (s.turn_prints.len() as i64).max(s.retained_turns);
            if s.retained_turns > s.first_turn {
                s.part = s.part.saturating_add(1);
            }
            s.first_turn = seen;
            s.retained_turns = seen;
            true
        })
        .await?;
        self.inner.queue.erase_traces().await;
        let mut message = report.message;
        if discarded > 0 {
            message.push_str(&format!(
                " Dropped {discarded} queued {}.",
                if discarded == 1 { "memory" } else { "memories" }
            ));
        }
        // Deleting memories is announced, so every plugin's status line sees it.
        self.inner.notices.emit(Level::Info, backend.id().as_str(), req.session_id.as_deref(), message.clone()).await;
        Ok(ClearOutcome { deleted: report.deleted, discarded, message })
    }
}
