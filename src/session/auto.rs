//! What happens without the model asking: first-turn recall, automatic retain on its cadence,
//! the tail a session leaves (retained when it ends or goes idle), and compaction context.

use mneme_core::text::{self, Message};
use mneme_core::MemoryType;

use super::block::{block_room, memory_block, query_for};
use super::clean::conversation;
use super::placement::{
    add_slice, command_print, first_message_of_turn, is_late_copy_of_previous_part, is_slash_command,
    known_turns_among_commands, latest_window_past_the_end, message_print, place_in_part_past, prints_with_window,
    renumber_turns, rewound_at, slices_before, taken_back_from_document, user_prints, without_slices, Placement,
    MAX_COMMANDS_SINCE_UPGRADE, MAX_UNKNOWN_TURNS, UNKNOWN_TURN,
};
use super::record::{reply_print, MAX_RECENT_REPLIES};
use super::spans::{
    carried_into_new_part, cleaned_each, next_turn_after_a_closed_span, prompt_in_context, spans_carried,
    window_opens_inside, with_current_turn, KeptPrompt, SpansCarried,
};
use super::{Delivery, PendingRetain, Session, SessionError, Sessions, StoredPart, Turn};
use crate::config::{RetainMode, Settings};
use crate::queue::{FlushReport, NewItem};
use crate::spool::SpoolError;

/// How a turn ends (agent-end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnEnd {
    /// The session ends with it: retain what is not retained yet, whatever the cadence.
    pub last: bool,
    /// Whether the answer waits for the session's queue to be delivered.
    pub delivery: Delivery,
    /// The assistant's final reply of this turn, when the client knows it apart from the
    /// messages (Claude Code's `last_assistant_message`): the turn is retained with it, and with
    /// the prompt agent-start saw, even if the messages do not hold them yet.
    pub reply: Option<String>,
    /// User turns before the messages that the client left out (a transcript too long to send
    /// whole): counted as there, so what is already retained is told from what is new.
    pub omitted_user_turns: usize,
    /// The client knows the messages leave out turns the user took back (see
    /// [`Placement::Rewound`]).
    pub rewound: bool,
}

impl Default for TurnEnd {
    fn default() -> Self {
        TurnEnd { last: false, delivery: Delivery::Wait, reply: None, omitted_user_turns: 0, rewound: false }
    }
}

/// What the messages of a turn's end are, as agent-end completed them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// A history (whole, or read from its end).
    History,
    /// No history: the turn's prompt, as agent-start kept it, and its reply, from a client that
    /// sends a turn at a time. It is the next turn, read from where the last one ended.
    TurnAlone,
}

