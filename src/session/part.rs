//! The session's record of its parts: turns passed over while nothing is retained, a part that
//! ends or starts over, the last reply and open spans kept, and the tail queued and counted.

use mneme_core::text::Message;

use super::auto::{transcript, transcript_item, Sent, TurnEnd};
use super::clean::conversation;
use super::itself::{last_turn_itself, turns_themselves};
use super::placement::{
    add_slice, branch_taken, conversation_of, first_message_of_turn, latest_window_past_the_end, place_in_part_past,
    prints_with_window, turns_passed_over, user_prints, without_slices, Placement, MAX_UNKNOWN_TURNS, UNKNOWN_TURN,
};
use super::record::{MAX_RECENT_REPLIES, MAX_TURNS_HAD_OFF, TURN_ITSELF, UNKNOWN_CONVERSATION};
use super::retain::{last_reply_print, last_turn_replies_unseen, part_document, turn_replies};
use super::spans::{carried_into_new_part, cleaned_each, window_opens_inside};
use super::{PendingRetain, Session, SessionError, Sessions, StoredPart};
use crate::config::Settings;
use crate::spool::SpoolError;

impl Sessions {
    /// Turns had while automatic retain keeps nothing (memory `off`, or `retain.auto = false`)
    /// are never retained, not when memory is on again either: the part goes on after them (a
    /// new part when it holds turns already, so its document keeps them). The tail kept before
    /// them was had with memory on: it is queued, and held until a backend stores it.
    pub(super) async fn pass_over_turns(
        &self,
        session: &Session,
        settings: &Settings,
        messages: &[Message],
        end: &TurnEnd,
        shape: Sent,
    ) -> Result<(), SessionError> {
        let history = conversation(messages);
        let known = &session.turn_prints;
        // As in `retain_turns`: a turn sent alone is the part's next turn, read from where the
        // last transcript ended (a part of its own, begun inside its spans, had a whole history
        // sent next read with the span that opened before it counted twice).
        let alone_after_known = shape == Sent::TurnAlone && session.alone_turn_number() > 0;
        // A window read from where it begins, as `retain_turns` reads it (from the part's start,
        // one begun inside a span left prints of its private text: review94 #2).
        let (omitted, open_before) = match (alone_after_known, end.omitted_user_turns) {
            (true, _) => (session.alone_turn_number(), session.alone_turn_opens_inside()),
            (false, 0) => (0, session.open_at_part_start),
            (false, omitted) => (omitted, window_opens_inside(session, omitted, &history)),
        };
        let omitted = i64::try_from(omitted).unwrap_or(i64::MAX);
        let sent = history.iter().filter(|m| m.role == "user").count() as i64;
        let cleaned = cleaned_each(settings, &history, open_before);
        let seen = user_prints(&cleaned.each, &history);
        let mut open_at = (session.open_at_part_start, cleaned.open_at_end);
        // A history no longer than the turns known, their prompts all agreeing, whose last reply
        // is new: from a client that says the user took turns back, the branch (as in
        // `retain_turns`). Taken for a late copy, the part went on counting the turns taken
        // back, and a whole branch sent once memory was on again agreed with the part only up
        // to them: read as rewound there, the turns had while off after it were stored (fuzz4
        // seed 6103: wholly private prompts taken back and sent again print alike).
        let new_reply =
            !seen.is_empty() && seen.len() <= known.len() && last_turn_replies_unseen(session, &history, &cleaned.each);
        let rewound_new_reply = end.rewound && new_reply;
        // Printed as stored (see `retain_turns`): what a stray close hides leaves no print.
        let kept = cleaned.into_kept();
        let kept_seen = user_prints(&kept, &history);
        let placement = match place_in_part_past(known, &seen, session.first_turn) {
            // As in `retain_turns`: the branch, a history of its own here.
            ref placement if end.rewound && branch_taken(known, &seen, session.first_turn, placement).is_some() => {
                Placement::StartsOver
            }
            Placement::Continues if rewound_new_reply && seen.len() < known.len() => Placement::StartsOver,
            Placement::Window(_) if rewound_new_reply && latest_window_past_the_end(known, &seen).is_none() => {
                Placement::StartsOver
            }
            placement => placement,
        };
        let mut reread = None;
        // Where the history's first user turn stands in the conversation, and from where its
        // turns are new (passed over now, to be kept in `turns_had_off`).
        let retained = session.retained_turns.max(session.pending.as_ref().map_or(0, |p| p.user_turns));
        let (first, new_from) = match placement {
            _ if alone_after_known || omitted > 0 => (omitted, retained.max(omitted)),
            Placement::Window(k) => (k as i64, retained),
            Placement::StartsOver | Placement::Rewound(_) => (0, 0),
            Placement::Continues => (0, retained),
        };
        let (prints, user_turns) = match placement {
            _ if alone_after_known => {
                // Past turns passed over unprinted (a window), or whose end never came: unknown
                // (a gap kept only while small, as in `retain_turns`).
                let gap_to = usize::try_from(omitted).unwrap_or(usize::MAX);
                let mut prints = known.clone();
                if gap_to <= known.len().saturating_add(MAX_UNKNOWN_TURNS) {
                    prints.resize(gap_to.max(known.len()), UNKNOWN_TURN);
                    prints.extend(&seen);
                }
                (prints, sent.saturating_add(omitted))
            }
            // Counted from where the client says it starts, and printed there: a whole history
            // holding these turns once memory is on again goes on past them, not over (a
            // history taken to start over was stored whole, the off turns in it: review91 #4).
            // A window of a branch (the client says the user took turns back) that leaves the
            // turns known: the part's turns are the branch's from there, as `retain_turns` takes
            // them. Kept as they were, the turn sent alone next was printed a place the branch
            // never had, and a whole history once memory was on again, read as another
            // conversation, stored it, a turn had with memory off (review120 #8).
            _ if omitted > 0 => {
                let gap_to = usize::try_from(omitted).unwrap_or(usize::MAX);
                let window = prints_with_window(known, gap_to, &kept_seen);
                let leaves_known =
                    |p: &Vec<u64>| p.iter().zip(known).any(|(seen, known)| *known != UNKNOWN_TURN && seen != known);
                let prints = match window {
                    Some(p) if p.len() > known.len() || (end.rewound && leaves_known(&p)) => p,
                    _ => known.clone(),
                };
                (prints, sent.saturating_add(omitted))
            }
            Placement::Continues if seen.len() > known.len() => (seen, sent),
            Placement::Continues => (known.clone(), sent.max(known.len() as i64)),
            Placement::Window(k) => ([&known[..k], &seen[..]].concat(), k as i64 + sent),
            Placement::StartsOver | Placement::Rewound(_) => {
                // As in `retain_turns`: the new history begins inside the spans left open.
                let carried = carried_into_new_part(session, &history, &seen);
                let cleaned = cleaned_each(settings, &history, carried);
                open_at = (carried, cleaned.open_at_end);
                let prints = user_prints(&cleaned.each, &history);
                reread = Some(cleaned.into_kept());
                (prints, sent)
            }
        };
        // The replies are known as a retained history's are (a late copy is told from a branch by
        // them, once memory is on again too), as read where the history was placed: read before,
        // a history that starts over inside a span left prints of its private replies (review94
        // #2).
        let each = reread.as_deref().unwrap_or(&kept);
        self.keep_last_reply(session, last_reply_print(&history, each), &history, each).await?;
        // New from where the history leaves the turns the part knows, if before (a branch).
        let off_prints = user_prints(each, &history);
        let leaves_known = match reread.is_some() {
            true => known.iter().zip(&prints).take_while(|(k, p)| k == p && **k != UNKNOWN_TURN).count() as i64,
            false => turns_passed_over(&off_prints, first, 0)
                .find(|(place, print)| known.get(*place as usize).is_some_and(|k| *k != UNKNOWN_TURN && k != print))
                .map_or(i64::MAX, |(place, _)| place),
        };
        let had_off: Vec<(i64, u64)> = turns_passed_over(&off_prints, first, new_from.min(leaves_known)).collect();
        // A history read as starting over may be a window sent without its count, a rewind or
        // another conversation: where its turns stand is a guess. Those whose prompt the part
        // (and the part before) never saw are also kept as themselves, wherever a later history
        // holds them (placed only as a new conversation's, a whole branch sent once memory was
        // on again stored them: review95 #4 `nocount`, review97 #1 and #3). Not at the places a
        // window would give them: a turn had with memory on there was lost (review97 #2).
        let mut itself_had_off = match &reread {
            Some(each) => turns_themselves(&history, each, |print| {
                !known.contains(&print) && !session.previous_part_prints.contains(&print)
            }),
            None => Vec::new(),
        };
        // A history no longer than the turns known whose last reply is new: new turns past them
        // among prompts that repeat (sent without the start or its count: review98 #2), or a
        // branch taken without the client's word. Placed past the known turns, a branch's off
        // turns were kept at places they never had, and stored (fuzz7 seed 1135): it keeps its
        // place, and its last turn, new, is kept as itself. Only where that place is a guess: not
        // in a window sent with its count, a turn sent alone, or a whole branch from a client
        // that says the user took turns back (there, its last turn kept as itself left out every
        // later turn that asked the same and closed alike: review102 #1, #2); in a window or a
        // history read as starting over, even so (review103 #5).
        let place_guessed = omitted == 0
            && !alone_after_known
            && match placement {
                Placement::Continues => !end.rewound,
                Placement::Window(_) | Placement::StartsOver => true,
                Placement::Rewound(_) => false,
            };
        if new_reply && place_guessed {
            itself_had_off.extend(last_turn_itself(&history, each));
        }

        if let Some(pending) = session.pending.as_ref().filter(|p| p.user_turns > session.retained_turns) {
            self.queue_pending(session, pending).await?;
        }
        let updated = self.update(&session.id, |s| {
            let holds_turns = s.retained_turns > s.first_turn || s.pending.is_some();
            if holds_turns || user_turns < s.first_turn {
                s.part = s.part.saturating_add(1);
            }
            s.first_turn = user_turns;
            s.retained_turns = user_turns;
            s.pending = None;
            s.sliced.clear();
            s.turn_prints = prints;
            (s.open_at_part_start, s.open_at_end) = open_at;
            let conversation = conversation_of(&s.turn_prints);
            let had_off = had_off.into_iter().map(|(place, print)| (conversation, place, print));
            let itself = itself_had_off.iter().map(|&print| (UNKNOWN_CONVERSATION, TURN_ITSELF, print));
            for turn in had_off.chain(itself) {
                if !s.turns_had_off.contains(&turn) {
                    if s.turns_had_off.len() == MAX_TURNS_HAD_OFF {
                        s.turns_had_off.remove(0);
                    }
                    s.turns_had_off.push(turn);
                }
            }
        });
        if let Some(s) = updated {
            self.save(&s.id).await?;
        }
        Ok(())
    }

