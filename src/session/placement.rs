//! Where the user turns a client sends stand in a session's current part: placed against the
//! turns seen before (continuing, a window, a rewind, a new part), renumbered after an upgrade,
//! and the slices of a part stored as documents of their own.

use mneme_core::text::{self, Message};

use super::itself::looked_up_each;
use super::record::{TURN_ITSELF, UNKNOWN_CONVERSATION};
use super::{clean::is_command_echo, Session};

/// A prompt that runs one of the agent's commands: `/name`, then arguments or nothing.
pub(super) fn is_slash_command(prompt: &str) -> bool {
    let Some(rest) = prompt.trim_start().strip_prefix('/') else { return false };
    let name = rest.split(char::is_whitespace).next().unwrap_or_default();
    // A path (`/usr/bin …`) is not a command name.
    !name.is_empty() && !name.contains('/') && name.chars().all(|c| c.is_alphanumeric() || "-_:.".contains(c))
}

/// A prompt that is no words of the user's to retain: a slash command, or one the agent wrote.
pub(super) fn is_agents_command(prompt: &str) -> bool {
    is_slash_command(prompt) || is_command_echo(prompt)
}

/// Where the `known` turns stand among a history's user turns (`users`, their prints `seen`):
/// those found from the start in order, only slash commands between them, up to the first
/// known turn it does not hold (all of them, in a history that goes on; fewer in a rewound or
/// rewritten one). A turn known as wholly private (0) stands for any turn but a command once the
/// history has shown a command whose arguments hold `<private>`: the earlier hooks counted
/// such a span twice, and hid every turn after it up to a second close. Not in a history the
/// client says it rewound, where such a turn may be one taken back, nor for the history's
/// newest turn, which the earlier build never saw.
pub(super) fn known_turns_among_commands(known: &[u64], users: &[&str], seen: &[u64], rewound: bool) -> Vec<usize> {
    let mut positions = Vec::with_capacity(known.len());
    let mut hidden_by_a_command = false;
    for (i, (text, print)) in users.iter().zip(seen).enumerate() {
        let Some(&want) = known.get(positions.len()) else { break };
        let command = is_slash_command(text);
        let newest = i + 1 == users.len();
        let hidden = want == 0 && hidden_by_a_command && !command && !rewound && !newest;
        // A command the earlier build counted as a turn in another form (Claude Code's line for
        // a custom command run with arguments, `<command-message>` first, read as words): it is
        // that turn when the turn after it is the known one after. Skipped, every known turn
        // after it was missed, and a new part stored the whole conversation again.
        let known_in_another_form =
            || want != UNKNOWN_TURN && known.get(positions.len() + 1).is_some_and(|next| seen.get(i + 1) == Some(next));
        if (want != UNKNOWN_TURN && (*print == want || hidden)) || (command && known_in_another_form()) {
            positions.push(i);
        } else if command {
            hidden_by_a_command |= text::has_private_tag(text);
        } else {
            break;
        }
    }
    positions
}

