//! The tools an agent's model calls: retain, recall, reflect.

use std::time::{Instant, SystemTime};

use mneme_core::text::budget_units;
use mneme_core::{BackendError, MemoryType, RecallQuery, Recalled, ReflectQuery, Scope, TagsMatch};

use super::clean::clean;
use super::{SessionError, Sessions};
use crate::config::Settings;
use crate::queue::NewItem;

/// The answer to a retain when memory is off.
pub const OFF_MESSAGE: &str = "Memory is off: nothing was stored.";

/// What the recall tool says while memory is off: not "No relevant memories found.", which an
/// agent (or a user who forgot the switch) took for memories gone (review65 #3).
pub const OFF_RECALL_MESSAGE: &str = "Memory is off: nothing was recalled.";

/// What a retain did.
#[derive(Debug, Clone, PartialEq)]
pub struct Retained {
    /// Items spooled (0 when all were empty after cleaning).
    pub queued: usize,
    /// Items not stored because nothing was left once private spans and recalled blocks were
    /// removed.
    pub skipped: usize,
    /// For the agent.
    pub message: String,
    /// `memory.backend = "off"` when it arrived: nothing was kept.
    pub off: bool,
}

/// The recall tool's answer.
#[derive(Debug, Clone)]
pub struct RecallAnswer {
    /// Best first.
    pub results: Vec<Recalled>,
    /// For the agent's model.
    pub message: String,
}

impl Sessions {
    /// The retain tool: spools items and answers at once. Blank items are refused (nothing is
    /// stored); items that hold only private or recalled text are skipped and counted.
    pub async fn retain(&self, id: &str, items: Vec<(String, Option<String>)>) -> Result<Retained, SessionError> {
        let (scope, queue_id) = self.route(id)?;
        if items.is_empty() {
            return Err(SessionError::Invalid("items must hold at least one {content}".into()));
        }
        if let Some(i) = items.iter().position(|(content, _)| mneme_core::text::is_blank(content)) {
            return Err(SessionError::Invalid(format!("items[{i}].content is blank; nothing was stored")));
        }
        if !self.inner.state.takes_retains() {
            return Ok(Retained { queued: 0, skipped: 0, message: OFF_MESSAGE.into(), off: true });
        }
        let settings = self.settings();
        let total = items.len();
        // The items are read in order, a span one opens hiding the items up to the one that
        // closes it (a span split across two items left the items between in the clear).
        let mut open = 0;
        let items: Vec<NewItem> = items
            .into_iter()
            .filter_map(|(content, context)| {
                let (cleaned, after) = super::clean_within(&settings, &content, open);
                open = after;
                let content = cleaned?;
                // A context that is private or blank falls back to the default.
                let context =
                    context.and_then(|c| clean(&settings, &c)).unwrap_or_else(|| settings.retain.context.clone());
                Some(NewItem { content, context: Some(context), kind: MemoryType::World, ..NewItem::default() })
            })
            .collect();
        let skipped = total - items.len();
        let n = self.inner.queue.enqueue(&queue_id, &scope, items).await?;
        Ok(Retained { queued: n, skipped, message: retained_message(n, skipped), off: false })
    }

    /// The recall tool.
    pub async fn recall(&self, id: &str, query: &str) -> Result<RecallAnswer, SessionError> {
        let (scope, queue_id) = self.route(id)?;
        let query = recall_text(&self.settings(), query).map_err(SessionError::Invalid)?;
        // The message is what the agent reads: within `recall.max_tokens` (in quarter tokens), its
        // heading and each result's formatting included, like the first-turn block.
        let heading = |n: usize| {
            format!("Found {n} relevant memories (as of {} UTC):\n\n", mneme_core::time::prompt_time(SystemTime::now()))
        };
        let budget = self.settings().recall.max_tokens.saturating_mul(4);
        // A message within the bound, or none (a budget of a few tokens).
        let within = |message: &str| if budget_units(message) <= budget { message.to_owned() } else { String::new() };
        if !self.backend().capabilities().stores {
            return Ok(RecallAnswer { results: Vec::new(), message: within(OFF_RECALL_MESSAGE) });
        }
        // Asked even when no result could fit: the agent is told whether nothing fits or nothing
        // was found.
        let room = budget.saturating_sub(budget_units(&heading(100)));
        // Bounded by `recall.timeout`, its delivery first included, as automatic recall is: the
        // session start hands that out as the wait a plugin's recall should exceed, and the
        // opencode plugin took a later answer for a hung daemon and skipped it (its turn's
        // retains too) for 30 s.
        let timeout = self.settings().recall.timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        self.deliver_own_retains(&queue_id).await;
        let results = match tokio::time::timeout_at(deadline, self.recall_scope(&scope, &query, room, deadline)).await {
            Ok(results) => results?,
            Err(_) => {
                tracing::warn!(session = id, "recall timed out after {timeout:?}");
                return Err(BackendError::transient(recall_timed_out(timeout)).into());
            }
        };
        if results.is_empty() {
            return Ok(RecallAnswer { results, message: within("No relevant memories found.") });
        }
        let results = fit_results(&results, budget.saturating_sub(budget_units(&heading(results.len()))));
        let results = shown_once(results);
        if results.is_empty() {
            // Not even one result fits: the bound holds, and says so when the words fit in it.
            return Ok(RecallAnswer { results, message: within(NOTHING_FITS) });
        }
        let message = format!("{}{}", heading(results.len()), format_results(&results));
        Ok(RecallAnswer { results, message })
    }

