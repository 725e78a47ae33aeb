//! Automatic retain of a transcript's turns: where they stand in the session's part (going on,
//! a window, a rewound branch, a history that starts over), which are new, and what of them is
//! queued or kept for later.

use mneme_core::text::Message;

use super::auto::{last_turns_cleaned, transcript, Sent, TurnEnd};
use super::clean::conversation;
use super::overlap::placed_by_new_reply;
use super::placement::{
    branch_taken, conversation_of, first_message_of_turn, hide_turns_had_off, is_late_copy_of_previous_part,
    known_turns_among_commands, message_print, place_in_part_past, prints_with_window, renumber_turns, slices_before,
    taken_back_from_document, user_prints, without_slices, Placement, UNKNOWN_TURN,
};
use super::record::{reply_print, UNKNOWN_CONVERSATION};
use super::spans::{carried_into_new_part, cleaned_each, next_turn_after_a_closed_span, window_opens_inside};
use super::{PendingRetain, Session, SessionError, Sessions};
use crate::config::{RetainMode, Settings};

impl Sessions {
    /// The transcript of the turns not retained yet: queued when due, else kept as pending.
    pub(super) async fn retain_turns(
        &self,
        session: &Session,
        settings: &Settings,
        messages: &[Message],
        end: &TurnEnd,
        sent: Sent,
    ) -> Result<usize, SessionError> {
        let last = end.last;
        let history = conversation(messages);
        // A turn sent alone after turns known is the part's next turn: read as a window past
        // them, from where the last transcript ended (its prompt carries the tags it closed and
        // opened: review80 #1). As a part of its own, begun inside the spans open there, a whole
        // history sent next was read from that part's start: the span opened before it was
        // counted twice, its close closed one of two, and every later turn was stored as nothing
        // (review84 #2); alternating, turns were stored twice (review84 #1).
        // (Known of: printed, or counted only, as a window passed over while memory was off is:
        // read from the start, a turn sent alone after one was stored nowhere: review91 #3.)
        let alone_after_known = sent == Sent::TurnAlone && session.alone_turn_number() > 0;
        let omitted_turns = if alone_after_known { session.alone_turn_number() } else { end.omitted_user_turns };
        let omitted = i64::try_from(omitted_turns).unwrap_or(i64::MAX);
        let user_turns = (history.iter().filter(|m| m.role == "user").count() as i64).saturating_add(omitted);
        let open_before = match omitted_turns {
            _ if alone_after_known => session.alone_turn_opens_inside(),
            0 => session.open_at_part_start,
            omitted => window_opens_inside(session, omitted, &history),
        };
        let cleaned = cleaned_each(settings, &history, open_before);
        let seen = user_prints(&cleaned.each, &history);
        let realigned;
        let session = match session.commands_unseen && omitted == 0 {
            true => {
                realigned = self.place_among_commands_unseen(session, &history, &seen, end.rewound).await?;
                &realigned
            }
            false => session,
        };
        // The previous part is looked for in a history as read from where that part began: this
        // part may have begun inside a span, and read from there the previous part's prompts came
        // out private, and its history was stored again whole (review88 #5).
        let reread;
        let as_previous: &[u64] = match omitted == 0
            && !session.previous_part_prints.is_empty()
            && session.previous_part_open_at_start != open_before
        {
            true => {
                let from = session.previous_part_open_at_start;
                reread = user_prints(&cleaned_each(settings, &history, from).each, &history);
                &reread
            }
            false => &seen,
        };
        if omitted == 0
            && is_late_copy_of_previous_part(session, as_previous, &seen)
            && !last_turn_replies_unseen(session, &history, &cleaned.each)
        {
            // Sent before the history started over and arriving after (a compaction racing
            // the turn before it): its turns are the previous part's, stored with it. Taken
            // for a new history, it stored them all again, and the next transcript once more.
            // Not one whose last reply is new (a rewind to before the compaction, the prompt
            // asked again): its new turn was stored nowhere. A session that ends with one still
            // has what it holds queued, as every end does (the turn held after the compaction
            // waited for the idle sweep: review61 #8).
            if last {
                if let Some(pending) = session.pending.as_ref().filter(|p| p.user_turns > session.retained_turns) {
                    self.queue_pending(session, pending).await?;
                    return Ok(1);
                }
            }
            return Ok(0);
        }
        // A transcript that goes no further than the turns known (a late, older copy; a resend)
        // closes none of the spans the last one left open: a late copy's 0 let the next part
        // (a compaction, a client sending a turn at a time) begin outside a span the
        // conversation was inside, and its private text was stored.
        let advances = usize::try_from(user_turns).unwrap_or(usize::MAX) > session.turn_prints.len();
        let open_at_end = if advances { cleaned.open_at_end } else { cleaned.open_at_end.max(session.open_at_end) };
        self.keep_open_at_end(session, open_at_end).await?;
        if omitted > 0 {
            // The turns' fingerprints are kept in step, so a later transcript sent without a
            // count (read from its end) is placed among them, not taken for a new part.
            let omitted = omitted_turns;
            let known = &session.turn_prints;
            let mut session = session.clone();
            // Printed as stored: a stray close hides what precedes it (the window began inside
            // a span it closes, its client not putting the tag back), and a print of that text
            // kept in the spool gave a short secret to whoever tries each value (review87 #5).
            // As hidden turns, they agree with the part's turns read inside the span.
            let kept = cleaned.into_kept();
            let seen = user_prints(&kept, &history);
            if let Some(prints) = prints_with_window(known, omitted, &seen) {
                // Rewound: the branch leaves the turns known where they first differ, and the
                // turns retained or kept from there on were taken back: the branch's turns
                // from there are new (else they were counted as retained, and never stored).
                // Only where a turn seen differs (not one never seen), at or past the part's
                // first retained turn (those before were had with memory off), and only when the
                // window reaches back to what is retained: the pending tail is then all in it.
                let diverges = if end.rewound && omitted as i64 <= session.retained_turns {
                    (0..seen.len())
                        .find(|&i| known.get(omitted + i).is_some_and(|k| *k != UNKNOWN_TURN && *k != seen[i]))
                } else {
                    None
                };
                let taken_back = |at: i64| {
                    at < session.retained_turns || session.pending.as_ref().is_some_and(|p| p.user_turns > at)
                };
                match diverges.map(|d| ((omitted + d) as i64).max(session.first_turn)) {
                    Some(at) if taken_back(at) => {
                        self.keep_tail_taken_back(&session, settings).await?;
                        let updated = self.update(&session.id, |s| {
                            s.turn_prints = prints;
                            s.retained_turns = s.retained_turns.min(at);
                            s.pending = None;
                            slices_before(s, at);
                            taken_back_from_document(s, at);
                        });
                        if let Some(updated) = updated {
                            self.save(&updated.id).await?;
                            session = updated;
                        }
                    }
                    _ if prints.len() > known.len() => {
                        self.update(&session.id, |s| s.turn_prints = prints);
                    }
                    _ => {}
                }
            }
            // Known as the last replies, as a whole history's are: a history that holds the window
            // the session was first heard as is told by them (see `holds_the_first_window`).
            if !alone_after_known {
                self.keep_last_reply(&session, last_reply_print(&history, &kept), &history, &kept).await?;
            }
            let mut kept = kept;
            hide_turns_had_off(&session, &history, &mut kept, omitted as i64, conversation_of(&session.turn_prints));
            if alone_after_known {
                // Known as the last reply, as a whole history's is (a resend of it, a prompt
                // repeated with another reply: see `same_prompt_another_reply`).
                let reply_print = last_reply_print(&history, &kept);
                self.keep_last_reply(&session, reply_print, &history, &kept).await?;
                let (queued, slice) = self.retain_tail_sliced(&session, &history, &kept, user_turns).await?;
                if let Some(document) = slice {
                    self.keep_alone_slice(&session, user_turns - 1, document).await?;
                }
                return Ok(queued);
            }
            // Only the new turns are stored: a stray close hides what precedes it of them.
            return self.retain_tail(&session, &history, &kept, user_turns).await;
        }
        // A whole history that holds the previous part, then this part's turns and more: the
        // part began with a turn sent alone (a client that had no transcript to send that turn),
        // and this history is the same conversation, whole again. Read from where the part
        // begins in it: taken for a history that starts over, all of it went into another part,
        // the earlier turns stored twice (review83 #5).
        if sent == Sent::History && omitted == 0 && holds_previous_then_this_part(session, as_previous) {
            let from = first_message_of_turn(&history, session.previous_part_prints.len() as i64);
            return Box::pin(self.retain_turns(session, settings, &history[from..], end, sent)).await;
        }
        let mut placement = place_in_part_past(&session.turn_prints, &seen, session.first_turn);
        let reply_print = last_reply_print(&history, &cleaned.each);
        let next_turn = placement == Placement::Continues
            && (next_turn_after_a_closed_span(settings, session, &history, &seen, &cleaned)
                || same_prompt_another_reply(session, &seen, reply_print, &history, &cleaned.each));
        // Prompts all known, no more of them than known, and a last turn whose reply is new:
        // not a late copy. From a client that says the user took turns back, the prompt taken
        // back sent again; in a window (read from a transcript's end), the turns past the known
        // ones, among prompts that repeat ("yes", "yes").
        let known_prompts_new_reply = !next_turn
            && !seen.is_empty()
            && seen.len() <= session.turn_prints.len()
            && last_turn_replies_unseen(session, &history, &cleaned.each);
        if next_turn {
            placement = Placement::StartsOver;
        }
        if known_prompts_new_reply {
            placement = placed_by_new_reply(session, &history, &cleaned.each, &seen, end.rewound, placement);
        }
        // From a client that says the user took turns back (see `branch_taken`).
        if end.rewound {
            let branch = branch_taken(&session.turn_prints, &seen, session.first_turn, &placement);
            placement = branch.map_or(placement, Placement::Rewound);
        }
        // The stored document holds turns the client took back: replaced now, not on the cadence.
        let mut taken_back = false;
        let (session, each) = match placement {
            Placement::Rewound(k) => {
                // The client went back to its `k`-th turn and on from there (Claude Code's
                // rewind, opencode's undo): the part goes on along the new branch, and its
                // document, replaced by it, loses the turns taken back. (A new part kept them,
                // and stored the turns before `k` a second time.)
                taken_back = session.retained_turns > k as i64 || session.pending.is_some();
                let tail_queued;
                let session = match self.keep_tail_taken_back(session, settings).await? {
                    true => {
                        tail_queued = self.get(&session.id)?;
                        &tail_queued
                    }
                    false => session,
                };
                // The branch is the conversation now: the spans open at its end are its own
                // (a span the taken-back turns opened is not kept open).
                let branch_open = cleaned.open_at_end;
                let updated = self.update(&session.id, |s| {
                    s.turn_prints = seen;
                    // Back to before the part's first turn: the branch's turns before `k` are
                    // those it shares with the turns never to be retained (had while memory was
                    // off, forgotten, or the part's before); its own begin the part.
                    s.first_turn = s.first_turn.min(k as i64);
                    s.retained_turns = s.retained_turns.min(k as i64);
                    s.pending = None;
                    s.open_at_end = branch_open;
                    slices_before(s, k as i64);
                    taken_back_from_document(s, k as i64);
                });
                // Ended meanwhile: nothing saved (a record would bring it back).
                if let Some(updated) = &updated {
                    self.save(&updated.id).await?;
                }
                let session = updated.unwrap_or_else(|| session.clone());
                // What stray closes before the branch point hid stays hidden in the branch.
                let hidden_before = cleaned.hidden_before;
                let (each, froms) =
                    cleaned.into_kept_by_closes(&history, session.retained_turns, &session.hidden_from_turns);
                if froms != session.hidden_from_turns {
                    self.save_change(&session.id, false, |s| s.hidden_from_turns = froms).await?;
                }
                // The turns sent alone the branch keeps, as it holds them (review90 #5).
                if !session.alone_slices.is_empty() {
                    self.complete_alone_slices(&session, &history, &each, hidden_before).await?;
                }
                (session, each)
            }
            Placement::Continues => {
                // Longer, or holding turns the part never saw (see `place_in_part`).
                if seen.len() >= session.turn_prints.len() && seen != session.turn_prints {
                    self.update(&session.id, |s| s.turn_prints = seen);
                }
                // A stray close hides the messages before it that are not retained yet:
                // shrinking the stored document for a mention of the tag would delete turns
                // stored long ago. Those it hid stay hidden once their turn is retained
                // (`Session::hidden_from_turns`).
                let retained_from = first_message_of_turn(&history, session.retained_turns);
                let (hidden_before, hides_kept) = (cleaned.hidden_before, cleaned.hidden_before > retained_from);
                let (each, froms) =
                    cleaned.into_kept_by_closes(&history, session.retained_turns, &session.hidden_from_turns);
                // Not from a history holding fewer of them (a late copy): the closes it lacks
                // still hide what they hid.
                if froms.len() >= session.hidden_from_turns.len() && froms != session.hidden_from_turns {
                    self.save_change(&session.id, false, |s| s.hidden_from_turns = froms).await?;
                }
                let session = match settings.retain.mode {
                    // Hidden by a stray close, the kept tail is not to be stored as it was.
                    RetainMode::FullSession if !hides_kept => {
                        self.end_part_if_it_lost_text(session, &history, &each).await?
                    }
                    _ => session.clone(),
                };
                if !session.alone_slices.is_empty() {
                    self.complete_alone_slices(&session, &history, &each, hidden_before).await?;
                }
                (session, each)
            }
            Placement::Window(k) => {
                // The client sent the part without its start (a transcript read from its end):
                // as if it had said how many turns it left out.
                let mut prints = session.turn_prints[..k].to_vec();
                prints.extend(&seen);
                if prints.len() > session.turn_prints.len() {
                    self.update(&session.id, |s| s.turn_prints = prints);
                }
                let mut kept = cleaned.into_kept();
                self.keep_last_reply(session, last_reply_print(&history, &kept), &history, &kept).await?;
                hide_turns_had_off(session, &history, &mut kept, k as i64, conversation_of(&session.turn_prints));
                return self.retain_tail(session, &history, &kept, k as i64 + user_turns).await;
            }
            Placement::StartsOver => {
                // The new part begins inside the spans the last transcript left open (a client
                // that sends a turn at a time, a history compacted with a span open); not when
                // it begins as the part did (edited or reverted), and holds the opening tag again.
                let carried = match next_turn {
                    true => session.open_at_end,
                    false => carried_into_new_part(session, &history, &seen),
                };
                let cleaned = cleaned_each(settings, &history, carried);
                let open_at_end = cleaned.open_at_end;
                let prints = user_prints(&cleaned.each, &history);
                let each = cleaned.into_kept();
                // Turn after turn from a client that sends a turn at a time, the history is all
                // new; else its first turns may be the part's (compacted to the first prompt and a
                // summary, edited after them): those are in the old part's document.
                let kept = if next_turn { 0 } else { turns_kept_by_the_part(session, &prints) };
                let session = self.next_part(session, carried, prints, kept).await?;
                self.keep_open_at_end(&session, open_at_end).await?;
                (self.get(&session.id).unwrap_or(session), each)
            }
        };
        // The replies are known as read where the history was placed: read before (from the
        // part's start), a history that starts over inside a span, or one a stray close hides
        // text of, left a print of its private replies in the spool (review94 #3).
        self.keep_last_reply(&session, last_reply_print(&history, &each), &history, &each).await?;
        // Whatever the history was taken for, the turns had while nothing was retained stay out.
        let mut each = each;
        // The part's conversation as its record now has it (placed: printed as the part reads it).
        let conversation = self.get(&session.id).map_or(UNKNOWN_CONVERSATION, |s| conversation_of(&s.turn_prints));
        hide_turns_had_off(&session, &history, &mut each, 0, conversation);
        let session = &session;
        // The part's turns: those before `first_turn` were had while memory was off.
        let from = first_message_of_turn(&history, session.first_turn);
        let (part, part_each) = (&history[from..], &each[from..]);
        let new_turns = user_turns - session.retained_turns;
        // No new turn, but the part's last turn went on (a Stop hook blocked the stop, and the
        // agent wrote more): its document, given that turn before, is given it again, longer.
        // Left at that, what the agent wrote after the block was never stored. Only from a
        // transcript as the client has it: one completed with a reply given apart may hold it
        // in the wrong turn (a slash command's, which the transcript writes as a turn later).
        let went_on = new_turns == 0
            && end.reply.is_none()
            && settings.retain.mode == RetainMode::FullSession
            && session.part_stored.is_some_and(|p| p.part == session.part && p.turns == user_turns);
        if new_turns < 0 || (new_turns == 0 && !went_on) {
            return Ok(0);
        }
        let every_n = settings.retain.every_n_turns;
        let due = new_turns >= every_n || last || taken_back || went_on;
        if let Some(kept) = session.pending.as_ref().filter(|p| p.user_turns > user_turns) {
            // A shorter copy sent late: the tail kept already holds its turns, and more. (One as
            // long replaces it: it may hold the turn's reply the kept one lacked.)
            if due {
                self.queue_pending(session, kept).await?;
                return Ok(1);
            }
            return Ok(0);
        }
        let (target, document_id) = match settings.retain.mode {
            RetainMode::FullSession => {
                let kept = without_slices(session, part, part_each);
                (kept.into_iter().flatten().collect(), part_document(session))
            }
            RetainMode::LastTurn => {
                // On the cadence, the last every_n turns (SPEC) or more after a gap; a tail kept
                // for later (or retained as the session ends) only its new turns: the ones before
                // are retained already. Both with the configured overlap.
                let turns = if new_turns >= every_n { new_turns.max(every_n) } else { new_turns };
                // More turns than the part holds: all of it, as SPEC's slice gives the whole
                // history (an assistant's opening before the first prompt too).
                let with_overlap = turns.saturating_add(settings.retain.overlap_turns);
                (last_turns_cleaned(part_each, part, with_overlap), self.turn_document(session))
            }
        };
        let content = transcript(&target);
        if went_on && content.as_ref().is_none_or(|c| session.part_stored.is_some_and(|p| c.len() <= p.chars)) {
            return Ok(0); // a resend, or a late copy: nothing more of the turn
        }
        let Some(content) = content else {
            // Nothing worth keeping in these turns.
            if due {
                self.mark_retained(&session.id, user_turns).await?;
            }
            return Ok(0);
        };
        let pending = PendingRetain { content, document_id, user_turns, sliced_from: None };
        if due {
            self.queue_pending(session, &pending).await?;
            Ok(1)
        } else {
            if let Some(s) = self.update(&session.id, |s| s.pending = Some(pending)) {
                self.save(&s.id).await?;
            }
            Ok(0)
        }
    }

