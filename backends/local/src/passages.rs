//! Passages: what recall ranks and returns. A short memory is one passage; a long one (a session's
//! transcript) is split at its turn frames into passages of a few hundred to about a thousand
//! characters, each after the first starting with a little of the one before. And the window of a
//! text that fits a budget, around where the query's words are.

use mneme_core::text::{budget_units, budget_units_of, take_units};

use crate::fts;
use crate::thesaurus::Thesaurus;

/// A memory up to this long is one passage.
pub const MAX_PASSAGE: usize = 1000;
/// Passages are filled up to about this much before a new one starts.
const TARGET: usize = 700;
/// At most this much of a passage's end opens the next one.
const OVERLAP: usize = 120;

/// The passages of a memory's text, in order.
pub fn split(text: &str) -> Vec<String> {
    if chars(text) <= MAX_PASSAGE {
        return vec![text.to_owned()];
    }
    let mut units = Vec::new();
    for unit in frames(text) {
        cut_long(unit, &mut units);
    }
    let mut passages: Vec<String> = Vec::new();
    let mut current = String::new();
    // Where the unit before ended in `text`: units are joined by what stood between them (a
    // blank line between turn frames, the space where a long paragraph was cut, nothing where a
    // word was), so a passage is the memory's own text. Joined by blank lines, a recalled
    // passage of a one-line memory showed line breaks it never had.
    let mut last_end: Option<usize> = None;
    for unit in units {
        let start = offset_in(text, unit);
        let between = last_end.map_or("", |end| &text[end..start]);
        if !current.is_empty() && chars(&current) + chars(between) + chars(unit) > TARGET {
            let tail = overlap(&current);
            passages.push(std::mem::take(&mut current));
            current.push_str(&tail);
        }
        if !current.is_empty() {
            current.push_str(between);
        }
        current.push_str(unit);
        last_end = Some(start + unit.len());
    }
    if !current.trim().is_empty() {
        passages.push(current);
    }
    passages
}

/// Where `part`, a slice of `text`, begins in it.
fn offset_in(text: &str, part: &str) -> usize {
    let at = (part.as_ptr() as usize).wrapping_sub(text.as_ptr() as usize);
    debug_assert!(at + part.len() <= text.len(), "not a slice of the text");
    at
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

/// The turn frames of a transcript (`[role: r] … [r:end]`, joined by blank lines), else its
/// paragraphs.
fn frames(text: &str) -> Vec<&str> {
    text.split("\n\n").map(str::trim).filter(|u| !u.is_empty()).collect()
}

/// Cuts a unit longer than [`MAX_PASSAGE`] at line, sentence or word ends.
fn cut_long<'a>(unit: &'a str, out: &mut Vec<&'a str>) {
    let mut rest = unit;
    while chars(rest) > MAX_PASSAGE {
        let limit = rest.char_indices().nth(TARGET).map_or(rest.len(), |(i, _)| i);
        let head = &rest[..limit];
        // The latest line end past the head's first third, else sentence end, else word end:
        // each kind looked for on its own (a line end early in the head is no reason to cut
        // through a word).
        let at = [head.rfind('\n'), head.rfind(". ").map(|i| i + 1), head.rfind(' ')]
            .into_iter()
            .flatten()
            .find(|&i| i > limit / 3)
            .unwrap_or_else(|| mneme_core::text::shown_char_boundary(rest, limit));
        out.push(rest[..at].trim());
        rest = rest[at..].trim_start();
    }
    if !rest.trim().is_empty() {
        out.push(rest.trim());
    }
}

/// What of a passage is its own: without the opening it repeats from `previous`, the passage
/// before it in its memory (`None` for a memory's first). The repeated lines belong to the
/// passage before, which reaches this one anyway: BM25 indexes its terms as this one's context
/// column, and the cosine is smoothed with its cosine (see `vectors.rs`). So BM25's own column
/// and the embedder get this. On LoCoMo's transcripts, dense R@5 rose from 0.584 to 0.617 and
/// BM25's from 0.843 to 0.850, likely because the passage after an answer no longer looks like
/// the answer. A passage that does not open with that repetition (a store split with other
/// settings) is returned whole.
pub fn own_text<'a>(passage: &'a str, previous: Option<&str>) -> &'a str {
    let Some(previous) = previous else { return passage };
    let lead = overlap(previous);
    if lead.is_empty() {
        return passage;
    }
    // What follows the repetition is what stood there in the memory's text (blank lines in a
    // transcript, a space, or nothing where a word was cut), then this passage's first unit.
    passage.strip_prefix(lead.as_str()).map_or(passage, str::trim_start)
}