    /// Read your own writes: what the session retained and its queue still holds (the debounce
    /// waits up to `queue.flush_interval`) is delivered before it recalls
    /// ([`Sessions::flush_before_recall`]). A retain followed by a recall found nothing for 5 s.
    /// Not while the session backs off after a failed delivery: the backend is down or
    /// throttling, and every recall would wait on it.
    async fn deliver_own_retains(&self, queue_id: &str) {
        if self.inner.queue.deliverable(queue_id) {
            self.flush_before_recall(queue_id, &self.settings()).await;
        }
    }

    /// The reflect tool.
    pub async fn reflect(&self, id: &str, query: &str, context: Option<String>) -> Result<String, SessionError> {
        let (scope, queue_id) = self.route(id)?;
        let settings = self.settings();
        let query = recall_text(&settings, query).map_err(SessionError::Invalid)?;
        // A backend that cannot reflect answers so at once, without waiting on a delivery.
        if self.backend().capabilities().reflects {
            self.deliver_own_retains(&queue_id).await;
        }
        let q = ReflectQuery {
            query,
            context: context.and_then(|c| clean(&settings, &c)),
            budget: settings.recall.budget,
            tags: scope.tags.clone(),
            tags_match: TagsMatch::Any,
            tag_groups: None,
            types: Vec::new(),
            max_tokens: None,
        };
        let text = self.backend().reflect(&scope, &q).await?;
        Ok(match text.trim() {
            "" => "No relevant information found to reflect on.".to_owned(),
            t => t.to_owned(),
        })
    }

    /// Recall in a scope with the configured budget, bound and types, timed for the metrics.
    /// `query` is already cleaned (see [`recall_text`]); an empty one asks nothing.
    ///
    /// `room` is what the results may take of the answer (quarter tokens), the answer's frame
    /// left out: the backend is asked to fit them, and a first result within room for its line's
    /// formatting, so that its window around the query's words is what the agent reads (cut
    /// again here, from its start, it lost them).
    ///
    /// `deadline` is when the caller stops waiting (`recall.timeout` after it began, less what
    /// came first: the delivery of the session's own retains): a backend that can answer sooner
    /// with less does not wait past it for the more.
    pub(super) async fn recall_scope(
        &self,
        scope: &Scope,
        query: &str,
        room: usize,
        deadline: tokio::time::Instant,
    ) -> Result<Vec<Recalled>, BackendError> {
        if query.is_empty() {
            return Ok(Vec::new());
        }
        let settings = self.settings();
        let q = RecallQuery {
            query: query.to_owned(),
            budget: settings.recall.budget,
            // At least a few words of each: a window shorter is not worth reading, and what
            // does not fit then is left out for shorter results (a short memory fits whole
            // where a window of a long one would have been a word or two).
            max_tokens: room.saturating_sub(RESULT_LINE_UNITS).max(MIN_CUT_CHARS + CUT_MARKS) / 4,
            types: settings.recall.types.clone(),
            tags: scope.tags.clone(),
            tags_match: TagsMatch::Any,
            deadline: Some(deadline.into_std()),
        };
        let started = Instant::now();
        let r = self.backend().recall(scope, &q).await;
        self.inner.metrics.recall_seconds.observe(started.elapsed());
        r
    }
}

/// What a result's line adds to its text at most ([`format_results`]: `- `, its type, its date,
/// the blank line before the next).
const RESULT_LINE_UNITS: usize = 48;

/// The recall tool's message when no result fits in `recall.max_tokens`.
const NOTHING_FITS: &str = "No memory fits in recall.max_tokens.";

