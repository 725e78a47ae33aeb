//! Text utilities shared by every backend, matching the original implementation case for case
//! (`../shared/golden/content.jsonl`). Lengths and cuts count Unicode scalar values.

use serde::{Deserialize, Serialize};
use unicode_segmentation::{GraphemeCursor, UnicodeSegmentation};

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

/// Blocks injected by memory systems, as (open, close) tags; recalled text must never be fed back
/// as a query or stored.
const MEMORY_TAGS: [(&str, &str); 4] = [
    ("<memories>", "</memories>"),
    ("<hindsight_memories>", "</hindsight_memories>"),
    ("<relevant_memories>", "</relevant_memories>"),
    ("<mental_models>", "</mental_models>"),
];

/// Removes every `<tag>…</tag>` block of the memory tags (shortest match, across newlines,
/// case-sensitive); an unclosed tag is left alone.
pub fn strip_memory_tags(text: &str) -> String {
    // Every retain and every recall query comes through here, and most hold no tag at all.
    if !text.contains('<') {
        return text.to_owned();
    }
    let mut out = text.to_owned();
    for (open, close) in MEMORY_TAGS {
        out = strip_tag_blocks(&out, open, close);
    }
    out
}

/// Removes `<private>…</private>` spans: what the user marked private is never stored.
///
/// Unlike the memory tags this fails closed: the tag matches in any case (`<PRIVATE>`), with
/// attributes (`<private reason="x">`), nested spans end at their outermost close, and an unclosed
/// `<private>` hides everything after it. A stray close tag (one no `<private>` before it opened)
/// hides everything before it: its opening tag was lost on the way (a span split across the items
/// of a document, a message cut to fit a request), so what precedes it may be the secret.
pub fn strip_private(text: &str) -> String {
    strip_private_within(text, 0).0
}

/// [`strip_private`] of a text that begins inside `open_before` spans an earlier text opened (a
/// message of a transcript), and how many it leaves open at its end. The same as stripping the
/// text behind `open_before` opening tags, in time linear in the text alone.
pub fn strip_private_within(text: &str, open_before: usize) -> (String, usize) {
    if !has_private_tag(text) {
        return if open_before == 0 { (text.to_owned(), 0) } else { (String::new(), open_before) };
    }
    let mut out = String::with_capacity(text.len());
    let mut depth = open_before;
    let mut kept_from = 0usize; // start of the text being kept, when depth == 0
    for (tag, start, end) in private_tags(text.as_bytes()) {
        match tag {
            PrivateTag::Open => {
                if depth == 0 {
                    out.push_str(&text[kept_from..start]);
                }
                depth += 1;
            }
            PrivateTag::Close => {
                if depth == 0 {
                    out.clear(); // a stray close tag: everything before it may be private
                } else {
                    depth -= 1;
                }
                if depth == 0 {
                    kept_from = end;
                }
            }
        }
    }
    if depth == 0 {
        out.push_str(&text[kept_from..]);
    }
    (out, depth)
}

/// The `<private>` tags of a text in order, as (tag, where it starts, where it ends).
fn private_tags(bytes: &[u8]) -> impl Iterator<Item = (PrivateTag, usize, usize)> + '_ {
    let mut i = 0usize;
    std::iter::from_fn(move || {
        while i < bytes.len() {
            if bytes[i] == b'<' {
                if let Some((tag, end)) = private_tag_at(bytes, i) {
                    let start = i;
                    i = end;
                    return Some((tag, start, end));
                }
            }
            i += 1;
        }
        None
    })
}

/// How a text meets `<private>` spans that cross its edges, read as [`strip_private`] reads
/// tags: a message of a transcript may close a span an earlier one opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PrivateEdges {
    /// It closes a span it did not open (one begun before it).
    pub closes_earlier: bool,
    /// It leaves a span open at its end.
    pub left_open: bool,
    /// How many spans it leaves open at its end (nested ones each count): the later text needs
    /// as many close tags before anything shows again.
    pub open_at_end: usize,
    /// Read inside spans begun before it ([`private_edges_within`]): how many of those it
    /// closes (what is shown after it depends on them).
    pub closes_of_those_before: usize,
}

