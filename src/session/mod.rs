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
mod tools;

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

    /// Starts (or re-scopes) a session. Idempotent.
    pub async fn start(&self, req: StartRequest) -> Result<Session, SessionError> {
        validate_id("session_id", &req.session_id)?;
        // (A session known already, from a build that took such ids, goes on.)
        if mneme_core::ends_as_a_session_document(&req.session_id) && self.get(&req.session_id).is_err() {
            return Err(SessionError::Invalid(
                "session_id may not end in -part<n> or -<13 digits>: automatic retain names another session's documents so".into(),
            ));
        }
        if let Some(parent) = req.parent_session_id.as_deref().filter(|p| !p.is_empty()) {
            validate_id("parent_session_id", parent)?;
        }
        if req.cwd.trim().is_empty() {
            return Err(SessionError::Invalid("cwd must be a non-empty path".into()));
        }
        // Each of its folders is looked at for the project: a path longer than any the system
        // opens would cost time in its length squared, and be kept with the session.
        if req.cwd.len() > MAX_CWD_BYTES {
            return Err(SessionError::Invalid(format!(
                "cwd is {} bytes long: a path is at most {MAX_CWD_BYTES} (PATH_MAX)",
                req.cwd.len()
            )));
        }
        // The cwd names the project (and its tag), and tool names are told back to the agent:
        // neither may carry private text, and cutting it out would change what they name.
        if text::has_private_tag(&req.cwd) {
            return Err(SessionError::Invalid("cwd may not contain <private> tags".into()));
        }
        // The project is found from the cwd's folders: a relative path would be read from the
        // daemon's own working directory and name some other project.
        if !std::path::Path::new(&req.cwd).is_absolute() {
            return Err(SessionError::Invalid(format!(
                "cwd must be an absolute path (the agent's working directory), not {:?}",
                req.cwd
            )));
        }
        if let Some(tools) = &req.tools {
            if [&tools.recall, &tools.retain, &tools.reflect]
                .iter()
                .any(|t| t.as_deref().is_some_and(text::has_private_tag))
            {
                return Err(SessionError::Invalid("tools may not contain <private> tags".into()));
            }
            // Kept with the session (in memory and in the spool, for its life): a name of
            // megabytes made every start a megabyte of memory that a restart read back.
            for (field, name) in [("recall", &tools.recall), ("retain", &tools.retain), ("reflect", &tools.reflect)] {
                if name.as_deref().is_some_and(|n| n.chars().count() > MAX_ID_LEN) {
                    return Err(SessionError::Invalid(format!(
                        "tools.{field} is longer than {MAX_ID_LEN} characters (a tool's name)"
                    )));
                }
            }
        }
        if req.agent.as_deref().is_some_and(|a| a.chars().count() > MAX_ID_LEN) {
            return Err(SessionError::Invalid(format!(
                "agent is longer than {MAX_ID_LEN} characters (an agent's name)"
            )));
        }
        let settings = self.settings();
        // The agent's name is free text: its private spans are dropped like a memory's.
        let mut req = req;
        if settings.retain.strip_private {
            req.agent = req.agent.as_deref().map(text::strip_private).filter(|a| !a.trim().is_empty());
        }
        // An alias's parent is a session of its own: naming an alias names its parent, and a
        // session never becomes the alias of its own alias (no cycles, one level).
        let parent = req
            .parent_session_id
            .as_deref()
            .filter(|p| !p.is_empty() && *p != req.session_id)
            .and_then(|p| self.get(p).ok())
            .and_then(|named| match &named.parent {
                Some(root) => self.get(root).ok(),
                None => Some(named),
            })
            .filter(|p| p.id != req.session_id);
        let project = match &parent {
            Some(p) => p.project.clone(),
            None => {
                // Finding the project walks the file system: not on the async worker.
                let cwd = req.cwd.clone();
                tokio::task::spawn_blocking(move || project_label(std::path::Path::new(&cwd)))
                    .await
                    .map_err(|e| SessionError::Invalid(format!("cannot work out the project of cwd: {e}")))?
            }
        };
        // The project is named by the folder the cwd leads to (through a symbolic link, or a
        // worktree's main checkout), which the check of the cwd's own text does not see.
        if text::has_private_tag(&project) {
            return Err(SessionError::Invalid(
                "cwd leads to a project folder whose name holds a <private> tag (through a symbolic link or a worktree's main checkout): the name is stored as the project's tag".into(),
            ));
        }
        // Moving to another scope, the session's conversation so far stays where it is stored:
        // its pending tail is queued there first (see `Session::move_to`). Taken before the
        // ended record is read: an end between the two left a resume starting from nothing.
        let _turn = self.inner.turns.lock(&req.session_id).await;
        // A session started again under the id of one that ended goes on where it stopped.
        let ended: Ended = match self.get(&req.session_id) {
            Ok(_) => Ended::default(),
            Err(_) => (self.inner.spool.record(ENDED_RECORD, &req.session_id).await?)
                .and_then(|r| serde_json::from_str(&r).ok())
                .unwrap_or_default(),
        };
        // Scoped under the settings in force now, not those read before the awaits above: a
        // reload in between re-scoped the sessions it found, and this one (or the parent whose
        // scope an alias copied) was not yet among them.
        let scope = scope::scope_of_project(&self.settings(), &project);
        self.queue_tail_before_move(&req.session_id, &scope).await?;
        // An ended session's record from an earlier mneme does not say where its conversation
        // was stored, nor what its document holds: it goes on in a part of its own.
        let earlier_ended = ended.scope.is_none() && (ended.retained_turns > ended.first_turn || ended.part > 0);
        // Ended under another `retain.mode`: its next turns go in a part of their own.
        let mode_changed = ended.retain_mode.as_deref().is_some_and(|m| m != self.settings().retain.mode.as_str());
        let (session, rescoped) = {
            let mut map = self.inner.map.locked();
            let s = map.entry(req.session_id.clone()).or_insert_with(|| {
                let mut s = Session {
                    id: req.session_id.clone(),
                    cwd: req.cwd.clone(),
                    agent: None,
                    parent: None,
                    // Where it was: started in another scope, it moves (below).
                    scope: ended.scope.clone().unwrap_or_else(|| scope.clone()),
                    project: project.clone(),
                    recalled: false,
                    block: None,
                    retained_turns: ended.retained_turns,
                    last_seen: 0,
                    tools: None,
                    pending: None,
                    last_prompt: None,
                    last_prompt_left_private: false,
                    last_prompt_closes: 0,
                    last_prompt_opens: None,
                    last_prompt_open_before: None,
                    last_prompt_turns_before: None,
                    open_at_part_start: ended.open_at_part_start,
                    open_at_end: ended.open_at_end,
                    part: ended.part,
                    turn_prints: ended.turn_prints.clone(),
                    first_turn: ended.first_turn,
                    instructions: None,
                    last_turn_document: ended.last_turn_document,
                    previous_part_prints: Vec::new(),
                    previous_part_open_at_start: 0,
                    turns_had_off: ended.turns_had_off.clone(),
                    last_reply_print: ended.last_reply_print,
                    recent_reply_prints: ended.recent_reply_prints.clone(),
                    hidden_from_turns: ended.hidden_from_turns.clone(),
                    sliced: ended.sliced.clone(),
                    alone_slices: Vec::new(),
                    part_stored: ended.part_stored,
                    format: SESSION_FORMAT,
                    commands_unseen: ended.format < 2 && !ended.turn_prints.is_empty(),
                    commands_since_upgrade: Vec::new(),
                };
                if earlier_ended || ended.erased || mode_changed {
                    clear::start_after_erasure(&mut s);
                }
                s
            });
            // A new cwd (or parent) re-scopes.
            let rescoped = s.move_to(&scope, &project);
            // A start begins a new context for the agent (a new process, a compaction, a
            // resume): its prompt cache starts over, so its instructions are asked afresh.
            s.instructions = None;
            s.cwd = req.cwd.clone();
            s.agent = req.agent.clone().or(s.agent.take());
            s.parent = parent.as_ref().map(|p| p.id.clone());
            s.project = project;
            if req.tools.is_some() {
                s.tools = req.tools.clone();
            }
            (s.clone(), rescoped)
        };
        self.save(&session.id).await?;
        self.trim_in_background();
        // Its subagents move with it (their retains already do, see `route`): a clear, a
        // compaction or the instructions of one would otherwise name the old project. A session
        // that became another's subagent hands its own to that one (aliases are one level): they
        // kept the scope they copied, and a clear of one deleted the old project's memories.
        let root = session.parent.as_ref();
        if rescoped || root.is_some() {
            let (id, scope, project) = (&session.id, &session.scope, &session.project);
            self.update_each(|s| {
                if s.parent.as_ref() != Some(id) {
                    return false;
                }
                let handed = root.is_some_and(|root| {
                    s.parent = Some(root.clone());
                    true
                });
                s.move_to(scope, project) | handed
            })
            .await?;
        }
        // Preparing the scope (e.g. a bank's mission) may wait on a server: never on the agent.
        let (backend, scope, id) = (self.backend(), session.scope.clone(), session.id.clone());
        tokio::spawn(async move {
            if let Err(e) = backend.start(&scope).await {
                tracing::warn!(session = id, "backend could not prepare {}: {e}", scope.bank);
            }
        });
        // Without this session's turn lock: the one it ends takes its own, and two starts
        // ending each other's session waited for each other for ever.
        drop(_turn);
        self.keep_up_with_the_trim().await;
        Ok(session)
    }

    /// A session of a record an earlier mneme saved ([`SESSION_FORMAT`]): one of format 0 keeps
    /// what it retained as stored (its pending tail is queued), and goes on from its next turn in
    /// a part of its own; one of format 1 goes on in its part, its turns placed among the slash
    /// commands its transcripts now hold ([`Session::commands_unseen`], set at load).
    async fn go_on_in_a_part_of_its_own(&self, id: &str) -> Result<(), SpoolError> {
        let Ok(session) = self.get(id) else { return Ok(()) };
        let pending = session.pending.as_ref().filter(|p| p.user_turns > session.retained_turns && session.format < 1);
        if let Some(pending) = pending {
            self.queue_pending(&session, pending).await?;
        }
        let updated = self.update(id, |s| {
            if s.format < 1 {
                clear::start_after_erasure(s);
            }
            s.format = SESSION_FORMAT;
        });
        match updated {
            Some(s) => self.save(&s.id).await,
            None => Ok(()),
        }
    }

    /// Queues the pending tail of session `id` under its scope when it is about to move to
    /// `scope` (see [`Session::move_to`]). The caller holds the session's turn lock.
    async fn queue_tail_before_move(&self, id: &str, scope: &Scope) -> Result<(), SpoolError> {
        let Ok(session) = self.get(id) else { return Ok(()) };
        if session.scope == *scope || session.parent.is_some() {
            return Ok(());
        }
        match session.pending.as_ref().filter(|p| p.user_turns > session.retained_turns) {
            Some(pending) => self.queue_pending(&session, pending).await,
            None => Ok(()),
        }
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

    /// Forgets the sessions idle past [`SESSION_TTL`] (their pending tail queued first) and the
    /// records of sessions ended that long ago, as a start does; returns how many sessions. Run
    /// periodically: a daemon that ran for months kept every session it had seen.
    pub async fn forget_expired(&self) -> usize {
        self.seen_no_later_than(unix_now());
        let cutoff = unix_now().saturating_sub(SESSION_TTL.as_secs());
        let expired = |s: &Session| s.last_seen != 0 && s.last_seen < cutoff;
        let ids: Vec<String> = self.inner.map.locked().values().filter(|s| expired(s)).map(|s| s.id.clone()).collect();
        // Ended, not forgotten: one that comes back goes on where it stopped, as after an end.
        // Forgotten whole, it began again at its first part, and a history compacted since
        // replaced that document (review63 #4).
        let n = self.end_each(ids, expired, "a session idle past the TTL").await;
        forget_long_ended(&self.inner.spool).await;
        n
    }

    /// Past `max` live sessions, ends the least recently seen down to nine tenths of it, as
    /// [`Self::end`] does; returns how many.
    pub async fn forget_least_recent(&self, max: usize) -> usize {
        let (ids, seen_by) = {
            let map = self.inner.map.locked();
            if map.len() <= max {
                return 0;
            }
            let mut by_age: Vec<(u64, &String)> = map.values().map(|s| (s.last_seen, &s.id)).collect();
            by_age.sort_unstable();
            by_age.truncate(map.len() - max * 9 / 10);
            let seen_by = by_age.last().map_or(0, |(seen, _)| *seen);
            (by_age.into_iter().map(|(_, id)| id.clone()).collect::<Vec<_>>(), seen_by)
        };
        // Ended, not forgotten: one that comes back (a session used only through its tools is
        // saved, and so seen, only at its starts) goes on where it stopped, as after an end.
        let n = self.end_each(ids, |s| s.last_seen <= seen_by, "a least recently seen session").await;
        if n > 0 {
            tracing::info!("ended the {n} least recently seen sessions: more than {max} were live");
        }
        n
    }

    /// After a start: forgets the least recently seen sessions in the background once there are
    /// more than the most kept (one pass at a time).
    fn trim_in_background(&self) {
        if self.inner.map.locked().len() <= self.inner.max_sessions {
            return;
        }
        let sessions = self.clone();
        tokio::spawn(async move {
            let max = sessions.inner.max_sessions;
            // A pass under way (or a start's, see `keep_up_with_the_trim`) finds these too.
            let Ok(gate) = sessions.inner.trim_gate.try_lock() else { return };
            // Pass after pass while past the most: the starts made during a pass (ends are
            // slower than starts) were left, and nothing trimmed them after the last start
            // (review112 #3: 40,000 starts left 15,944 live sessions).
            let mut ended_some = true;
            while ended_some && sessions.inner.map.locked().len() > max {
                ended_some = sessions.forget_least_recent(max).await > 0;
            }
            drop(gate);
            // A start between the last look and the gate let go did not begin a pass. (None
            // again after a pass that ended nothing: a full disk, say, until the next start.)
            if ended_some {
                sessions.trim_in_background();
            }
        });
    }

    /// A start made while the live sessions are past the most by a tenth waits for a pass
    /// that brings them down to the most (one at a time: the others wait for it, and find it
    /// done). A client starting sessions faster than a pass ends them (each end writes the
    /// spool) grew the daemon past the most for as long as it went on (review112 #3); now it
    /// goes at the pace of the ends.
    async fn keep_up_with_the_trim(&self) {
        let max = self.inner.max_sessions;
        let past = || self.inner.map.locked().len() > max + (max / 10).max(1);
        if !past() {
            return;
        }
        let _gate = self.inner.trim_gate.lock().await;
        if past() {
            self.forget_least_recent(max).await;
        }
    }

    /// Ends each of the sessions `ids` that is still `due` (one may have been seen since it was
    /// picked), as [`Self::end`] does, its failure logged as `what`'s; returns how many.
    async fn end_each(&self, ids: Vec<String>, due: impl Fn(&Session) -> bool, what: &str) -> usize {
        let mut n = 0;
        for id in ids {
            if self.get(&id).is_ok_and(|s| !due(&s)) {
                continue;
            }
            match self.end(&id, Delivery::Background).await {
                Ok(_) => n += 1,
                Err(e) => tracing::warn!(session = id, "cannot end {what}: {e}"),
            }
        }
        n
    }

    /// Queues the pending tail of every session idle for `idle` or longer; returns how many.
    /// Run periodically and at shutdown: an agent that stops without saying so (closed, crashed)
    /// still has its last turns retained.
    pub async fn retain_idle(&self, idle: Duration) -> usize {
        self.seen_no_later_than(unix_now());
        let cutoff = unix_now().saturating_sub(idle.as_secs());
        let is_idle = |s: &Session| s.pending.is_some() && s.last_seen <= cutoff;
        let idle_sessions: Vec<String> =
            self.inner.map.locked().values().filter(|s| is_idle(s)).map(|s| s.id.clone()).collect();
        let mut n = 0;
        for id in idle_sessions {
            // Under the session's turn lock, looked at again: a turn that ended meanwhile has
            // queued or replaced the tail, which this would queue a second time or wipe.
            let _turn = self.inner.turns.lock(&id).await;
            let Some(s) = self.get(&id).ok().filter(is_idle) else { continue };
            let Some(pending) = &s.pending else { continue };
            match self.queue_pending(&s, pending).await {
                Ok(()) => {
                    n += 1;
                    // Nothing more is coming from an idle session: deliver now, not on a timer.
                    self.flush(s.queue_id(), Delivery::Background).await;
                }
                Err(e) => tracing::warn!(session = s.id, "cannot retain the idle session's last turns: {e}"),
            }
        }
        n
    }

    /// Sessions last seen after `now` (the wall clock was set back since) count as seen now: they
    /// were idle, or expired, only once the clock came back to where it had been, and their
    /// pending turns waited that long, a day for a clock set back a day (review63 #2).
    fn seen_no_later_than(&self, now: u64) {
        for s in self.inner.map.locked().values_mut().filter(|s| s.last_seen > now) {
            s.last_seen = now;
        }
    }

    /// Tells the idle sweep that `retain.idle_after` changed (a reload).
    pub fn idle_after_changed(&self) {
        self.inner.idle_after_changed.notify_one();
    }

    /// Resolves once `retain.idle_after` has changed since the last call; a change made while no
    /// one was waiting is kept for the next.
    pub async fn idle_after_change(&self) {
        self.inner.idle_after_changed.notified().await;
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