/// Moves every turn number `s` keeps from its count without slash commands to where that turn
/// stands in the history (`users`, their prints `seen`; `positions` of its first known turns,
/// see [`known_turns_among_commands`]): a command before a known turn counts with the turns
/// before it (its reply was stored with them), numbers past the turns found move with the
/// commands met. What the session kept as text up to all its known turns (the part's start
/// after turns had with memory off, its pending tail, what its document was given) also holds
/// the commands after the last of them that came before the history's newest turn: the earlier
/// build saw them, and their replies. The known turns found take the history's prints; those
/// after keep theirs, so that a rewound history is placed from where it leaves them.
pub(super) fn renumber_turns(s: &mut Session, positions: &[usize], users: &[&str], seen: &[u64]) {
    let found = positions.len();
    let end = positions.last().map_or(0, |last| last + 1);
    let newest = users.len().saturating_sub(1);
    // Kept as prints (a record of an earlier build kept the text: compared as it is).
    let run_since = |text: &str| {
        let (typed, print) = (as_typed(text), command_print(text));
        s.commands_since_upgrade.iter().any(|c| *c == print || *c == typed)
    };
    let seen_by_the_earlier_build = match found == s.turn_prints.len() {
        true => (end..newest)
            .take_while(|&i| is_slash_command(users[i]) && !run_since(users[i]))
            .last()
            .map_or(end, |i| i + 1),
        false => end,
    };
    let moved_to = |turn: i64, all_known_at: usize| -> i64 {
        let n = usize::try_from(turn).unwrap_or_default();
        match n {
            0 => 0,
            n if n < found => positions[n] as i64,
            n => (all_known_at + (n - found)) as i64,
        }
    };
    let moved = |turn: i64| moved_to(turn, end);
    let kept_as_text = |turn: i64| moved_to(turn, seen_by_the_earlier_build);
    s.first_turn = kept_as_text(s.first_turn);
    s.retained_turns = moved(s.retained_turns).max(s.first_turn);
    if let Some(p) = s.pending.as_mut() {
        p.user_turns = kept_as_text(p.user_turns);
        p.sliced_from = p.sliced_from.map(moved);
    }
    for slice in &mut s.sliced {
        *slice = (moved(slice.0), moved(slice.1));
    }
    // Numbered as the turns were before: no longer the turns their slices hold.
    s.alone_slices.clear();
    if let Some(p) = s.part_stored.as_mut() {
        p.turns = kept_as_text(p.turns);
    }
    let mut prints = seen[..seen_by_the_earlier_build].to_vec();
    prints.extend_from_slice(&s.turn_prints[found.min(s.turn_prints.len())..]);
    s.turn_prints = prints;
    s.commands_since_upgrade.clear();
}

/// The commands [`Session::commands_since_upgrade`] keeps at most.
pub(super) const MAX_COMMANDS_SINCE_UPGRADE: usize = 64;

/// How [`Session::commands_since_upgrade`] keeps a command: a fingerprint of it as typed, its
/// `<private>` spans left out, never its text (written to the spool, it was: review80 #3); nor a
/// print of its spans, which a short secret (a PIN) is found from by trying each (review83 #1).
pub(super) fn command_print(prompt: &str) -> String {
    format!("{:016x}", fingerprint(&as_typed(&without_spans(prompt))))
}

/// A prompt's words joined by single spaces: a command as typed and as the hook writes it.
pub(super) fn as_typed(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether `seen` is no part of the current part's history but the start of the previous
/// part's, all of it known there, or the whole previous part and then turns the current part
/// holds (a copy taken a turn or more after the history started over: taken for a new history,
/// it stored the old one again). One turn says too little: a client that sends a turn at a
/// time starts a part each turn, and a prompt repeated two turns apart ("yes", "go on") is a
/// new turn. Nor do turns that are all private. `as_previous`: the prints as read from where the
/// previous part began; `seen`, from where the current part began.
pub(super) fn is_late_copy_of_previous_part(session: &Session, as_previous: &[u64], seen: &[u64]) -> bool {
    let previous = &session.previous_part_prints;
    let (seen, placed) = (as_previous, seen);
    let known = match seen.len() <= previous.len() {
        true => previous[..seen.len()] == *seen,
        false => {
            let (old, new) = seen.split_at(previous.len());
            !previous.is_empty()
                && old == previous.as_slice()
                && session.turn_prints.windows(new.len()).any(|w| w == new)
        }
    };
    seen.len() >= 2
        && seen.iter().any(|p| *p != 0 && *p != UNKNOWN_TURN)
        && known
        && (is_all_private(placed) || place_in_part(&session.turn_prints, placed) == Placement::StartsOver)
}

/// Whether every turn of `prints` is wholly private or never seen: read so, a history agrees with
/// any part of private turns, which says nothing of whose it is (a late copy of the previous part,
/// read inside the span the current part began in, was taken for this part going on, and the
/// whole history after it stored its first turns twice: review93 #3).
pub(super) fn is_all_private(prints: &[u64]) -> bool {
    prints.iter().all(|p| *p == 0 || *p == UNKNOWN_TURN)
}

/// Adds the user turns `[from, to)` to a part's slices ([`Session::sliced`]), joined with those
/// they touch.
pub(super) fn add_slice(sliced: &mut Vec<(i64, i64)>, (from, to): (i64, i64)) {
    if from >= to {
        return;
    }
    sliced.push((from, to));
    sliced.sort_unstable();
    let mut joined: Vec<(i64, i64)> = Vec::with_capacity(sliced.len());
    for &(a, b) in sliced.iter() {
        match joined.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => joined.push((a, b)),
        }
    }
    *sliced = joined;
}