/// A value as an error message quotes it (`"…"`), unless it holds a `<private>` tag: then it is
/// not repeated, since error messages reach clients and logs. A long one is cut after its first
/// [`QUOTED_HEAD`] characters, with its length.
pub fn quoted_unless_private(value: &str) -> String {
    if has_private_tag(value) {
        return "(a value with <private> text)".to_owned();
    }
    let chars = value.chars().count();
    if chars > QUOTED_HEAD * 2 {
        let head: String = value.chars().take(QUOTED_HEAD).collect();
        return format!("{head:?}… ({chars} characters)");
    }
    format!("{value:?}")
}

/// How much of a long value an error message quotes.
pub const QUOTED_HEAD: usize = 100;

/// Where `text`'s `<private>` spans cross its edges (see [`PrivateEdges`]).
pub fn private_edges(text: &str) -> PrivateEdges {
    private_edges_within(text, 0)
}

/// [`private_edges`] of a text begun inside `open_before` spans, as if it followed as many
/// opening tags (without writing them: a history of many messages each leaving one open made
/// that quadratic, review77 #3).
pub fn private_edges_within(text: &str, open_before: usize) -> PrivateEdges {
    let mut edges = PrivateEdges { left_open: open_before > 0, open_at_end: open_before, ..PrivateEdges::default() };
    if !has_private_tag(text) {
        return edges;
    }
    let (mut depth, mut lowest) = (open_before, open_before);
    for (tag, _, _) in private_tags(text.as_bytes()) {
        match tag {
            PrivateTag::Open => depth += 1,
            PrivateTag::Close if depth == 0 => edges.closes_earlier = true,
            PrivateTag::Close => depth -= 1,
        }
        lowest = lowest.min(depth);
    }
    edges.left_open = depth > 0;
    edges.open_at_end = depth;
    edges.closes_of_those_before = open_before - lowest;
    edges
}

/// Whether `text` holds a `<private>` or `</private>` tag, matched as [`strip_private`] matches
/// them (any case, with attributes). Identifiers (session ids, bank names, memory ids) are
/// stored and shown as they are, so one holding a tag is refused rather than cut.
pub fn has_private_tag(text: &str) -> bool {
    contains_ignore_ascii_case(text, "<private") || contains_ignore_ascii_case(text, "</private")
}

/// Removes private spans from every item of a list (tags); an item of which nothing is left is
/// dropped.
pub fn strip_private_list(items: Vec<String>) -> Vec<String> {
    items
        .into_iter()
        .map(|t| if has_private_tag(&t) { strip_private(&t) } else { t })
        .filter(|t| !t.trim().is_empty())
        .collect()
}

/// FNV-1a over `bytes`: a fingerprint that is the same on every run and build (unlike the
/// standard library's hasher), for what is saved or shown across runs.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

/// Removes private spans from every value of a string map (metadata).
pub fn strip_private_map(map: &mut std::collections::BTreeMap<String, String>) {
    let mut cleaned = std::collections::BTreeMap::new();
    let mut renamed = Vec::new();
    for (key, value) in std::mem::take(map) {
        let (clean_key, value) = (strip_private(&key), strip_private(&value));
        match clean_key == key {
            true => {
                cleaned.insert(clean_key, value);
            }
            false => renamed.push((clean_key, value)),
        }
    }
    // A key that held a private span and, cleaned, names another key does not replace that key's
    // value (`{"k": "A", "k<private>x</private>": "B"}` was stored as `k: "B"`, and A was lost).
    for (key, value) in renamed {
        cleaned.entry(key).or_insert(value);
    }
    *map = cleaned;
}

#[derive(Clone, Copy)]
enum PrivateTag {
    Open,
    Close,
}

