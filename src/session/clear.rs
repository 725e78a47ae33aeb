//! Deleting memories: one session's scope, or everything; what is spooled for them goes too.

use mneme_core::{BackendError, ClearReport, ClearWhat, Scope};
use serde::Serialize;

use super::record::{Ended, ENDED_RECORD};
use super::{SessionError, Sessions};
use crate::lock::MutexExt;
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
    /// Memory was off: no store was open, so none of what it holds was deleted.
    pub memory_off: bool,
}

impl Sessions {
    /// A memory or document of `bank` (of any bank: `None`) was forgotten: the recalled blocks
    /// and the backend's instructions the sessions of that bank keep (served with every prompt,
    /// and saved in the spool) may quote it, so they are dropped, to be asked again.
    /// A forgotten `document` that is a session's conversation (its part, or a last-turn
    /// document) also ends what automatic retain keeps of it: its pending tail and the turns
    /// had so far would store the forgotten turns again (the tail when the session ends or goes
    /// idle, the next retain of a `full-session` part with the whole history), so the session
    /// goes on from its next turn, in a document of its own, as after a clear.
    pub async fn forgotten(&self, bank: Option<&str>, document: Option<&str>) {
        // Counted first: a recall or a backend's instructions asked before now, and answered
        // after, is not kept either.
        self.inner.forgets.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if let Some(document) = document {
            let ids = sessions_of_document(document).map(str::to_owned).collect();
            let bank = bank.map(str::to_owned);
            let of_bank = move |e: &Ended| bank.as_ref().is_none_or(|b| e.scope.as_ref().is_none_or(|s| &s.bank == b));
            self.erase_ended(ids, of_bank).await;
        }
        self.update_each_after_erasure(|s| {
            if bank.is_some_and(|b| s.scope.bank != b) {
                return false;
            }
            let conversation = document.is_some_and(|d| mneme_core::is_session_document(&s.id, d));
            if !conversation && s.block.is_none() && s.instructions.is_none() {
                return false;
            }
            s.block = None;
            s.recalled = false;
            s.instructions = None;
            if conversation {
                start_after_erasure(s);
            }
            true
        })
        .await;
    }
    /// Holds the turns of the sessions whose conversation `document` of `bank` is (see
    /// [`Sessions::forgotten`]) while it is forgotten: an agent-end that read the session before
    /// the forget and queued its transcript after the forget's discard stored the forgotten
    /// turns again. Held until dropped, after `forgotten`. Those of ended sessions too: one
    /// started again meanwhile read its record before it was marked, and stored the forgotten
    /// turns again.
    pub async fn hold_conversations(&self, bank: &str, document: &str) -> HeldTurns {
        let ids: Vec<String> = {
            let map = self.inner.map.locked();
            let sessions =
                map.values().filter(|s| s.scope.bank == bank && mneme_core::is_session_document(&s.id, document));
            let ended = sessions_of_document(document).filter(|id| !map.contains_key(*id));
            sessions.map(|s| s.id.clone()).chain(ended.map(str::to_owned)).collect()
        };
        self.hold_turns(ids).await
    }

    /// Marks the records of the ended sessions among `ids` that `erased` picks as erased (see
    /// [`Ended::erased`]), in one spool transaction. The caller holds their turns; each record is
    /// read under them (a clear listed them before: an end in between wrote a newer one, which
    /// this keeps).
    async fn erase_ended(&self, ids: Vec<String>, erased: impl Fn(&Ended) -> bool + Send + 'static) {
        if ids.is_empty() {
            return;
        }
        let marked = self.inner.spool.change_records(ENDED_RECORD, ids, move |record| {
            let mut ended = serde_json::from_str::<Ended>(record).ok()?;
            if ended.erased || !erased(&ended) {
                return None;
            }
            ended.erased = true;
            Some(serde_json::to_string(&ended).expect("plain data serializes"))
        });
        if let Err(e) = marked.await {
            tracing::warn!("cannot mark the ended sessions' conversations as deleted: {e}");
        }
    }

    /// The ids of the ended sessions whose record `picked` chooses.
    async fn ended_sessions(&self, picked: impl Fn(&Ended) -> bool) -> Vec<String> {
        match self.inner.spool.records(ENDED_RECORD, "").await {
            Ok(records) => records
                .into_iter()
                .filter(|(_, r)| serde_json::from_str::<Ended>(r).is_ok_and(|e| picked(&e)))
                .map(|(id, _)| id)
                .collect(),
            Err(e) => {
                tracing::warn!("cannot read the ended sessions' records: {e}");
                Vec::new()
            }
        }
    }

