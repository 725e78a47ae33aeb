//! What happens without the model asking: first-turn recall, automatic retain on its cadence
//! (a turn's end, placed and queued by `retain` and `part`), the tail a session leaves (retained
//! when it ends or goes idle), and compaction context.

use mneme_core::text::{self, Message};
use mneme_core::MemoryType;

use super::block::{block_room, memory_block, query_for};
use super::clean::conversation;
use super::placement::{command_print, is_slash_command, MAX_COMMANDS_SINCE_UPGRADE};
use super::spans::{prompt_in_context, spans_carried, with_current_turn, KeptPrompt, SpansCarried};
use super::{Delivery, SessionError, Sessions, Turn};
use crate::config::Settings;
use crate::queue::{FlushReport, NewItem};

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
pub(super) enum Sent {
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
        let deadline = tokio::time::Instant::now() + settings.recall.timeout;
        let recall = self.recall_scope(&session.scope, &query, block_room(&settings), deadline);
        let results = match tokio::time::timeout_at(deadline, recall).await {
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
        // A count of omitted turns past what the part's turns can be printed to (a client that
        // overcounts, a session first heard deep into a long one) is taken at that bound: counted
        // whole, with the turns unprinted, every later transcript shorter than it was taken for
        // turns retained already and stored as nothing (review120 #3).
        let most = session.turn_prints.len().saturating_add(super::placement::MAX_UNKNOWN_TURNS);
        let end = TurnEnd { omitted_user_turns: end.omitted_user_turns.min(most), ..end };
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
                retained = match end.last && conversation(&messages).is_empty() {
                    // The end with nothing sent (a hook that could not read its transcript):
                    // `ends_session` retains the session's tail now, as a side turn's end does;
                    // it waited for the session to go idle (review120 #5).
                    true => self.queue_pending_of(id).await?,
                    false => self.retain_turns(&session, &settings, &messages, &end, sent).await?,
                };
            } else {
                self.pass_over_turns(&session, &settings, &messages, &end, sent).await?;
            }
        } else if end.last && session.parent.is_none() {
            // A side turn (a title, a summary) that ends the session: its messages are not the
            // conversation, but `ends_session` retains everything now, the session's tail kept
            // for the cadence too, as the idle retain would (review109: it waited for that).
            retained = self.queue_pending_of(id).await?;
        }
        drop(turn_lock);
        let flushed = self.flush(session.queue_id(), end.delivery).await;
        Ok((retained, flushed))
    }

    /// Queues the session's pending tail, if it has one (as it is now: a turn's end may have
    /// changed it); how many transcripts were queued.
    async fn queue_pending_of(&self, id: &str) -> Result<usize, SessionError> {
        let session = self.get(id)?;
        let Some(pending) = &session.pending else { return Ok(0) };
        self.queue_pending(&session, pending).await?;
        Ok(1)
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
        match tokio::time::timeout_at(
            deadline,
            self.recall_scope(&session.scope, &query, block_room(&settings), deadline),
        )
        .await
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