/// Keeps of a part's slices the turns before `turn`: those from there on were taken back (a
/// rewind), and the branch's turns in their places are others. So are its turns sent alone
/// from there on ([`Session::alone_slices`]): kept, a whole transcript gave the branch's turn to
/// the document of the one taken back as well as to its own, and stored it twice (review89 #1).
pub(super) fn slices_before(s: &mut Session, turn: i64) {
    s.sliced.retain(|&(from, _)| from < turn);
    if let Some(last) = s.sliced.last_mut() {
        last.1 = last.1.min(turn);
    }
    s.alone_slices.retain(|a| a.turn < turn);
}

/// A rewind took back the part's turns from `turn` on: what its document was last given is no
/// measure of what it should hold any more (kept, a later whole transcript was taken for one
/// that lost text, and the branch's turns after the rewind were never stored).
pub(super) fn taken_back_from_document(s: &mut Session, turn: i64) {
    if s.part_stored.is_some_and(|p| p.turns > turn) {
        s.part_stored = None;
    }
}

/// The part's messages (`part_each`, cleaned, of the history from the part's first turn) without
/// those of its turns stored as slices of their own.
pub(super) fn without_slices(
    session: &Session,
    part: &[Message],
    part_each: &[Option<Message>],
) -> Vec<Option<Message>> {
    let mut kept = part_each.to_vec();
    for &(from, to) in &session.sliced {
        let at = |turn: i64| first_message_of_turn(part, turn - session.first_turn);
        kept[at(from)..at(to)].fill(None);
    }
    kept
}

/// Where a history that agrees with the part's first `k` user turns and then goes its own way
/// was rewound to: `k`. 0 when it was rewound to before its first prompt (the client says so:
/// the turns taken back were stored in the part's document, and a new part left them there).
/// Also to before the part's first turn (`first_turn`: the turns before it had while memory was
/// off, forgotten or cleared, stored in the part before a move or by an earlier build): taken for
/// a history that starts over, the branch was stored whole in a new part, those turns with it (a
/// password the user had forgotten came back). A turn never seen agrees only before `first_turn`
/// (a window passed over while memory was off, heard first): there the branch's turns are never
/// to be stored anyway, and read as rewound to the start, the branch was stored whole, the off
/// turns in it (review92 #1). Past it, a turn never seen (one whose end never came) may be the
/// branch's own, to be stored.
pub(super) fn rewound_at(known: &[u64], seen: &[u64], first_turn: i64) -> Option<usize> {
    let not_stored = usize::try_from(first_turn).unwrap_or(usize::MAX);
    let agree = |(i, (a, b)): (usize, (&u64, &u64))| match *a {
        UNKNOWN_TURN => i < not_stored,
        _ => a == b,
    };
    let k = known.iter().zip(seen).enumerate().take_while(|&pair| agree(pair)).count();
    (k < known.len() && k < seen.len()).then_some(k)
}

/// Where a history sent whole, from a client that says the user took turns back, was rewound to,
/// placed first as `placement`: a branch agrees with the part's first `k` turns (none: rewound to
/// before the first prompt), then not ([`rewound_at`]). So does one that starts over, and one
/// placed as a window over the part's later turns that agrees there only at wholly private
/// prompts (they all print alike): taken for a window, a branch of a private first prompt and one
/// more turn made the part count two turns more than the client had and stay inside a span the
/// branch had closed, every turn after it stored as nothing (fuzz seed 3026); a branch of one
/// private prompt, rewound to the start, lost its turn (1213). A window that agrees at a prompt's
/// print is one (a client may send `rewound` with a history cut without a count): read as rewound
/// to the start, it replaced the session's document, and the turns before it left the store
/// (review93 #2); a branch only where it agrees with the part's first turn. `None`: not a branch.
pub(super) fn branch_taken(known: &[u64], seen: &[u64], first_turn: i64, placement: &Placement) -> Option<usize> {
    match *placement {
        Placement::StartsOver => rewound_at(known, seen, first_turn),
        Placement::Window(k) => {
            let over = &known[k.min(known.len())..known.len().min(k.saturating_add(seen.len()))];
            rewound_at(known, seen, first_turn).filter(|at| *at > 0 || is_all_private(over))
        }
        _ => None,
    }
}

