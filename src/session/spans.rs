//! `<private>` spans across the messages of a transcript: each message cleaned with the spans the
//! ones before it left open, where a part or a window of it begins inside spans, and the prompt
//! and reply of the current turn read in their context.

use mneme_core::text::{self, Message};

use super::clean::{clean, conversation};
use super::placement::{first_message_of_turn, is_agents_command, same_words, UNKNOWN_TURN};
use super::record::reply_print;
use super::Session;
use crate::config::Settings;

/// Each message cleaned as [`text::strip_private`] reads one text, with the spans earlier
/// messages left open carried into it: a `<private>` left unclosed hides the later messages,
/// whole, up to the one that closes it (fail closed: a reply may repeat what the prompt hid, and a
/// retain may run before the close arrives), and a close with no opening tag before it hides what
/// precedes it, in its message and in those before ([`Cleaned::kept`]).
/// The history begins inside `open_before` spans (a part that started over inside one an
/// earlier transcript left open).
pub(super) fn cleaned_each(settings: &Settings, history: &[Message], open_before: usize) -> Cleaned {
    let cleaned = |m: &Message, content: &str| clean(settings, content).map(|c| Message::new(m.role.clone(), c));
    if !settings.retain.strip_private {
        let each = history.iter().map(|m| cleaned(m, &m.content)).collect();
        return Cleaned { each, hidden_before: 0, stray_closes: Vec::new(), open_at_end: 0 };
    }
    let mut open = open_before; // spans earlier messages left open
    let mut hidden_before = 0;
    let mut stray_closes = Vec::new();
    let each = history
        .iter()
        .enumerate()
        .map(|(i, m)| {
            if text::private_edges_within(&m.content, open).closes_earlier {
                hidden_before = i; // a close whose opening tag is in no message before it
                stray_closes.push(i);
            }
            let (content, open_after) = text::strip_private_within(&m.content, open);
            open = open_after;
            cleaned(m, &content)
        })
        .collect();
    Cleaned { each, hidden_before, stray_closes, open_at_end: open }
}

/// A transcript's messages cleaned ([`cleaned_each`]).
pub(super) struct Cleaned {
    /// Each message, `None` where nothing is left of it; what its user turns' fingerprints are
    /// taken from.
    pub(super) each: Vec<Option<Message>>,
    /// The messages before this one are hidden: a later one holds a `</private>` whose opening
    /// tag is in none of them (lost with a start the client did not send, or in a message it
    /// sent apart), so all that precedes it may be private, as in a single text.
    pub(super) hidden_before: usize,
    /// The messages holding such a close, in order.
    pub(super) stray_closes: Vec<usize>,
    /// The spans it leaves open at its end.
    pub(super) open_at_end: usize,
}

impl Cleaned {
    /// What may be stored of a history (`history`) whose first `retained` user turns are
    /// retained: each stray close hides the messages before it from the first turn it found not
    /// retained (`known`: (that turn, the close's turn) of the closes seen before, in order; a
    /// close seen now for the first time, or not in the turn known for it (a rewind took that
    /// one back), hides from the first turn not retained now, or from its own turn if that is
    /// retained already). Returns the kept messages and the closes to remember.
    pub(super) fn into_kept_by_closes(
        mut self,
        history: &[Message],
        retained: i64,
        known: &[(i64, i64)],
    ) -> (Vec<Option<Message>>, Vec<(i64, i64)>) {
        // Indexed once, and the hidden ranges merged: a history of many stray closes was
        // quadratic in them (review77 #3: 90,000 lone `</private>` messages took 12 s).
        let turns = Turns::of(history);
        let retained_from = turns.first_message(retained);
        let mut froms = Vec::with_capacity(self.stray_closes.len());
        let mut hidden = Vec::with_capacity(self.stray_closes.len());
        for (n, &at) in self.stray_closes.iter().enumerate() {
            let close_turn = turns.holding(at);
            let from_turn = match known.get(n) {
                Some(&(from, turn)) if turn == close_turn => from,
                _ if at >= retained_from => retained.min(close_turn),
                _ => close_turn,
            };
            froms.push((from_turn, close_turn));
            hidden.push((turns.first_message(from_turn), at));
        }
        hidden.sort_unstable();
        let mut filled_to = 0;
        for (from, at) in hidden {
            let from = from.max(filled_to);
            if from < at {
                self.each[from..at].fill(None);
                filled_to = at;
            }
        }
        (self.each, froms)
    }