    /// A history that holds less of the turns the part's document was given (or its pending tail
    /// holds) than they had: replaced by it, the document lost the rest from the store (a history
    /// compacted to its first prompt and a summary drops that prompt's reply, which the turns'
    /// fingerprints, taken from the prompts, do not see). The document keeps what it was given
    /// (the pending tail is queued) and the part ends after those turns: what follows is a part
    /// of its own. Counted in bytes of the stored text: a history that only differs splits the
    /// conversation into one document more, and loses nothing.
    pub(super) async fn end_part_if_it_lost_text(
        &self,
        session: &Session,
        history: &[Message],
        each: &[Option<Message>],
    ) -> Result<Session, SessionError> {
        let document = part_document(session);
        let sent = history.iter().filter(|m| m.role == "user").count() as i64;
        let stored = session.part_stored.filter(|p| p.part == session.part).map(|p| (p.turns, p.chars));
        let given = match &session.pending {
            // A copy as long as the pending tail may lack its last turn's reply (a client whose
            // transcript lags), and replaces the tail as before: measured against what the
            // store holds instead.
            Some(p) if p.document_id == document && p.sliced_from.is_none() && sent <= p.user_turns => stored,
            Some(p) if p.document_id == document && p.sliced_from.is_none() => Some((p.user_turns, p.content.len())),
            _ => stored,
        };
        let Some((turns, chars)) = given else { return Ok(session.clone()) };
        if turns <= session.first_turn || sent <= turns {
            // A shorter copy sent late holds fewer of the turns, not less of them; one as long
            // as what the store holds may lack the last turn's reply, as above.
            return Ok(session.clone());
        }
        let from = first_message_of_turn(history, session.first_turn);
        let to = first_message_of_turn(history, turns);
        let kept = without_slices(session, &history[from..], &each[from..]);
        let now: Vec<Message> = kept[..to - from].iter().flatten().cloned().collect();
        if transcript(&now).map_or(0, |t| t.len()) >= chars {
            return Ok(session.clone());
        }
        // The document keeps what it was given and its pending tail: the new part begins after both.
        let mut turns = turns;
        if let Some(pending) = session.pending.as_ref().filter(|p| p.user_turns > session.retained_turns) {
            self.queue_pending(session, pending).await?;
            turns = turns.max(pending.user_turns);
        }
        let updated = self.update(&session.id, |s| {
            s.part = s.part.saturating_add(1);
            s.first_turn = turns;
            s.retained_turns = s.retained_turns.max(turns);
            s.pending = None;
            // The slices after those turns are the new part's: its document leaves them out too.
            s.sliced.retain(|&(_, to)| to > turns);
            for slice in &mut s.sliced {
                slice.0 = slice.0.max(turns);
            }
            s.part_stored = None;
        });
        match updated {
            Some(s) => {
                self.save(&s.id).await?;
                Ok(s)
            }
            None => Ok(session.clone()),
        }
    }