/// Why a recall tool got nothing: its backend took longer than `recall.timeout`.
pub fn recall_timed_out(timeout: std::time::Duration) -> String {
    format!("it did not answer within recall.timeout ({})", humantime::format_duration(timeout))
}

/// What a recall query asks once `<private>` spans (when `retain.strip_private`) and recalled
/// memory blocks are removed: a query goes to the backend, which may be a server that keeps or
/// logs what it is asked, so it is cleaned like a retain. An error for a person when nothing is
/// left.
pub fn recall_text(settings: &Settings, query: &str) -> Result<String, String> {
    if mneme_core::text::is_blank(query) {
        return Err("query must not be empty".into());
    }
    super::clean_text(settings, query)
        .ok_or_else(|| "query must hold more than <private> text or recalled memories: nothing was asked".into())
}

/// Refuses filter tags holding a `<private>` tag: a filter goes to the backend as it is (cut, it
/// would filter by something else), and the backend may be a server that logs what it is asked.
pub fn filter_tags(tags: &[String]) -> Result<(), String> {
    match tags.iter().any(|t| mneme_core::text::has_private_tag(t)) {
        true => Err("tags may not contain <private> tags: a filter is sent to the backend as it is".into()),
        false => Ok(()),
    }
}

/// `"1 memory queued."` / `"N memories queued."`
pub fn queued_message(n: usize) -> String {
    if n == 1 {
        "1 memory queued.".into()
    } else {
        format!("{n} memories queued.")
    }
}

/// [`queued_message`], saying also how many items were not stored because nothing but private
/// or recalled text was in them.
pub fn retained_message(queued: usize, skipped: usize) -> String {
    let mut message = queued_message(queued);
    match skipped {
        0 => {}
        1 => message.push_str(" 1 item held only <private> or recalled text and was not stored."),
        n => message.push_str(&format!(" {n} items held only <private> or recalled text and were not stored.")),
    }
    message
}

/// The results as the agent is given them, after every filter and fit: a turn (or paragraph)
/// an earlier result showed is left out of later ones, and a result with nothing of its own
/// goes (see [`mneme_core::repeats`]).
pub fn shown_once(results: Vec<Recalled>) -> Vec<Recalled> {
    mneme_core::repeats::without_repeats(results, |r| &mut r.text)
}

/// The results that fit in `room` characters as [`format_results`] shows them, best first:
/// one that does not fit is left out for shorter ones after it; a first result too long for the
/// room is cut at a word, or left out when less than [`MIN_CUT_CHARS`] of it would show.
pub(super) fn fit_results(results: &[Recalled], room: usize) -> Vec<Recalled> {
    let mut room = room;
    let mut kept: Vec<Recalled> = Vec::new();
    for r in results {
        let separator = if kept.is_empty() { 0 } else { 2 };
        let len = budget_units(&format_results(std::slice::from_ref(r))) + separator;
        if len <= room {
            room -= len;
            kept.push(r.clone());
        } else if kept.is_empty() {
            let overhead = len - budget_units(&r.text);
            let text_room = room.saturating_sub(overhead);
            if text_room >= MIN_CUT_CHARS {
                kept.push(Recalled { text: cut_at_word(&r.text, text_room), ..r.clone() });
            }
            break;
        }
    }
    kept
}

/// The least of a result's text worth showing cut: below this, nothing is shown.
const MIN_CUT_CHARS: usize = 24;
/// What the `… ` and ` …` around a window cost.
const CUT_MARKS: usize = 4;

/// `text` costing at most `max` (quarter tokens), cut at a word and marked with `…`.
fn cut_at_word(text: &str, max: usize) -> String {
    if budget_units(text) <= max {
        return text.to_owned();
    }
    let keep = mneme_core::text::take_units(text, max.saturating_sub(2));
    let at = keep.rfind(char::is_whitespace).filter(|i| *i > keep.len() / 2).unwrap_or(keep.len());
    // `keep` is the start of `text`: the same offsets, and `text` knows what follows the cut.
    let at = mneme_core::text::shown_char_boundary(text, at);
    format!("{} …", keep[..at].trim_end())
}

/// Results as the formatter shows them: `- text [type] (mentioned_at)`.
pub(super) fn format_results(results: &[Recalled]) -> String {
    let lines: Vec<mneme_core::text::MemoryLine> = results
        .iter()
        .map(|r| mneme_core::text::MemoryLine { text: &r.text, kind: &r.kind, mentioned_at: &r.mentioned_at })
        .collect();
    // Shown inside a `<memories>` block, or beside one: never able to close it.
    mneme_core::text::defuse_memory_tags(&mneme_core::text::format_memories(&lines)).into_owned()
}