/// Hides in `each` (a history's messages as cleaned) the turns had while automatic retain kept
/// nothing ([`Session::turns_had_off`]): those of the same conversation (`conversation`: its first
/// prompt's print) at the same place (`first` is the place of the history's first user turn) with
/// the same prompt. Placement decides which turns of a history are new, and where it erred (a
/// branch taken for a late copy, a window for a branch, a gap at a part's start), turns had with
/// memory off were stored once it was on: this keeps them out whatever it decided. A new turn
/// that asks what an off turn asked, at its place in the same conversation, is not stored either:
/// the price of failing closed. (Keyed by the conversation, not cleared when a part starts
/// another: the conversation left may come back, a rewind to before a compaction, and its off
/// turns were stored: review96 #3; nor hiding another's turns: review95 #1.)
pub(super) fn hide_turns_had_off(
    session: &Session,
    history: &[Message],
    each: &mut [Option<Message>],
    first: i64,
    conversation: u64,
) {
    if session.turns_had_off.is_empty() {
        return;
    }
    let same = |c: u64| c == conversation || c == UNKNOWN_CONVERSATION || conversation == UNKNOWN_CONVERSATION;
    let prints = user_prints(each, history);
    let any_itself = session.turns_had_off.iter().any(|(_, place, _)| *place == TURN_ITSELF);
    let themselves = if any_itself { looked_up_each(history, each) } else { Vec::new() };
    for (turn, print) in prints.into_iter().enumerate() {
        let place = first.saturating_add(turn as i64);
        let itself = |t: &u64| themselves.get(turn).is_some_and(|prints| prints.contains(t));
        if session
            .turns_had_off
            .iter()
            .any(|(c, p, t)| same(*c) && ((*p == place && *t == print) || (*p == TURN_ITSELF && itself(t))))
        {
            let from = first_message_of_turn(history, turn as i64);
            let to = first_message_of_turn(history, turn as i64 + 1).min(each.len());
            each[from..to].fill(None);
        }
    }
}

/// The conversation a part's turns belong to, for [`Session::turns_had_off`]: its first prompt's
/// print, [`UNKNOWN_CONVERSATION`] when never seen.
pub(super) fn conversation_of(prints: &[u64]) -> u64 {
    match prints.first() {
        Some(&UNKNOWN_TURN) | None => UNKNOWN_CONVERSATION,
        Some(print) => *print,
    }
}

/// The turns of a history passed over while nothing was retained, to be kept in
/// [`Session::turns_had_off`]: its user turns' places (`first` for the first) and prints, from
/// the place `from` on (those before are the part's, retained or passed over before).
/// A wholly private prompt (print 0) is kept too: every such prompt prints alike, and a later one
/// at that place is left out, its public reply with it (review95 #2), the price of never storing
/// the public reply to one had off (review96 #6).
pub(super) fn turns_passed_over(prints: &[u64], first: i64, from: i64) -> impl Iterator<Item = (i64, u64)> + '_ {
    prints
        .iter()
        .enumerate()
        .map(move |(turn, print)| (first.saturating_add(turn as i64), *print))
        .filter(move |(place, print)| *place >= from && *print != UNKNOWN_TURN)
}

/// Where the user turns a client sent stand in the session's current part.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Placement {
    /// From the part's start, agreeing with what was seen before (longer, as long, or a shorter
    /// copy sent late): the turns past the retained ones are new.
    Continues,
    /// Agreeing with the part from its `k`-th user turn on: the start was left out.
    Window(usize),
    /// Agreeing with nothing seen (compacted, another conversation): a new part.
    StartsOver,
    /// Agreeing with the part's first `k` turns, then not, from a client that says the user
    /// took turns back: in `full-session` mode the part goes on along the new branch
    /// ([`rewound_at`]; `place_in_part` gives `StartsOver`). Not without the client's word: a
    /// history compacted to its first prompt, a summary and new turns looks the same, and
    /// replacing the document with it would delete the turns in between from the store.
    Rewound(usize),
}

