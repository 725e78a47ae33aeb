//! How a session begins or goes on: its record made or found, its scope settled (a move to
//! another project's bank queues what the old one was owed), and the live sessions kept within
//! [`MAX_SESSIONS`](super::MAX_SESSIONS).

use super::*;

impl Sessions {
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
    pub(super) async fn go_on_in_a_part_of_its_own(&self, id: &str) -> Result<(), SpoolError> {
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
    pub(super) async fn queue_tail_before_move(&self, id: &str, scope: &Scope) -> Result<(), SpoolError> {
        let Ok(session) = self.get(id) else { return Ok(()) };
        if session.scope == *scope || session.parent.is_some() {
            return Ok(());
        }
        match session.pending.as_ref().filter(|p| p.user_turns > session.retained_turns) {
            Some(pending) => self.queue_pending(&session, pending).await,
            None => Ok(()),
        }
    }
}