    /// A part whose turns were counted without their slash commands ([`Session::commands_unseen`])
    /// given a whole history: its known turns are looked for in it in order, the commands
    /// aside, and every turn number the session keeps is moved to where that turn stands now,
    /// so the part goes on as it was (a command among the known turns was never stored alone:
    /// its reply was, with the turn before). A history that holds only the first of them (a
    /// rewind) is then placed from where it leaves them; one that holds none, by the numbers
    /// kept. Once either way.
    async fn place_among_commands_unseen(
        &self,
        session: &Session,
        history: &[Message],
        seen: &[u64],
        rewound: bool,
    ) -> Result<Session, SessionError> {
        let users: Vec<&str> = history.iter().filter(|m| m.role == "user").map(|m| m.content.as_str()).collect();
        let positions = known_turns_among_commands(&session.turn_prints, &users, seen, rewound);
        let updated = self.update(&session.id, |s| {
            s.commands_unseen = false;
            renumber_turns(s, &positions, &users, seen);
        });
        match updated {
            Some(updated) => {
                self.save(&updated.id).await?;
                Ok(updated)
            }
            None => Ok(session.clone()),
        }
    }
}

/// The document a `full-session` transcript replaces: the session's id for its first part,
/// `{session}-part{n}` for the parts after a history started over.
pub(super) fn part_document(session: &Session) -> String {
    match session.part {
        0 => session.id.clone(),
        n => format!("{}-part{}", session.id, n + 1),
    }
}

