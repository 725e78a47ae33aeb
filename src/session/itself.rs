//! A turn told by itself rather than by its place: its prompt with its replies, for the turns
//! had while memory was off whose place in the conversation is a guess (see
//! [`Session::turns_had_off`](super::Session::turns_had_off) and [`TURN_ITSELF`]).

use mneme_core::text::Message;

use super::placement::{message_print, user_prints, UNKNOWN_TURN};
use super::record::reply_print;
#[cfg(doc)]
use super::record::TURN_ITSELF;

/// At most this many turns of one history are kept as themselves (its last): a long history
/// read while memory was off filled the net and pushed out the turns kept before it
/// (review99 #7).
const MOST_KEPT_FROM_ONE_HISTORY: usize = 32;

/// The prints that keep the turns of a history (cleaned as `each`) whose prompt's print `keep`
/// accepts, as themselves (see [`TurnItself::kept`]), of its last
/// [`MOST_KEPT_FROM_ONE_HISTORY`] such turns.
pub(super) fn turns_themselves(history: &[Message], each: &[Option<Message>], keep: impl Fn(u64) -> bool) -> Vec<u64> {
    let prints = user_prints(each, history);
    let kept: Vec<TurnItself> = each_turn(history, each)
        .into_iter()
        .zip(prints)
        .filter(|(_, print)| *print != UNKNOWN_TURN && keep(*print))
        .map(|(turn, _)| turn)
        .collect();
    let from = kept.len().saturating_sub(MOST_KEPT_FROM_ONE_HISTORY);
    let mut prints: Vec<u64> = kept[from..].iter().flat_map(TurnItself::kept).collect();
    prints.dedup();
    prints
}

/// The prints that keep the last user turn of a history as itself (see [`TurnItself::kept`]).
pub(super) fn last_turn_itself(history: &[Message], each: &[Option<Message>]) -> Vec<u64> {
    let prompt_known = user_prints(each, history).last().is_some_and(|print| *print != UNKNOWN_TURN);
    match (prompt_known, each_turn(history, each).pop()) {
        (true, Some(turn)) => turn.kept(),
        _ => Vec::new(),
    }
}

/// For each user turn of a history, the prints a turn kept as itself is found by
/// ([`TurnItself::looked_up`]).
pub(super) fn looked_up_each(history: &[Message], each: &[Option<Message>]) -> Vec<Vec<u64>> {
    each_turn(history, each).iter().map(TurnItself::looked_up).collect()
}

/// One user turn: its prompt's print and its replies' (public words only, see [`reply_print`]):
/// the first, and all of them in order.
struct TurnItself {
    prompt: u64,
    first: u64,
    all: u64,
    replies: usize,
}

impl TurnItself {
    /// What keeps the turn: its prompt with all its replies, and with its only reply as a first
    /// one too (a copy sent later may hold more after it: the transcript had lagged). Not by a
    /// first reply that more followed: a turn that only opened alike ("I'll run the tests.") and
    /// was answered otherwise was left out (review99 #1); nor by the last alone: every later turn
    /// that asked "continue" and closed "Done." was (review102 #2). A turn whose replies have no public
    /// word (wholly `<private>`, or none yet) by its prompt alone, found only in a turn whose
    /// replies have none either: kept by nothing, its public prompt was stored (review100 #2);
    /// found in any turn, every turn asking it was left out (review99 #2).
    fn kept(&self) -> Vec<u64> {
        match self.replies {
            0 if self.prompt_tells() => vec![only_prompt(self.prompt)],
            0 => Vec::new(),
            1 => vec![with_all(self.prompt, self.all), with_first(self.prompt, self.first)],
            _ => vec![with_all(self.prompt, self.all)],
        }
    }

    /// What a turn kept as itself is found by in a later history: the same prompt with the same
    /// replies, or with the same first reply where the kept copy had only that one; a turn with
    /// no public reply, by its prompt.
    fn looked_up(&self) -> Vec<u64> {
        match self.replies {
            0 if self.prompt_tells() => vec![only_prompt(self.prompt)],
            0 => Vec::new(),
            _ => vec![with_all(self.prompt, self.all), with_first(self.prompt, self.first)],
        }
    }

    /// Whether the prompt has public words (a wholly private one prints as every other does).
    fn prompt_tells(&self) -> bool {
        self.prompt != 0 && self.prompt != message_print("")
    }
}