    /// Keeps the fingerprint of the reply that ended the last transcript ([`last_reply_print`]),
    /// and by their words those that ended its last turns among the recent ones
    /// ([`Session::recent_reply_prints`]): a turn's transcript can arrive after the next turn's
    /// (a late copy), whose last reply it never was.
    pub(super) async fn keep_last_reply(
        &self,
        session: &Session,
        print: u64,
        history: &[Message],
        each: &[Option<Message>],
    ) -> Result<(), SpoolError> {
        let words = turn_replies(history, each, MAX_RECENT_REPLIES);
        let known = words.iter().all(|w| session.recent_reply_prints.contains(w));
        let unchanged = session.last_reply_print == print && known;
        self.save_change(&session.id, unchanged, |s| {
            s.last_reply_print = print;
            for w in words {
                if let Some(at) = s.recent_reply_prints.iter().position(|r| *r == w) {
                    s.recent_reply_prints.remove(at);
                }
                if s.recent_reply_prints.len() == MAX_RECENT_REPLIES {
                    s.recent_reply_prints.remove(0);
                }
                s.recent_reply_prints.push(w);
            }
        })
        .await
    }

    /// Keeps the spans a transcript left open (in memory, and in the spool when they changed:
    /// a restart must not forget that the conversation is inside a span).
    pub(super) async fn keep_open_at_end(&self, session: &Session, open_at_end: usize) -> Result<(), SpoolError> {
        let unchanged = session.open_at_end == open_at_end;
        self.save_change(&session.id, unchanged, |s| s.open_at_end = open_at_end).await
    }

