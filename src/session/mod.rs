//! Agent-session semantics, the same for every backend (ARCHITECTURE.md traces a retain and a
//! recall through them). This module is the registry: starting, re-scoping, persisting and ending sessions (kept in the spool, so a restarted daemon
//! still knows them). What a session does lives beside it:
//!
//! - `record`: a session as the spool keeps it, and what is remembered of one that ended;
//! - [`scope`]: which bank and tags a session writes to;
//! - `tools`: the retain, recall and reflect tools;
//! - `auto`: first-turn automatic recall, automatic retain on its cadence (and of the tail a
//!   session leaves when it ends or goes idle), compaction context;
//! - `placement`: where the turns a client sends stand in the session's current part;
//! - `spans`: `<private>` spans carried across a transcript's messages and its current turn;
//! - `block`: the first-turn `<memories>` block and the query it is recalled with;
//! - `guide`: the developer instructions, naming the tools the client really has;
//! - `clean`: what is removed from text before it is stored (private spans, recalled blocks);
//! - `clear`: deleting a scope's memories.

mod auto;
mod block;
mod clean;
mod clear;
mod guide;
mod itself;
mod overlap;
mod part;
mod placement;
mod record;
mod rescope;
mod retain;
mod scope;
mod slices;
mod spans;
mod start;
mod tools;
mod upkeep;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use mneme_core::{text, BackendError, Scope};
use serde::{Deserialize, Serialize};

use crate::config::Settings;
use crate::lock::MutexExt;
use crate::metrics::Metrics;
use crate::notices::Notices;
use crate::queue::{FlushReport, Queue};
use crate::spool::{Spool, SpoolError};
use crate::state::DaemonState;

pub use auto::TurnEnd;
pub use block::memory_block;
pub use clean::{clean as clean_text, clean_imported_all, clean_imported_each, clean_within, is_command_echo};
pub use clear::{ClearOutcome, ClearRequest, HeldTurns};
pub use guide::{guide, Behaviour, OFF_GUIDE};
pub use placement::fingerprint;
use record::{Ended, ENDED_KEPT, ENDED_RECORD};
pub use record::{PendingRetain, Session, StoredPart, SESSION_FORMAT};
pub use scope::{banks_of_configuration, cwd_to_send, project_label, scope_for, MAX_LABEL_BYTES};
pub use tools::{
    filter_tags, queued_message, recall_text, recall_timed_out, retained_message, shown_once, RecallAnswer, Retained,
    OFF_MESSAGE,
};

/// How often a session record a deletion could not save is tried again.
const SAVE_RETRY: Duration = Duration::from_secs(1);

/// Longest accepted session id.
const MAX_ID_LEN: usize = 256;

/// What can go wrong in a session operation; the HTTP layer maps each to a status.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// No session with that id.
    /// (A long id is quoted cut: an error's length stays bounded.)
    #[error("unknown session {}; start it with POST /v1/sessions", mneme_core::text::quoted_unless_private(.0))]
    NotFound(String),
    /// The caller sent something unusable.
    #[error("{0}")]
    Invalid(String),
    /// The backend failed.
    #[error("{0}")]
    Backend(#[from] BackendError),
    /// The backend failed after mneme did its own part, which `done` says.
    #[error("{error} — {done}")]
    BackendAfter {
        /// What the backend answered.
        error: BackendError,
        /// What was done all the same.
        done: String,
    },
    /// The spool failed: nothing was accepted.
    #[error("{0}")]
    Spool(#[from] SpoolError),
}

/// The names under which the client offers mneme's tools to its model. The instructions name
/// these, so the model is never told to use a tool it does not have.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolNames {
    /// The recall tool, if the client has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recall: Option<String>,
    /// The retain tool, if the client has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retain: Option<String>,
    /// The reflect tool, if the client has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reflect: Option<String>,
}

impl ToolNames {
    /// What a client that names none is assumed to have: tools called `recall` and `retain`
    /// (the first plugins' contract).
    pub fn assumed() -> Self {
        ToolNames { recall: Some("recall".into()), retain: Some("retain".into()), reflect: None }
    }
}