/// The fingerprint of the reply a history ends with (its last message, an assistant's, as
/// cleaned in `each`); 0 when it ends otherwise or the reply is wholly private.
pub(super) fn last_reply_print(history: &[Message], each: &[Option<Message>]) -> u64 {
    match (history.last(), each.last()) {
        (Some(m), Some(Some(cleaned))) if m.role == "assistant" => message_print(&cleaned.content),
        _ => 0,
    }
}

/// The fingerprints by words ([`reply_print`]) of the replies that end the last `most` turns of
/// a history (a turn's last message, when it is the agent's), oldest first.
pub(super) fn turn_replies(history: &[Message], each: &[Option<Message>], most: usize) -> Vec<u64> {
    let mut replies = Vec::new();
    for (i, (m, c)) in history.iter().zip(each).enumerate().rev() {
        let ends_a_turn = history.get(i + 1).is_none_or(|next| next.role == "user");
        if m.role == "assistant" && ends_a_turn {
            if let Some(c) = c {
                replies.push(reply_print(&c.content));
            }
            if replies.len() == most {
                break;
            }
        }
    }
    replies.reverse();
    replies
}

/// Whether the replies of a history's last turn are all new: it has one, and none is among the
/// replies that ended the transcripts sent lately ([`Session::recent_reply_prints`], which must
/// know some). A late copy ends with a reply seen before; a turn gone on (a Stop hook that
/// blocked the stop) still holds the reply it had.
pub(super) fn last_turn_replies_unseen(session: &Session, history: &[Message], each: &[Option<Message>]) -> bool {
    if session.recent_reply_prints.is_empty() {
        return false;
    }
    let last_user = history.iter().rposition(|m| m.role == "user");
    let from = last_user.map_or(0, |i| i + 1);
    let mut replies = history[from..]
        .iter()
        .zip(&each[from..])
        .filter(|(m, _)| m.role == "assistant")
        .filter_map(|(_, c)| c.as_ref())
        .peekable();
    replies.peek().is_some() && replies.all(|c| !session.recent_reply_prints.contains(&reply_print(&c.content)))
}

