//! The part's turns stored as documents of their own (slices): the new turns of a transcript
//! sent without its start, and turns sent alone, which a whole transcript completes later.

use std::time::{SystemTime, UNIX_EPOCH};

use mneme_core::text::Message;

use super::auto::{last_turns_cleaned, transcript, transcript_item};
use super::placement::first_message_of_turn;
use super::record::{AloneSlice, MAX_ALONE_SLICES};
use super::{PendingRetain, Session, SessionError, Sessions};
use crate::config::RetainMode;
use crate::spool::SpoolError;

impl Sessions {
    /// The new turns of a transcript sent without its start (too long for one request): it
    /// cannot replace the session's document, which holds that start, nor wait on the cadence
    /// (the next transcript lacks these turns as well), so the pending tail, whose turns this
    /// one may lack, is queued first, and then the new turns, as a document of their own.
    pub(super) async fn retain_tail(
        &self,
        session: &Session,
        history: &[Message],
        each: &[Option<Message>],
        user_turns: i64,
    ) -> Result<usize, SessionError> {
        Ok(self.retain_tail_sliced(session, history, each, user_turns).await?.0)
    }

    /// [`Sessions::retain_tail`], with the document the new turns went to when they are a slice
    /// of the part (`full-session`).
    pub(super) async fn retain_tail_sliced(
        &self,
        session: &Session,
        history: &[Message],
        each: &[Option<Message>],
        user_turns: i64,
    ) -> Result<(usize, Option<String>), SessionError> {
        let mut retained_turns = session.retained_turns;
        let mut queued = 0;
        if let Some(pending) = session.pending.as_ref().filter(|p| p.user_turns > retained_turns) {
            self.queue_pending(session, pending).await?;
            retained_turns = pending.user_turns;
            queued += 1;
        }
        let new_turns = user_turns - retained_turns;
        if new_turns <= 0 {
            return Ok((queued, None));
        }
        let target = last_turns_cleaned(each, history, new_turns);
        let content = transcript(&target);
        match content {
            Some(content) => {
                // In `full-session` mode the part's document leaves these turns out from now on:
                // replaced by a whole transcript that followed (a rewind's shorter branch), it
                // stored them a second time.
                let sent = history.iter().filter(|m| m.role == "user").count() as i64;
                let first = user_turns - new_turns.min(sent);
                let sliced_from = (self.settings().retain.mode == RetainMode::FullSession).then_some(first);
                let document_id = self.turn_document(session);
                let pending = PendingRetain { content, document_id, user_turns, sliced_from };
                self.queue_pending(session, &pending).await?;
                queued += 1;
                return Ok((queued, sliced_from.map(|_| pending.document_id)));
            }
            None => self.mark_retained(&session.id, user_turns).await?,
        }
        Ok((queued, None))
    }

    /// Keeps a turn sent alone, stored as a slice of the part (`document`), for a whole
    /// transcript to complete ([`Session::alone_slices`]).
    pub(super) async fn keep_alone_slice(
        &self,
        session: &Session,
        turn: i64,
        document: String,
    ) -> Result<(), SpoolError> {
        self.save_change(&session.id, false, |s| {
            if s.alone_slices.len() >= MAX_ALONE_SLICES {
                s.alone_slices.remove(0);
            }
            s.alone_slices.push(AloneSlice { part: s.part, turn, document });
        })
        .await
    }

    /// Gives the documents of the part's turns sent alone ([`Session::alone_slices`]) each turn
    /// as a whole transcript holds it (`history`, cleaned: `each`), once the transcript holds the
    /// turn after it (so it is whole): the part's document leaves those turns out, and what the
    /// agent wrote before its last reply was stored nowhere (review87 #6). Those of another part,
    /// or no longer slices (a rewind took them back), are dropped, and so are those a stray close
    /// after them hides (`hidden_before`: see [`Cleaned::hidden_before`]): what was stored of a
    /// turn before the close arrived stays as it was, and the rest of it is hidden (review89 #2).
    pub(super) async fn complete_alone_slices(
        &self,
        session: &Session,
        history: &[Message],
        each: &[Option<Message>],
        hidden_before: usize,
    ) -> Result<(), SessionError> {
        let sliced = |turn: i64| session.sliced.iter().any(|&(from, to)| from <= turn && turn < to);
        let held_whole = |turn: i64| first_message_of_turn(history, turn + 1) < history.len();
        let mut done = Vec::new();
        for slice in &session.alone_slices {
            if slice.part != session.part || !sliced(slice.turn) {
                done.push(slice.clone());
                continue;
            }
            if !held_whole(slice.turn) {
                continue;
            }
            let (from, to) =
                (first_message_of_turn(history, slice.turn), first_message_of_turn(history, slice.turn + 1));
            if from < hidden_before {
                done.push(slice.clone());
                continue;
            }
            let turn: Vec<Message> = each[from..to].iter().flatten().cloned().collect();
            // Wholly hidden in the transcript (spans it shows): the slice keeps what it was given.
            // Its turn counts as retained already, and the part's pending tail stays as it is.
            if let Some(content) = transcript(&turn) {
                let item = transcript_item(&self.settings(), content, slice.document.clone());
                self.inner.queue.enqueue(&session.id, &session.scope, vec![item]).await?;
            }
            done.push(slice.clone());
        }
        if !done.is_empty() {
            self.save_change(&session.id, false, |s| s.alone_slices.retain(|a| !done.contains(a))).await?;
        }
        Ok(())
    }

    /// A document of its own for some of the session's turns, named after the last one it was
    /// given (kept in the session's record, which is saved with the slice that uses the name).
    /// Named by the clock alone, in a process-wide sequence that ran ahead of it under load, a
    /// slice after a restart (or after the clock was set back) could take the name of one stored
    /// before, and replace it: turns acknowledged and stored were lost.
    pub(super) fn turn_document(&self, session: &Session) -> String {
        let mut named = None;
        self.update(&session.id, |s| {
            let (name, ms) = turn_document_name(&s.id, s.last_turn_document.max(session.last_turn_document));
            s.last_turn_document = ms;
            named = Some(name);
        });
        // Ended meanwhile: no record of it keeps names, and its next start begins from its end.
        named.unwrap_or_else(|| turn_document_name(&session.id, session.last_turn_document).0)
    }
}

/// `{session}-{ms}` for a slice of a session's turns that is a document of its own (SPEC §6):
/// the milliseconds past the session's last such name ([`Session::last_turn_document`]).
fn turn_document_name(id: &str, last: u64) -> (String, u64) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let ms = now.max(last.saturating_add(1));
    (format!("{id}-{ms}"), ms)
}