/// A `<private …>` or `</private …>` tag starting at `at` (which holds `<`), and where it ends.
/// An open tag without its `>` runs to the end of the text (fail closed).
fn private_tag_at(bytes: &[u8], at: usize) -> Option<(PrivateTag, usize)> {
    const NAME: &[u8] = b"private";
    let (kind, name_at) =
        if bytes.get(at + 1) == Some(&b'/') { (PrivateTag::Close, at + 2) } else { (PrivateTag::Open, at + 1) };
    let name = bytes.get(name_at..name_at + NAME.len())?;
    if !name.eq_ignore_ascii_case(NAME) {
        return None;
    }
    let after = name_at + NAME.len();
    match bytes.get(after) {
        None => Some((kind, bytes.len())),
        Some(b'>') => Some((kind, after + 1)),
        Some(c) if c.is_ascii_whitespace() || *c == b'/' => {
            let end = bytes[after..].iter().position(|&b| b == b'>').map_or(bytes.len(), |p| after + p + 1);
            Some((kind, end))
        }
        Some(_) => None, // `<privateer>`: another word
    }
}

fn contains_ignore_ascii_case(text: &str, needle: &str) -> bool {
    let (t, n) = (text.as_bytes(), needle.as_bytes());
    t.len() >= n.len() && t.windows(n.len()).any(|w| w.eq_ignore_ascii_case(n))
}

fn strip_tag_blocks(text: &str, open: &str, close: &str) -> String {
    if !text.contains(open) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(open) {
        let after_open = &rest[start + open.len()..];
        let Some(end) = after_open.find(close) else { break };
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

/// Whether a text shows nothing: only white space, control characters and the invisible format
/// characters (zero-width spaces and joiners, direction marks, the byte-order mark, soft hyphens).
pub fn is_blank(text: &str) -> bool {
    text.chars().all(|c| {
        c.is_whitespace()
            || c.is_control()
            || matches!(c, '\u{ad}' | '\u{34f}' | '\u{61c}' | '\u{180e}' | '\u{200b}'..='\u{200f}'
                | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{206f}' | '\u{feff}')
    })
}

/// Whether a message carries anything worth reading: a letter or a digit.
pub fn has_substance(text: &str) -> bool {
    text.chars().any(char::is_alphanumeric)
}

/// `text` with its control characters other than newline and tab shown escaped (`\u{1b}`), for
/// a terminal or a log line: a memory or an id may hold ESC sequences or a line break.
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    escape_controls_but(text, &['\n', '\t'])
}

/// [`escape_controls`] with newlines escaped as well: for one log line.
pub fn escape_controls_in_line(text: &str) -> std::borrow::Cow<'_, str> {
    escape_controls_but(text, &['\t'])
}

fn escape_controls_but<'a>(text: &'a str, kept: &[char]) -> std::borrow::Cow<'a, str> {
    let escaped = |c: char| (c.is_control() || disguises(c)) && !kept.contains(&c);
    if !text.chars().any(escaped) {
        return std::borrow::Cow::Borrowed(text);
    }
    text.chars().map(|c| if escaped(c) { c.escape_unicode().to_string() } else { c.to_string() }).collect()
}

