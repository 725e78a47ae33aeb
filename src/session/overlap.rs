//! Where a transcript sent without its start and without a count begins among the known turns,
//! told by its replies where its prompts repeat ("continue", "continue"): Claude Code's hook
//! reads a transcript over 32 MiB from its end at every turn, and sends no count.

use mneme_core::text::Message;

use super::placement::{latest_window_past_the_end, rewound_at, Placement, UNKNOWN_TURN};
use super::record::reply_print;
use super::Session;

/// Where a history goes whose prompts (`seen`) are all known, no more of them than known, and
/// whose last reply is new (not a late copy), placed first as `placement`. Not from a client
/// that says the user took turns back: its first turns are the last ones known, by their
/// replies ([`overlap_by_replies`]), and the rest are new (overlapping the known turns as little
/// as the prompts allow, a tail of "continue"s read from a Claude Code transcript over 32 MiB
/// stored its earlier turns again at every turn: review99 #6). With none of its replies known
/// and all its prompts the last one asked again, turns past the known ones (another
/// conversation of "continue"s under the session's id lost its first turn, taken for the last
/// known one: review99 #5). Else as [`new_reply_placed`].
pub(super) fn placed_by_new_reply(
    session: &Session,
    history: &[Message],
    each: &[Option<Message>],
    seen: &[u64],
    rewound: bool,
    placement: Placement,
) -> Placement {
    let replies = turn_reply_prints(history, each);
    let (known, recent) = (&session.turn_prints, &session.recent_reply_prints);
    let by_prompts = matches!(placement, Placement::Continues | Placement::Window(_)) && !rewound;
    match overlap_by_replies(known, seen, &replies, recent) {
        Some(k) if by_prompts => Placement::Window(k),
        None if by_prompts
            && !replies.iter().flatten().any(|r| recent.contains(r))
            && asks_only_the_last_prompt_again(known, seen) =>
        {
            Placement::Window(known.len())
        }
        _ => new_reply_placed(known, seen, session.first_turn, rewound, placement),
    }
}

/// Where such a history goes by its prompts alone. From a client that says the user took turns
/// back, the prompt taken back asked again: a rewind to before it (fuzz4 seed 6124: "continue"
/// twice; taken for a window over the known turns, its new reply was stored nowhere). Else turns
/// past the known ones among prompts that repeat: past the end, overlapping the known turns
/// where it can, else wholly after them. Taken for a window over the known turns (all its turns
/// new, review98 #2) or, agreeing with the part's first prompts, for a late copy (review98 #3),
/// its new turns were stored nowhere.
fn new_reply_placed(known: &[u64], seen: &[u64], first_turn: i64, rewound: bool, placement: Placement) -> Placement {
    match placement {
        Placement::Continues if rewound => Placement::Rewound(seen.len() - 1),
        Placement::Continues if seen.len() < known.len() => {
            latest_window_past_the_end(known, seen).map_or(Placement::Continues, Placement::Window)
        }
        Placement::Window(k) => match latest_window_past_the_end(known, seen) {
            Some(past) => Placement::Window(past),
            None if rewound => rewound_at(known, seen, first_turn).map_or(Placement::Window(k), Placement::Rewound),
            None => Placement::Window(known.len()),
        },
        other => other,
    }
}

/// For each user turn of a history (cleaned as `each`), the print of the reply that ends it
/// ([`reply_print`]; none when the turn has no reply kept).
fn turn_reply_prints(history: &[Message], each: &[Option<Message>]) -> Vec<Option<u64>> {
    let mut replies: Vec<Option<u64>> = Vec::new();
    for (m, cleaned) in history.iter().zip(each) {
        match m.role.as_str() {
            "user" => replies.push(None),
            "assistant" => {
                if let (Some(reply), Some(cleaned)) = (replies.last_mut(), cleaned) {
                    *reply = Some(reply_print(&cleaned.content));
                }
            }
            _ => {}
        }
    }
    replies
}

