//! Text utilities shared by every backend, matching the original implementation case for case
//! (`../shared/golden/content.jsonl`). Lengths and cuts count Unicode scalar values.

use serde::{Deserialize, Serialize};

/// A conversation message, already flattened to text by the agent's plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `user`, `assistant`, `system`, `tool`, …
    pub role: String,
    /// The text.
    pub content: String,
}

impl Message {
    /// A message with the given role and text.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self { role: role.into(), content: content.into() }
    }

    fn is_user(&self) -> bool {
        self.role == "user"
    }
}

/// One recalled memory as the formatter needs it.
#[derive(Debug, Clone, Copy)]
pub struct MemoryLine<'a> {
    /// The memory's text.
    pub text: &'a str,
    /// Its type, shown as ` [type]` when non-empty.
    pub kind: &'a str,
    /// When it was mentioned, shown as ` (at)` when non-empty.
    pub mentioned_at: &'a str,
}

/// Blocks injected by memory systems; recalled text must never be fed back as a query or stored.
const MEMORY_TAGS: [&str; 4] = ["memories", "hindsight_memories", "relevant_memories", "mental_models"];

/// Removes every `<tag>…</tag>` block of the memory tags (shortest match, across newlines,
/// case-sensitive); an unclosed tag is left alone.
pub fn strip_memory_tags(text: &str) -> String {
    let mut out = text.to_owned();
    for tag in MEMORY_TAGS {
        out = strip_tag_blocks(&out, tag);
    }
    out
}

/// Removes `<private>…</private>` spans: what the user marked private is never stored.
pub fn strip_private(text: &str) -> String {
    strip_tag_blocks(text, "private")
}

fn strip_tag_blocks(text: &str, tag: &str) -> String {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    if !text.contains(&open) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(&open) {
        let after_open = &rest[start + open.len()..];
        let Some(end) = after_open.find(&close) else { break };
        out.push_str(&rest[..start]);
        rest = &after_open[end + close.len()..];
    }
    out.push_str(rest);
    out
}

/// Formats recalled memories as `- text [type] (mentioned_at)`, separated by blank lines.
pub fn format_memories(results: &[MemoryLine<'_>]) -> String {
    let mut lines = Vec::with_capacity(results.len());
    for r in results {
        let mut line = format!("- {}", r.text);
        if !r.kind.is_empty() {
            line.push_str(&format!(" [{}]", r.kind));
        }
        if !r.mentioned_at.is_empty() {
            line.push_str(&format!(" ({})", r.mentioned_at));
        }
        lines.push(line);
    }
    lines.join("\n\n")
}

/// The tail of `messages` that starts at the `turns`-th user message counted from the end.
/// Fewer user messages than `turns` → all messages; `turns <= 0` or no messages → empty.
pub fn slice_last_turns(messages: &[Message], turns: i64) -> &[Message] {
    if turns <= 0 || messages.is_empty() {
        return &[];
    }
    let mut seen = 0;
    for (i, m) in messages.iter().enumerate().rev() {
        if m.is_user() {
            seen += 1;
            if seen == turns {
                return &messages[i..];
            }
        }
    }
    messages
}

/// Builds a recall query from the latest prompt and up to `turns` turns of prior context.
pub fn compose_recall_query(latest: &str, messages: &[Message], turns: i64) -> String {
    let latest = latest.trim();
    if turns <= 1 || messages.is_empty() {
        return latest.to_owned();
    }
    let mut lines = Vec::new();
    for m in slice_last_turns(messages, turns) {
        let stripped = strip_memory_tags(&m.content);
        let content = stripped.trim();
        if content.is_empty() || (m.is_user() && content == latest) {
            continue;
        }
        lines.push(format!("{}: {}", m.role, content));
    }
    if lines.is_empty() {
        return latest.to_owned();
    }
    format!("Prior context:\n\n{}\n\n{}", lines.join("\n"), latest)
}

/// Cuts a composed query to `max_chars`: the latest message is kept, the oldest context lines
/// go first; when the latest alone is too long it is cut to `max_chars`.
pub fn truncate_recall_query(query: &str, latest: &str, max_chars: i64) -> String {
    if max_chars <= 0 || char_len(query) as i64 <= max_chars {
        return query.to_owned();
    }
    let max = max_chars as usize;
    let latest = latest.trim();
    let latest_only = take_chars(latest, max).to_owned();
    const MARKER: &str = "Prior context:\n\n";
    let Some(marker_at) = query.find(MARKER) else { return latest_only };
    let suffix_marker = format!("\n\n{latest}");
    let Some(suffix_at) = query.rfind(&suffix_marker) else { return latest_only };
    let suffix = &query[suffix_at..];
    let suffix_len = char_len(suffix);
    if suffix_len >= max {
        return latest_only;
    }
    let body_start = marker_at + MARKER.len();
    let body = if body_start <= suffix_at { &query[body_start..suffix_at] } else { "" };
    let lines: Vec<&str> = body.split('\n').filter(|l| !l.is_empty()).collect();
    // Keep the newest lines that fit: marker + lines joined by "\n" + suffix.
    let mut used = char_len(MARKER) + suffix_len;
    let mut first_kept = lines.len();
    for (i, line) in lines.iter().enumerate().rev() {
        let extra = char_len(line) + usize::from(first_kept != lines.len());
        if used + extra > max {
            break;
        }
        used += extra;
        first_kept = i;
    }
    if first_kept == lines.len() {
        return latest_only;
    }
    format!("{MARKER}{}{suffix}", lines[first_kept..].join("\n"))
}

/// A transcript for retention and how many messages it frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transcript {
    /// `[role: r]\ncontent\n[r:end]` frames joined by blank lines; `None` when too little is left.
    pub text: Option<String>,
    /// Frames in `text`.
    pub message_count: usize,
}

