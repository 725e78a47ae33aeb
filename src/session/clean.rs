//! What is removed from text before it is stored: `<private>` spans (when `retain.strip_private`),
//! recalled memory blocks (never fed back), and messages with nothing to read.

use mneme_core::text::{self, Message};

use crate::config::Settings;

/// Private spans removed (when configured), memory blocks removed, trimmed; `None` if nothing is left.
pub fn clean(settings: &Settings, content: &str) -> Option<String> {
    clean_within(settings, content, 0).0
}

/// [`clean`] of a text that begins inside `open_before` private spans an earlier text of the
/// same request left open (the items of one retain are read in order, as a transcript's
/// messages are), and how many it leaves open.
pub fn clean_within(settings: &Settings, content: &str, open_before: usize) -> (Option<String>, usize) {
    if !settings.retain.strip_private {
        return (kept(text::strip_memory_tags(content)), 0);
    }
    let (shown, open) = text::strip_private_within(content, open_before);
    let mut shown = text::strip_memory_tags(&shown);
    // A memory block's removal can join a tag again (`<priv<memories>…</memories>ate>`): what
    // follows it is private.
    if text::has_private_tag(&shown) {
        shown = text::strip_private(&shown);
    }
    (kept(shown), open)
}

/// Texts that open `user` lines Claude Code writes itself: what a slash command leaves behind,
/// a `!command` run in shell mode and its output (`!cat .env` would store the file), a
/// background task's notice. (An interruption's "[Request interrupted by user]" and a reminder
/// stay: harmless, and left out they would change the turns of every session that has them,
/// which would then start a new part, its document a copy of the old.)
pub const COMMAND_ECHOES: [&str; 11] = [
    "<command-name>",
    "<command-message>",
    "<command-args>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<local-command-caveat>",
    "<bash-input>",
    "<bash-stdout>",
    "<bash-stderr>",
    "<task-notification>",
    "<teammate-message",
];

/// Whether a text opens as one of the [`COMMAND_ECHOES`]: the agent's words in the user's place.
pub fn is_command_echo(content: &str) -> bool {
    let trimmed = content.trim_start();
    COMMAND_ECHOES.iter().any(|e| trimmed.starts_with(e))
}

fn kept(content: String) -> Option<String> {
    let trimmed = content.trim();
    (!trimmed.is_empty()).then(|| trimmed.to_owned())
}

/// Only user and assistant messages that hold a letter or digit (drops tool-only turns' ".").
/// The spans the messages left out (system, tool) open still count: such a span hides what
/// follows it until a message closes it. A left-out message's closes count only for spans
/// left-out messages opened, innermost first: a tool result that read a file holding a lone
/// `</private>` would otherwise end the user's own span, or hide the whole conversation before
/// it.
pub(super) fn conversation(messages: &[Message]) -> Vec<Message> {
    let mut kept: Vec<Message> = Vec::with_capacity(messages.len());
    // The spans open after the last message read, innermost last, each marked whether a
    // left-out message opened it; and how many were open after the last message kept. The kept
    // messages are read in order with the spans each leaves open carried into the next, so the
    // next one kept opens (or closes) the difference. Kept as a count carried into a kept
    // message, a span a later tool message closed was never closed, and every later turn of the
    // session was stored as nothing (review120 #1); kept as two counts, a span the user opened
    // after a kept close was taken for a tool's, and a tool's close ended it (review122 #1).
    let mut open: Vec<bool> = Vec::new();
    let mut carried = 0usize;
    for m in messages {
        let is_kept = (m.role == "user" || m.role == "assistant") && text::has_substance(&m.content);
        if is_kept {
            let mut m = m.clone();
            let edges = text::private_edges_within(&m.content, open.len());
            if open.len() > carried {
                m.content.insert_str(0, &"<private>".repeat(open.len() - carried));
            } else if open.len() < carried {
                m.content.insert_str(0, &"</private>".repeat(carried - open.len()));
            }
            // Its closes end any span, innermost first; what it opens is its own.
            let lowest = open.len() - edges.closes_of_those_before;
            open.truncate(lowest);
            open.resize(edges.open_at_end, false);
            carried = open.len();
            kept.push(m);
        } else if text::has_private_tag(&m.content) {
            // Its closes end only the innermost spans left-out messages opened.
            let closable = open.iter().rev().take_while(|by_left_out| **by_left_out).count();
            let edges = text::private_edges_within(&m.content, closable);
            let lowest = open.len() - edges.closes_of_those_before;
            let opened = edges.open_at_end - (closable - edges.closes_of_those_before);
            open.truncate(lowest);
            open.extend(std::iter::repeat_n(true, opened));
        }
    }
    kept
}