/// The end of a passage that opens the next one: its last [`OVERLAP`] characters, from a word start.
fn overlap(passage: &str) -> String {
    let n = chars(passage);
    if n <= OVERLAP {
        return String::new();
    }
    let start = passage.char_indices().nth(n - OVERLAP).map_or(0, |(i, _)| i);
    let tail = &passage[mneme_core::text::shown_char_boundary(passage, start)..];
    let tail = tail.find(char::is_whitespace).map_or(tail, |i| &tail[i..]).trim_start();
    if tail.is_empty() {
        String::new()
    } else {
        format!("… {tail}")
    }
}

/// `text` cut to cost at most `max_units` (quarter tokens, as [`budget_units`] counts them)
/// around the part that holds most of the query's words (stemmed as the index stems them) or
/// their alternatives (see [`crate::thesaurus`]: the words a passage may have been found by),
/// marked with `…` where it was cut. A text that fits is returned as it is; `None` when no
/// character of it fits (a budget smaller than its first joined emoji).
pub fn window(text: &str, query: &str, thesaurus: &Thesaurus, max_units: usize) -> Option<String> {
    let units = budget_units(text);
    if units <= max_units {
        return Some(text.to_owned());
    }
    if max_units < 8 {
        let start = take_units(text, max_units);
        return Some(start).filter(|t| !nothing_shown(&t.chars().collect::<Vec<_>>())).map(str::to_owned);
    }
    let mut wanted = fts::query_terms(query);
    wanted.extend(thesaurus.alternatives(&wanted));
    // The words of its identifiers, by which recall finds a memory too.
    for word in fts::identifier_words(query) {
        if !wanted.contains(&word) {
            wanted.push(word);
        }
    }
    // Each wanted term's number, for counting how many of them a window holds.
    let wanted: std::collections::HashMap<String, usize> = wanted.into_iter().zip(0..).collect();
    // Words (char offsets of their start and end) and which wanted term each is, if any, as the
    // index has them (see `fts::word_spans`): an ideograph or kana is a word of its own, and a
    // run of Thai a pair of letters at a time (a run of them was one word, which no query term
    // equals: the window of such text ignored the question).
    let cs: Vec<char> = text.chars().collect();
    let mut char_at = vec![0usize; text.len() + 1]; // a byte offset's char offset
    for (n, (i, c)) in text.char_indices().enumerate() {
        char_at[i..i + c.len_utf8()].fill(n);
    }
    char_at[text.len()] = cs.len();
    let words: Vec<(usize, usize, Option<usize>)> = fts::word_spans(text)
        .map(|span| {
            // A camelCase name is its whole term and its words' (see `fts::index_terms`).
            let terms = fts::index_terms(&text[span.clone()]);
            (char_at[span.start], char_at[span.end], terms.split(' ').find_map(|t| wanted.get(t).copied()))
        })
        .collect();
    // What the text up to each char offset costs: a window is measured by what it costs, not by
    // its length (by the text's average cost, a window in ideographs or emoji came out too
    // short for the English word asked for, and held none of the question).
    let mut cost_to = Vec::with_capacity(cs.len() + 1);
    cost_to.push(0usize);
    for c in &cs {
        cost_to.push(cost_to[cost_to.len() - 1] + budget_units_of(*c));
    }
    let cost_of = |range: std::ops::Range<usize>| -> usize { cost_to[range.end] - cost_to[range.start] };
    let room_units = max_units - 4; // for the two "… " marks
                                    // The window starting at a wanted word that holds the most of the wanted terms (then the
                                    // most wanted words), centred on them: counted with repeats, a common word of the question
                                    // ("我们", "the") over and over outweighed the one place that answers it.
    let mut held = vec![0usize; wanted.len()]; // how often each term is in the window
    let (mut best, mut best_score, mut distinct, mut hits, mut j) = ((0usize, 0usize), (0, 0), 0usize, 0usize, 0usize);
    for i in 0..words.len() {
        j = j.max(i); // (a word longer than the window is in none)
                      // The words that end in the window starting at word i.
        while j < words.len() && cost_of(words[i].0..words[j].1) <= room_units {
            if let Some(t) = words[j].2 {
                distinct += usize::from(held[t] == 0);
                held[t] += 1;
                hits += 1;
            }
            j += 1;
        }
        if words[i].2.is_some() && (distinct, hits) > best_score {
            let last = words[i..j].iter().rev().find(|w| w.2.is_some()).map_or(words[i].1, |w| w.1);
            (best, best_score) = ((words[i].0, last), (distinct, hits));
        }
        if let Some(t) = words[i].2.filter(|_| j > i) {
            held[t] -= 1;
            distinct -= usize::from(held[t] == 0);
            hits -= 1;
        }
    }
    // Start at a word (within 20 characters).
    let at_a_word = |from: usize| -> usize {
        match words.iter().find(|w| w.0 >= from) {
            Some(w) if from > 0 && w.0 - from < 20 => w.0,
            _ => from,
        }
    };
    // The wanted words fit (the scan counts only windows that do; with none, `best` is the
    // text's start): the window grows from them a character at a time on each side while the
    // budget lasts, so it is as long as the budget whatever the text around costs.
    let (mut from, mut to) = best;
    let mut cost = cost_of(from..to);
    let grow_right = |to: &mut usize, cost: &mut usize| -> bool {
        let fits = *to < cs.len() && *cost + budget_units_of(cs[*to]) <= room_units;
        if fits {
            *cost += budget_units_of(cs[*to]);
            *to += 1;
        }
        fits
    };
    let (mut left, mut right) = (true, true);
    while left || right {
        right = right && grow_right(&mut to, &mut cost);
        left = left && from > 0 && cost + budget_units_of(cs[from - 1]) <= room_units;
        if left {
            from -= 1;
            cost += budget_units_of(cs[from]);
        }
    }
    let start = at_a_word(from).min(best.0);
    cost -= cost_of(from..start);
    while grow_right(&mut to, &mut cost) {}
    let mut from = start;
    // End after a word, not inside one (a word of 20 characters or more is cut), and never
    // before the last word asked for: moved back to a space before it, the window held none of
    // the question (a Latin word glued to ideographs, a Thai tone mark taken for a gap).
    // (An ideograph is a word of its own: between two, the cut is between words; a mark is part
    // of its word.)
    let of_a_word = |c: char| c.is_alphanumeric() || fts::is_mark(c);
    let in_a_word = |a: char, b: char| of_a_word(a) && of_a_word(b) && !fts::is_cjk(a) && !fts::is_cjk(b);
    if to < cs.len() && to > from && in_a_word(cs[to - 1], cs[to]) {
        let lowest = to.saturating_sub(20).max(from + 1).max(best.1);
        if let Some(gap) = (lowest..to).rev().find(|&i| !in_a_word(cs[i - 1], cs[i])) {
            to = gap;
        }
    }
    while to < cs.len() && to > from + 1 && cs[to - 1].is_whitespace() {
        to -= 1;
    }
    // Neither end splits a character as shown (a joined emoji, a letter and its accent, a word
    // and the joiner after it). The end goes on to the character's end while the budget lasts,
    // taking room from the start before the words asked for: come back to its start, it cut the
    // last word asked for (کتاب of کتاب‌ها, whose joiner is part of its last letter). Else it
    // comes back.
    let shown_starts = mneme_core::text::shown_char_starts(text);
    // (A zero-width non-joiner only keeps the letter before it from joining the one after: a cut
    // before it shows that letter as it ends a word.)
    let splits = |at: usize| !shown_starts[at] && cs.get(at) != Some(&'\u{200c}');
    while from < to && splits(from) {
        from += 1;
    }
    let (first, widest) = (from, to);
    let mut cost = cost_of(from..to);
    while to < cs.len() && splits(to) {
        let unit = budget_units_of(cs[to]);
        if cost + unit <= room_units {
            cost += unit;
            to += 1;
        } else if from < best.0 {
            cost -= budget_units_of(cs[from]);
            from += 1;
        } else {
            break;
        }
    }
    while from < to && splits(from) {
        from += 1;
    }
    if to < cs.len() && splits(to) {
        (from, to) = (first, widest);
        while to > from && splits(to) {
            to -= 1;
        }
    }
    // Nothing of the text fits between the marks (a joined emoji longer than the budget), or
    // only a later passage's own opening mark.
    if nothing_shown(&cs[from..to]) {
        return None;
    }
    let mut out = String::new();
    if from > 0 {
        out.push_str("… ");
    }
    out.extend(&cs[from..to]);
    if to < cs.len() {
        out.push_str(" …");
    }
    Some(out)
}