    /// Locks the turns of `ids`, in order: callers that hold more than one lock take them
    /// sorted, so two of them never wait for each other.
    async fn hold_turns(&self, ids: Vec<String>) -> HeldTurns {
        HeldTurns(self.inner.turns.lock_all(ids).await)
    }

    /// `retain.mode` changed by a reload: the turns retained so far stay as the old mode stored
    /// them, and the new mode goes on from each session's next turn, in a part of its own. A
    /// full-session document after `last-turn` slices held the slices' turns again, and slices
    /// after a full-session document repeated its turns. A tail kept for later is queued
    /// first, as the old mode made it.
    pub async fn retain_mode_changed(&self) -> Result<(), crate::spool::SpoolError> {
        let ids: Vec<String> =
            self.inner.map.locked().values().filter(|s| s.parent.is_none()).map(|s| s.id.clone()).collect();
        for id in ids {
            let _turn = self.inner.turns.lock(&id).await;
            let Ok(session) = self.get(&id) else { continue }; // ended meanwhile
            if let Some(pending) = session.pending.as_ref().filter(|p| p.user_turns > session.retained_turns) {
                self.queue_pending(&session, pending).await?;
            }
            if let Some(s) = self.update(&id, start_after_erasure) {
                self.save(&s.id).await?;
            }
        }
        Ok(())
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
        // The turns of the sessions it clears go before or after the clear, never across it: an
        // agent-end that read its session before the clear and queued its transcript after the
        // clear's discard stored the cleared turns again. Every session of the scope (not only
        // the one named: another session of the project was as much cleared), or every session.
        let mut ids: Vec<String> = {
            let map = self.inner.map.locked();
            let cleared =
                map.values().filter(|s| req.all || s.scope == scope || req.session_id.as_ref() == Some(&s.id));
            cleared.map(|s| s.id.clone()).collect()
        };
        // Ended sessions of the scope too: started again, they stored the cleared turns again.
        let in_scope = {
            let (all, scope) = (req.all, scope.clone());
            move |e: &Ended| all || e.scope.as_ref() == Some(&scope)
        };
        ids.extend(self.ended_sessions(in_scope.clone()).await);
        let _turns = self.hold_turns(ids.clone()).await;
        let queue = &self.inner.queue;
        let (discarded, cleared) = if one_scope {
            let clear = async { BanksCleared::of_one(backend.clear(&scope, what).await) };
            queue.discard_scope_then(&scope, clear).await?
        } else {
            queue.discard_then(None, self.clear_every_bank(&scope, what)).await?
        };
        // The backend failed: what was queued is gone all the same, and the banks cleared before
        // the failure are (a bank at a time under `per-project`; a server may delete part of one
        // before it fails), so the sessions go on as after a clear the backend did. Taken for a
        // clear that did nothing, a session's next turn stored the cleared conversation again
        // (review88 #6); a bare "backend unavailable" read as if nothing had been cleared
        // (review82 #4).
        let report = match cleared.failed {
            None => cleared.report,
            Some(error) => {
                // Each bank was asked: those cleared, after the failure or before it, are said.
                let mut done = Vec::new();
                if !cleared.report.message.is_empty() {
                    done.push(cleared.report.message);
                }
                if discarded > 0 {
                    done.push(format!(
                        "{discarded} queued {} dropped before {} stored.",
                        if discarded == 1 { "memory was" } else { "memories were" },
                        if discarded == 1 { "it was" } else { "they were" },
                    ));
                }
                done.push("Clear again once the backend answers, for what it still stores.".into());
                let done = done.join(" ");
                self.after_clear(ids, in_scope, &req, &scope).await;
                let message = format!("Clear: the backend failed ({error}). {done}");
                self.inner
                    .notices
                    .emit(Level::Warning, backend.id().as_str(), req.session_id.as_deref(), message)
                    .await;
                return Err(SessionError::BackendAfter { error, done });
            }
        };
        self.after_clear(ids, in_scope, &req, &scope).await;
        let mut message = report.message;
        if discarded > 0 {
            message.push_str(&format!(
                " Dropped {discarded} queued {}.",
                if discarded == 1 { "memory" } else { "memories" }
            ));
        }
        // Deleting memories is announced, so every plugin's status line sees it.
        self.inner.notices.emit(Level::Info, backend.id().as_str(), req.session_id.as_deref(), message.clone()).await;
        let memory_off = !backend.capabilities().stores;
        Ok(ClearOutcome { deleted: report.deleted, discarded, message, memory_off })
    }
}

