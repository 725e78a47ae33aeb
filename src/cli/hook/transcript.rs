//! Reading a Claude Code transcript (JSON lines) into the conversation: user and assistant
//! messages of the main thread, their text blocks joined. Tool calls and results carry no text;
//! subagent lines, and the lines Claude Code writes as `user` that are not the user's words (a
//! compaction's summary, slash-command echoes, shell-mode commands and their output, task
//! notices), are left out, and so are the turns a rewind took back (see [`super::branch`]).

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use mneme_core::text::Message;
use serde_json::Value;

use super::branch::{active_branch, Row};

/// Transcript bytes read at most (the tail, where the recent turns are).
const MAX_TRANSCRIPT_BYTES: u64 = 32 * 1024 * 1024;

/// Flags Claude Code sets on lines it wrote itself (an `assistant` line saying an API call
/// failed is one too).
const NOT_THE_USERS: [&str; 6] = [
    "isSidechain",
    "isMeta",
    "isCompactSummary",
    "isVisibleInTranscriptOnly",
    "repeatsCompactSummary",
    "isApiErrorMessage",
];

/// What becomes of a custom slash command run with arguments (see [`conversation`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commands {
    /// Kept as the user typed it: a turn of theirs.
    AsTyped,
    /// Left out, its spans carried: for a daemon that counts no command as a turn (one before
    /// session format 2, still running after the binary was replaced), to which a turn its
    /// transcripts never held made the conversation look rewritten.
    LeftOut,
}

/// The conversation in the transcript at `path` (none when there is no file yet).
pub fn read_transcript(path: Option<&Path>, commands: Commands) -> Vec<Message> {
    read_tail(path, MAX_TRANSCRIPT_BYTES, commands).messages
}

/// The messages read from a transcript's end.
struct Tail {
    messages: Vec<Message>,
    /// The file's start was left unread.
    cut: bool,
    /// Messages a rewind took back were left out.
    rewound: bool,
}

/// What of a transcript goes into one request (see [`turns_within`]).
pub struct TurnsWithin {
    pub messages: Vec<Message>,
    /// User turns left out before `messages` (0: unknown).
    pub omitted_user_turns: usize,
    /// Messages a rewind took back were left out.
    pub rewound: bool,
}

/// The newest messages of the transcript at `path` that fit in `max_bytes` of a request, and how
/// many user turns were left out before them: 0 (unknown) when the file itself was too long to
/// read whole, since the turns in its unread start cannot be counted. Told a count too small,
/// the daemon would take every later turn for one it had retained already; told none, it places
/// the messages among the turns it has seen by their fingerprints.
pub fn turns_within(path: Option<&Path>, max_bytes: usize, commands: Commands) -> TurnsWithin {
    let tail = read_tail(path, MAX_TRANSCRIPT_BYTES, commands);
    let (messages, omitted) = tail_within(tail.messages, max_bytes);
    TurnsWithin { messages, omitted_user_turns: if tail.cut { 0 } else { omitted }, rewound: tail.rewound }
}

/// The messages of the last `max_bytes` of the transcript. Read as bytes and parsed a line at a
/// time: the cut, or a line a crash left half written, can fall inside a character, and read as
/// one string the whole read failed on it (every hook of the session then saw no messages).
/// Also whether the file's start was left unread, and whether a rewind took messages back.
fn read_tail(path: Option<&Path>, max_bytes: u64, commands: Commands) -> Tail {
    let Some(path) = path else { return Tail { messages: Vec::new(), cut: false, rewound: false } };
    // Only a regular file: opening a FIFO would wait for a writer, and the agent with it.
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return Tail { messages: Vec::new(), cut: false, rewound: false };
    }
    let Ok(mut file) = std::fs::File::open(path) else {
        return Tail { messages: Vec::new(), cut: false, rewound: false };
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let skip = len.saturating_sub(max_bytes);
    if file.seek(SeekFrom::Start(skip)).is_err() {
        return Tail { messages: Vec::new(), cut: false, rewound: false };
    }
    let mut bytes = Vec::new();
    let _ = (&mut file).take(max_bytes).read_to_end(&mut bytes);
    let mut lines = bytes.split(|b| *b == b'\n');
    if skip > 0 {
        lines.next(); // the partial first line
    }
    let rows = lines.filter_map(parse_line).map(|v| {
        let message = line_message(&v);
        let mut row = Row::new(&v, message);
        row.own_text = own_text(&v);
        row.expands_command = expands_command(&v, row.own_text.as_deref());
        row
    });
    let (rows, rewound) = active_branch(rows.collect());
    let lines = rows.into_iter().filter_map(|r| match (r.message, r.own_text) {
        (Some(m), _) => Some(Line::Message(m)),
        (None, Some(text)) => Some(Line::Own { text, expands_command: r.expands_command }),
        (None, None) => None,
    });
    let mut messages = conversation(lines, commands);
    if skip > 0 {
        // What is read begins inside the spans the unread start left open: it stays private.
        let open = open_in_unread_start(&mut file, skip);
        if let Some(first) = messages.first_mut().filter(|_| open > 0) {
            first.content.insert_str(0, &"<private>".repeat(open));
        }
    }
    Tail { messages, cut: skip > 0, rewound }
}