/// Whether `shown` holds nothing of a text: spaces, and the `…` a passage after a memory's
/// first opens with.
fn nothing_shown(shown: &[char]) -> bool {
    shown.iter().all(|c| c.is_whitespace() || *c == '…')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The window holds the most of the question's terms, not the most repeats of one common
    /// word, and holds its last wanted word whole (centred, its end was cut off).
    #[test]
    fn the_window_holds_the_most_of_the_questions_terms_whole() {
        let text = format!("{}{}", "今天天气很好我们去公园散步。".repeat(70), "我们的数据库用PostgreSQL。");
        let q = "我们的数据库是什么? PostgreSQL?";
        for max in [100, 372, 1000] {
            let w = window(&text, q, &Thesaurus::builtin(), max).unwrap();
            assert!(w.contains("我们的数据库用PostgreSQL") && budget_units(&w) <= max, "{max}: {w}");
        }
        let text =
            format!("{} the deploy uses cargo-dist {}", "the the the deploy the the ".repeat(40), "x ".repeat(400));
        let w = window(&text, "how does the deploy use cargo-dist", &Thesaurus::builtin(), 120).unwrap();
        assert!(w.contains("cargo-dist"), "{w}");
    }

    /// No piece of `pieces` starts or ends inside a shown character: each of its characters
    /// beyond ASCII is one of `shown` whole.
    fn whole(pieces: &[&str], shown: &[&str]) {
        use unicode_segmentation::UnicodeSegmentation;
        for p in pieces {
            let p = p.trim_start_matches("… ").trim_end_matches(" …");
            assert!(p.graphemes(true).all(|g| g.is_ascii() || shown.contains(&g)), "{p:?}");
        }
    }

    /// A long paragraph after a short first line (a transcript's turn frame, a heading) is cut
    /// at word ends: the line end early in it made every cut fall through a word, whose halves
    /// BM25 then indexed as two words.
    #[test]
    fn a_long_paragraph_after_a_short_line_is_cut_between_words() {
        for opening in ["[role: user]\n", "Deploys. ", ""] {
            let text = format!("{opening}{}", "deployment ".repeat(200));
            let parts = split(&text);
            assert!(parts.len() > 1);
            for p in &parts {
                let own = p.trim_start_matches("… ");
                let words = own.split_whitespace().filter(|w| w.trim_end_matches('.').starts_with("deploy"));
                assert!(words.clone().all(|w| w.trim_end_matches('.') == "deployment"), "{opening:?}: {own:?}");
            }
        }
    }

    #[test]
    fn passages_and_windows_keep_joined_emoji_and_flags_whole() {
        let family = "👨\u{200D}👩\u{200D}👧\u{200D}👦";
        let long = family.repeat(2_000);
        let parts = split(&long);
        assert!(parts.len() > 1);
        whole(&parts.iter().map(String::as_str).collect::<Vec<_>>(), &[family]);
        let thesaurus = Thesaurus::builtin();
        for (unit, shown) in [(family, &[family][..]), ("🇺🇸🇫🇷", &["🇺🇸", "🇫🇷"][..])] {
            let text = format!("deploy {} deploy", unit.repeat(50));
            for max in 1..60 {
                whole(&[window(&text, "deploy", &thesaurus, max).unwrap_or_default().as_str()], shown);
            }
        }
    }

    #[test]
    fn a_window_of_cjk_text_counts_a_character_as_a_token() {
        let text =
            format!("{} otter cargo-dist 部署 {}", "我们每周五部署服务。".repeat(40), "然后检查日志。".repeat(40));
        let thesaurus = Thesaurus::builtin();
        for max in [8, 9, 40, 41, 100, 400] {
            let w = window(&text, "otter cargo-dist", &thesaurus, max).unwrap();
            assert!(budget_units(&w) <= max, "{max}: {} units: {w}", budget_units(&w));
            if max >= 100 {
                assert!(w.contains("otter cargo-dist"), "{max}: {w}");
            }
        }
        // A question in Chinese: the window holds the fact, not the text's start.
        let text =
            format!("{}我们的数据库用PostgreSQL。{}", "今天天气很好。".repeat(100), "今天天气很好。".repeat(100));
        for query in ["PostgreSQL", "数据库"] {
            let w = window(&text, query, &thesaurus, 200).unwrap();
            assert!(w.contains("数据库用PostgreSQL"), "{query}: {w}");
        }
        // Found by an identifier's words or by a word without its accents, the window shows
        // them: it showed filler (review121 #2).
        let filler = "The quick brown fox jumps over the lazy dog near the river bank today. ";
        for (fact, query, shown) in [
            ("the get_user_by_email helper is slow", "getUserByEmail", "get_user_by_email"),
            ("a 429 carries retry_after in seconds", "retryAfter", "retry_after"),
            ("the office is in Zürich now", "Zurich", "Zürich"),
            ("André reviewed the parser", "andre", "André"),
        ] {
            let text = format!("{} {fact}. {}", filler.repeat(12), filler.repeat(2));
            let w = window(&text, query, &thesaurus, 60).unwrap();
            assert!(w.contains(shown), "{query}: {w}");
        }
        // And in Thai, written without spaces: the window holds the sentence with the word asked for.
        let fact = "เราใช้ระบบคิวแบบทนทาน";
        let text = format!("{}{fact}{}", "วันนี้อากาศดีมาก".repeat(100), "วันนี้อากาศดีมาก".repeat(100));
        let w = window(&text, "ระบบคิว", &thesaurus, 200).unwrap();
        assert!(w.contains(fact), "{w}");
    }

    fn transcript(turns: usize) -> String {
        (0..turns)
            .map(|i| {
                format!(
                    "[role: user]\nquestion {i} about the otter habitat {}\n[user:end]\n\n[role: assistant]\nanswer {i} {}\n[assistant:end]",
                    "and its rivers ".repeat(8),
                    "with plenty of detail ".repeat(10)
                )
            })
            .collect::<Vec<_>>()
            .join("\n\n")
    }

    #[test]
    fn short_texts_are_one_passage_and_long_ones_split_at_frames() {
        assert_eq!(split("tabs, not spaces"), vec!["tabs, not spaces".to_owned()]);
        let t = transcript(20);
        let passages = split(&t);
        assert!(passages.len() > 5, "{}", passages.len());
        for p in &passages {
            let n = chars(p);
            assert!((100..=MAX_PASSAGE + OVERLAP + 4).contains(&n), "{n}: {p}");
        }
        // Nothing is lost, and frames are not cut.
        for i in 0..20 {
            assert!(passages.iter().any(|p| p.contains(&format!("question {i} about"))), "{i}");
        }
        assert!(passages[1].starts_with("… "), "a little of the one before: {}", passages[1]);
        // What is each passage's own: the opening repetition dropped, and nothing else.
        assert_eq!(own_text(&passages[0], None), passages[0]);
        let own: Vec<&str> = (1..passages.len()).map(|k| own_text(&passages[k], Some(&passages[k - 1]))).collect();
        for (k, o) in own.iter().enumerate() {
            assert!(!o.starts_with("… ") && passages[k + 1].ends_with(o), "{k}: {o}");
            assert!(o.starts_with("[role: "), "{k} starts at a frame: {o}");
        }
        // The own texts together are the transcript.
        assert_eq!(std::iter::once(passages[0].as_str()).chain(own).collect::<Vec<_>>().join("\n\n"), t);
        // A text of its own that happens to open with an ellipsis, or a passage split otherwise.
        assert_eq!(own_text("… and so on\n\nmore", None), "… and so on\n\nmore");
        let other = "a passage this one does not follow, long enough to open the next one ".repeat(3);
        assert_eq!(own_text(&passages[2], Some(&other)), passages[2]);
        // One enormous line is cut at words.
        let long = "word ".repeat(1000);
        let parts = split(&long);
        assert!(parts.len() >= 5 && parts.iter().all(|p| chars(p) <= MAX_PASSAGE + OVERLAP + 4));
    }

    #[test]
    fn the_window_holds_the_query_words() {
        let text = format!("{} the release is built with cargo-dist {}", "filler ".repeat(300), "padding ".repeat(300));
        let w = window(&text, "how is the release built?", &Thesaurus::builtin(), 200).unwrap();
        assert!(chars(&w) <= 200, "{}", chars(&w));
        assert!(w.contains("release is built with cargo-dist"), "{w}");
        assert!(w.starts_with("… ") && w.ends_with(" …"), "{w}");
        assert_eq!(window("short", "x", &Thesaurus::builtin(), 200).as_deref(), Some("short"));
        // Found through the thesaurus, cut around the word it was found by.
        let text = format!("{} we deploy with cargo-dist {}", "filler ".repeat(300), "padding ".repeat(300));
        let w = window(&text, "how do we ship a release?", &Thesaurus::builtin(), 200).unwrap();
        assert!(w.contains("we deploy with cargo-dist"), "{w}");
    }

    /// Where the question's English stands in text that costs more a character (emoji,
    /// ideographs), the window still fills its budget: sized by the text's average cost it came
    /// out a quarter as long and left out the word asked for.
    #[test]
    fn a_window_in_costly_text_fills_its_budget() {
        for sea in ["✅", "我们"] {
            let text = format!("{} the launch code word is zqmxvt today {}", sea.repeat(400), sea.repeat(400));
            let w = window(&text, "launch code word zqmxvt", &Thesaurus::builtin(), 100).unwrap();
            assert!(budget_units(&w) <= 100, "{}", budget_units(&w));
            assert!(w.contains("the launch code word is zqmxvt today"), "{w}");
            assert!(budget_units(&w) >= 90, "the window uses its budget: {} of 100 in {w:?}", budget_units(&w));
        }
    }

    /// A window is measured by what it costs: by the text's average cost, one in ideographs or
    /// emoji was too short for the English word asked for, held none of the question, and came
    /// back as the text's start, or as nothing but its marks (review51 #4).
    #[test]
    fn a_window_in_costly_text_holds_a_long_word_asked_for() {
        let thesaurus = Thesaurus::builtin();
        let text = format!("{} PostgreSQLReplication {}", "数据库".repeat(300), "数据库".repeat(300));
        for max in 30..=100 {
            let w = window(&text, "PostgreSQLReplication", &thesaurus, max).unwrap();
            assert!(w.contains("PostgreSQLReplication") && budget_units(&w) <= max, "{max}: {w}");
        }
        let family = "👨\u{200D}👩\u{200D}👧";
        let text = format!("{} cargo {}", family.repeat(200), family.repeat(200));
        for max in 9..=40 {
            let w = window(&text, "cargo", &thesaurus, max).unwrap();
            assert!(w.contains("cargo") && budget_units(&w) <= max, "{max}: {w:?}");
        }
        // Thai without spaces, and a Latin word glued to ideographs: the end after a word never
        // comes back before the word asked for (review54 #2).
        let text = format!("{}เราใช้ระบบคิวแบบทนทาน{}", "วันนี้อากาศดีมาก".repeat(60), "วันนี้อากาศดีมาก".repeat(60));
        for max in 18..=80 {
            let w = window(&text, "ระบบคิว", &thesaurus, max).unwrap();
            assert!(w.contains("ระบบคิว") && budget_units(&w) <= max, "{max}: {w}");
        }
        let text = format!("{} zqmxvt数据abcdefghij{}", "数据库".repeat(100), "数据库".repeat(100));
        for max in 10..=80 {
            let w = window(&text, "zqmxvt", &thesaurus, max).unwrap();
            assert!(w.contains("zqmxvt") && budget_units(&w) <= max, "{max}: {w}");
        }
        // A word asked for whose last letter is joined to what follows (Persian's zero-width
        // non-joiner), or carries marks: the end goes on to the character's end (review55 #2).
        let text = format!("{} کتاب\u{200c}ها {}", "数据库".repeat(100), "数据库".repeat(100));
        for max in 12..=60 {
            let w = window(&text, "کتاب", &thesaurus, max).unwrap();
            assert!(w.contains("کتاب") && budget_units(&w) <= max, "{max}: {w}");
        }
        let text = format!("{}서버\u{e49}\u{e49}\u{e49}\u{e49}{}", "数据库".repeat(100), "数据库".repeat(100));
        for max in 20..=60 {
            let w = window(&text, "서버", &thesaurus, max).unwrap();
            assert!(w.contains("서버\u{e49}\u{e49}\u{e49}\u{e49}") && budget_units(&w) <= max, "{max}: {w}");
        }
        // However many marks its last letter carries (review56 #1: past 32, the end stopped
        // short of the character's end, or came back into it).
        let marks = "\u{e49}".repeat(60);
        let text = format!("{}서버{marks}{}", "数据库".repeat(60), "数据库".repeat(60));
        for max in 132..=200 {
            let w = window(&text, "서버", &thesaurus, max).unwrap();
            assert!(w.contains(&format!("서버{marks}")) && budget_units(&w) <= max, "{max}: {w}");
        }
        let w = window(&text, "서버", &thesaurus, 100).unwrap_or_default();
        assert!(!w.contains("버") || w.contains(&format!("버{marks}")), "no character split: {w}");
        // A later passage opens with "… ": a window of that alone holds nothing (review54 #1).
        let text = format!("… {}", "数据库".repeat(300));
        for max in 1..=3 {
            assert_eq!(window(&text, "PostgreSQL", &thesaurus, max), None, "{max}");
        }
        // A budget smaller than the text's first joined emoji: nothing of it fits.
        let text = family.repeat(200);
        for max in 1..=12 {
            assert_eq!(window(&text, "cargo", &thesaurus, max), None, "{max}");
        }
    }

    #[test]
    fn a_window_ends_after_a_word() {
        let text = format!("{}the release is built with cargo-dist {}", "alpha ".repeat(300), "betamax ".repeat(300));
        for budget in 60..140 {
            let w = window(&text, "how is the release built?", &Thesaurus::builtin(), budget).unwrap();
            assert!(chars(&w) <= budget, "{budget}: {}", chars(&w));
            let body = w.trim_start_matches("… ").trim_end_matches(" …");
            assert!(text.contains(body), "{budget}: {w:?}");
            let last = body.split(' ').next_back().unwrap();
            assert!(
                ["alpha", "betamax", "the", "release", "is", "built", "with", "cargo-dist"].contains(&last),
                "{budget}: {w:?}"
            );
            let first = body.split(' ').next().unwrap();
            assert!(
                ["alpha", "betamax", "the", "release", "is", "built", "with", "cargo-dist"].contains(&first),
                "{budget}: {w:?}"
            );
        }
    }

    /// A memory of one long line is split where it was cut, and its passages are its own text:
    /// no line breaks it never had between the pieces.
    #[test]
    fn a_one_line_memory_is_split_into_its_own_text() {
        let code = format!("{} needlefn {}", "function(a){return a+1};".repeat(250), "x".repeat(3000));
        let prose = "we deploy the build with cargo-dist on fridays. ".repeat(60);
        for text in [code, prose] {
            let passages = split(&text);
            assert!(passages.len() > 2, "{}", passages.len());
            let mut own = String::new();
            for (k, p) in passages.iter().enumerate() {
                assert!(!p.contains('\n'), "{k}: {p}");
                let mine = own_text(p, k.checked_sub(1).map(|j| passages[j].as_str()));
                assert!(text.contains(mine), "{k}: {mine}");
                own.push_str(mine);
            }
            let squeezed = |t: &str| t.split_whitespace().collect::<String>();
            assert_eq!(squeezed(&own), squeezed(&text), "nothing lost, nothing twice");
        }
    }
}
