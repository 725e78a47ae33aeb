//! What an answer shows once: a conversation continued under a new session id (Claude Code's
//! `--resume --fork-session`, an older Claude Code's `--resume`) is stored again with the turns
//! it copied, and its results repeated the original's turns within the agent's budget.
//!
//! Applied to an answer as it goes to the agent, after every filter and fit (a result left out
//! later would take with it what another result was cut for): each result's units (turn frames
//! and paragraphs, split at blank lines) are noted; a later result leaves out a unit of
//! [`REPEATED_UNIT`] characters or more that an earlier one showed, a piece of one (a
//! passage's opening repeats the end of the passage before it) that an earlier unit holds, word
//! for word, and a shorter unit an earlier one showed that stands beside one that goes (the
//! rest of a copy). A result left with nothing of its own is left out.

/// A unit this long or longer is not shown twice; shorter ones ("yes", "Done.") are too common
/// to be copies, and stay with what they stand beside.
pub const REPEATED_UNIT: usize = 80;

/// `items` with what earlier items showed left out of later ones (see the module's doc);
/// `text` gives an item's text. The order is kept; an item trimmed keeps everything else.
pub fn without_repeats<T>(items: Vec<T>, text: fn(&mut T) -> &mut String) -> Vec<T> {
    let mut shown = Shown::default();
    let mut out = Vec::with_capacity(items.len());
    for mut item in items {
        let t = text(&mut item);
        match trimmed(t, &shown) {
            Trimmed::Whole => {}
            Trimmed::To(own) => *t = own,
            Trimmed::Nothing => continue,
        }
        shown.note(t);
        out.push(item);
    }
    out
}

/// What earlier results showed: their whole units, and which stood next to which.
#[derive(Default)]
struct Shown {
    units: Vec<String>,
    neighbours: std::collections::HashSet<(String, String)>,
}

impl Shown {
    fn note(&mut self, text: &str) {
        // A passage's opening is not noted: the passage it comes from keeps its own turns.
        let whole: Vec<Option<&str>> =
            units(text).into_iter().map(|u| (unmarked(u).len() == u.len()).then_some(u)).collect();
        for pair in whole.windows(2) {
            if let [Some(a), Some(b)] = pair {
                self.neighbours.insert(((*a).to_owned(), (*b).to_owned()));
            }
        }
        self.units.extend(whole.into_iter().flatten().map(str::to_owned));
    }

    fn holds(&self, unit: &str) -> bool {
        self.units.iter().any(|s| s == unit)
    }

    fn stood_together(&self, first: &str, then: &str) -> bool {
        self.neighbours.contains(&(first.to_owned(), then.to_owned()))
    }
}

enum Trimmed {
    Whole,
    To(String),
    Nothing,
}

fn trimmed(text: &str, shown: &Shown) -> Trimmed {
    if shown.units.is_empty() {
        return Trimmed::Whole;
    }
    let units = units(text);
    let mut goes: Vec<bool> = units
        .iter()
        .map(|u| {
            let own = unmarked(u);
            if own.len() < u.len() {
                // A piece of a unit: it goes when a shown unit holds it, word for word.
                shown.units.iter().any(|s| holds_words(s, own))
            } else {
                own.chars().count() >= REPEATED_UNIT && shown.holds(own)
            }
        })
        .collect();
    if !goes.contains(&true) {
        return Trimmed::Whole;
    }
    // A shorter unit goes beside one that goes when an earlier result showed the two side by
    // side: the rest of a copy (a fork's short questions between the answers it copied). A "yes"
    // of its own beside a copied turn stays, though another result showed a "yes" too.
    let mut grew = true;
    while grew {
        grew = false;
        for i in 0..units.len() {
            if goes[i] || unmarked(units[i]).len() != units[i].len() {
                continue;
            }
            let after = i > 0 && goes[i - 1] && shown.stood_together(units[i - 1], units[i]);
            let before = goes.get(i + 1).copied().unwrap_or(false) && shown.stood_together(units[i], units[i + 1]);
            if after || before {
                goes[i] = true;
                grew = true;
            }
        }
    }
    let kept: Vec<&str> = units.into_iter().zip(goes).filter(|(_, goes)| !goes).map(|(u, _)| u).collect();
    if kept.iter().all(|u| shown.holds(unmarked(u))) {
        return Trimmed::Nothing;
    }
    Trimmed::To(kept.join("\n\n"))
}

/// The units of a text: split at blank lines (`\r\n` line ends too), trimmed.
fn units(text: &str) -> Vec<&str> {
    let mut units = Vec::new();
    let (mut start, mut end, mut at) = (None, 0, 0);
    for line in text.split_inclusive('\n') {
        if line.trim().is_empty() {
            if let Some(s) = start.take() {
                units.push(text[s..end].trim());
            }
        } else {
            start = start.or(Some(at));
            end = at + line.len();
        }
        at += line.len();
    }
    if let Some(s) = start {
        units.push(text[s..end].trim());
    }
    units
}

/// A unit without the marks that say a passage or window starts or ends inside its text.
fn unmarked(unit: &str) -> &str {
    unit.trim_start_matches("… ").trim_end_matches(" …")
}