/// Each user turn of a history, its replies counted only where they hold a public word.
fn each_turn(history: &[Message], each: &[Option<Message>]) -> Vec<TurnItself> {
    let no_public_word = reply_print("");
    let mut turns: Vec<TurnItself> = Vec::new();
    for (m, cleaned) in history.iter().zip(each) {
        let text = cleaned.as_ref().map(|c| c.content.as_str());
        match m.role.as_str() {
            "user" => turns.push(TurnItself { prompt: text.map_or(0, message_print), first: 0, all: 0, replies: 0 }),
            "assistant" => {
                let reply = text.map_or(no_public_word, reply_print);
                if let (Some(turn), false) = (turns.last_mut(), reply == no_public_word) {
                    if turn.replies == 0 {
                        turn.first = reply;
                    }
                    turn.all = (turn.all.rotate_left(23) ^ reply).wrapping_mul(0xff51_afd7_ed55_8ccd);
                    turn.replies += 1;
                }
            }
            _ => {}
        }
    }
    turns
}

/// A prompt's print mixed with its replies' (folded in order); [`with_first`] mixes otherwise,
/// so that a first reply never stands for all of them.
fn with_all(prompt: u64, reply: u64) -> u64 {
    (prompt.rotate_left(29) ^ reply).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ prompt
}

fn with_first(prompt: u64, reply: u64) -> u64 {
    (prompt.rotate_left(13) ^ reply).wrapping_mul(0xc2b2_ae3d_27d4_eb4f) ^ !prompt
}

/// A prompt's print, mixed apart from [`with_all`] and [`with_first`].
fn only_prompt(prompt: u64) -> u64 {
    prompt.rotate_left(41).wrapping_mul(0x1656_67b1_9e37_79f9) ^ 0x27d4_eb2f_1656_67c5
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(role: &str, text: &str) -> Message {
        Message::new(role, text)
    }

    fn kept_and_found(kept: &[Message], later: &[Message]) -> bool {
        let each = |h: &[Message]| h.iter().cloned().map(Some).collect::<Vec<_>>();
        let kept = turns_themselves(kept, &each(kept), |_| true);
        looked_up_each(later, &each(later)).iter().any(|prints| prints.iter().any(|p| kept.contains(p)))
    }

    #[test]
    fn a_turn_is_found_by_its_prompt_and_replies_or_its_only_first_one() {
        let turn = [m("user", "run the tests"), m("assistant", "I'll run them."), m("assistant", "3 fail")];
        assert!(kept_and_found(&turn, &turn), "the same turn");
        let answered_otherwise =
            [m("user", "run the tests"), m("assistant", "I'll run them."), m("assistant", "all pass")];
        assert!(!kept_and_found(&turn, &answered_otherwise), "opened alike, answered otherwise (review99 #1)");
        let lagged = [m("user", "run the tests"), m("assistant", "I'll run them.")];
        assert!(kept_and_found(&lagged, &turn), "kept while the transcript lagged, found once it holds more");
        let closed_alike = [m("user", "run the tests"), m("assistant", "Fixed the lexer."), m("assistant", "3 fail")];
        assert!(!kept_and_found(&turn, &closed_alike), "closed alike, answered otherwise (review102 #2)");
        let other_prompt = [m("user", "run the linter"), m("assistant", "I'll run them."), m("assistant", "3 fail")];
        assert!(!kept_and_found(&turn, &other_prompt), "another prompt");
        // No public word in its replies: kept by its prompt, found only in such a turn.
        let private = [m("user", "run the tests"), m("assistant", "<private>secret</private>")];
        assert!(kept_and_found(&private, &private), "the same turn (review100 #2)");
        let none = [m("user", "run the tests")];
        assert!(kept_and_found(&none, &private), "no reply yet, then a private one");
        assert!(!kept_and_found(&private, &turn), "answered in public words: another turn (review99 #2)");
        assert!(!kept_and_found(&turn, &private), "kept by its replies, not found by its prompt alone");
        let private_prompt = [m("user", "<private>pw</private>"), m("assistant", "<private>ok</private>")];
        assert!(!kept_and_found(&private_prompt, &private_prompt), "nothing public: nothing kept");
    }

    #[test]
    fn only_the_last_turns_of_a_long_history_are_kept() {
        let history: Vec<Message> =
            (0..100).flat_map(|i| [m("user", &format!("prompt {i}")), m("assistant", &format!("reply {i}"))]).collect();
        let each: Vec<Option<Message>> = history.iter().cloned().map(Some).collect();
        let kept = turns_themselves(&history, &each, |_| true);
        assert_eq!(kept.len(), 2 * MOST_KEPT_FROM_ONE_HISTORY, "each turn with one reply keeps two prints");
    }
}