/// A transcript line as JSON. A line written with half an emoji (`JSON.stringify` of a string
/// cut inside a surrogate pair writes a lone `\ud83d`) or with a byte that is not UTF-8 is read
/// with U+FFFD in their places: refused whole, the line's text was never stored (not even by the
/// session's end), and the history without it looked rewritten.
fn parse_line(line: &[u8]) -> Option<Value> {
    if let Ok(v) = serde_json::from_slice(line) {
        return Some(v);
    }
    crate::json_text::from_slice_mended(String::from_utf8_lossy(line).as_bytes()).ok()
}

/// How many `<private>` spans the messages on the lines left unread leave open: those starting
/// before `skip`, and the one starting there, which the read drops as the partial first line.
/// Read a line at a time, and only a line that holds the word parsed, so a transcript of
/// hundreds of megabytes costs one pass over its bytes. Unreadable: none found.
fn open_in_unread_start(file: &mut std::fs::File, skip: u64) -> usize {
    use std::io::BufRead;
    if file.seek(SeekFrom::Start(0)).is_err() {
        return 0;
    }
    let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
    let (mut at, mut line) = (0u64, Vec::new());
    let mut texts = Vec::new();
    while at <= skip {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(n) => at += n as u64,
        }
        if !mentions_private(&line) {
            continue;
        }
        // An echo, or a line Claude Code flags as its own, too: its spans are carried into the
        // messages after it (see `conversation`).
        let Some(v) = parse_line(&line) else { continue };
        if let Some(text) = line_message(&v).map(|m| m.content).or_else(|| own_text(&v)) {
            texts.push(text);
        }
    }
    mneme_core::text::private_edges(&texts.join("\n")).open_at_end
}

/// The newest messages whose JSON fits in `max_bytes`, and how many user turns were left out
/// before them (counted as the daemon counts them: user messages with substance). A transcript
/// too long for one request is sent without its start, so that the turn is still retained;
/// the newest message alone over the bound keeps its end.
pub fn tail_within(mut messages: Vec<Message>, max_bytes: usize) -> (Vec<Message>, usize) {
    let json_len = |m: &Message| serde_json::to_string(m).map_or(m.content.len(), |s| s.len()) + 1;
    let (mut start, mut size) = (messages.len(), 0usize);
    while start > 0 {
        let len = json_len(&messages[start - 1]);
        if size + len > max_bytes {
            break;
        }
        size += len;
        start -= 1;
    }
    let mut cut_off = None;
    if start == messages.len() && start > 0 {
        start -= 1;
        let last = &mut messages[start];
        // Escaping can double a text's length: a quarter of the bound is always enough room.
        let keep = max_bytes / 4;
        if last.content.len() > keep {
            let mut cut = last.content.len() - keep;
            while !last.content.is_char_boundary(cut) {
                cut += 1;
            }
            let cut = outside_a_tag(&last.content, cut);
            let kept = last.content.split_off(cut);
            cut_off = Some(std::mem::replace(&mut last.content, kept));
        }
    }
    let omitted =
        messages[..start].iter().filter(|m| m.role == "user" && mneme_core::text::has_substance(&m.content)).count();
    let opened_before = left_open(&messages[..start], cut_off.as_deref());
    let mut tail = messages.split_off(start);
    if opened_before > 0 {
        // What is kept begins inside spans the cut-off part opened: it stays private (the
        // daemon sees only the kept part, and would take their close tags for stray ones).
        if let Some(first) = tail.first_mut() {
            first.content.insert_str(0, &"<private>".repeat(opened_before));
        }
    }
    (tail, omitted)
}