/// Where a history (its prompts' prints `seen`, its turns' replies `replies`) begins among the
/// `known` turns, by the replies the last transcripts ended their turns with (`recent`, oldest
/// first, as [`Session::recent_reply_prints`](super::Session::recent_reply_prints) keeps them):
/// its first `t` turns are the last `t` known ones when the reply of its `t`-th is the last one
/// known, the replies before it end as the recent ones do, and the prompts agree. The largest
/// such `t` short of its last turn. By order, not by membership: a new turn that closed with a
/// recent reply ("Done.") was taken for a known one, and lost (review100 #1). From the last
/// known reply back, not from the window's start: a window longer than the recent replies
/// kept was never placed, and stored its turns again (review100 #3).
fn overlap_by_replies(known: &[u64], seen: &[u64], replies: &[Option<u64>], recent: &[u64]) -> Option<usize> {
    let last_known = *recent.last()?;
    let most = seen.len().saturating_sub(1).min(known.len().saturating_sub(1)).min(replies.len());
    (1..=most).rev().find_map(|t| {
        let k = known.len() - t;
        (replies[t - 1] == Some(last_known) && ends_as_the_recent(&replies[..t], recent) && known[k..] == seen[..t])
            .then_some(k)
    })
}

/// Whether `replies` end as `recent` does, read back from the end: each the recent reply before
/// the one matched last, or one heard before that (a reply heard again, which `recent` keeps
/// where it was first heard: "Done." closing two turns), until `recent` runs out.
fn ends_as_the_recent(replies: &[Option<u64>], recent: &[u64]) -> bool {
    let mut left = recent.len();
    for reply in replies.iter().rev() {
        if left == 0 {
            return true;
        }
        match reply {
            Some(r) if *r == recent[left - 1] => left -= 1,
            Some(r) if recent[..left - 1].contains(r) => {}
            _ => return false,
        }
    }
    true
}

/// Whether every prompt of `seen` is the last known one (a print that tells, not a wholly
/// private prompt's).
fn asks_only_the_last_prompt_again(known: &[u64], seen: &[u64]) -> bool {
    match known.last() {
        Some(&last) if last != 0 && last != UNKNOWN_TURN => seen.iter().all(|p| *p == last),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_overlaps_the_known_turns_as_its_replies_end() {
        let known = [1, 2, 2, 2, 2, 2];
        // Known replies 10..=15; the window holds turns 3..=5 and a new one.
        let recent = [10, 11, 12, 13, 14, 15];
        let seen = [2, 2, 2, 2];
        assert_eq!(overlap_by_replies(&known, &seen, &[Some(13), Some(14), Some(15), Some(99)], &recent), Some(3));
        // A new turn that closes as the last known one did ("Done."): not taken for it.
        let recent = [10, 11, 12, 13, 14, 77];
        let replies = [Some(14), Some(77), Some(77), Some(99)];
        assert_eq!(overlap_by_replies(&known, &seen, &replies, &recent), Some(4));
        // A known turn that closed as an older one did (turns 1 and 4: 77), kept where that one
        // was first heard; the window holds turns 3..=5 and a new one.
        let recent = [10, 77, 12, 13, 14];
        let replies = [Some(13), Some(77), Some(14), Some(99)];
        assert_eq!(overlap_by_replies(&known, &seen, &replies, &recent), Some(3));
        // Nothing new after the known ones, or no reply known: no overlap told.
        assert_eq!(overlap_by_replies(&known, &[2, 2], &[Some(14), Some(15)], &[14, 15]), None);
        assert_eq!(overlap_by_replies(&known, &seen, &[Some(1), Some(2), Some(3), Some(4)], &recent), None);
    }

    #[test]
    fn a_window_longer_than_the_recent_replies_is_placed_by_its_last_known_one() {
        let known: Vec<u64> = std::iter::once(1).chain(std::iter::repeat_n(2, 40)).collect();
        let recent: Vec<u64> = (25..41).collect();
        // Turns 11..=40 (replies 11..=40), then a new one.
        let mut replies: Vec<Option<u64>> = (11..41).map(Some).collect();
        replies.push(Some(99));
        let seen = vec![2; replies.len()];
        assert_eq!(overlap_by_replies(&known, &seen, &replies, &recent), Some(11));
    }
}