impl Sessions {
    /// What a clear does to the sessions once the queue's part is done (and the backend's, or
    /// it failed): the sessions `ids` it held, the ended ones `in_scope`.
    async fn after_clear(
        &self,
        ids: Vec<String>,
        in_scope: impl Fn(&Ended) -> bool + Send + 'static,
        req: &ClearRequest,
        scope: &Scope,
    ) {
        // As a forget does: a recall asked before the deletion and answered after it is not
        // kept as a session's block (or instructions), which would quote what was cleared.
        self.inner.forgets.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // Every session held, the live ones too: one that ended between the listing and the
        // hold wrote a record neither list holds, and started again it stored the cleared turns.
        self.erase_ended(ids, in_scope).await;
        self.update_each_after_erasure(|s| {
            if !(req.all || s.scope == *scope) {
                return false;
            }
            s.block = None;
            s.recalled = false;
            s.instructions = None;
            start_after_erasure(s);
            true
        })
        .await;
        self.inner.queue.erase_traces().await;
    }

    /// Clears everything: on a backend that is read a bank at a time (a Hindsight server), every
    /// bank of this configuration it lists under `per-project` scoping, not only the base bank
    /// (`--all --remote` left every project's memories on the server). A bank that fails does
    /// not stop the others: each is asked, and the report says which were cleared.
    async fn clear_every_bank(&self, base: &Scope, what: ClearWhat) -> BanksCleared {
        let backend = self.backend();
        if backend.capabilities().lists_every_bank || what != ClearWhat::Remote {
            return BanksCleared::of_one(backend.clear(base, what).await);
        }
        let listed = match backend.banks().await {
            Ok(banks) => banks.into_iter().map(|b| b.bank),
            Err(e) => return BanksCleared::of_one(Err(e)),
        };
        let banks = super::scope::banks_of_configuration(&self.settings(), listed);
        let mut messages = Vec::with_capacity(banks.len());
        let mut deleted = Some(0);
        let (mut failed, mut not_cleared) = (None, Vec::new());
        for bank in banks {
            match backend.clear(&Scope { bank: bank.clone(), tags: vec![] }, what).await {
                Ok(report) => {
                    deleted = deleted.zip(report.deleted).map(|(a, b)| a + b);
                    messages.push(report.message);
                }
                Err(e) => {
                    failed.get_or_insert(e);
                    not_cleared.push(format!("{bank:?}"));
                }
            }
        }
        if !not_cleared.is_empty() && !messages.is_empty() {
            messages.push(format!("Not cleared: {}.", not_cleared.join(", ")));
        }
        BanksCleared { report: ClearReport { deleted, message: messages.join(" ") }, failed }
    }
}

/// What the backend's part of a clear did: the banks it cleared, and the first failure.
struct BanksCleared {
    /// What was cleared (an empty message: nothing is known to be).
    report: ClearReport,
    failed: Option<BackendError>,
}

impl BanksCleared {
    fn of_one(result: Result<ClearReport, BackendError>) -> Self {
        match result {
            Ok(report) => BanksCleared { report, failed: None },
            Err(e) => BanksCleared { report: ClearReport { deleted: None, message: String::new() }, failed: Some(e) },
        }
    }
}

/// The ids of the sessions whose conversation `document` may be (see
/// [`mneme_core::is_session_document`]): itself, and each of its beginnings that ends before a
/// `-`, of which it is a later part or a slice.
fn sessions_of_document(document: &str) -> impl Iterator<Item = &str> {
    let beginnings = document.match_indices('-').map(|(i, _)| &document[..i]);
    beginnings.chain(std::iter::once(document)).filter(|id| mneme_core::is_session_document(id, document))
}

/// Turns held by a forget or a clear (see [`Sessions::hold_conversations`]).
#[must_use = "the turns are held only until this is dropped"]
pub struct HeldTurns(#[allow(dead_code)] Vec<tokio::sync::OwnedMutexGuard<()>>);

/// The conversation so far was deleted (cleared, or its document forgotten), or is kept as
/// another `retain.mode` stored it: automatic retain drops its pending tail and goes on from the
/// next turn, in a document of its own, instead of storing it again.
pub(super) fn start_after_erasure(s: &mut super::Session) {
    s.pending = None;
    s.hidden_from_turns.clear();
    let seen = (s.turn_prints.len() as i64).max(s.retained_turns);
    if s.retained_turns > s.first_turn {
        s.part = s.part.saturating_add(1);
    }
    s.first_turn = seen;
    s.retained_turns = seen;
    s.sliced.clear();
}