/// Sessions idle this long are forgotten at the next start (their spooled items are kept, and
/// their pending tail is retained first).
pub const SESSION_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// Live sessions at most. Past it the least recently seen tenth are ended, as an agent's end
/// does (their pending tail queued first, a resume goes on where they stopped): each is kept in
/// memory, a few KiB with its cwd, and a client starting new sessions in a loop grew the daemon
/// without bound.
pub const MAX_SESSIONS: usize = 10_000;

fn unix_now() -> u64 {
    mneme_core::time::unix_seconds(SystemTime::now())
}

/// Forgets the records of sessions that ended before the last [`ENDED_KEPT`], and of those that
/// matter ([`record::ENDED_THAT_MATTER`]) before the last [`record::ENDED_THAT_MATTER_KEPT`].
async fn forget_long_ended(spool: &Spool) {
    use record::{ENDED_PLAIN, ENDED_THAT_MATTER, ENDED_THAT_MATTER_KEPT};
    for (of, most) in [(ENDED_PLAIN, ENDED_KEPT), (ENDED_THAT_MATTER, ENDED_THAT_MATTER_KEPT)] {
        if let Err(e) = spool.keep_newest_records(ENDED_RECORD, of, most).await {
            tracing::warn!("cannot forget old ended sessions: {e}");
        }
    }
}

/// What a turn is, as far as memory is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// The agent's real work: recalled for and retained.
    Work,
    /// A side request (title, summary, compaction): neither recalled for nor retained.
    Side,
}

/// A session start request.
#[derive(Debug, Clone, Default)]
pub struct StartRequest {
    /// The agent's id.
    pub session_id: String,
    /// Working directory.
    pub cwd: String,
    /// Agent name.
    pub agent: Option<String>,
    /// Makes this an alias of a known session.
    pub parent_session_id: Option<String>,
    /// The tools the client offers (`None`: keep what the session had, or assume the defaults).
    pub tools: Option<ToolNames>,
}

/// Whether a caller waits for the deliveries it set off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Wait, and report what was delivered.
    Wait,
    /// Start them and answer at once (hooks on the prompt path): what is spooled is safe.
    Background,
}

/// All sessions.
#[derive(Clone)]
pub struct Sessions {
    inner: Arc<Inner>,
}

struct Inner {
    /// The settings and backend in force.
    state: DaemonState,
    queue: Queue,
    spool: Spool,
    metrics: Arc<Metrics>,
    notices: Notices,
    map: Mutex<HashMap<String, Session>>,
    turns: TurnLocks,
    /// A session's record is written to the spool one write at a time, each what the session is
    /// when it is written (see [`Sessions::save`]).
    saves: TurnLocks,
    /// Forgets so far: a recalled block or instructions asked before one are not kept (they
    /// may quote what it removed).
    forgets: std::sync::atomic::AtomicU64,
    /// Live sessions at most ([`MAX_SESSIONS`]; smaller in tests).
    max_sessions: usize,
    /// Held by a pass of [`Sessions::forget_least_recent`] in the background and by a start
    /// that waits for one (see [`Sessions::keep_up_with_the_trim`]): one pass at a time.
    trim_gate: tokio::sync::Mutex<()>,
    /// `retain.idle_after` was changed by a reload: the idle sweep's pass is due on the new
    /// interval, not at the end of the old one.
    idle_after_changed: tokio::sync::Notify,
}

/// A session's automatic work (first-turn recall, automatic retain, its end) runs one call at a
/// time: two concurrent calls would each read what is recalled or retained and both act on it
/// (two blocks injected, turns sliced from the same count). One lock per session id: a session
/// only ever waits for itself. (Locks shared by hash made an unrelated session wait out another's
/// recall, outside its own timeout, until the agent's hook gave up and tripped its breaker.)
type TurnLocks = crate::lock::KeyedLocks;

/// The longest `cwd` a session takes, in bytes: Linux's `PATH_MAX`.
const MAX_CWD_BYTES: usize = 4096;