/// Memories that arrive whole (an import) cleaned like a retain: private spans removed from every
/// text field, and those of one document read in order
/// with the private spans each leaves open carried into the next (a document's memories are
/// its passages, read as a transcript's messages are; `/hindsight` reads a document's items so):
/// a span split across two of them left the memories between in the clear. Those left with
/// nothing are dropped.
pub fn clean_imported_all(
    settings: &Settings,
    memories: Vec<mneme_core::StoredMemory>,
) -> Vec<mneme_core::StoredMemory> {
    clean_imported_each(settings, memories, |m| m)
}

/// [`clean_imported_all`] of items that each hold a memory (`memory` gives it): `mneme import`
/// cleans a whole file so, with its line numbers, before it sends it in parts.
pub fn clean_imported_each<T>(
    settings: &Settings,
    items: Vec<T>,
    memory: fn(&mut T) -> &mut mneme_core::StoredMemory,
) -> Vec<T> {
    let mut open: std::collections::HashMap<(String, String), usize> = std::collections::HashMap::new();
    items
        .into_iter()
        .filter_map(|mut item| {
            let m = memory(&mut item);
            // Keyed as the ids are stored: trimmed, in their bank. One holding a tag is dropped
            // (below), and its memory stands alone.
            let document = m.document_id.as_deref().filter(|d| !text::has_private_tag(d));
            let document = document.map(|d| (m.bank.clone(), d.trim().to_owned()));
            let before = document.as_ref().map_or(0, |d| open.get(d).copied().unwrap_or(0));
            let (kept, after) = clean_imported_within(settings, m, before);
            if let Some(d) = document {
                open.insert(d, after);
            }
            kept.then_some(item)
        })
        .collect()
}

/// Cleans an imported memory whose content begins inside `open_before` private spans (dates made
/// RFC 3339 UTC, private spans removed from every field); whether anything is left, and how many
/// spans its content leaves open.
fn clean_imported_within(settings: &Settings, m: &mut mneme_core::StoredMemory, open_before: usize) -> (bool, usize) {
    // Stored as every date is, RFC 3339 UTC with milliseconds (`+05:30`, a date alone, a space
    // for the `T` were kept as sent, and sorted and shown as such); none (a Hindsight memory
    // without one) is now.
    m.created_at = crate::hindsight_api::time::normalize(&m.created_at)
        .unwrap_or_else(|| mneme_core::time::rfc3339_millis(std::time::SystemTime::now()));
    if settings.retain.strip_private {
        m.context = m.context.as_deref().map(text::strip_private).filter(|c| !c.trim().is_empty());
        // A document id holding a span is dropped, not cleaned: two cleaned alike would make one
        // document, each memory replacing the other.
        m.document_id = m.document_id.take().filter(|d| !text::has_private_tag(d) && !d.trim().is_empty());
        m.tags = text::strip_private_list(std::mem::take(&mut m.tags));
        text::strip_private_map(&mut m.metadata);
    }
    match clean_within(settings, &m.content, open_before) {
        (Some(content), after) => {
            m.content = content;
            (true, after)
        }
        (None, after) => (false, after),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_a_memory_block_joins_again_is_private() {
        let settings = Settings::default();
        let cleaned = clean(&settings, "abc <priv<memories>x</memories>ate>LEAK-G1 hmm");
        assert_eq!(cleaned.as_deref(), Some("abc"));
    }

    /// The memories of one document are read in order: a span one opens and a later one closes
    /// hides those between; a memory of another document, or of none, stands outside it.
    #[test]
    fn imported_memories_of_one_document_carry_their_spans() {
        let memory = |content: &str, document: Option<&str>| mneme_core::StoredMemory {
            id: content.into(),
            bank: "b".into(),
            content: content.into(),
            context: None,
            tags: Vec::new(),
            metadata: Default::default(),
            document_id: document.map(Into::into),
            kind: mneme_core::MemoryType::Experience,
            created_at: "2026-01-02T03:04:05Z".into(),
        };
        let memories = vec![
            memory("the prod key: <private>", Some("d")),
            memory("a fact of its own", None),
            memory("IMPORTSECRET", Some(" d ")),
            memory("another document", Some("e")),
            mneme_core::StoredMemory { bank: "other".into(), ..memory("another bank's d", Some("d")) },
            memory("</private> rotate monthly", Some("d")),
        ];
        let kept: Vec<String> =
            clean_imported_all(&Settings::default(), memories).into_iter().map(|m| m.content).collect();
        assert_eq!(
            kept,
            ["the prod key:", "a fact of its own", "another document", "another bank's d", "rotate monthly"]
        );
    }

    #[test]
    fn a_text_begins_inside_the_spans_an_earlier_one_left_open() {
        let settings = Settings::default();
        assert_eq!(clean_within(&settings, "one <private> opens", 0), (Some("one".into()), 1));
        assert_eq!(clean_within(&settings, "SECRET between", 1), (None, 1));
        assert_eq!(clean_within(&settings, "closes </private> two", 1), (Some("two".into()), 0));
        let mut off = Settings::default();
        off.retain.strip_private = false;
        assert_eq!(clean_within(&off, "SECRET <private>", 1), (Some("SECRET <private>".into()), 0));
    }
}
