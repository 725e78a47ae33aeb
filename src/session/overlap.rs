//! Where a transcript whose prompts are all known and whose last reply is new goes: among
//! prompts that repeat ("continue", "continue"), turns past the known ones sent without the
//! start or its count (Claude Code's hook reads a transcript over 32 MiB from its end at every
//! turn, and sends no count), or a rewind.

use mneme_core::text::Message;

use super::placement::{latest_window_past_the_end, rewound_at, Placement, UNKNOWN_TURN};
use super::record::reply_print;
use super::Session;

/// Where a history goes whose prompts (`seen`) are all known, no more of them than known, and
/// whose last reply is new (not a late copy), placed first as `placement`. With none of its
/// replies heard before and all its prompts the last one asked again, not from a client that
/// says the user took turns back: turns past the known ones (another conversation of
/// "continue"s under the session's id lost its first turn, taken for the last known one:
/// review99 #5). Else as [`new_reply_placed`], which errs to storing a turn twice, never to
/// losing one. (Placed by where its replies end as the known turns' did, a new turn that closed
/// as an older one had, "Done.", was taken for a known one and lost: review100 #1, review101
/// #4. The replies the session keeps are the last message of each of its last turns, which
/// such turns share: telling them apart needs each turn's whole reply.)
pub(super) fn placed_by_new_reply(
    session: &Session,
    history: &[Message],
    each: &[Option<Message>],
    seen: &[u64],
    rewound: bool,
    placement: Placement,
) -> Placement {
    let known = &session.turn_prints;
    let by_prompts = matches!(placement, Placement::Continues | Placement::Window(_)) && !rewound;
    let none_heard = || {
        let replies = turn_reply_prints(history, each);
        !replies.iter().flatten().any(|r| session.recent_reply_prints.contains(r))
    };
    match by_prompts && asks_only_the_last_prompt_again(known, seen) && none_heard() {
        true => Placement::Window(known.len()),
        false => new_reply_placed(known, seen, session.first_turn, rewound, placement),
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

/// Whether every prompt of `seen` is the last known one (a print that tells, not a wholly
/// private prompt's).
fn asks_only_the_last_prompt_again(known: &[u64], seen: &[u64]) -> bool {
    match known.last() {
        Some(&last) if last != 0 && last != UNKNOWN_TURN => seen.iter().all(|p| *p == last),
        _ => false,
    }
}