    /// What may be stored of a history none of which is retained yet (a new part, a window):
    /// `each`, with the messages a stray close hides taken out. (A history whose start is
    /// retained keeps what each close hid, see [`Cleaned::into_kept_by_closes`].)
    pub(super) fn into_kept(mut self) -> Vec<Option<Message>> {
        self.each[..self.hidden_before].fill(None);
        self.each
    }
}

/// Whether a history that agrees with the part only in wholly private turns (fingerprint 0,
/// read from where the part began: `cleaned`) is the next turn of a client that sends a turn at
/// a time, after a turn that closed a span and showed nothing. Read from the part's start,
/// inside that span, it looked like that turn again, and it and every turn after it were
/// hidden, the session's end included. It is when it ends inside other spans than the last
/// transcript left open (a copy of the part, read from the same start, ends where it did) and,
/// read from where the last transcript ended, shows more of its messages. It then starts a part
/// inside the spans open there.
pub(super) fn next_turn_after_a_closed_span(
    settings: &Settings,
    session: &Session,
    history: &[Message],
    seen: &[u64],
    cleaned: &Cleaned,
) -> bool {
    if seen.iter().any(|p| *p != 0) || cleaned.open_at_end == session.open_at_end {
        return false;
    }
    let reread = cleaned_each(settings, history, session.open_at_end);
    let shown = |c: &Cleaned| c.each.iter().filter(|m| m.is_some()).count();
    shown(&reread) > shown(cleaned)
}

/// The spans a part that starts over begins inside: those the last transcript left open, when
/// the new history is another (a client that sends a turn at a time, a history compacted inside a
/// span); none beyond the old part's own when it begins with the same turn (an edited or reverted
/// history holds the opening tag again, and counted twice the span never closed). Nor when the
/// part was first heard as a window (its first turns never seen) and the history, read from the
/// part's start, holds the window's turns where they stand and is inside the spans the window
/// left open where they end: it is the conversation from its start, and the span the window's
/// reply opened, counted twice, never closed again (review93 #1: every later turn was stored as
/// nothing). Not on a prompt's agreement alone: a history compacted inside the span, its tag not
/// put back, that says "continue" where the window did was read as outside it, and its private
/// text stored (review94 #1).
pub(super) fn carried_into_new_part(session: &Session, history: &[Message], seen: &[u64]) -> usize {
    let same_start = matches!((session.turn_prints.first(), seen.first()), (Some(k), Some(s)) if k == s);
    match same_start || holds_the_first_window(session, history, seen) {
        true => session.open_at_part_start,
        false => session.open_at_end,
    }
}

/// Whether a history, read from the part's start, holds the window the part was first heard as
/// (its first turns never seen), which left spans open: the window's turns where they stand, a
/// prompt's print among them, those spans open where they end, and the public words of the
/// window's last reply, as the window sent them ([`Session::recent_reply_prints`]). A history
/// compacted inside the span, which opens a span of its own at the window's place, agrees in all
/// but the last: read from its start, its summary was stored (review95 #3), and with a close of
/// its own, the text after it, still inside the window's span (review96 #1). With no public word
/// in that reply there is no telling them apart, and the history is read inside the spans.
pub(super) fn holds_the_first_window(session: &Session, history: &[Message], seen: &[u64]) -> bool {
    let known = &session.turn_prints;
    if known.first() != Some(&UNKNOWN_TURN)
        || session.open_at_end == 0
        || seen.len() < known.len()
        || !known.iter().any(|k| *k != UNKNOWN_TURN && *k != 0)
        || !known.iter().zip(seen).all(|(k, s)| *k == UNKNOWN_TURN || k == s)
    {
        return false;
    }
    let window_end = first_message_of_turn(history, known.len() as i64);
    let mut open = session.open_at_part_start;
    let mut last_reply = None;
    for m in &history[..window_end] {
        let (kept, after) = text::strip_private_within(&m.content, open);
        last_reply = (m.role == "assistant").then_some(kept);
        open = after;
    }
    let reply_known = last_reply
        .filter(|reply| !reply.trim().is_empty())
        .is_some_and(|reply| session.recent_reply_prints.contains(&reply_print(&reply)));
    open == session.open_at_end && reply_known
}