/// Characters that are not controls but change how the text around them reads: the
/// bidirectional overrides and isolates (U+202E shows "exe.txt" as "txt.exe"), the marks, and
/// the invisible zero-width space and byte-order mark. (The zero-width joiner stays: emoji need it.)
fn disguises(c: char) -> bool {
    matches!(c, '\u{200B}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

/// Length in Unicode scalar values.
pub fn char_len(s: &str) -> usize {
    s.chars().count()
}

/// How far back (in bytes) a cut moves to the start of the shown character it would split: a
/// longer cluster (a letter under hundreds of combining marks) is cut where it was asked.
const SHOWN_CHAR_MAX_BYTES: usize = 128;

/// Whether a cut at byte `at` (a char boundary of `text`) splits no shown character: it falls
/// between two grapheme clusters (UAX #29: a flag's two letters, a joined emoji, a letter and
/// its accents, a Hangul syllable's jamo stay together).
pub fn is_shown_char_boundary(text: &str, at: usize) -> bool {
    GraphemeCursor::new(at, text.len(), true).is_boundary(text, 0).unwrap_or(true)
}

/// A byte offset at or before `at` (a char boundary of `text`) where a cut splits no shown
/// character ([`is_shown_char_boundary`]); `at` itself when that would move it back more than
/// [`SHOWN_CHAR_MAX_BYTES`].
pub fn shown_char_boundary(text: &str, at: usize) -> usize {
    let mut cursor = GraphemeCursor::new(at, text.len(), true);
    if cursor.is_boundary(text, 0).unwrap_or(true) {
        return at;
    }
    match cursor.prev_boundary(text, 0) {
        Ok(Some(start)) if at - start <= SHOWN_CHAR_MAX_BYTES => start,
        _ => at,
    }
}

/// For each char offset of `text` (and its end), whether a cut there splits no shown character.
pub fn shown_char_starts(text: &str) -> Vec<bool> {
    let mut starts = Vec::with_capacity(text.len() + 1);
    for g in text.graphemes(true) {
        starts.push(true);
        starts.extend(std::iter::repeat_n(false, g.chars().count() - 1));
    }
    starts.push(true);
    starts
}

/// A memory's text with the memory block's own tags made inert (`<` → `‹`, the same length): a
/// stored `</memories>` would otherwise close a recalled block early and put what follows it
/// outside the frame that tells the agent to read it as background only.
pub fn defuse_memory_tags(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains('<') {
        return std::borrow::Cow::Borrowed(text);
    }
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (at, _) in lower.match_indices('<') {
        let rest = &lower[at + 1..];
        let rest = rest.strip_prefix('/').unwrap_or(rest);
        if rest.starts_with("memories") {
            out.push_str(&text[last..at]);
            out.push('‹');
            last = at + 1;
        }
    }
    out.push_str(&text[last..]);
    std::borrow::Cow::Owned(out)
}

/// What `s` costs against a recall budget, in quarter tokens: recall's answers, the first-turn
/// block and the recall tool's message stay within `max_tokens` × 4 of these (see
/// [`budget_units_of`]).
pub fn budget_units(s: &str) -> usize {
    s.chars().map(budget_units_of).sum()
}

/// What one character costs against a recall budget, in quarter tokens. Agents' tokenizers take
/// about 4 characters of English a token, 2 to 3 characters of the other alphabets they learned
/// (Cyrillic, Greek, Arabic, Devanagari …), and a token or more for each other character: one
/// of Chinese, Japanese or Korean, an emoji, a currency sign, an arrow, a musical or
/// mathematical symbol, a character of a script they rarely see. Counted as a quarter or half a
/// token, a CJK answer ran to about 4 times its budget and one of symbols to twice it, so only
/// the alphabets below U+2000 and the general punctuation count less than a token.
pub fn budget_units_of(c: char) -> usize {
    match c as u32 {
        // ASCII, Latin, and the general punctuation Latin text uses (… – “ ”).
        0..=0x024F | 0x2000..=0x206F => 1,
        // Hangul Jamo: a syllable's parts, each a token as a syllable is.
        0x1100..=0x11FF => 4,
        // The other alphabets (IPA and combining marks to Greek Extended): letters tokenizers
        // merge in pairs or threes.
        0x0250..=0x1FFF => 2,
        // Everything from U+2070 on: symbol blocks (currency, letterlike, arrows, technical,
        // geometric, dingbats: ✅ ⭐ ⚡ ☕ among them), CJK, Hangul, full-width forms, private use,
        // and every character past the first plane (emoji, musical and mathematical symbols,
        // historic scripts, supplementary ideographs).
        _ => 4,
    }
}

/// The longest start of `s` that costs at most `units` (see [`budget_units`]).
pub fn take_units(s: &str, units: usize) -> &str {
    let mut used = 0;
    for (i, c) in s.char_indices() {
        used += budget_units_of(c);
        if used > units {
            return &s[..shown_char_boundary(s, i)];
        }
    }
    s
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
    fn a_long_value_is_quoted_cut() {
        assert_eq!(quoted_unless_private("short"), "\"short\"");
        let q = quoted_unless_private(&"x".repeat(5000));
        assert_eq!(q, format!("{:?}… (5000 characters)", "x".repeat(QUOTED_HEAD)));
        assert_eq!(quoted_unless_private(&"y".repeat(2 * QUOTED_HEAD)), format!("{:?}", "y".repeat(2 * QUOTED_HEAD)));
        assert_eq!(quoted_unless_private("a <private>b</private>"), "(a value with <private> text)");
    }

    #[test]
    fn a_budget_counts_cjk_as_a_token_a_character() {
        assert_eq!(budget_units("We deploy… “now”"), 16, "English: a quarter token a character");
        assert_eq!(budget_units("我们用"), 12, "Chinese: a token a character");
        assert_eq!(budget_units("デプロイ"), 16);
        assert_eq!(budget_units("배포"), 8);
        assert_eq!(budget_units("🚀"), 4);
        assert_eq!(budget_units("✅⭐⚡☕✨❌⏰→"), 32, "the symbol blocks below U+2E80 hold emoji too: a token each");
        assert_eq!(budget_units("деплой"), 12, "other scripts: half a token a character");
        assert_eq!(budget_units("£¥"), 2, "Latin-1's currency signs are Latin text's");
        assert_eq!(budget_units("€₹₿𝄞𝔸\u{E000}"), 24, "other symbols: a token each, wherever their block");
        assert_eq!(take_units("ab我们", 5), "ab", "a character that does not fit whole is left out");
        assert_eq!(take_units("ab我们", 6), "ab我");
        assert_eq!(take_units("ab", 0), "");
        assert_eq!(take_units("ab", 9), "ab");
    }

    #[test]
    fn text_that_disguises_itself_is_escaped() {
        assert_eq!(escape_controls("invoice\u{202E}txt.exe"), "invoice\\u{202e}txt.exe");
        assert_eq!(escape_controls("a\u{200B}b\nc"), "a\\u{200b}b\nc");
        let family = "👨\u{200D}👩";
        assert_eq!(escape_controls(family), family, "emoji keep their joiner");
    }

    #[test]
    fn cuts_keep_joined_emoji_flags_and_accents_whole() {
        let text = "deploy 👨\u{200D}👩\u{200D}👧 done 🇺🇸🇫🇷🇩🇪 cafe\u{301}s 한국";
        let shown: Vec<&str> = text.graphemes(true).collect();
        for at in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
            let cut = shown_char_boundary(text, at);
            assert!(cut <= at && is_shown_char_boundary(text, cut), "{at} → {cut}");
            let (head, tail) = text.split_at(cut);
            let pieces = head.graphemes(true).chain(tail.graphemes(true)).collect::<Vec<_>>();
            assert_eq!(pieces, shown, "{at} → {cut}: {head:?} | {tail:?}");
        }
        assert_eq!(shown_char_boundary("cafe\u{301}s", 4), 3, "not between the e and its accent");
        assert_eq!(shown_char_boundary("🇺🇸🇫🇷", 12), 8, "not between a flag's two letters");
        assert_eq!(shown_char_boundary("plain", 3), 3);
        assert_eq!(take_units("🇺🇸🇫🇷", 10), "🇺🇸", "a flag is whole or left out");
        let starts = shown_char_starts("a🇺🇸e\u{301}");
        assert_eq!(starts, [true, true, false, true, false, true]);
    }

    #[test]
    fn blank_is_what_shows_nothing() {
        for blank in ["", "  \n\t", "\u{0}", "\u{200b}\u{feff}", "\u{200d} \u{2060}"] {
            assert!(is_blank(blank), "{blank:?}");
        }
        for shown in ["x", "👍", "-", "\u{200b}a"] {
            assert!(!is_blank(shown), "{shown:?}");
        }
    }

    #[test]
    fn control_characters_are_shown_escaped() {
        assert_eq!(escape_controls("plain\ttext\nnext"), "plain\ttext\nnext");
        assert_eq!(escape_controls("a\u{1b}[2Jb\u{7}"), "a\\u{1b}[2Jb\\u{7}");
        assert_eq!(escape_controls_in_line("id\nERROR forged"), "id\\u{a}ERROR forged");
    }

    #[test]
    fn strips_shortest_blocks_and_leaves_unclosed() {
        assert_eq!(strip_memory_tags("a<memories>x</memories>b<memories>y"), "ab<memories>y");
        assert_eq!(strip_memory_tags("<memories>1</memories>-<memories>2</memories>"), "-");
        assert_eq!(strip_memory_tags("<MEMORIES>up</MEMORIES>"), "<MEMORIES>up</MEMORIES>");
        assert_eq!(strip_private("keep <private>secret\nline</private> this"), "keep  this");
    }

    #[test]
    fn a_span_crossing_a_text_edge_is_seen() {
        assert_eq!(private_edges("plain"), PrivateEdges::default());
        assert_eq!(private_edges("a <private>b</private> c"), PrivateEdges::default());
        let edges = |closes_earlier, open_at_end| PrivateEdges {
            closes_earlier,
            left_open: open_at_end > 0,
            open_at_end,
            ..PrivateEdges::default()
        };
        assert_eq!(private_edges("hello <private>secret"), edges(false, 1));
        assert_eq!(private_edges("secret</PRIVATE> ok"), edges(true, 0));
        assert_eq!(private_edges("x</private> <private>y"), edges(true, 1));
        assert_eq!(private_edges("<private>a <private>b</private> c"), edges(false, 1));
        assert_eq!(private_edges("<private>a <private>b"), edges(false, 2));
        assert_eq!(private_edges("<privateer> and </privately>"), PrivateEdges::default());
        // Inside spans begun before: how many of them it closes.
        let closes = |text: &str, open: usize| private_edges_within(text, open).closes_of_those_before;
        assert_eq!(closes("still secret", 2), 0);
        assert_eq!(closes("a</private> b", 2), 1);
        assert_eq!(closes("a</private></private> b <private>c", 2), 2);
        assert_eq!(closes("<private>a</private></private>", 1), 1);
        assert_eq!(closes("</private></private></private>", 2), 2);
        assert_eq!(closes("x</private>", 0), 0);
    }

    #[test]
    fn a_text_begun_inside_spans_is_stripped_as_behind_their_opening_tags() {
        for (text, open) in [
            ("plain", 2),
            ("a </private> b", 1),
            ("a </private> b </private> c", 2),
            ("a </private> b </private> c", 1),
            ("x <private> y", 0),
            ("</private></private></private> z <private>", 2),
        ] {
            let behind = format!("{}{text}", "<private>".repeat(open));
            let want = (strip_private(&behind), private_edges(&behind).open_at_end);
            assert_eq!(strip_private_within(text, open), want, "{text:?} inside {open}");
            let within = PrivateEdges { closes_of_those_before: 0, ..private_edges_within(text, open) };
            assert_eq!(within, private_edges(&behind), "{text:?} inside {open}");
        }
    }

    #[test]
    fn private_spans_fail_closed() {
        assert_eq!(strip_private("no tags here"), "no tags here");
        assert_eq!(strip_private("a <PRIVATE>x</Private> b"), "a  b");
        assert_eq!(strip_private("a <private reason=\"key\">x</private >b"), "a b");
        assert_eq!(strip_private("a <private>x <private>y</private> z</private> b"), "a  b");
        assert_eq!(strip_private("a <private>never closed\nsecret"), "a ");
        assert_eq!(strip_private("a <private"), "a ");
        // A close tag whose opening tag was lost (split off, cut off) hides what came before it.
        assert_eq!(strip_private("the key is sk-123</private> rotate monthly"), " rotate monthly");
        assert_eq!(strip_private("vate>SECRET</private> tail"), " tail", "a cut through the opening tag");
        assert_eq!(strip_private("<private>s3 </private> s4 </private> done"), " done", "one level short");
        assert_eq!(strip_private("a </private> b <private>c</private> d"), " b  d");
        assert_eq!(strip_private("<privateer> ahoy"), "<privateer> ahoy");
        assert_eq!(strip_private("é<private>ü</private>ß"), "éß");
        let mut m = std::collections::BTreeMap::from([("k".to_owned(), "v<private>s</private>".to_owned())]);
        strip_private_map(&mut m);
        assert_eq!(m["k"], "v");
        // A key that, cleaned, names another does not take its value.
        let mut m = std::collections::BTreeMap::from([
            ("k".to_owned(), "A".to_owned()),
            ("k<private>x</private>".to_owned(), "B".to_owned()),
            ("j<private>x</private>".to_owned(), "C".to_owned()),
        ]);
        strip_private_map(&mut m);
        assert_eq!((m["k"].as_str(), m["j"].as_str(), m.len()), ("A", "C", 2));
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