/// Places the user turns `seen` (their fingerprints) against those `known` of the part: where
/// they agree with it, from its start or from a later turn, wherever they overlap.
pub(super) fn place_in_part(known: &[u64], seen: &[u64]) -> Placement {
    if known.is_empty() || seen.is_empty() {
        return Placement::Continues;
    }
    // Turns never seen (a gap before a turn sent alone: a window passed over while memory was
    // off, turns whose end never came) agree with any, in a whole history that goes on from the
    // part's first turn past all it knows: taken for another history, it started the part over,
    // and the new part stored the whole history again, turns had while memory was off among
    // them (review90 #1). Not in one that begins in a gap, or ends within what the part knows:
    // a history that starts over agreed there at the few turns known, and its turns were taken
    // for retained ones and never stored (review91 #1, #2).
    let goes_on_over_gaps = known[0] != UNKNOWN_TURN
        && seen.len() > known.len()
        && known.contains(&UNKNOWN_TURN)
        && known.iter().zip(seen).all(|(k, s)| *k == UNKNOWN_TURN || k == s);
    if goes_on_over_gaps {
        return Placement::Continues;
    }
    // How far `seen` agrees with `known` from each turn of it, for all turns at once (the
    // Z-algorithm): comparing from each turn in turn took time in the product of the two
    // lengths, seconds on a worker for a client repeating one prompt a hundred thousand times.
    let agreeing = common_prefixes(seen, known);
    let agrees_from = |k: usize| agreeing[k] >= seen.len().min(known.len() - k);
    match (0..known.len()).find(|&k| agrees_from(k)) {
        Some(0) => Placement::Continues,
        Some(k) => Placement::Window(k),
        None => Placement::StartsOver,
    }
}

/// As [`place_in_part`], for a part that never stores its turns before `first_turn` (had while
/// memory was off, or stored by the part before). A whole history that agrees with every turn
/// the part knows and goes past them goes on, a gap at the part's start or not, when one of
/// those turns is known: the part's first known turns were passed over while off (the first the
/// session heard was a transcript without its start), and a turn sent alone after them. Taken
/// for a history that starts over, it was stored whole, the off turns in it (review91 #4). A
/// wholly private prompt (print 0) counts: the reply to one had while off was stored so
/// (review92 #2). A new conversation that agrees there loses its turns before `first_turn`;
/// storing the off turns of the same one would write what the user had memory off for. A gap at
/// the start with no such turn known is still no agreement (review91 #1, #2): such a history's
/// turns were taken for retained ones and never stored.
pub(super) fn place_in_part_past(known: &[u64], seen: &[u64], first_turn: i64) -> Placement {
    let not_stored = usize::try_from(first_turn).unwrap_or(usize::MAX).min(known.len());
    let agrees_at_one_not_stored = known[..not_stored].iter().zip(seen).any(|(k, s)| *k != UNKNOWN_TURN && k == s);
    let goes_on_from_turns_not_stored = known.first() == Some(&UNKNOWN_TURN)
        && seen.len() > known.len()
        && agrees_at_one_not_stored
        && known.iter().zip(seen).all(|(k, s)| *k == UNKNOWN_TURN || k == s);
    match goes_on_from_turns_not_stored {
        true => Placement::Continues,
        false => place_in_part(known, seen),
    }
}

/// The part's turn prints after a transcript sent without its start (`omitted` user turns left
/// out, the prints `seen` of its own): those known before it, turns never seen up to it, then its
/// own. `None` when the gap is too large to keep (a client's count is not to be trusted with the
/// session record's size: a million left out made it 21 MB).
pub(super) fn prints_with_window(known: &[u64], omitted: usize, seen: &[u64]) -> Option<Vec<u64>> {
    if omitted > known.len().saturating_add(MAX_UNKNOWN_TURNS) {
        return None;
    }
    let mut prints = known[..omitted.min(known.len())].to_vec();
    prints.resize(omitted, UNKNOWN_TURN);
    prints.extend(seen);
    Some(prints)
}

/// Of the places where a window `seen` agrees with the part's turns `known`, the last that
/// reaches past them (its last turns new): `None` when none does. For a window whose last reply
/// is new (see `last_turn_replies_unseen`): among prompts that repeat, [`place_in_part`]'s
/// first agreement put it over turns known, and its new turns were never stored.
pub(super) fn latest_window_past_the_end(known: &[u64], seen: &[u64]) -> Option<usize> {
    let agreeing = common_prefixes(seen, known);
    (1..known.len()).rev().find(|&k| agreeing[k] >= known.len() - k && k + seen.len() > known.len())
}