/// Frames messages for storage. Not `full_window`: only from the last user message on.
pub fn retention_transcript(messages: &[Message], full_window: bool) -> Transcript {
    let none = Transcript { text: None, message_count: 0 };
    let window = if full_window {
        messages
    } else {
        match messages.iter().rposition(Message::is_user) {
            Some(i) => &messages[i..],
            None => return none,
        }
    };
    let mut frames = Vec::new();
    for m in window {
        let stripped = strip_memory_tags(&m.content);
        let content = stripped.trim();
        if content.is_empty() {
            continue;
        }
        frames.push(format!("[role: {r}]\n{content}\n[{r}:end]", r = m.role));
    }
    if frames.is_empty() {
        return none;
    }
    let text = frames.join("\n\n");
    if char_len(text.trim()) < 10 {
        return none;
    }
    Transcript { text: Some(text), message_count: frames.len() }
}

/// Whether a message carries anything worth reading: a letter or a digit.
pub fn has_substance(text: &str) -> bool {
    text.chars().any(char::is_alphanumeric)
}

/// Length in Unicode scalar values.
pub fn char_len(s: &str) -> usize {
    s.chars().count()
}

/// The first `n` chars of `s`.
pub fn take_chars(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_shortest_blocks_and_leaves_unclosed() {
        assert_eq!(strip_memory_tags("a<memories>x</memories>b<memories>y"), "ab<memories>y");
        assert_eq!(strip_memory_tags("<memories>1</memories>-<memories>2</memories>"), "-");
        assert_eq!(strip_memory_tags("<MEMORIES>up</MEMORIES>"), "<MEMORIES>up</MEMORIES>");
        assert_eq!(strip_private("keep <private>secret\nline</private> this"), "keep  this");
    }

    #[test]
    fn slices_by_user_boundary() {
        let m = vec![Message::new("user", "a"), Message::new("assistant", "b"), Message::new("user", "c")];
        assert_eq!(slice_last_turns(&m, 1), &m[2..]);
        assert_eq!(slice_last_turns(&m, 2), &m[..]);
        assert_eq!(slice_last_turns(&m, 5), &m[..]);
        assert!(slice_last_turns(&m, 0).is_empty());
    }

    #[test]
    fn substance() {
        assert!(!has_substance(" . "));
        assert!(has_substance("é"));
        assert!(has_substance("1"));
    }
}