/// The spans open where a transcript sent without its start (`omitted` user turns left out)
/// begins, when it begins among or just after the turns known and the last transcript ended
/// inside spans: the fewest that its messages of known turns (or, when it holds none, the
/// opening tags it begins with: the Claude Code hooks and the opencode plugin open again what
/// their cut left open) turn into the spans the last transcript left open. A client that cut
/// the transcript without putting the tags back had its private text stored. Elsewhere what is
/// known of the part's start, as before.
pub(super) fn window_opens_inside(session: &Session, omitted: usize, history: &[Message]) -> usize {
    let (known, open_at_end) = (session.turn_prints.len(), session.open_at_end);
    if open_at_end == 0 || omitted > known {
        return session.open_at_part_start;
    }
    let overlap = first_message_of_turn(history, (known - omitted) as i64);
    let depth_after = |start: usize| -> usize {
        if overlap == 0 {
            let reopened = history.first().map_or(0, |m| leading_opening_tags(&m.content));
            return start + reopened;
        }
        history[..overlap].iter().fold(start, |open, m| text::strip_private_within(&m.content, open).1)
    };
    (0..=open_at_end).find(|&start| depth_after(start) == open_at_end).unwrap_or(session.open_at_part_start)
}

/// How many `<private>` tags (any case) a text begins with, blanks between them allowed.
pub(super) fn leading_opening_tags(text: &str) -> usize {
    const TAG: &str = "<private>";
    let mut rest = text.trim_start();
    let mut n = 0;
    while rest.get(..TAG.len()).is_some_and(|t| t.eq_ignore_ascii_case(TAG)) {
        n += 1;
        rest = rest[TAG.len()..].trim_start();
    }
    n
}

/// Whether `m` is the prompt `prompt` as the history holds it: the same words but for the blanks
/// around them (a transcript's copy may end in a newline the hook's prompt has not). Told apart,
/// the prompt was counted twice, or as a turn the session had seen.
pub(super) fn is_the_prompt(m: &Message, prompt: &str) -> bool {
    m.role == "user" && m.content.trim() == prompt.trim()
}

/// The `<private>` spans a prompt's history is read with (see [`spans_carried`]).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct SpansCarried {
    /// Open where the history begins.
    pub(super) before: usize,
    /// Open after it at least, whatever it closes.
    pub(super) at_least_after: usize,
}

/// The spans an agent-start's `history` is read with: those open where the session's part
/// begins and, when the history lacks turns the session has seen (a client that sends none, a
/// lagging transcript), at least those its last transcript left open after it. A prompt typed
/// inside a span an earlier turn opened was kept in the clear in the session's record when the
/// agent-start came without that turn. (At least, not added: a cut history that holds the turn
/// that opened the span counts it itself.)
pub(super) fn spans_carried(session: &Session, history: &[Message], prompt: &str) -> SpansCarried {
    // The prompt itself, when the history ends with it, is no turn the session has seen: counted,
    // a client that sends a turn at a time (its history the prompt alone) looked as if it lacked
    // none, and the prompt typed inside the span its last turn left open was kept in the clear.
    let before_prompt = match history.last() {
        Some(m) if is_the_prompt(m, prompt) => &history[..history.len() - 1],
        _ => history,
    };
    // No history at all (a client that sends the prompt alone): it stands where the last
    // transcript ended, not where the part began (which the part may have closed since: the
    // prompt was read inside a span a turn before had closed).
    if before_prompt.is_empty() {
        return SpansCarried { before: session.open_at_end, at_least_after: session.open_at_end };
    }
    let users = before_prompt.iter().filter(|m| m.role == "user").count();
    let lacks_turns = users < session.turn_prints.len() || history.is_empty();
    SpansCarried {
        before: session.open_at_part_start,
        at_least_after: if lacks_turns { session.open_at_end } else { 0 },
    }
}