/// `cut`, or the start of a `<private` or `</private` tag it falls in the name of: cut there, the
/// part cut off would end in `<priv`, no tag, and the kept part begin with `ate>`, none either.
fn outside_a_tag(text: &str, cut: usize) -> usize {
    let before = &text.as_bytes()[cut.saturating_sub(9)..cut];
    match before.iter().rposition(|&b| b == b'<') {
        Some(at) => {
            let partial = &before[at..];
            let is_start_of =
                |tag: &[u8]| tag.len() > partial.len() && tag[..partial.len()].eq_ignore_ascii_case(partial);
            if is_start_of(b"<private") || is_start_of(b"</private") {
                cut - (before.len() - at)
            } else {
                cut
            }
        }
        None => cut,
    }
}

/// How many `<private>` spans the text left out (whole messages, then the cut-off start of the
/// first one kept) leaves open.
fn left_open(dropped: &[Message], cut_off: Option<&str>) -> usize {
    let texts = dropped.iter().map(|m| m.content.as_str()).chain(cut_off);
    if !texts.clone().any(mneme_core::text::has_private_tag) {
        return 0;
    }
    let joined: Vec<&str> = texts.collect();
    mneme_core::text::private_edges(&joined.join("\n")).open_at_end
}

/// Whether a line holds a `<private` or `</private` tag in any case, as JSON may write it
/// (`<` or `\u003c`; `/` or `\/`). Looked for from each `p`: most lines of a transcript's size
/// are tool output, and the word alone is in every Java or C# file read (parsing each such line
/// took the Stop hook past its time on a long transcript).
fn mentions_private(line: &[u8]) -> bool {
    const OPENERS: [&[u8]; 6] = [b"<", b"</", br"<\/", br"\u003c", br"\u003c/", br"\u003c\/"];
    memchr::memchr2_iter(b'p', b'P', line).any(|at| {
        let before = &line[..at];
        line.get(at..at + 7).is_some_and(|w| w.eq_ignore_ascii_case(b"private"))
            && OPENERS
                .iter()
                .any(|o| before.len() >= o.len() && before[before.len() - o.len()..].eq_ignore_ascii_case(o))
    })
}

/// A transcript line the conversation reads.
enum Line {
    /// A message, an echo included (see [`is_echo`]).
    Message(Message),
    /// The text of a line Claude Code flags as its own (see [`own_text`]), and whether it is a
    /// custom command's expanded prompt (see [`expands_command`]).
    Own { text: String, expands_command: bool },
}

/// The conversation of a transcript's messages. A line Claude Code wrote itself (an echo, or one
/// it flags as its own) is left out, but not the spans it leaves open: a slash command's
/// arguments, its expanded prompt (`isMeta`) or a shell command can hold `<private>`, and the
/// messages after it stay private up to the close (the next kept message carries the opening
/// tags again).
///
/// A custom slash command the user ran with arguments (`/review the auth module`: its echo is
/// followed by the prompt it expanded into) is the user's turn, kept as they typed it: its
/// arguments are their words, and the reply answers them. Its expanded prompt stays out (the
/// command file's text, not the user's); the spans it opens are carried as an echo's are, but
/// for those of the arguments it repeats (the command's message holds them). One that does not
/// hold the arguments as typed (a file using `$1`) has all of its spans carried: hidden twice
/// rather than not at all.
fn conversation(lines: impl Iterator<Item = Line>, commands: Commands) -> Vec<Message> {
    let mut messages = Vec::new();
    let mut opened_by_echoes = 0usize;
    let mut lines = lines.peekable();
    // The arguments of the command kept just before (its expansion may repeat them).
    let mut kept_command_args: Option<String> = None;
    while let Some(line) = lines.next() {
        let expanding_command_follows = matches!(lines.peek(), Some(Line::Own { expands_command: true, .. }));
        let typed = match &line {
            Line::Message(m) if expanding_command_follows && commands == Commands::AsTyped => {
                slash_command_typed(&m.content)
            }
            _ => None,
        };
        let mut m = match line {
            Line::Message(m) if !is_echo(&m.content) => m,
            Line::Message(m) if typed.is_some() => {
                let SlashCommand { typed, args } = typed.expect("checked");
                kept_command_args = Some(args);
                Message::new(m.role, typed)
            }
            Line::Own { text, expands_command: true } if kept_command_args.is_some() => {
                // The command's message took the spans carried before it, and holds its
                // arguments' own: what the expansion opens besides is carried.
                let args = kept_command_args.take().unwrap_or_default();
                if mneme_core::text::has_private_tag(&text) {
                    let besides = match mneme_core::text::has_private_tag(&args) && text.contains(&args) {
                        true => text.replace(&args, " "),
                        false => text,
                    };
                    opened_by_echoes = mneme_core::text::private_edges(&besides).open_at_end;
                }
                continue;
            }
            Line::Message(Message { content: text, .. }) | Line::Own { text, .. } => {
                kept_command_args = None;
                if mneme_core::text::has_private_tag(&text) {
                    opened_by_echoes = mneme_core::text::private_edges_within(&text, opened_by_echoes).open_at_end;
                }
                continue;
            }
        };
        if !expanding_command_follows {
            kept_command_args = None;
        }
        if opened_by_echoes > 0 {
            m.content.insert_str(0, &"<private>".repeat(std::mem::take(&mut opened_by_echoes)));
        }
        messages.push(m);
    }
    messages
}