/// Whether `hay` holds `needle` starting and ending at word edges (`port 80` is not held by
/// `port 8080`).
fn holds_words(hay: &str, needle: &str) -> bool {
    if needle.is_empty() {
        return true;
    }
    let word = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
    hay.match_indices(needle).any(|(at, _)| {
        let before = hay[..at].chars().next_back();
        let after = hay[at + needle.len()..].chars().next();
        let cuts_a_word_before = word(before) && needle.starts_with(char::is_alphanumeric);
        let cuts_a_word_after = word(after) && needle.ends_with(char::is_alphanumeric);
        !cuts_a_word_before && !cuts_a_word_after
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(texts: &[&str]) -> Vec<String> {
        without_repeats(texts.iter().map(|t| t.to_string()).collect(), |t| t)
    }

    fn turn(i: usize) -> String {
        format!(
            "[role: user]\nQuestion {i}: which port does the zephyr{i} service listen on, and who owns it?\n[user:end]\n\n\
             [role: assistant]\nAnswer {i}: the zephyr{i} service listens on port 80{i:02}; the platform team owns it.\n[assistant:end]"
        )
    }

    /// A fork's copy of a conversation gives only its own turns; a copy with none is left out.
    #[test]
    fn a_forked_conversation_shows_its_turns_once() {
        let conversation = |n: usize| (0..n).map(turn).collect::<Vec<_>>().join("\n\n");
        let (original, fork) = (conversation(3), conversation(4));
        let out = answer(&[&fork, &original]);
        assert_eq!(out, vec![fork.clone()], "the original holds nothing the fork did not show");
        let out = answer(&[&original, &fork]);
        assert_eq!(out, vec![original, turn(3)], "the fork gives its own turn");
    }

    /// A fork's copied short questions go with the answers they stand between; its own short
    /// question stays, and so does a short turn another result showed beside text of its own
    /// (review58 #3).
    #[test]
    fn a_copys_short_turns_go_with_it() {
        let frame = |role: &str, text: &str| format!("[role: {role}]\n{text}\n[{role}:end]");
        let answer_to = |i: usize| {
            frame(
                "assistant",
                &format!("Answer {i}: the flamingo cache keeps {i}0000 entries, set in config/flamingo.toml."),
            )
        };
        let question = |i: usize| frame("user", &format!("And question {i}?"));
        let conversation = |n: usize| (0..n).flat_map(|i| [question(i), answer_to(i)]).collect::<Vec<_>>().join("\n\n");
        let (original, fork) = (conversation(3), conversation(4));
        let out = answer(&[&original, &fork]);
        assert_eq!(out, vec![original.clone(), format!("{}\n\n{}", question(3), answer_to(3))]);
        // A short turn shown before, beside text of its own: it stays.
        let yes = frame("user", "yes");
        let friday = frame("assistant", "Then the deploy goes out on Friday with the new flags.");
        let other = format!("{yes}\n\n{friday}\n\n{}", answer_to(7));
        let first = format!("{}\n\n{yes}", answer_to(7));
        assert_eq!(answer(&[&first, &other]), vec![first.clone(), format!("{yes}\n\n{friday}")]);
        // A fork's own "yes" after the last answer it copied stays, though another result showed
        // a "yes" (not after that answer) (review60 #2).
        let fork = format!("{}\n\n{yes}\n\n{friday}", conversation(3));
        let out = answer(&[&first, &original, &fork]);
        assert_eq!(out[2], format!("{yes}\n\n{friday}"), "{out:?}");
    }

    /// Only a whole unit shown word for word goes: a paragraph another holds inside it stays
    /// (`port 80` is not `port 8080`), and so do short ones and a result's other units.
    #[test]
    fn only_what_was_shown_word_for_word_goes() {
        let a = "Deploys to the staging cluster run through the release pipeline with ENV=staging-eu set.";
        let b = "Deploys to the staging cluster run through the release pipeline with ENV=staging set.";
        assert_eq!(answer(&[a, b]), vec![a, b]);
        let long = "The platform team owns the zephyr service and answers its pages within the hour, day or night.";
        assert!(long.chars().count() >= REPEATED_UNIT);
        let with = format!("yes\n\n{long}\n\nAnd the on-call rota lives in the ops wiki, under Platform.");
        assert_eq!(
            answer(&[long, &with]),
            vec![long.to_owned(), "yes\n\nAnd the on-call rota lives in the ops wiki, under Platform.".to_owned()]
        );
        let short = "Done.";
        assert_eq!(answer(&[short, short]), vec![short, short], "the same text twice is the store's to fold");
    }

    /// Paragraphs written with Windows line ends are units too (review48 #2).
    #[test]
    fn crlf_paragraphs_are_units() {
        let long = "The platform team owns the zephyr service and answers its pages within the hour, day or night.";
        let with = format!("A note from the wiki:\r\n\r\n{long}\r\n\r\nAnd the rota lives in the ops wiki.");
        assert_eq!(
            answer(&[long, &with]),
            vec![long.to_owned(), "A note from the wiki:\n\nAnd the rota lives in the ops wiki.".to_owned()]
        );
    }

    /// A passage's opening (marked `… `) goes when an earlier unit holds it word for word, and is
    /// not noted as shown itself.
    #[test]
    fn a_passage_opening_goes_only_when_held_word_for_word() {
        let first = "[role: assistant]\nThe service listens on port 8080 behind the proxy.\n[assistant:end]";
        let opening = "… listens on port 80\n\n[role: user]\nand which port does the admin console use, the same one?\n[user:end]";
        let out = answer(&[first, opening]);
        assert_eq!(out, vec![first, opening], "port 80 is not held by port 8080");
        let opening = "… on port 8080 behind the proxy.\n[assistant:end]\n\n[role: user]\nand which port does the admin console use?\n[user:end]";
        let out = answer(&[first, opening]);
        assert_eq!(out[1], "[role: user]\nand which port does the admin console use?\n[user:end]");
        // Noted only as it stands in a passage of its own: a unit the opening held is shown again.
        let whole = "[role: assistant]\nThe service listens on port 8080 behind the proxy.\n[assistant:end]";
        let out = answer(&[opening, whole]);
        assert_eq!(out, vec![opening, whole]);
    }
}