/// The messages with the current turn whole: a transcript that lags behind (it lacks the latest
/// prompt, or the reply to it) gets them appended. Compared after cleaning, as they are stored.
/// The reply goes in as it came: a `<private>` span the prompt left open and the reply closes is
/// then hidden across the two ([`cleaned_each`]); a prompt known only cleaned that left one open
/// carries the opening tag again for that. A slash command (`/fix 123`) is not appended to a
/// transcript (to a turn sent without one it is): the agent writes it to its transcript in a
/// form of its own (Claude Code: `<command-name>` lines), so the next transcript would never
/// hold it and the session would look rewritten. Nor is a
/// prompt the agent wrote in the user's place ([`super::clean::is_command_echo`]: Claude Code
/// feeds a background subagent's `<task-notification>` back as a prompt, which its transcript
/// leaves out): appended, it was stored as the user's words, and the next transcript, without
/// it, started a new part holding the whole conversation again.
///
/// A transcript whose last prompt is the same as this turn's ("yes", "yes") holds it only when no
/// reply of an earlier turn follows it (`known_replies`: the session's recent ones, see
/// `Session::recent_reply_prints`), unless its last reply is this one: followed by one, it is the
/// turn before's, and this turn's reply, attached to it, was stored twice and split the
/// conversation.
pub(super) fn with_current_turn(
    messages: &[Message],
    prompt: Option<&KeptPrompt>,
    reply: &str,
    settings: &Settings,
    known_replies: &[u64],
) -> Vec<Message> {
    let mut messages = conversation(messages);
    // Cleaned to nothing compares as "", as a wholly private prompt is known.
    let same = |m: &Message, text: &str| same_words(&clean(settings, &m.content).unwrap_or_default(), text);
    // Without a transcript (a client that sends the turn alone), a command is the turn's prompt:
    // no transcript will hold it in a form of its own, and left out, its turn was a reply
    // without a prompt, never stored (review83 #4).
    let alone = messages.is_empty();
    if let Some(kept) = prompt.filter(|p| alone || !is_agents_command(&p.text)) {
        let prompt = kept.text.as_str();
        // The prompt is known as it was cleaned in its history: compared so.
        let last_user_at = messages.iter().rposition(|m| m.role == "user");
        let last_user = last_user_at.map(|i| {
            let (before, last) = messages.split_at(i);
            prompt_in_context(settings, before, &last[0].content, SpansCarried::default()).text
        });
        // (Not when the turn there already ends with this reply: the transcript holds the whole
        // turn, and a reply the same as the turn before's, "Done.", stored it twice.)
        let answered_before = last_user_at.is_some_and(|i| {
            let after = &messages[i + 1..];
            let holds_this_reply = clean(settings, reply)
                .is_some_and(|r| after.iter().rev().find(|m| m.role == "assistant").is_some_and(|m| same(m, &r)));
            !holds_this_reply
                && after.iter().any(|m| {
                    m.role == "assistant"
                        && clean(settings, &m.content)
                            .is_some_and(|c| known_replies.contains(&super::record::reply_print(&c)))
                })
        });
        if answered_before || !last_user.as_deref().is_some_and(|last| same_words(last, prompt)) {
            // A wholly private prompt goes in as a turn of which nothing is kept.
            // Kept cleaned, it lost its tags: the spans it closed are closed again, and those it
            // left open opened again, each one (review80 #1), so what follows is read as it was.
            let closes = "</private>".repeat(kept.closes);
            let opens = "<private>".repeat(kept.opens);
            let prompt = match (prompt.is_empty(), kept.opens > 0) {
                (true, true) => format!("{closes}{opens}"),
                (true, false) => format!("{closes}<private></private>"),
                (false, true) => format!("{closes}{prompt} {opens}"),
                (false, false) => format!("{closes}{prompt}"),
            };
            messages.push(Message::new("user", prompt));
        }
    }
    // A slash command is not appended, but a span its arguments left open is kept open: the
    // reply goes in behind an opening tag, unless the messages hold the span open already (the
    // hook carries a command line's tags into the message after it).
    let slash_left_open = !alone
        && prompt.is_some_and(|p| p.left_private && is_agents_command(&p.text))
        && settings.retain.strip_private
        && cleaned_each(settings, &messages, 0).open_at_end == 0;
    if let Some(cleaned_reply) = clean(settings, reply) {
        let after_user = messages.iter().rposition(|m| m.role == "user").map_or(0, |i| i + 1);
        if !messages[after_user..].iter().any(|m| m.role == "assistant" && same(m, &cleaned_reply)) {
            let reply = if slash_left_open { format!("<private>{reply}") } else { reply.to_owned() };
            messages.push(Message::new("assistant", reply));
        }
    }
    messages
}

/// A prompt as the session keeps it until its turn ends (see [`prompt_in_context`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct KeptPrompt {
    /// Its text, cleaned ("" when nothing of it is kept).
    pub text: String,
    /// It leaves a `<private>` span open.
    pub left_private: bool,
    /// How many of the spans its history left open it closes.
    pub closes: usize,
    /// How many spans it opens and leaves open (nested ones each count).
    pub opens: usize,
    /// How many spans are open before it, as read in its history: what `closes` and `opens`
    /// count from.
    pub open_before: usize,
    /// How many user turns its history holds before it (`None`: no history).
    pub turns_before: Option<usize>,
}

