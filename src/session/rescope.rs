//! Sessions follow a change of `memory.bank_id`, `bank_id_prefix`, `scoping` or backend, whether
//! it came by a live reload or was made while mneme was down.

use serde::{Deserialize, Serialize};

use super::scope::scope_of_project;
use super::Sessions;
use crate::config::Settings;
use crate::lock::MutexExt;
use crate::spool::SpoolError;
use mneme_core::BackendId;

/// What the saved sessions were scoped and served under, kept in the spool: a restart compares
/// it with the settings it starts with. (Clients start a session once; a session kept across a
/// restart kept writing to the old bank.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ScopedUnder {
    bank: String,
    scoping: String,
    backend: String,
    /// `retain.mode` (none in a record of a build before it was kept: not known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retain_mode: Option<String>,
    /// `retain.strip_private` (none in a record of a build before it was kept: not known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    strip_private: Option<bool>,
}

impl ScopedUnder {
    fn of(settings: &Settings) -> Self {
        ScopedUnder {
            bank: settings.base_bank(),
            scoping: settings.memory.scoping.as_str().to_owned(),
            backend: settings.memory.backend.to_string(),
            retain_mode: Some(settings.retain.mode.as_str().to_owned()),
            strip_private: Some(settings.retain.strip_private),
        }
    }
}

const RECORD_KIND: &str = "daemon";
const RECORD_KEY: &str = "scoped-under";

impl Sessions {
    /// Brings every session in line with the settings in force, where they differ from those
    /// the sessions were scoped under (at a start: those of the last run): a new bank or scoping
    /// re-scopes them, a new backend drops their cached instructions, and a new `retain.mode`
    /// or `retain.strip_private` goes on from each session's next turn (changed while mneme was stopped, or killed before
    /// its watcher read the file, a full-session document after last-turn slices held their
    /// turns again).
    pub async fn follow_settings(&self) -> Result<(), SpoolError> {
        let now = ScopedUnder::of(&self.settings());
        let spool = &self.inner.spool;
        let kept: Option<ScopedUnder> =
            spool.record(RECORD_KIND, RECORD_KEY).await?.and_then(|r| serde_json::from_str(&r).ok());
        match &kept {
            Some(ScopedUnder { bank, scoping, backend, retain_mode, strip_private }) => {
                if *backend != now.backend {
                    // Switched while mneme was down (live, the reload did this before the switch).
                    // From `off` no conversation was stored: what the sessions retained while a
                    // live switch opened the store begins theirs in it (review79 #2).
                    if backend.as_str() != BackendId::Off.to_string() {
                        self.store_changing().await?;
                    }
                    self.backend_switched().await?;
                }
                // A new `retain.strip_private` too goes on from the next turn: cleaned by the
                // new rule, the turns retained before differed from those placed, and the whole
                // history went again into a new part, `<private>` text written while spans were
                // removed stored with it (review73 #4).
                let mode_changed = retain_mode.is_some() && *retain_mode != now.retain_mode;
                let strip_changed = strip_private.is_some() && *strip_private != now.strip_private;
                if mode_changed || strip_changed {
                    self.retain_mode_changed().await?;
                }
                if *bank != now.bank || *scoping != now.scoping {
                    self.rescope().await?;
                }
            }
            // A spool of a build before this record: what its sessions were scoped under is not
            // known, so they are scoped again (from their labels: moves only those that differ).
            None => self.rescope().await?,
        }
        if kept.as_ref() != Some(&now) {
            let record = serde_json::to_string(&now).expect("serializable");
            spool.save_record(RECORD_KIND, RECORD_KEY, record).await?;
        }
        Ok(())
    }

    /// Re-scopes every session under the settings in force: a new bank or scoping takes effect
    /// at once; sessions whose scope changed recall afresh. A session keeps the project it was
    /// started in (its label, found on the disk then): a worktree removed since does not move it
    /// to another project's tag.
    pub async fn rescope(&self) -> Result<(), SpoolError> {
        let settings = self.settings();
        let roots = self.root_projects();
        // The conversations so far stay where they are stored: the pending tail of each that
        // moves is queued there first, and it moves before its turn lock is let go (a turn
        // between the two left a tail that went with it, its whole part: see `Session::move_to`).
        for id in roots.keys() {
            let _turn = self.inner.turns.lock(id).await;
            // As it is now: a start while this waited for the lock may have moved it (read
            // before, it was moved back to the project it had left).
            let Some(project) = self.get(id).ok().filter(|s| s.parent.is_none()).map(|s| s.project) else { continue };
            let scope = scope_of_project(&settings, &project);
            self.queue_tail_before_move(id, &scope).await?;
            if let Some(s) = self.update_if(id, |s| s.move_to(&scope, &project)) {
                self.save(&s.id).await?;
            }
        }
        // Aliases (no turns of their own) follow their parents, as they are now.
        let roots = self.root_projects();
        self.update_each(|s| {
            let Some(root) = s.parent.as_deref() else { return false };
            roots.get(root).is_some_and(|project| {
                let scope = scope_of_project(&settings, project);
                s.move_to(&scope, project)
            })
        })
        .await
    }

    /// The store the conversations go to is being replaced by another (a backend switch, another
    /// local file or Hindsight server): each session's conversation so far stays in the store it
    /// was retained to, its pending tail queued first (before the queue drains into the old
    /// store), and its next turns go in a part of their own, as after a move to another bank.
    /// Going on under the same document, a session gave the new store its whole part again, and
    /// every turn before the switch was in both (and `migrate` then put the old store's shorter
    /// version back over the new one's).
    pub async fn store_changing(&self) -> Result<(), SpoolError> {
        for id in self.root_projects().keys() {
            let _turn = self.inner.turns.lock(id).await;
            let Ok(session) = self.get(id) else { continue };
            if let Some(pending) = session.pending.as_ref().filter(|p| p.user_turns > session.retained_turns) {
                self.queue_pending(&session, pending).await?;
            }
            let moved = self.update_if(id, |s| {
                let before = (s.part, s.first_turn, s.retained_turns, s.pending.is_some());
                super::clear::start_after_erasure(s);
                before != (s.part, s.first_turn, s.retained_turns, s.pending.is_some())
            });
            if let Some(s) = moved {
                self.save(&s.id).await?;
            }
        }
        Ok(())
    }

    /// The project of each session that is no alias, by id.
    fn root_projects(&self) -> std::collections::HashMap<String, String> {
        let map = self.inner.map.locked();
        map.values().filter(|s| s.parent.is_none()).map(|s| (s.id.clone(), s.project.clone())).collect()
    }
}