    /// Applies `change` to session `id` and saves it, unless it is `unchanged` (nothing to write)
    /// or the session ended meanwhile (a record would bring it back).
    pub(super) async fn save_change(
        &self,
        id: &str,
        unchanged: bool,
        change: impl FnOnce(&mut Session),
    ) -> Result<(), SpoolError> {
        if unchanged {
            return Ok(());
        }
        match self.update(id, change) {
            Some(s) => self.save(&s.id).await,
            None => Ok(()),
        }
    }

    /// A history that starts over (compacted, or a client that sends a turn at a time): the
    /// pending tail of the part before is queued, and what follows is counted afresh into a
    /// document of its own, so it never replaces the turns retained before.
    /// `open_at_part_start`: the spans the new part begins inside; `kept`: its first user turns
    /// that the part before stored (see [`turns_kept_by_the_part`]), not stored again.
    pub(super) async fn next_part(
        &self,
        session: &Session,
        open_at_part_start: usize,
        turn_prints: Vec<u64>,
        kept: i64,
    ) -> Result<Session, SessionError> {
        if let Some(pending) = session.pending.as_ref().filter(|p| p.user_turns > session.retained_turns) {
            self.queue_pending(session, pending).await?;
        }
        let updated = self.update(&session.id, |s| {
            s.part = s.part.saturating_add(1);
            s.hidden_from_turns.clear();
            s.previous_part_open_at_start = std::mem::replace(&mut s.open_at_part_start, open_at_part_start);
            // A history of its own: its turns were not had while memory was off, and those it
            // begins with that the part before stored count as retained.
            s.retained_turns = kept;
            s.first_turn = kept;
            s.pending = None;
            s.sliced.clear();
            s.previous_part_prints = std::mem::replace(&mut s.turn_prints, turn_prints);
        });
        match updated {
            Some(s) => {
                self.save(&s.id).await?;
                Ok(s)
            }
            None => Err(SessionError::NotFound(super::shown_id(&session.id))),
        }
    }