/// For each position k of `text`, how long a start of `pattern` `text[k..]` begins with, in time
/// linear in both (the Z-function of `pattern`, a separator, then `text`).
pub(super) fn common_prefixes(pattern: &[u64], text: &[u64]) -> Vec<usize> {
    let s: Vec<Option<u64>> =
        pattern.iter().map(|p| Some(*p)).chain(std::iter::once(None)).chain(text.iter().map(|t| Some(*t))).collect();
    let n = s.len();
    let mut z = vec![0usize; n];
    let (mut left, mut right) = (0usize, 0usize);
    for i in 1..n {
        if i < right {
            z[i] = (right - i).min(z[i - left]);
        }
        // The separator matches nothing, so no run crosses it.
        while i + z[i] < n && s[z[i]].is_some() && s[z[i]] == s[i + z[i]] {
            z[i] += 1;
        }
        if i + z[i] > right {
            (left, right) = (i, i + z[i]);
        }
    }
    z.split_off(pattern.len() + 1)
}

/// The fingerprint of a turn left out of every transcript sent: it agrees with no turn.
pub(super) const UNKNOWN_TURN: u64 = u64::MAX;
/// At most this many turns never seen are kept as [`UNKNOWN_TURN`]s between those seen.
pub(super) const MAX_UNKNOWN_TURNS: usize = 4096;

/// The fingerprints of a history's user messages, cleaned (`each`, message by message): 0 for
/// one wholly private. Line ends count as one (see [`unix_lines`]).
pub(super) fn user_prints(each: &[Option<Message>], history: &[Message]) -> Vec<u64> {
    history
        .iter()
        .zip(each)
        .filter(|(m, _)| m.role == "user")
        .map(|(_, c)| c.as_ref().map_or(0, |c| message_print(&c.content)))
        .collect()
}

/// The fingerprint of a message as cleaned, line ends counting as one (see [`unix_lines`]), and
/// its `<private>` spans left out whether or not `retain.strip_private` removed them: the turns
/// placed under one setting are the same turns under the other (a change of it took every
/// session's history for another, and stored it whole again in a new part: review73 #4).
pub(super) fn message_print(cleaned: &str) -> u64 {
    fingerprint(&unix_lines(&without_spans(cleaned)))
}

/// `text` without its `<private>` spans, when it has any, trimmed as [`super::clean::clean`]
/// trims what it keeps.
pub(super) fn without_spans(text: &str) -> std::borrow::Cow<'_, str> {
    match text::has_private_tag(text) {
        true => std::borrow::Cow::Owned(text::strip_private(text).trim().to_owned()),
        false => std::borrow::Cow::Borrowed(text),
    }
}

/// `text` with `\n` for every line end (`\r\n`, `\r`). A prompt the client gave with one and
/// its transcript with the other were two turns: every transcript that lagged (the reply given
/// apart) looked rewritten, and started a new part holding the whole history again.
pub(super) fn unix_lines(text: &str) -> std::borrow::Cow<'_, str> {
    match text.contains('\r') {
        true => std::borrow::Cow::Owned(text.replace("\r\n", "\n").replace('\r', "\n")),
        false => std::borrow::Cow::Borrowed(text),
    }
}

/// Whether two texts are the same but for their blanks: line ends, and the spaces, tabs and
/// blank lines a client's copy of a message may trim or collapse (a Markdown hard break's two
/// spaces, a no-break space). A reply given apart that differed so from the transcript's copy
/// was stored twice, and every later turn began a part of its own.
pub(super) fn same_words(a: &str, b: &str) -> bool {
    a == b || a.split_whitespace().eq(b.split_whitespace())
}

/// Where a history's user turn `n` (counted from 0) begins: after the messages of the turns
/// before it. Past its end, the history's length.
pub(super) fn first_message_of_turn(history: &[Message], n: i64) -> usize {
    if n <= 0 {
        return 0;
    }
    let mut users = 0;
    for (i, m) in history.iter().enumerate() {
        if m.role == "user" {
            if users == n {
                return i;
            }
            users += 1;
        }
    }
    history.len()
}