impl Sessions {
    /// Forgets done so far (see [`Inner::forgets`]).
    fn forgets(&self) -> u64 {
        self.inner.forgets.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Sessions over a queue; loads the sessions a previous run saved. Sessions idle past
    /// [`SESSION_TTL`] are forgotten, their pending tail retained first.
    pub async fn load(
        state: DaemonState,
        queue: Queue,
        spool: Spool,
        notices: Notices,
        metrics: Arc<Metrics>,
    ) -> Result<Self, SpoolError> {
        let mut map = HashMap::new();
        let mut expired = Vec::new();
        let cutoff = unix_now().saturating_sub(SESSION_TTL.as_secs());
        for (id, record) in spool.sessions().await? {
            match serde_json::from_str::<Session>(&record) {
                Ok(s) => {
                    if s.last_seen != 0 && s.last_seen < cutoff {
                        expired.push(id.clone());
                    }
                    map.insert(id, s);
                }
                Err(e) => tracing::warn!(session = id, "ignoring an unreadable saved session: {e}"),
            }
        }
        forget_long_ended(&spool).await;
        // Format 1 counted no slash command as a turn: the next transcript is placed among its
        // commands (see `Session::commands_unseen`); format 0 knew less, see below.
        for s in map.values_mut().filter(|s| s.format < SESSION_FORMAT) {
            s.commands_unseen |= !s.turn_prints.is_empty();
        }
        let earlier: Vec<String> = map.values().filter(|s| s.format < SESSION_FORMAT).map(|s| s.id.clone()).collect();
        let sessions = Sessions {
            inner: Arc::new(Inner {
                state,
                queue,
                spool,
                metrics,
                notices,
                map: Mutex::new(map),
                turns: TurnLocks::default(),
                saves: TurnLocks::default(),
                forgets: Default::default(),
                max_sessions: MAX_SESSIONS,
                trim_gate: Default::default(),
                idle_after_changed: tokio::sync::Notify::new(),
            }),
        };
        for id in earlier {
            sessions.go_on_in_a_part_of_its_own(&id).await?;
        }
        // Ended, as one idle that long while the daemon runs is: started again, it goes on where
        // it stopped.
        let n = sessions.end_each(expired, |_| true, "a session idle past the TTL").await;
        if n > 0 {
            tracing::info!("ended {n} sessions idle for more than {} days", SESSION_TTL.as_secs() / 86400);
        }
        Ok(sessions)
    }

    /// The settings in force.
    pub fn settings(&self) -> Arc<Settings> {
        self.inner.state.settings()
    }

    /// Applies `change` to every session, and saves those it says it changed.
    pub(super) async fn update_each(&self, change: impl FnMut(&mut Session) -> bool) -> Result<(), SpoolError> {
        for id in self.change_each(change) {
            self.save(&id).await?;
        }
        Ok(())
    }

    /// Applies `change` to every session in memory; returns the ids of those it changed.
    fn change_each(&self, mut change: impl FnMut(&mut Session) -> bool) -> Vec<String> {
        self.inner.map.locked().values_mut().filter_map(|s| change(s).then(|| s.id.clone())).collect()
    }

    /// [`Sessions::update_each`] after a deletion that is done: a failure to save is no reason to
    /// answer that nothing was deleted. A record that cannot be saved (a full disk) is saved
    /// again each second in the background until it is, since it may hold a recalled block
    /// quoting what was deleted (the session in memory has it cleared already).
    pub(super) async fn update_each_after_erasure(&self, change: impl FnMut(&mut Session) -> bool) {
        let unsaved = self.save_all(self.change_each(change)).await;
        let Some(first) = unsaved.first() else { return };
        tracing::warn!(
            "cannot save {} session record(s) after a deletion ({}): trying again each second",
            unsaved.len(),
            first.1
        );
        let sessions = self.clone();
        let mut unsaved: Vec<String> = unsaved.into_iter().map(|(id, _)| id).collect();
        tokio::spawn(async move {
            while !unsaved.is_empty() {
                tokio::time::sleep(SAVE_RETRY).await;
                unsaved = sessions.save_all(unsaved).await.into_iter().map(|(id, _)| id).collect();
            }
        });
    }

    /// Saves each of `ids`; returns those that could not be, with why.
    async fn save_all(&self, ids: Vec<String>) -> Vec<(String, SpoolError)> {
        let mut unsaved = Vec::new();
        for id in ids {
            if let Err(e) = self.save(&id).await {
                unsaved.push((id, e));
            }
        }
        unsaved
    }

    /// How many sessions are known.
    pub fn count(&self) -> usize {
        self.inner.map.locked().len()
    }

    /// A copy of a session.
    pub fn get(&self, id: &str) -> Result<Session, SessionError> {
        self.inner.map.locked().get(id).cloned().ok_or_else(|| SessionError::NotFound(shown_id(id)))
    }

    /// The scope and queue of a session, without copying the rest (the retain path is hot). An
    /// alias has its parent's scope as it is now: the parent started again in another folder
    /// moves its subagents with it (their copy, taken when they started, named the old project).
    fn route(&self, id: &str) -> Result<(Scope, String), SessionError> {
        let map = self.inner.map.locked();
        let s = map.get(id).ok_or_else(|| SessionError::NotFound(shown_id(id)))?;
        let scope = s.parent.as_deref().and_then(|p| map.get(p)).map_or(&s.scope, |parent| &parent.scope);
        Ok((scope.clone(), s.queue_id().to_owned()))
    }

    /// Ends a session: queues the tail of its conversation not retained yet, flushes its queue
    /// and forgets it.
    pub async fn end(&self, id: &str, delivery: Delivery) -> Result<FlushReport, SessionError> {
        let session = {
            let _turn = self.inner.turns.lock(id).await;
            let session = self.get(id)?;
            let mut part_stored = session.part_stored;
            if let Some(pending) = &session.pending {
                self.queue_pending(&session, pending).await?;
                part_stored = self.get(id).map_or(part_stored, |s| s.part_stored);
            }
            // What is retained now: the turns before, and the tail just queued.
            let retained_turns = session.retained_turns.max(session.pending.as_ref().map_or(0, |p| p.user_turns));
            if retained_turns > 0 || session.part > 0 || session.open_at_end > 0 {
                let ended = Ended {
                    at: unix_now(),
                    part: session.part,
                    retained_turns,
                    turn_prints: session.turn_prints.clone(),
                    first_turn: session.first_turn,
                    open_at_part_start: session.open_at_part_start,
                    open_at_end: session.open_at_end,
                    last_turn_document: session.last_turn_document,
                    sliced: session.sliced.clone(),
                    part_stored,
                    scope: Some(session.scope.clone()),
                    format: if session.commands_unseen { 1 } else { SESSION_FORMAT },
                    last_reply_print: session.last_reply_print,
                    recent_reply_prints: session.recent_reply_prints.clone(),
                    hidden_from_turns: session.hidden_from_turns.clone(),
                    erased: false,
                    retain_mode: Some(self.settings().retain.mode.as_str().to_owned()),
                    turns_had_off: session.turns_had_off.clone(),
                };
                let record = serde_json::to_string(&ended).expect("plain data serializes");
                self.inner.spool.save_record(ENDED_RECORD, id, record).await?;
            }
            // Forgotten before the lock is let go: a call that comes in while the queue
            // delivers (a resumed session's start, a late turn) finds the session ended, not a
            // session about to be deleted under it.
            self.forget_session(id).await?;
            session
        };
        Ok(self.flush(session.queue_id(), delivery).await)
    }

    /// Flushes a queue, waiting or not.
    async fn flush(&self, queue_id: &str, delivery: Delivery) -> FlushReport {
        match delivery {
            Delivery::Wait => self.inner.queue.flush(queue_id).await,
            Delivery::Background => {
                let (queue, id) = (self.inner.queue.clone(), queue_id.to_owned());
                tokio::spawn(async move { queue.flush(&id).await });
                FlushReport::default()
            }
        }
    }

    /// Whether the backend in force stores memories (not `off`).
    pub fn memory_is_on(&self) -> bool {
        self.backend().capabilities().stores
    }

    fn backend(&self) -> Arc<dyn mneme_core::MemoryBackend> {
        self.inner.state.backend()
    }

    fn update(&self, id: &str, f: impl FnOnce(&mut Session)) -> Option<Session> {
        let mut map = self.inner.map.locked();
        let s = map.get_mut(id)?;
        f(s);
        Some(s.clone())
    }

    /// As [`Sessions::update`], the session only when `f` says it changed it.
    fn update_if(&self, id: &str, f: impl FnOnce(&mut Session) -> bool) -> Option<Session> {
        let mut map = self.inner.map.locked();
        let s = map.get_mut(id)?;
        f(s).then(|| s.clone())
    }

    async fn save(&self, id: &str) -> Result<(), SpoolError> {
        // The session as it is now, read and written under its save lock: a copy taken before
        // (a forget's pass over every session, without their turn locks) and written after an
        // agent-end saved a newer one put the older record back, and a restart lost the turns
        // it had kept. One ended meanwhile is not saved (a record would bring it back).
        let _order = self.inner.saves.lock(id).await;
        let Some(live) = self.inner.map.locked().get(id).cloned() else { return Ok(()) };
        let record = self.record_of(&live);
        let saved = self.inner.spool.save_session(id, record).await;
        self.inner.queue.accepted(id, saved).await
    }

    /// [`Sessions::save`] where the answer does not depend on it (a route that is never an
    /// error to the agent): a failure (a full disk) is logged; the session in memory has it, and
    /// the next save writes it. `what` names what was being kept.
    async fn save_or_warn(&self, id: &str, what: &str) {
        if let Err(e) = self.save(id).await {
            tracing::warn!(session = id, "cannot save the session's {what}: {e}");
        }
    }

    /// Forgets session `id`: its record out of the spool, then out of the map (a record that
    /// could not be deleted would bring it back at the next start), in order with its saves (a
    /// save that read it before would write the record back after the delete).
    async fn forget_session(&self, id: &str) -> Result<(), SpoolError> {
        let _order = self.inner.saves.lock(id).await;
        self.inner.spool.delete_session(id).await?;
        self.inner.map.locked().remove(id);
        Ok(())
    }

    /// A session's record as it is saved (marking the live one seen now).
    fn record_of(&self, s: &Session) -> String {
        // This build's format, whatever was read: a record a later build saved loses what this
        // one does not know, and must not say it has it.
        let mut record = Session { last_seen: unix_now(), format: SESSION_FORMAT, ..s.clone() };
        // The prompt under way is written down only for automatic retain (a lagging transcript
        // still has its turn retained whole); while it keeps nothing (memory `off`, or
        // `retain.auto = false`), nothing of what the user says reaches the disk: it is kept in
        // memory, for counting the turn, and lost with a restart.
        if !(self.settings().retain.auto && self.inner.state.takes_retains()) {
            record.last_prompt = None;
        }
        if let Some(live) = self.inner.map.locked().get_mut(&s.id) {
            live.last_seen = record.last_seen;
        }
        serde_json::to_string(&record).expect("session serializes")
    }
}

fn validate_id(field: &str, id: &str) -> Result<(), SessionError> {
    if id.trim().is_empty() {
        return Err(SessionError::Invalid(format!("{field} must not be empty")));
    }
    if id.chars().count() > MAX_ID_LEN {
        return Err(SessionError::Invalid(format!("{field} is longer than {MAX_ID_LEN} characters")));
    }
    if text::has_private_tag(id) {
        return Err(SessionError::Invalid(format!(
            "{field} may not contain <private> tags: ids are stored as they are"
        )));
    }
    if id.chars().any(char::is_control) || id.contains('/') {
        return Err(SessionError::Invalid(format!("{field} may not contain control characters or '/'")));
    }
    // A URL reads "." and ".." as its own steps: `/v1/sessions/../retain` is `/v1/retain`.
    if matches!(id, "." | "..") {
        return Err(SessionError::Invalid(format!("{field} may not be \".\" or \"..\" (a URL cannot name it)")));
    }
    Ok(())
}

/// A session id as error messages show it: one holding a `<private>` tag is not repeated (it
/// would reach the logs).
fn shown_id(id: &str) -> String {
    if text::has_private_tag(id) {
        "(an id with <private> text)".to_owned()
    } else {
        id.to_owned()
    }
}

#[cfg(test)]
mod tests;