/// Whether a history of one user turn, the same as the part's only one (a prompt repeated, or
/// two wholly private ones: fingerprint 0 both), is a new turn of a client that sends a turn at
/// a time rather than the last one sent again: its reply is another, and the reply the last
/// transcript ended with is not in it. Taken for a resend, the second "continue" replaced the
/// first turn's reply, or was dropped. (A real resend carries the same reply; the same turn
/// gone on, as when a Stop hook blocked the stop and the agent wrote more, still holds the
/// reply before; a history of more turns is placed by them.)
fn same_prompt_another_reply(
    session: &Session,
    seen: &[u64],
    reply_print: u64,
    history: &[Message],
    each: &[Option<Message>],
) -> bool {
    // Looked for last: it fingerprints every reply, and most histories are settled before.
    let holds_the_last_reply = || {
        history.iter().zip(each).any(|(m, c)| {
            m.role == "assistant" && c.as_ref().is_some_and(|c| message_print(&c.content) == session.last_reply_print)
        })
    };
    seen.len() == 1
        && session.turn_prints.len() == 1
        && session.last_reply_print != 0
        && reply_print != 0
        && reply_print != session.last_reply_print
        && !holds_the_last_reply()
}

/// How many of the first user turns of a history that starts over (its fingerprints `prints`)
/// are the part's own first turns, stored (or queued) with its document: a history compacted to
/// its first prompt and a summary, or edited after its first turns. The new part holds the turns
/// after them; it stored that first prompt a second time. None when nothing follows them, or
/// when the part stored none of them (had while memory was off).
fn turns_kept_by_the_part(session: &Session, prints: &[u64]) -> i64 {
    let stored = session.retained_turns.max(session.pending.as_ref().map_or(0, |p| p.user_turns));
    let same = session.turn_prints.iter().zip(prints).take_while(|(a, b)| a == b && **a != UNKNOWN_TURN).count();
    let kept = (same as i64).min(stored);
    match kept > session.first_turn && (kept as usize) < prints.len() {
        true => kept,
        false => 0,
    }
}

/// Whether `seen` is the session's previous part, then the current part's turns, then more.
fn holds_previous_then_this_part(session: &Session, seen: &[u64]) -> bool {
    let (previous, known) = (&session.previous_part_prints, &session.turn_prints);
    !previous.is_empty()
        && !known.is_empty()
        && seen.len() > previous.len() + known.len()
        && seen.starts_with(previous)
        && seen[previous.len()..].starts_with(known)
}

impl Sessions {
    /// In `last-turn` mode the slices a rewind takes back stay, and so does the tail kept for
    /// the cadence: queued now, as the next slice would have been (dropped, turns acknowledged
    /// were stored nowhere: review120 #2, review122 #6). Whether it was queued.
    async fn keep_tail_taken_back(&self, session: &Session, settings: &Settings) -> Result<bool, SessionError> {
        match &session.pending {
            Some(pending) if settings.retain.mode == RetainMode::LastTurn => {
                self.queue_pending(session, pending).await?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}