/// A slash command as the user typed it (`/fix issue 12`), and its arguments (`issue 12`).
struct SlashCommand {
    typed: String,
    args: String,
}

/// What the user typed to run a slash command, from the echo Claude Code writes for it
/// (`<command-name>/fix</command-name>` … `<command-args>issue 12</command-args>` → `/fix issue
/// 12`); `None` when it is no command's echo or was run without arguments.
fn slash_command_typed(echo: &str) -> Option<SlashCommand> {
    let within = |tag: &str| {
        let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
        let start = echo.find(&open)? + open.len();
        let len = echo[start..].find(&close)?;
        Some(echo[start..start + len].trim())
    };
    let name = within("command-name")?;
    let args = within("command-args")?;
    let name_ok = name.strip_prefix('/').is_some_and(|n| !n.is_empty() && !n.contains(char::is_whitespace));
    (name_ok && !args.is_empty()).then(|| SlashCommand { typed: format!("{name} {args}"), args: args.to_owned() })
}

/// Whether a line is the prompt a custom slash command expanded into: flagged `isMeta`, in the
/// main thread, and not the caveat Claude Code writes before a built-in command's output.
fn expands_command(v: &Value, own_text: Option<&str>) -> bool {
    v["isMeta"] == true
        && v["isSidechain"] != true
        && own_text.is_some_and(|t| !t.trim_start().starts_with("<local-command-caveat>"))
}

/// Whether a message is one Claude Code wrote as the user's ([`crate::session::is_command_echo`]).
fn is_echo(content: &str) -> bool {
    crate::session::is_command_echo(content)
}

/// A line's message, echoes included; `None` for a line of another kind, one Claude Code flags
/// as its own, or one without text.
fn line_message(v: &Value) -> Option<Message> {
    if NOT_THE_USERS.iter().any(|f| v[*f] == true) {
        return None;
    }
    any_message(v)
}

/// The text of a line Claude Code flags as its own (see [`NOT_THE_USERS`]) but a subagent's (a
/// thread of its own, whose spans are not the conversation's).
fn own_text(v: &Value) -> Option<String> {
    if v["isSidechain"] == true || !NOT_THE_USERS.iter().any(|f| v[*f] == true) {
        return None;
    }
    any_message(v).map(|m| m.content)
}