    /// Queues a prepared transcript and records its turns as retained.
    pub(super) async fn queue_pending(&self, session: &Session, pending: &PendingRetain) -> Result<(), SpoolError> {
        let item = transcript_item(&self.settings(), pending.content.clone(), pending.document_id.clone());
        // The turn and the count that says it is retained in one spool transaction: a crash
        // between the two left it spooled and not counted, and the client's resend stored it a
        // second time (in `last-turn` mode under a document of its own). Under the session's
        // save lock, as any save of its record (see `Sessions::save`).
        let _order = self.inner.saves.lock(&session.id).await;
        let live = self.get(&session.id).ok();
        let Some(mut marked) = live else {
            // Ended meanwhile: no record to save (it would bring the session back).
            self.inner.queue.enqueue(&session.id, &session.scope, vec![item]).await?;
            return Ok(());
        };
        let queued = |s: &mut Session| {
            s.retained_turns = s.retained_turns.max(pending.user_turns);
            s.pending = None;
            if let Some(from) = pending.sliced_from {
                add_slice(&mut s.sliced, (from, pending.user_turns));
            } else if pending.document_id == part_document(s) {
                s.part_stored =
                    Some(StoredPart { part: s.part, turns: pending.user_turns, chars: pending.content.len() });
            }
        };
        queued(&mut marked);
        let record = self.record_of(&marked);
        self.inner.queue.enqueue_with_session(&session.id, &session.scope, vec![item], record).await?;
        self.update(&session.id, queued);
        Ok(())
    }

    pub(super) async fn mark_retained(&self, id: &str, user_turns: i64) -> Result<(), SpoolError> {
        let updated = self.update(id, |s| {
            s.retained_turns = s.retained_turns.max(user_turns);
            s.pending = None;
        });
        match updated {
            Some(s) => self.save(&s.id).await,
            None => Ok(()),
        }
    }
}