/// A prompt as the session keeps it until its turn ends: cleaned with the spans its history
/// left open carried into it (a prompt inside a span an earlier message opened is private, and
/// kept in the spool as ""), whether it leaves a span open itself, and how many of those carried
/// it closes.
pub(super) fn prompt_in_context(
    settings: &Settings,
    history: &[Message],
    prompt: &str,
    carried: SpansCarried,
) -> KeptPrompt {
    let mut history = conversation(history);
    // A client may send the history with the prompt in it already (a transcript written before
    // the hook ran): its spans are counted once, as the prompt's.
    if history.last().is_some_and(|m| is_the_prompt(m, prompt)) {
        history.pop();
    }
    let turns_before = (!history.is_empty()).then(|| history.iter().filter(|m| m.role == "user").count());
    if !settings.retain.strip_private {
        let text = clean(settings, prompt).unwrap_or_default();
        return KeptPrompt { text, turns_before, ..KeptPrompt::default() };
    }
    let open = history
        .iter()
        .filter(|m| text::has_private_tag(&m.content))
        .fold(carried.before, |open, m| text::strip_private_within(&m.content, open).1)
        .max(carried.at_least_after);
    let (shown, open_after) = text::strip_private_within(prompt, open);
    let closes = text::private_edges_within(prompt, open).closes_of_those_before;
    KeptPrompt {
        text: clean(settings, &shown).unwrap_or_default(),
        left_private: open_after > 0,
        closes,
        opens: open_after.saturating_sub(open - closes),
        open_before: open,
        turns_before,
    }
}

/// A history's turns, counted once: which turn holds a message, and where a turn begins (what
/// [`first_message_of_turn`] finds by reading the history).
///
/// [`first_message_of_turn`]: super::placement::first_message_of_turn
struct Turns {
    /// How many user messages there are up to each message, itself included.
    users_through: Vec<usize>,
    /// Where each user message is.
    user_at: Vec<usize>,
}

impl Turns {
    fn of(history: &[Message]) -> Self {
        let (mut users_through, mut user_at) = (Vec::with_capacity(history.len()), Vec::new());
        for (i, m) in history.iter().enumerate() {
            if m.role == "user" {
                user_at.push(i);
            }
            users_through.push(user_at.len());
        }
        Self { users_through, user_at }
    }

    /// The user turn (counted from 0) message `at` belongs to: its user messages up to and
    /// including it, less one (0 before the first; the last turn past the end).
    fn holding(&self, at: usize) -> i64 {
        let users = self.users_through.get(at.min(self.users_through.len().saturating_sub(1))).copied();
        users.unwrap_or(0).saturating_sub(1) as i64
    }

    /// See [`super::placement::first_message_of_turn`].
    fn first_message(&self, n: i64) -> usize {
        if n <= 0 {
            return 0;
        }
        usize::try_from(n).ok().and_then(|n| self.user_at.get(n)).copied().unwrap_or(self.users_through.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(n: usize, user: &str) -> Vec<Message> {
        (0..n).flat_map(|_| [Message::new("user", user), Message::new("assistant", "ok")]).collect()
    }

    /// Linear in the messages (review77 #3: 90,000 messages each opening a span took 49 s, each
    /// carrying the spans before it written out; 90,000 lone closes 12 s).
    #[test]
    fn many_spans_and_stray_closes_are_read_in_one_pass() {
        let settings = Settings::default();
        let opens = history(50_000, "<private>");
        let cleaned = cleaned_each(&settings, &opens, 0);
        assert_eq!(cleaned.open_at_end, 50_000);
        assert!(cleaned.each.iter().all(Option::is_none));
        let closes = history(50_000, "</private> after");
        let cleaned = cleaned_each(&settings, &closes, 0);
        assert_eq!(cleaned.stray_closes.len(), 50_000);
        let (kept, froms) = cleaned.into_kept_by_closes(&closes, 0, &[]);
        assert_eq!(froms.len(), 50_000);
        // Each close hides what precedes it in its turn's history: the last turn's prompt shows.
        let shown: Vec<usize> = kept.iter().enumerate().filter(|(_, m)| m.is_some()).map(|(i, _)| i).collect();
        assert_eq!(shown.first(), Some(&(closes.len() - 2)), "{:?}", &shown[..shown.len().min(4)]);
    }

    #[test]
    fn turns_are_found_as_by_reading_the_history() {
        let h = vec![
            Message::new("system", "s"),
            Message::new("user", "a"),
            Message::new("assistant", "b"),
            Message::new("user", "c"),
        ];
        let turns = Turns::of(&h);
        for at in 0..6 {
            let users = h[..=at.min(h.len() - 1)].iter().filter(|m| m.role == "user").count();
            assert_eq!(turns.holding(at), users.saturating_sub(1) as i64, "{at}");
        }
        for n in -1..4 {
            assert_eq!(turns.first_message(n), super::super::placement::first_message_of_turn(&h, n), "{n}");
        }
    }
}