/// A `user` or `assistant` line's message, whoever wrote it; `None` for a line of another kind
/// or one without text.
fn any_message(v: &Value) -> Option<Message> {
    if !matches!(v["type"].as_str(), Some("user" | "assistant")) {
        return None;
    }
    let msg = &v["message"];
    let role = msg["role"].as_str().or(v["type"].as_str())?.to_owned();
    let content = match &msg["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => return None,
    };
    if content.trim_start().is_empty() {
        return None;
    }
    Some(Message::new(role, content))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    /// A line with half an emoji (a lone surrogate escape) or a byte that is not UTF-8 is read,
    /// its text kept with U+FFFD in their places; an escaped backslash before a `u` and a whole
    /// pair are left as they are.
    #[test]
    fn a_line_with_half_an_emoji_is_read_not_dropped() {
        let v = parse_line(br#"{"message":{"content":"before a tool call \ud83d and after"}}"#).unwrap();
        assert_eq!(v["message"]["content"], "before a tool call \u{fffd} and after");
        let v = parse_line(br#"{"t":"low \udc00 alone, pair \ud83d\ude00, text \\ud83d"}"#).unwrap();
        assert_eq!(v["t"], "low \u{fffd} alone, pair \u{1f600}, text \\ud83d");
        let v = parse_line(b"{\"t\":\"a byte \xff here\"}").unwrap();
        assert_eq!(v["t"], "a byte \u{fffd} here");
        assert!(parse_line(b"{\"t\": truncated").is_none());
    }

    #[test]
    fn the_tail_that_fits_and_the_user_turns_left_out() {
        let m = |role: &str, text: &str| Message::new(role.to_owned(), text.to_owned());
        let all = vec![m("user", "one"), m("assistant", "two"), m("user", "three"), m("assistant", "four")];
        let size = |m: &Message| serde_json::to_string(m).unwrap().len() + 1;
        assert_eq!(tail_within(all.clone(), 10_000), (all.clone(), 0));
        let (tail, omitted) = tail_within(all.clone(), size(&all[2]) + size(&all[3]));
        assert_eq!((tail, omitted), (all[2..].to_vec(), 1));
        // The newest alone over the bound: its end.
        let (tail, omitted) = tail_within(vec![m("user", "x"), m("assistant", &"é".repeat(1000))], 400);
        assert_eq!(omitted, 1);
        assert_eq!(tail.len(), 1);
        assert!(tail[0].content.len() <= 100 && tail[0].content.chars().all(|c| c == 'é'), "{}", tail[0].content);
    }
    use super::*;

    fn read_transcript_as_typed(path: Option<&Path>) -> Vec<Message> {
        read_transcript(path, Commands::AsTyped)
    }

    #[test]
    fn a_private_span_the_cut_opened_stays_private() {
        let m = |role: &str, text: &str| Message::new(role.to_owned(), text.to_owned());
        let hidden = |tail: &[Message]| tail.iter().any(|m| text::strip_private(&m.content).contains("SECRET"));
        use mneme_core::text;
        // The newest message alone over the bound, its opening tag in the part cut off.
        let long = format!("<private>{}SECRET</private> ok", "x".repeat(3000));
        let (tail, _) = tail_within(vec![m("user", &long)], 1000);
        assert!(!hidden(&tail), "{:?}", tail[0].content);
        assert!(text::strip_private(&tail[0].content).ends_with(" ok"));
        // A span an older, left-out message opened and a kept one closes.
        let all = vec![m("user", &format!("<private>{}", "y".repeat(2000))), m("assistant", "SECRET</private> done")];
        let (tail, omitted) = tail_within(all, 200);
        assert_eq!((tail.len(), omitted), (1, 1));
        assert!(!hidden(&tail) && text::strip_private(&tail[0].content) == " done", "{:?}", tail[0].content);
        // A cut that falls inside an opening tag's name: the tag is kept whole.
        let long = format!("{}<private>SECRET and more", "x".repeat(1000));
        for at in 1..9 {
            let (tail, _) = tail_within(vec![m("user", &long)], 4 * (24 - at));
            assert!(!hidden(&tail), "cut {at} into the tag: {:?}", tail[0].content);
        }
        // Spans closed before the cut change nothing.
        let all = vec![m("user", &format!("<private>a</private>{}", "z".repeat(2000))), m("assistant", "fine")];
        assert_eq!(tail_within(all, 200).0[0].content, "fine");
    }

    #[test]
    fn a_cut_or_a_broken_line_inside_a_character_costs_only_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let first = r#"{"type":"user","message":{"role":"user","content":"é"}}"#;
        let last = r#"{"type":"user","message":{"role":"user","content":"the newest"}}"#;
        let mut bytes = first.as_bytes().to_vec();
        bytes.push(b'\n');
        bytes.extend_from_slice(&[b'{', 0xc3, b'\n']); // a line a crash left with half a character
        bytes.extend_from_slice(last.as_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let contents = |max| {
            read_tail(Some(&path), max, Commands::AsTyped).messages.into_iter().map(|m| m.content).collect::<Vec<_>>()
        };
        assert_eq!(contents(1 << 20), ["é", "the newest"]);
        assert!(!read_tail(Some(&path), 1 << 20, Commands::AsTyped).cut, "read whole");
        // A cut in the middle of the first line's "é".
        let at = bytes.len() - first.find('é').unwrap() - 1;
        assert_eq!(contents(at as u64), ["the newest"]);
        assert!(
            read_tail(Some(&path), at as u64, Commands::AsTyped).cut,
            "its start unread: the turns left out are not known"
        );
    }

    #[test]
    fn a_private_span_the_unread_start_opened_stays_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let line =
            |role: &str, text: &str| json!({"type": role, "message": {"role": role, "content": text}}).to_string();
        let mut lines = vec![
            line("user", "<private><private> everything below is confidential"),
            line("assistant", "noted"),
            line("user", "</private> still inside the outer span"),
        ];
        lines.extend((0..4).map(|i| line("assistant", &format!("padding {i} {}", "p".repeat(4000)))));
        lines.push(line("user", "SECRET-7 is the deploy key"));
        lines.push(line("assistant", "</private> and now in the open"));
        std::fs::write(&path, lines.join("\n")).unwrap();
        // The tail read starts inside the padding: both opening tags are in the unread start.
        let Tail { messages, cut, .. } = read_tail(Some(&path), 9000, Commands::AsTyped);
        assert!(cut);
        // Each message cleaned as the daemon cleans a transcript: with the spans before it open.
        let mut open = 0;
        let shown: Vec<String> = messages
            .iter()
            .map(|m| {
                let (shown, open_after) = mneme_core::text::strip_private_within(&m.content, open);
                open = open_after;
                shown
            })
            .collect();
        let shown = shown.join("\n");
        assert!(!shown.contains("SECRET-7"), "{shown}");
        assert!(shown.contains("and now in the open"), "{shown}");
        // Spans closed in the unread start leave the tail alone.
        lines[2] = line("user", "</private></private> closed again");
        std::fs::write(&path, lines.join("\n")).unwrap();
        let messages = read_tail(Some(&path), 9000, Commands::AsTyped).messages;
        assert!(!messages[0].content.contains("<private>"), "{:?}", messages[0].content);
    }

    /// Only a tag is looked at closely: the word alone fills the tool output of Java projects.
    #[test]
    fn only_a_private_tag_makes_a_line_worth_parsing() {
        for tagged in [
            r#"{"content":"a <private> b"}"#,
            r#"{"content":"a </PRIVATE> b"}"#,
            r#"{"content":"a \u003cprivate> b"}"#,
            r#"{"content":"a <\/private> b"}"#,
            r#"{"content":"a <Private x=1>"}"#,
        ] {
            assert!(mentions_private(tagged.as_bytes()), "{tagged}");
        }
        for plain in [r#"{"content":"private static void main"}"#, r#"{"content":"a private repo"}"#, "p"] {
            assert!(!mentions_private(plain.as_bytes()), "{plain}");
        }
    }

    /// A line Claude Code flags as its own (a custom command's expanded prompt is `isMeta`) is
    /// left out, but the spans it opens are carried into the messages after it, as an echo's
    /// are; a subagent's (`isSidechain`) are its own thread's.
    #[test]
    fn a_span_a_line_claude_code_flags_as_its_own_opens_stays_open() {
        let dir = tempfile::tempdir().unwrap();
        let lines = [
            r#"{"type":"user","message":{"role":"user","content":"start"}}"#,
            r#"{"type":"user","isMeta":true,"message":{"content":"expanded command: the key is <private>"}}"#,
            r#"{"type":"user","message":{"role":"user","content":"METASECRET is what follows"}}"#,
            r#"{"type":"assistant","message":{"role":"assistant","content":"noted </private> and public"}}"#,
            r#"{"type":"assistant","isSidechain":true,"message":{"role":"assistant","content":"a subagent's <private>"}}"#,
            r#"{"type":"user","message":{"role":"user","content":"a public question"}}"#,
        ];
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, lines.join("\n")).unwrap();
        let stored: Vec<String> = read_transcript_as_typed(Some(&path))
            .into_iter()
            .map(|m| mneme_core::text::strip_private(&m.content).trim().to_owned())
            .collect();
        assert_eq!(stored, ["start", "", "and public", "a public question"]);
    }

    /// Each message as the daemon shows it: cleaned with the spans the ones before left open.
    fn shown(messages: &[Message]) -> Vec<String> {
        let mut open = 0;
        messages
            .iter()
            .map(|m| {
                let (shown, after) = mneme_core::text::strip_private_within(&m.content, open);
                open = after;
                shown.trim().to_owned()
            })
            .collect()
    }

    /// A custom command run with arguments is the user's turn, as they typed it; its expanded
    /// prompt, a command run without arguments and a built-in one's output are not.
    #[test]
    fn a_custom_commands_arguments_are_the_users_words() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let lines = [
            r#"{"type":"user","message":{"role":"user","content":"turn one"}}"#,
            r#"{"type":"user","message":{"content":"<command-message>facts</command-message>\n<command-name>/facts</command-name>\n<command-args>SL-2 release notes</command-args>"}}"#,
            r#"{"type":"user","isMeta":true,"message":{"content":[{"type":"text","text":"Summarize the project facts for: SL-2 release notes"}]}}"#,
            r#"{"type":"assistant","message":{"role":"assistant","content":"the notes"}}"#,
            r#"{"type":"user","message":{"content":"<command-message>facts</command-message>\n<command-name>/facts</command-name>\n<command-args></command-args>"}}"#,
            r#"{"type":"user","isMeta":true,"message":{"content":"Summarize the project facts for: "}}"#,
            r#"{"type":"assistant","message":{"role":"assistant","content":"all of them"}}"#,
            r#"{"type":"user","isMeta":true,"message":{"content":"<local-command-caveat>Caveat</local-command-caveat>"}}"#,
            r#"{"type":"user","message":{"content":"<command-name>/model</command-name>\n<command-message>model</command-message>\n<command-args>sonnet</command-args>"}}"#,
            r#"{"type":"user","message":{"content":"<local-command-stdout>Set model to sonnet</local-command-stdout>"}}"#,
            r#"{"type":"user","message":{"role":"user","content":"turn four"}}"#,
        ];
        std::fs::write(&path, lines.join("\n")).unwrap();
        let got: Vec<(String, String)> =
            read_transcript_as_typed(Some(&path)).into_iter().map(|m| (m.role, m.content)).collect();
        let want = [
            ("user", "turn one"),
            ("user", "/facts SL-2 release notes"),
            ("assistant", "the notes"),
            ("assistant", "all of them"),
            ("user", "turn four"),
        ];
        assert_eq!(got, want.map(|(r, c)| (r.to_owned(), c.to_owned())));
        // Arguments that open a span: the expanded prompt repeats it, and is not counted again
        // (the user's close ends it); a span the command's file opens is carried.
        let lines = [
            r#"{"type":"user","message":{"content":"<command-message>deploy</command-message>\n<command-name>/deploy</command-name>\n<command-args>prod <private> SLASHSECRET</command-args>"}}"#,
            r#"{"type":"user","isMeta":true,"message":{"content":"Deploy to prod <private> SLASHSECRET"}}"#,
            r#"{"type":"assistant","message":{"role":"assistant","content":"Deployed with SLASHSECRET"}}"#,
            r#"{"type":"user","message":{"role":"user","content":"done </private> and the docs"}}"#,
            r#"{"type":"user","message":{"content":"<command-message>keys</command-message>\n<command-name>/keys</command-name>\n<command-args>rotate</command-args>"}}"#,
            r#"{"type":"user","isMeta":true,"message":{"content":"Rotate the keys: <private> rotate"}}"#,
            r#"{"type":"assistant","message":{"role":"assistant","content":"KEYSECRET rotated"}}"#,
            r#"{"type":"user","message":{"role":"user","content":"</private> thanks"}}"#,
        ];
        std::fs::write(&path, lines.join("\n")).unwrap();
        let messages = read_transcript_as_typed(Some(&path));
        assert_eq!(shown(&messages), ["/deploy prod", "", "and the docs", "/keys rotate", "", "thanks"]);
        // A file that does not repeat the arguments as typed (`$1`) and opens a span of its own:
        // all of the expansion's spans are carried (the user's close ends only theirs).
        let lines = [
            r#"{"type":"user","message":{"content":"<command-message>ship</command-message>\n<command-name>/ship</command-name>\n<command-args>prod <private> TOKEN</command-args>"}}"#,
            r#"{"type":"user","isMeta":true,"message":{"content":"Ship prod now. <private>Internal runbook"}}"#,
            r#"{"type":"assistant","message":{"role":"assistant","content":"Shipped with TOKEN per the runbook"}}"#,
            r#"{"type":"user","message":{"role":"user","content":"</private> thanks, RUNBOOKSTEP 4 next"}}"#,
        ];
        std::fs::write(&path, lines.join("\n")).unwrap();
        let messages = read_transcript_as_typed(Some(&path));
        assert_eq!(shown(&messages), ["/ship prod", "", ""]);
        // For a daemon that counts no command as a turn: left out, its spans carried.
        let messages = read_transcript(Some(&path), Commands::LeftOut);
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert_eq!(shown(&messages), ["", ""]);
    }

    #[test]
    fn only_the_users_and_the_assistants_words() {
        let dir = tempfile::tempdir().unwrap();
        let lines = [
            r#"{"type":"user","message":{"role":"user","content":"fix the build"}}"#,
            r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"Fixed."},{"type":"tool_use","id":"t"}]}}"#,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"x"}]}}"#,
            r#"{"type":"assistant","isSidechain":true,"message":{"role":"assistant","content":"subagent"}}"#,
            r#"{"type":"system","subtype":"compact_boundary"}"#,
            r#"{"type":"user","isCompactSummary":true,"isVisibleInTranscriptOnly":true,"message":{"role":"user","content":"This session is being continued"}}"#,
            r#"{"type":"user","isMeta":true,"message":{"content":"<local-command-caveat>Caveat</local-command-caveat>"}}"#,
            r#"{"type":"user","message":{"content":"<command-name>/compact</command-name>"}}"#,
            r#"{"type":"user","message":{"content":"<command-message>fix is running…</command-message>\n<command-name>/fix</command-name>\n<command-args>123</command-args>"}}"#,
            r#"{"type":"user","message":{"content":"<local-command-stdout>\u001b[2mCompacted</local-command-stdout>"}}"#,
            r#"not json"#,
            r#"{"type":"user","message":{"role":"user","content":"and now the tests"}}"#,
        ];
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, lines.join("\n")).unwrap();
        let got: Vec<(String, String)> =
            read_transcript_as_typed(Some(&path)).into_iter().map(|m| (m.role, m.content)).collect();
        let want = [("user", "fix the build"), ("assistant", "Fixed."), ("user", "and now the tests")];
        assert_eq!(got, want.map(|(r, c)| (r.to_owned(), c.to_owned())));
        assert!(read_transcript_as_typed(Some(&dir.path().join("missing.jsonl"))).is_empty());
        // Shell mode, a task's notice, an API error: not the user's words.
        let lines = [
            r#"{"type":"user","message":{"role":"user","content":"<bash-input>cat .env</bash-input>"}}"#,
            r#"{"type":"user","message":{"role":"user","content":"<bash-stdout>API_KEY=BASHSECRET</bash-stdout><bash-stderr></bash-stderr>"}}"#,
            r#"{"type":"user","message":{"role":"user","content":"<task-notification>task done</task-notification>"}}"#,
            r#"{"type":"assistant","isApiErrorMessage":true,"message":{"role":"assistant","content":[{"type":"text","text":"API Error: 529"}]}}"#,
            r#"{"type":"user","message":{"role":"user","content":"now the tests"}}"#,
        ];
        std::fs::write(&path, lines.join("\n")).unwrap();
        let got: Vec<String> = read_transcript_as_typed(Some(&path)).into_iter().map(|m| m.content).collect();
        assert_eq!(got, ["now the tests"]);
        // A slash command's arguments that open a span: the reply after it stays private.
        let lines = [
            r#"{"type":"user","message":{"content":"<command-name>/deploy</command-name>\n<command-args><private> SLASHSECRET</command-args>"}}"#,
            r#"{"type":"assistant","message":{"role":"assistant","content":"Deployed with SLASHSECRET"}}"#,
            r#"{"type":"user","message":{"role":"user","content":"done </private> and the docs"}}"#,
        ];
        std::fs::write(&path, lines.join("\n")).unwrap();
        let messages = read_transcript_as_typed(Some(&path));
        assert_eq!(messages.len(), 2);
        assert_eq!(shown(&messages), ["", "and the docs"]);
        // A FIFO (nothing ever writes it) and a folder are no transcript, and do not block.
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        assert!(read_transcript_as_typed(Some(&fifo)).is_empty());
        assert!(read_transcript_as_typed(Some(dir.path())).is_empty());
    }
}