impl Sessions {
    /// First-turn automatic recall. Never fails the agent: problems answer `None`.
    pub async fn agent_start(
        &self,
        id: &str,
        prompt: &str,
        messages: &[Message],
        turn: Turn,
    ) -> Result<Option<String>, SessionError> {
        let _turn = self.inner.turns.lock(id).await;
        let mut session = self.get(id)?;
        let settings = self.settings();
        if turn == Turn::Work && !prompt.trim().is_empty() {
            // A prompt of which nothing is kept (wholly private) is known as "": the turn's, so
            // the prompt of a turn before is never taken for it.
            let mut kept = prompt_in_context(&settings, messages, prompt, spans_carried(&session, messages, prompt));
            // Where its turn stands: after the turns its history holds; without a history, past
            // every turn the part knows of, and after the prompt before it when that one's turn
            // never ended (another prompt, still kept: review90 #2). Counted now: the part knows
            // of more turns once that one's end comes (review91 #5: counted then, it was one
            // too many, and the next whole transcript started a part over).
            if kept.turns_before.is_none() {
                let unended = session.last_prompt.as_deref().is_some_and(|p| p != kept.text);
                let after_unended = session.last_prompt_turns_before.filter(|_| unended).map_or(0, |n| n + 1);
                kept.turns_before = Some(after_unended.max(session.alone_turn_number()));
            }
            let changed = session.last_prompt.as_deref() != Some(kept.text.as_str())
                || kept.left_private != session.last_prompt_left_private
                || kept.closes != session.last_prompt_closes
                || Some(kept.opens) != session.last_prompt_opens
                || Some(kept.open_before) != session.last_prompt_open_before
                || kept.turns_before != session.last_prompt_turns_before;
            // A command run since the upgrade is none the earlier build saw (its Stop may never
            // come: an interrupted reply), whatever the next transcript holds after it.
            let command_since = session.commands_unseen && is_slash_command(prompt);
            if changed || command_since {
                let typed = command_since.then(|| command_print(prompt));
                let updated = self.update(id, |s| {
                    s.last_prompt = Some(kept.text);
                    s.last_prompt_left_private = kept.left_private;
                    s.last_prompt_closes = kept.closes;
                    s.last_prompt_opens = Some(kept.opens);
                    s.last_prompt_open_before = Some(kept.open_before);
                    s.last_prompt_turns_before = kept.turns_before;
                    if let Some(typed) = typed {
                        if s.commands_since_upgrade.len() < MAX_COMMANDS_SINCE_UPGRADE {
                            s.commands_since_upgrade.push(typed);
                        }
                    }
                });
                if let Some(s) = updated {
                    // Never an error to the agent (a full disk): the session in memory has it,
                    // and the next save writes it.
                    self.save_or_warn(&s.id, "prompt").await;
                    session = s;
                }
            }
        }
        if turn == Turn::Side
            || !settings.recall.auto
            || session.parent.is_some()
            || session.recalled
            || prompt.trim().is_empty()
        {
            return Ok(None);
        }
        let carried = spans_carried(&session, messages, prompt);
        let mut history = conversation(messages);
        // A client whose history already ends with the prompt (the opencode plugin) has it once:
        // twice, it took the place of the earlier turn `recall.context_turns` asks for.
        if !history.last().is_some_and(|m| super::spans::is_the_prompt(m, prompt)) {
            history.push(Message::new("user", prompt));
        }
        // Nothing left once cleaned (a wholly private prompt): nothing is asked, and the session's
        // one automatic recall is kept for its next prompt (used up, the session never had one).
        let Some(query) = query_for(&settings, prompt, &history, carried).filter(|q| !q.trim().is_empty()) else {
            return Ok(None);
        };
        let forgets = self.forgets();
        let recall = self.recall_scope(&session.scope, &query, block_room(&settings));
        let results = match tokio::time::timeout(settings.recall.timeout, recall).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                tracing::warn!(session = id, "automatic recall failed: {e}");
                return Ok(None);
            }
            Err(_) => {
                tracing::warn!(session = id, "automatic recall timed out after {:?}", settings.recall.timeout);
                return Ok(None);
            }
        };
        let block = memory_block(&settings, &results);
        // A forget since the recall began: the block may quote it, and is not kept (it goes to
        // this prompt only; the session's next prompt recalls again).
        let overtaken = self.forgets() != forgets;
        let updated = self.update(id, |s| {
            s.recalled = !overtaken;
            s.block = if overtaken { None } else { block.clone() };
        });
        if let Some(s) = updated {
            // As above: the block is the agent's all the same.
            self.save_or_warn(&s.id, "first recall").await;
        }
        Ok(block)
    }

    /// Automatic retain, then a flush of the session's queue. Every `retain.every_n_turns` user
    /// turns the transcript is queued; in between it is kept as the session's pending tail, which
    /// is queued when the session ends (`end.last`, [`Sessions::end`]) or goes idle
    /// ([`Sessions::retain_idle`]). Returns how many transcripts were queued (0 or 1).
    pub async fn agent_end(
        &self,
        id: &str,
        messages: &[Message],
        turn: Turn,
        end: TurnEnd,
    ) -> Result<(usize, FlushReport), SessionError> {
        let turn_lock = self.inner.turns.lock(id).await;
        let session = self.get(id)?;
        let settings = self.settings();
        let mut retained = 0;
        let mut sent = Sent::History;
        if turn == Turn::Work && session.parent.is_none() {
            // A client that passes the reply apart knows its messages may lag behind.
            let messages = match end.reply.as_deref() {
                Some(reply) => {
                    let prompt = session.last_prompt.as_ref().map(|text| KeptPrompt {
                        text: text.clone(),
                        left_private: session.last_prompt_left_private,
                        closes: session.last_prompt_closes,
                        // A record of an earlier build knows only that a span was left open.
                        opens: session.last_prompt_opens.unwrap_or(usize::from(session.last_prompt_left_private)),
                        open_before: session.alone_turn_opens_inside(),
                        turns_before: session.last_prompt_turns_before,
                    });
                    let known = &session.recent_reply_prints;
                    if prompt.is_some() && conversation(messages).is_empty() {
                        sent = Sent::TurnAlone;
                    }
                    std::borrow::Cow::Owned(with_current_turn(messages, prompt.as_ref(), reply, &settings, known))
                }
                None => std::borrow::Cow::Borrowed(messages),
            };
            // The turn has ended, whatever the client sent: its prompt is not the next turn's,
            // whose agent-start may never arrive (a hook that timed out), nor one whose turn
            // never ended (kept after a whole transcript, the next prompt without a history was
            // counted a turn further on, a rewind's stale place too: review91).
            if session.last_prompt.is_some() || session.last_prompt_turns_before.is_some() {
                let ended = self.update(id, |s| {
                    s.last_prompt = None;
                    s.last_prompt_turns_before = None;
                });
                if let Some(s) = ended {
                    self.save(&s.id).await?;
                }
            }
            // A store being opened (memory turned on) keeps what is retained meanwhile.
            if settings.retain.auto && self.inner.state.takes_retains() {
                retained = self.retain_turns(&session, &settings, &messages, &end, sent).await?;
            } else {
                self.pass_over_turns(&session, &settings, &messages, &end, sent).await?;
            }
        }
        drop(turn_lock);
        let flushed = self.flush(session.queue_id(), end.delivery).await;
        Ok((retained, flushed))
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

    /// The transcript of the turns not retained yet: queued when due, else kept as pending.
    async fn retain_turns(
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
        if omitted == 0
            && is_late_copy_of_previous_part(session, &seen)
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
        if sent == Sent::History && omitted == 0 && holds_previous_then_this_part(session, &seen) {
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
        self.keep_last_reply(session, reply_print, &history, &cleaned.each).await?;
        if next_turn {
            placement = Placement::StartsOver;
        }
        if known_prompts_new_reply {
            placement = match placement {
                Placement::Continues if end.rewound => Placement::Rewound(seen.len() - 1),
                Placement::Window(k) => latest_window_past_the_end(&session.turn_prints, &seen)
                    .map_or(Placement::Window(k), Placement::Window),
                other => other,
            };
        }
        if placement == Placement::StartsOver && end.rewound {
            placement = rewound_at(&session.turn_prints, &seen).map_or(placement, Placement::Rewound);
        }
        // A history sent whole from a client that says the user took turns back, which agrees
        // with the part's first turns and then not, is the branch, even where its turns also
        // agree with a later stretch of the part: wholly private prompts all print alike, and a
        // branch of a private first prompt and one more turn was placed as a window over the
        // part's last private turn. The part then counted two turns more than the client had,
        // stayed inside a span the branch had closed, and every turn after it was stored as
        // nothing (fuzz seed 3026).
        if let (Placement::Window(_), true) = (&placement, end.rewound) {
            if let Some(k) = rewound_at(&session.turn_prints, &seen).filter(|k| *k > 0) {
                placement = Placement::Rewound(k);
            }
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
                return self.retain_tail(session, &history, &cleaned.into_kept(), k as i64 + user_turns).await;
            }
            Placement::StartsOver => {
                // The new part begins inside the spans the last transcript left open (a client
                // that sends a turn at a time, a history compacted with a span open); not when
                // it begins as the part did (edited or reverted), and holds the opening tag again.
                let carried = match next_turn {
                    true => session.open_at_end,
                    false => carried_into_new_part(session, &seen),
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

    /// Turns had while automatic retain keeps nothing (memory `off`, or `retain.auto = false`)
    /// are never retained, not when memory is on again either: the part goes on after them (a
    /// new part when it holds turns already, so its document keeps them). The tail kept before
    /// them was had with memory on: it is queued, and held until a backend stores it.
    async fn pass_over_turns(
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
        let (omitted, open_before) = match alone_after_known {
            true => (session.alone_turn_number(), session.alone_turn_opens_inside()),
            false => (end.omitted_user_turns, session.open_at_part_start),
        };
        let omitted = i64::try_from(omitted).unwrap_or(i64::MAX);
        let sent = history.iter().filter(|m| m.role == "user").count() as i64;
        let cleaned = cleaned_each(settings, &history, open_before);
        let seen = user_prints(&cleaned.each, &history);
        let mut open_at = (session.open_at_part_start, cleaned.open_at_end);
        // Printed as stored (see `retain_turns`): what a stray close hides leaves no print.
        let kept_seen = user_prints(&cleaned.into_kept(), &history);
        let placement = match place_in_part_past(known, &seen, session.first_turn) {
            // As in `retain_turns`: the branch, not a window over the part's later turns.
            Placement::Window(_) if end.rewound && rewound_at(known, &seen).is_some_and(|k| k > 0) => {
                Placement::StartsOver
            }
            placement => placement,
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
            _ if omitted > 0 => {
                let gap_to = usize::try_from(omitted).unwrap_or(usize::MAX);
                let prints = prints_with_window(known, gap_to, &kept_seen)
                    .filter(|p| p.len() > known.len())
                    .unwrap_or_else(|| known.clone());
                (prints, sent.saturating_add(omitted))
            }
            Placement::Continues if seen.len() > known.len() => (seen, sent),
            Placement::Continues => (known.clone(), sent.max(known.len() as i64)),
            Placement::Window(k) => ([&known[..k], &seen[..]].concat(), k as i64 + sent),
            Placement::StartsOver | Placement::Rewound(_) => {
                // As in `retain_turns`: the new history begins inside the spans left open.
                let carried = carried_into_new_part(session, &seen);
                let cleaned = cleaned_each(settings, &history, carried);
                open_at = (carried, cleaned.open_at_end);
                (user_prints(&cleaned.each, &history), sent)
            }
        };
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
    async fn end_part_if_it_lost_text(
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
    async fn keep_last_reply(
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
    async fn keep_open_at_end(&self, session: &Session, open_at_end: usize) -> Result<(), SpoolError> {
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
    async fn next_part(
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
            s.open_at_part_start = open_at_part_start;
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

    /// Flushes the session ([`Sessions::flush_before_recall`]), then recalls for the
    /// last user message: the block to splice into a compaction summary, or `None`.
    pub async fn compaction(&self, id: &str, messages: &[Message]) -> Result<Option<String>, SessionError> {
        let session = self.get(id)?;
        let settings = self.settings();
        // The flush and the recall share `recall.timeout`: the hook and the plugin wait that and
        // their own bound, and a daemon answering later trips their breaker. The flush goes on
        // on its own task if its wait ends first.
        let deadline = tokio::time::Instant::now() + settings.recall.timeout;
        self.flush_before_recall(session.queue_id(), &settings).await;
        let history = conversation(messages);
        let Some(at) = history.iter().rposition(|m| m.role == "user") else {
            return Ok(None);
        };
        let latest = history[at].content.clone();
        // A compacted history may begin anywhere in the conversation: a span the last transcript
        // left open is taken to hide its latest prompt (read then up to it). Fail closed: what
        // is lost is one recall's question, not a secret sent to a backend.
        let carried =
            SpansCarried { at_least_after: session.open_at_end, ..spans_carried(&session, &history[..at], &latest) };
        let asked = if carried.at_least_after > 0 { &history[..=at] } else { &history[..] };
        let Some(query) = query_for(&settings, &latest, asked, carried) else {
            return Ok(None);
        };
        match tokio::time::timeout_at(deadline, self.recall_scope(&session.scope, &query, block_room(&settings))).await
        {
            Ok(Ok(results)) => Ok(memory_block(&settings, &results)),
            Ok(Err(e)) => {
                tracing::warn!(session = id, "compaction recall failed: {e}");
                Ok(None)
            }
            Err(_) => Ok(None),
        }
    }
}

/// How long a recall waits at most for its session's queue to be delivered first (a quarter of
/// `recall.timeout` if that is less): long enough for a local store, short enough that a slow or
/// unreachable Hindsight server does not take the agent's hook past its own time limit (a
/// compaction would lose its memories).
const FLUSH_BEFORE_RECALL: std::time::Duration = std::time::Duration::from_secs(1);

impl Sessions {
    /// Delivers the session queue `queue_id` before a recall, waiting [`FLUSH_BEFORE_RECALL`] at
    /// most; a flush that outlasts the wait goes on on its own task.
    pub(super) async fn flush_before_recall(&self, queue_id: &str, settings: &Settings) {
        let wait = FLUSH_BEFORE_RECALL.min(settings.recall.timeout / 4);
        let _ = tokio::time::timeout(wait, self.inner.queue.flush(queue_id)).await;
    }
}

/// The cleaned messages (`each`, see [`cleaned_each`]) of a history's last `turns` user turns,
/// counted as the history was sent: a wholly private turn counts, though nothing of it is kept
/// (counted after cleaning, the slice reached a turn further back for each: a turn retained
/// already, or one had while memory was off).
pub(super) fn last_turns_cleaned(each: &[Option<Message>], history: &[Message], turns: i64) -> Vec<Message> {
    let from = history.len() - text::slice_last_turns(history, turns).len();
    each[from..].iter().flatten().cloned().collect()
}

/// A transcript of automatic retain as the queue takes it.
pub(super) fn transcript_item(settings: &Settings, content: String, document_id: String) -> NewItem {
    NewItem {
        content,
        context: Some(settings.retain.context.clone()),
        kind: MemoryType::Experience,
        document_id: Some(document_id),
        ..NewItem::default()
    }
}

/// The stored text of some turns (each already cleaned, see [`cleaned_each`]); `None` when
/// nothing is worth keeping. Memory tags are stripped message by message (SPEC §4), never across
/// two messages.
pub(super) fn transcript(turns: &[Message]) -> Option<String> {
    text::retention_transcript(turns, true).text
}

/// The document a `full-session` transcript replaces: the session's id for its first part,
/// `{session}-part{n}` for the parts after a history started over.
fn part_document(session: &Session) -> String {
    match session.part {
        0 => session.id.clone(),
        n => format!("{}-part{}", session.id, n + 1),
    }
}

/// The fingerprint of the reply a history ends with (its last message, an assistant's, as
/// cleaned in `each`); 0 when it ends otherwise or the reply is wholly private.
fn last_reply_print(history: &[Message], each: &[Option<Message>]) -> u64 {
    match (history.last(), each.last()) {
        (Some(m), Some(Some(cleaned))) if m.role == "assistant" => message_print(&cleaned.content),
        _ => 0,
    }
}

/// The fingerprints by words ([`reply_print`]) of the replies that end the last `most` turns of
/// a history (a turn's last message, when it is the agent's), oldest first.
fn turn_replies(history: &[Message], each: &[Option<Message>], most: usize) -> Vec<u64> {
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
fn last_turn_replies_unseen(session: &Session, history: &[Message], each: &[Option<Message>]) -> bool {
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