/// A stable fingerprint of a text (FNV-1a, 64 bits): the same on every run and build, unlike
/// the standard library's hasher, since it is saved with the session.
pub fn fingerprint(text: &str) -> u64 {
    text::fnv1a(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_are_placed_as_by_comparing_from_each_turn() {
        let naive = |known: &[u64], seen: &[u64]| {
            let agrees_from = |k: usize| {
                let overlap = seen.len().min(known.len() - k);
                seen[..overlap] == known[k..k + overlap]
            };
            match (0..known.len()).find(|&k| agrees_from(k)) {
                Some(0) => Placement::Continues,
                Some(k) => Placement::Window(k),
                None => Placement::StartsOver,
            }
        };
        // Small alphabets, so that turns repeat and partial agreements are common.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for _ in 0..5000 {
            let known: Vec<u64> = (0..1 + next(12)).map(|_| next(3)).collect();
            let seen: Vec<u64> = (0..1 + next(12)).map(|_| next(3)).collect();
            assert_eq!(place_in_part(&known, &seen), naive(&known, &seen), "{known:?} {seen:?}");
        }
        // One prompt repeated: linear now.
        let known = vec![7u64; 200_000];
        let mut seen = vec![7u64; 100_000];
        seen.push(8);
        assert_eq!(place_in_part(&known, &seen), Placement::Window(100_000));
    }

    /// The known turns stand among the history's commands: skipped when the earlier build never
    /// counted them, taken for the known turn they stand in for when it counted them in another
    /// form (the turn after agrees).
    #[test]
    fn known_turns_are_found_among_commands() {
        let users = ["q1", "/review the auth module", "q3", "q4", "q5"];
        let seen = [1, 20, 3, 4, 5];
        assert_eq!(known_turns_among_commands(&[1, 3, 4], &users, &seen, false), [0, 2, 3], "unseen");
        assert_eq!(known_turns_among_commands(&[1, 21, 3, 4], &users, &seen, false), [0, 1, 2, 3], "another form");
        assert_eq!(known_turns_among_commands(&[1, 21, 9], &users, &seen, false), [0], "rewritten after it");
    }

    #[test]
    fn turns_are_placed_in_their_part() {
        let known = [1, 2, 3, 4, 5];
        assert_eq!(place_in_part(&[], &[9, 9]), Placement::Continues, "the first turns of a part");
        assert_eq!(place_in_part(&known, &[1, 2, 3, 4, 5, 6]), Placement::Continues, "it grew");
        assert_eq!(place_in_part(&known, &[1, 2, 3]), Placement::Continues, "a late, shorter copy");
        assert_eq!(place_in_part(&known, &[3, 4, 5, 6, 7]), Placement::Window(2), "its start left out");
        assert_eq!(place_in_part(&known, &[4]), Placement::Window(3));
        assert_eq!(place_in_part(&known, &[8, 6, 7]), Placement::StartsOver, "compacted");
        assert_eq!(place_in_part(&known, &[1, 2, 9]), Placement::StartsOver, "rewound and retold");
        // A repeated prompt ("continue") is placed where the turns after it agree too.
        assert_eq!(place_in_part(&[7, 1, 2, 7, 3], &[7, 3, 4]), Placement::Window(3));
    }

    /// A gap at the part's start is gone over only by a history that agrees at a turn the part
    /// never stores (had while memory was off), and at every turn it knows, and goes past them.
    #[test]
    fn a_gap_at_the_start_is_gone_over_only_past_turns_not_stored() {
        const U: u64 = UNKNOWN_TURN;
        let known = [U, U, 5, 6, 7];
        let whole = [1, 2, 5, 6, 7, 8];
        assert_eq!(place_in_part_past(&known, &whole, 4), Placement::Continues, "off turns 5, 6 in it");
        assert_eq!(place_in_part_past(&known, &whole, 0), Placement::StartsOver, "all stored: review91 #2");
        assert_eq!(place_in_part_past(&known, &whole, 2), Placement::StartsOver, "none known off");
        assert_eq!(place_in_part_past(&known, &[1, 2], 4), Placement::StartsOver, "within the gap: review91 #1");
        assert_eq!(place_in_part_past(&known, &[1, 2, 5, 6, 9, 8], 4), Placement::StartsOver, "differs after");
        assert_eq!(place_in_part_past(&known, &[1, 2, 5, 6, 7], 4), place_in_part(&known, &[1, 2, 5, 6, 7]));
        assert_eq!(place_in_part_past(&[U, U, 0, 7], &[1, 2, 0, 7, 8], 3), Placement::Continues, "private");
        assert_eq!(place_in_part_past(&[U, U, 0, 7], &[1, 2, 5, 7, 8], 3), Placement::StartsOver);
    }
}
