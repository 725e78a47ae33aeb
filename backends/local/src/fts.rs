//! Full-text terms: one normalisation for the index and for queries.
//!
//! Text is split into runs of letters and digits, lowercased and stemmed (Snowball English) in
//! Rust; the FTS5 index stores those terms (SQLite's tokenizer only folds diacritics). Because
//! queries go through the same function, a query word can be looked up in the index's vocabulary to
//! learn how many memories hold it. Recall uses that to rank on the rarest words only: common words
//! barely move BM25 but make it score thousands of rows.
//!
//! A query can never be an FTS5 syntax error: every term is quoted, and `AND`, `*`, `-`, quotes and
//! parentheses in user text are just separators.

use std::collections::HashMap;
use std::sync::OnceLock;

use rust_stemmers::{Algorithm, Stemmer};

/// At most this many terms are looked up per query (a long prompt's first 16 used to be all of
/// it, so a question after a paragraph of context found nothing by its words).
const MAX_TERMS: usize = 32;
/// ... chosen from at most this many, the longest, by which the index holds (see [`known_first`]).
const LOOKUP_TERMS: usize = 128;
/// Terms are added, rarest first, while the memories they match stay under this many.
const POSTINGS_BUDGET: u64 = 4000;
/// ... and at most this many terms are used.
const MAX_QUERY_TERMS: usize = 8;
/// Beyond them, at most this many of their alternatives (see [`crate::thesaurus`]) ...
const MAX_ALTERNATIVES: usize = 8;
/// ... while the memories those match stay under this many.
const ALTERNATIVE_POSTINGS_BUDGET: u64 = POSTINGS_BUDGET / 4;

const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "can", "could", "did", "do", "does", "for", "from", "had",
    "has", "have", "how", "i", "if", "in", "is", "it", "its", "me", "my", "of", "on", "or", "our", "should", "so",
    "that", "the", "their", "them", "then", "there", "these", "they", "this", "to", "us", "was", "we", "were", "what",
    "when", "where", "which", "who", "why", "will", "with", "would", "you", "your",
];

fn stemmer() -> &'static Stemmer {
    static STEMMER: OnceLock<Stemmer> = OnceLock::new();
    STEMMER.get_or_init(|| Stemmer::create(Algorithm::English))
}

/// The words of a text, as they are written: runs of letters and digits, with the marks that
/// follow them (Thai's and Hindi's vowel signs are part of a word; they were separators, so a
/// Hindi word was found only as its consonants). In Chinese and Japanese, which write no
/// spaces, each ideograph or kana is a word of its own (and a Latin word written against one,
/// "RedisではなくMemcached", is a word apart): a run of them was one term, so no word in it could
/// be found. Thai, Lao, Khmer and Myanmar write no spaces either, and their words are several
/// letters long: a run of them gives each pair of neighbouring letters (with their marks) as a
/// word, so a word asked for is found wherever it stands in the run.
fn raw_words(text: &str) -> impl Iterator<Item = &str> + '_ {
    text.split(|c: char| !(c.is_alphanumeric() || is_mark(c)))
        .map(|w| w.trim_start_matches(is_mark))
        .filter(|w| !w.is_empty())
        .flat_map(|w| Pieces { rest: w, paired: false })
}

/// The byte ranges of a text's words (see [`raw_words`]), in order; the pairs of a run in a
/// script without spaces overlap.
pub(crate) fn word_spans(text: &str) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    raw_words(text).map(move |w| {
        let start = w.as_ptr() as usize - text.as_ptr() as usize;
        start..start + w.len()
    })
}

/// A word cut at each ideograph or kana, and into pairs of letters in a run of a script
/// without spaces (see [`raw_words`]).
struct Pieces<'a> {
    rest: &'a str,
    /// The letter at the start of `rest` ended a pair already given.
    paired: bool,
}

impl<'a> Iterator for Pieces<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        loop {
            let first = self.rest.chars().next()?;
            let end = if self.rest.is_ascii() {
                self.rest.len()
            } else if is_cjk(first) {
                first.len_utf8()
            } else if is_unspaced(first) {
                let one = letter_end(self.rest, 0);
                let next_is_unspaced = self.rest[one..].chars().next().is_some_and(is_unspaced);
                if next_is_unspaced {
                    // A pair; the next starts at its second letter.
                    let pair = &self.rest[..letter_end(self.rest, one)];
                    self.rest = &self.rest[one..];
                    self.paired = true;
                    return Some(pair);
                }
                let (letter, paired) = (&self.rest[..one], std::mem::take(&mut self.paired));
                self.rest = &self.rest[one..];
                if paired {
                    continue; // the last letter of a run, given with the one before it
                }
                return Some(letter);
            } else {
                self.rest.find(|c| is_cjk(c) || is_unspaced(c)).unwrap_or(self.rest.len())
            };
            self.paired = false;
            let (piece, rest) = self.rest.split_at(end);
            self.rest = rest;
            return Some(piece);
        }
    }
}

/// Where the letter starting at `start` ends, with the marks that follow it.
fn letter_end(text: &str, start: usize) -> usize {
    let mut chars = text[start..].char_indices();
    chars.next();
    chars.find(|(_, c)| !is_mark(*c)).map_or(text.len(), |(i, _)| start + i)
}

/// A combining mark (a vowel sign, an accent written apart).
pub(crate) fn is_mark(c: char) -> bool {
    !c.is_ascii() && unicode_normalization::char::is_combining_mark(c)
}

/// Han ideographs and kana: scripts written without spaces between words. (Hangul is written
/// with them: a Korean word stays whole.)
pub(crate) fn is_cjk(c: char) -> bool {
    matches!(c as u32, 0x3040..=0x30FF | 0x31F0..=0x31FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000..=0x3134F)
}

/// Thai, Lao, Myanmar and Khmer: scripts written without spaces, whose words are several letters.
pub(crate) fn is_unspaced(c: char) -> bool {
    matches!(c as u32, 0x0E00..=0x0EFF | 0x1000..=0x109F | 0x1780..=0x17FF | 0x19E0..=0x19FF | 0xA9E0..=0xA9FF | 0xAA60..=0xAA7F)
}

/// Whether a text is split into other terms than by runs of letters and digits alone, as the
/// index first had it (it is made again for such passages): ideographs and kana, full-width
/// forms, marks, and scripts without spaces.
pub fn split_differs(text: &str) -> bool {
    (!text.is_ascii()
        && text.chars().any(|c| is_cjk(c) || full_width(c).is_some() || is_mark(c) || is_unspaced(c) || folds(c)))
        || has_camel_case(text)
}

/// A Latin letter with an accent written with it (`é`, `ü`, `ñ`): its term holds its letter
/// alone, folded before the word is stemmed. The index folds accents too, but after: Snowball
/// stems `andre` (to `andr`) and not `andré`, so `André` and `Andre`, `résumé` and `resume` never
/// met (review121 #3), while `Malmö` and `Malmo`, left whole by the stemmer, did.
fn folds(c: char) -> bool {
    is_latin_letter_beyond_ascii(c) && {
        let mut parts = 0;
        unicode_normalization::char::decompose_canonical(c, |_| parts += 1);
        parts > 1
    }
}

/// Latin-1 Supplement, Latin Extended-A and -B, Latin Extended Additional: the letters whose
/// accents [`lowered`] folds.
fn is_latin_letter_beyond_ascii(c: char) -> bool {
    matches!(c as u32, 0xC0..=0x24F | 0x1E00..=0x1EFF)
}

/// Whether a text may hold a camelCase or PascalCase name (see [`camel_parts`]): a capital
/// after a lowercase letter, or two capitals before a lowercase one. More than the names split
/// (indexing a passage again gives the same terms): so also every passage an earlier rule for
/// them split.
fn has_camel_case(text: &str) -> bool {
    text.as_bytes().windows(3).any(|w| {
        (w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase())
            || (w[1].is_ascii_lowercase() && w[2].is_ascii_uppercase())
            || (w[0].is_ascii_uppercase() && w[1].is_ascii_uppercase() && w[2].is_ascii_lowercase())
    })
}

/// The ASCII letter or digit a full-width form stands for (what an input method types: `ＱＳ`).
fn full_width(c: char) -> Option<char> {
    let folded = char::from_u32((c as u32).checked_sub(0xFEE0)?)?;
    (matches!(c as u32, 0xFF01..=0xFF5E) && folded.is_ascii_alphanumeric()).then_some(folded)
}

/// A word lowercased, full-width forms folded to ASCII, accented Latin letters to their letter
/// (see [`folds`]), its marks as the index keeps them (see [`indexed_mark`]).
fn lowered(word: &str) -> String {
    if word.is_ascii() {
        return word.to_ascii_lowercase();
    }
    use unicode_normalization::UnicodeNormalization;
    let mut out = String::with_capacity(word.len());
    let mut push = |c: char| match is_mark(c) {
        true => out.extend(indexed_mark(c)),
        false => out.push(c),
    };
    // Composed first: a letter typed apart from its accent (as macOS names files) is the letter
    // typed with it. Dropped apart, a Cyrillic `й` typed so became `и`, another letter, and never
    // met the `й` typed whole (review123 #8).
    for c in word.nfc().map(|c| full_width(c).unwrap_or(c)).flat_map(char::to_lowercase) {
        // (A letter with no accent decomposes into itself: no need to ask `folds` first.)
        if is_latin_letter_beyond_ascii(c) {
            unicode_normalization::char::decompose_canonical(c, &mut push);
        } else {
            push(c);
        }
    }
    out
}

/// A mark as a term holds it. Accents written apart (a `café` typed as `e` and U+0301) and the
/// optional vowel points of Arabic and Hebrew are dropped, as the index folds accents away, and
/// so are variation selectors.
/// Other marks are letters of their word (Thai's and Hindi's vowel signs), but FTS5's tokenizer
/// takes a mark for a separator (it keeps letters, digits and private-use characters), so the
/// term holds each as a private-use character of its own: `U+F0000` plus its code point (marks
/// are below `U+10000`, but for a few, which go to `U+100000` on).
fn indexed_mark(c: char) -> Option<char> {
    let code = c as u32;
    let optional = matches!(code, 0x0300..=0x036F | 0x1AB0..=0x1AFF | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF | 0xFE20..=0xFE2F)
        || matches!(code, 0xFE00..=0xFE0F | 0xE0100..=0xE01EF) // variation selectors
        || matches!(code, 0x0591..=0x05C7 | 0x0610..=0x061A | 0x064B..=0x065F | 0x0670 | 0x06D6..=0x06ED);
    if optional {
        return None;
    }
    match code {
        0..=0xFFFF => char::from_u32(0xF0000 + code),
        _ => char::from_u32(0x100000 + (code & 0xFFFF)),
    }
}

fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    raw_words(text).map(lowered)
}

/// Stems remembered per thread, at most this many (then forgotten all at once): the store's
/// writer stems every passage it indexes and the passage before it, and Snowball costs a few
/// thousand instructions a word where a lookup costs a hundred; words repeat (Zipf), so a few
/// thousand cover most of them.
const STEM_CACHE: usize = 4096;

thread_local! {
    static STEMS: std::cell::RefCell<HashMap<Box<str>, Box<str>>> = std::cell::RefCell::new(HashMap::new());
}

/// The indexed form of a text: its stemmed terms separated by spaces. A camelCase name, or a
/// PascalCase one of three words or more, is indexed whole and then as its words, side by side
/// (`retryAfter` → `retryaft retri after`): asked for as `retry_after`, "retry after" or
/// `retry`, it was not found (review71 #2).
pub fn index_terms(text: &str) -> String {
    STEMS.with_borrow_mut(|stems| {
        let mut out = String::with_capacity(text.len());
        let mut ascii = String::new();
        let mut push_stem = |out: &mut String, lower: &str| {
            if !out.is_empty() {
                out.push(' ');
            }
            match stems.get(lower) {
                Some(stem) => out.push_str(stem),
                None => {
                    let stem = stemmer().stem(lower);
                    out.push_str(&stem);
                    if stems.len() >= STEM_CACHE {
                        stems.clear();
                    }
                    stems.insert(lower.into(), stem.into());
                }
            }
        };
        for word in raw_words(text) {
            // The same lowercasing as `words`; ASCII without an allocation.
            let owned;
            let lower: &str = if word.is_ascii() {
                ascii.clear();
                ascii.push_str(word);
                ascii.make_ascii_lowercase();
                &ascii
            } else {
                owned = lowered(word);
                &owned
            };
            push_stem(&mut out, lower);
            if let Some(parts) = camel_parts(word) {
                for part in parts {
                    push_stem(&mut out, &part.to_ascii_lowercase());
                }
            }
        }
        out
    })
}

/// The words of an ASCII camelCase name or PascalCase one of three words or more
/// (`fetchUserProfile` → fetch, User, Profile; `HTTPServerError` → HTTP, Server, Error), `None`
/// for any other word. A case change that would
/// leave a piece of one letter is no boundary (`iPhone`, `IPv6`, `getX` stay whole), nor is a
/// digit.
pub(crate) fn camel_parts(word: &str) -> Option<Vec<&str>> {
    let bytes = word.as_bytes();
    if bytes.len() < 4 || !word.is_ascii() {
        return None;
    }
    let mut parts = Vec::new();
    let mut start = 0;
    for i in 1..bytes.len() {
        let (before, here) = (bytes[i - 1], bytes[i]);
        let lower_to_upper = before.is_ascii_lowercase() && here.is_ascii_uppercase();
        // The last capital of an acronym begins the next word: HTTP|Server.
        let acronym_end = before.is_ascii_uppercase()
            && here.is_ascii_uppercase()
            && bytes.get(i + 1).is_some_and(u8::is_ascii_lowercase);
        if (lower_to_upper || acronym_end) && i - start >= 2 && bytes.len() - i >= 2 {
            parts.push(&word[start..i]);
            start = i;
        }
    }
    if parts.is_empty() {
        return None;
    }
    parts.push(&word[start..]);
    // A product's name of two words (ClickHouse, TypeScript, GitHub) is one word to its notes:
    // split, "type" and "house" found every note naming them. A name beginning in lowercase
    // (`fetchUser`) or of three words or more (`ProfileUnavailableError`) is code's.
    let code = bytes[0].is_ascii_lowercase() || parts.len() >= 3;
    code.then_some(parts)
}

/// Whether a query holds a word that is not a stopword: one of only "what is it" or "the a of"
/// asks about nothing, and recall answers it with nothing (it used to bring up most of a bank:
/// the stopwords matched everywhere, and the vectors of such a question resemble any short note).
pub fn asks_about_something(text: &str) -> bool {
    words(text).any(|w| !STOPWORDS.contains(&w.as_str()) && !FUNCTION_WORDS.contains(&w.as_str()))
}

/// Words that ask about nothing either, beyond the ranking's [`STOPWORDS`] (which stay as they
/// are: they were measured), and the pieces contractions leave ("isn't" → "isn", "t").
const FUNCTION_WORDS: &[&str] = &[
    "about", "all", "also", "am", "any", "been", "being", "both", "d", "didn", "doesn", "don", "each", "hello", "here",
    "hey", "hi", "isn", "just", "ll", "m", "more", "most", "no", "nor", "not", "now", "ok", "okay", "only", "other",
    "please", "re", "s", "same", "some", "such", "t", "than", "thanks", "those", "too", "ve", "very", "wasn", "yeah",
    "yes",
];

/// The distinct stemmed terms of a query, stopwords dropped unless nothing else is left. Past
/// [`MAX_TERMS`] the longest are kept, in the query's order, wherever they stand in it: a long
/// word is usually a rare one, and the words that matter are not always the first.
pub fn query_terms(text: &str) -> Vec<String> {
    longest_in_order(distinct_terms(text), MAX_TERMS)
}

/// [`query_terms`] up to [`LOOKUP_TERMS`], for [`known_first`] to choose from once the index
/// has said which it holds.
pub fn query_terms_to_look_up(text: &str) -> Vec<String> {
    longest_in_order(distinct_terms(text), LOOKUP_TERMS)
}

/// At most [`MAX_TERMS`] of looked-up terms, in the query's order: the longest the index holds
/// (or may: a `None` frequency), then, if room is left, the longest it does not. A pasted stack
/// trace is full of long identifiers no memory holds; kept for their length, they crowded the
/// question's own words out, and recall found nothing.
pub fn known_first(terms: Vec<(String, Option<u64>)>) -> Vec<(String, Option<u64>)> {
    if terms.len() <= MAX_TERMS {
        return terms;
    }
    let mut order: Vec<usize> = (0..terms.len()).collect();
    order.sort_by_key(|&i| (terms[i].1 == Some(0), std::cmp::Reverse(terms[i].0.chars().count())));
    let mut keep = vec![false; terms.len()];
    for &i in &order[..MAX_TERMS] {
        keep[i] = true;
    }
    let mut kept = keep.iter();
    terms.into_iter().filter(|_| *kept.next().unwrap_or(&false)).collect()
}

/// The distinct stemmed terms of a query, stopwords dropped unless nothing else is left.
fn distinct_terms(text: &str) -> Vec<String> {
    let text = without_contractions(text);
    let all: Vec<String> = words(&text).collect();
    let content: Vec<&String> = all.iter().filter(|w| !STOPWORDS.contains(&w.as_str())).collect();
    let chosen: Vec<&String> = if content.is_empty() { all.iter().collect() } else { content };
    let mut terms: Vec<String> = Vec::new();
    // A set beside the list: a long query's distinct words made a scan of the list quadratic.
    let mut seen = std::collections::HashSet::new();
    for w in chosen {
        let t = stemmer().stem(w).into_owned();
        if seen.insert(t.clone()) {
            terms.push(t);
        }
    }
    terms
}

/// A question with its contractions undone as far as ranking needs: "I'm", "don't", "we'll",
/// "it's" left one- and two-letter pieces (`m`, `t`, `ll`, `s`) that are rare in notes (`m=19456,
/// t=2`), so they were ranked on as the question's rarest words and brought such a note first
/// (review71 #6). A suffix after an apostrophe (`'m`, `'s`, `'re`, `'ve`, `'ll`, `'d`) is dropped,
/// and `n't` with it goes (`don't` → `do`, `isn't` → `is`; `can't`, `won't` → `can`, `will`).
/// Only the question's: notes are indexed as written.
fn without_contractions(text: &str) -> std::borrow::Cow<'_, str> {
    const SUFFIXES: [&str; 6] = ["m", "s", "re", "ve", "ll", "d"];
    let apostrophe = |c: char| matches!(c, '\'' | '\u{2019}' | '\u{02BC}');
    if !text.contains(apostrophe) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(apostrophe) {
        let (before, after) = rest.split_at(at);
        let quote = after.chars().next().expect("found");
        let after = &after[quote.len_utf8()..];
        let suffix_len = after.find(|c: char| !c.is_alphanumeric()).unwrap_or(after.len());
        let suffix = after[..suffix_len].to_ascii_lowercase();
        let word_start = before
            .rfind(|c: char| !c.is_alphanumeric())
            .map_or(0, |i| i + before[i..].chars().next().map_or(1, char::len_utf8));
        let word = &before[word_start..];
        if suffix == "t" && word.len() > 1 && word.to_ascii_lowercase().ends_with('n') {
            out.push_str(&before[..word_start]);
            let stem = &word[..word.len() - 1];
            out.push_str(match stem.to_ascii_lowercase().as_str() {
                "ca" => "can",
                "wo" => "will",
                "sha" => "shall",
                _ => stem,
            });
            rest = &after[suffix_len..];
        } else if SUFFIXES.contains(&suffix.as_str()) && !word.is_empty() {
            out.push_str(before);
            rest = &after[suffix_len..];
        } else {
            out.push_str(before);
            out.push(' ');
            rest = after;
        }
    }
    out.push_str(rest);
    out.into()
}

/// At most `max` of `terms`, the longest, in their order (ties: the earlier).
fn longest_in_order(mut terms: Vec<String>, max: usize) -> Vec<String> {
    if terms.len() > max {
        let mut by_length: Vec<usize> = (0..terms.len()).collect();
        by_length.sort_by_key(|&i| std::cmp::Reverse(terms[i].chars().count()));
        let mut keep = vec![false; terms.len()];
        for &i in &by_length[..max] {
            keep[i] = true;
        }
        let mut kept = keep.iter();
        terms.retain(|_| *kept.next().unwrap_or(&false));
    }
    terms
}

/// At most this many identifier phrases a query (see [`identifier_phrases`]).
const MAX_PHRASES: usize = 4;
/// ... of at most this many words each.
const MAX_PHRASE_WORDS: usize = 8;

/// The identifiers and paths a query names (`parse_config`, `src/config/parse.rs`, a camelCase
/// name as its words: `getUserByEmail`), each as the
/// phrase of its words' terms (`pars config`): its words are split apart like any others, and a
/// note holding one of them and an alternative of the other ("parse" and "yaml") ranked with the
/// memory holding the identifier itself. As a phrase too, the identifier counts where its words
/// stand together (and recall gives a name's words no alternatives). Words joined as prose joins
/// them (`self-care`, `Caroline's`, `2:30`, `2.5`) are no identifier, nor are abbreviations
/// (`e.g.`): at least two of the words are words, with letters and more than one character.
pub fn identifier_phrases(text: &str) -> Vec<String> {
    let joiner = |c: char| matches!(c, '_' | '.' | '/');
    let mut phrases: Vec<String> = Vec::new();
    for token in text.split(|c: char| !(c.is_alphanumeric() || joiner(c))) {
        // A camelCase name's words too (see `camel_parts`): `retryAfter` finds `retry_after`.
        let words: Vec<&str> = token
            .split(joiner)
            .filter(|w| !w.is_empty())
            .flat_map(|w| camel_parts(w).unwrap_or_else(|| vec![w]))
            .collect();
        let worded = words.iter().filter(|w| w.chars().count() > 1 && w.chars().any(char::is_alphabetic)).count();
        if worded < 2 || words.len() > MAX_PHRASE_WORDS || token.chars().any(|c| is_cjk(c) || is_unspaced(c)) {
            continue;
        }
        let phrase = words.iter().map(|w| stemmer().stem(&lowered(w)).into_owned()).collect::<Vec<_>>().join(" ");
        if !phrases.contains(&phrase) {
            phrases.push(phrase);
        }
        if phrases.len() == MAX_PHRASES {
            break;
        }
    }
    phrases
}

/// The distinct terms of the words of a query's identifiers (see [`identifier_phrases`]),
/// stopwords left out: `getUserByEmail` → get, user, email. A window of a memory found by such a
/// phrase shows where its words stand (it showed filler: the question's term `getuserbyemail`
/// is no word of `get_user_by_email`, review121 #2).
pub fn identifier_words(text: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for phrase in identifier_phrases(text) {
        for word in phrase.split(' ') {
            if !STOPWORDS.contains(&word) && !words.iter().any(|w| w == word) {
                words.push(word.to_owned());
            }
        }
    }
    words
}

/// OR of quoted terms: the FTS5 MATCH expression for them, `None` when there are none.
pub fn or_expression(terms: &[String]) -> Option<String> {
    (!terms.is_empty()).then(|| terms.iter().map(|t| format!("\"{t}\"")).collect::<Vec<_>>().join(" OR "))
}

/// [`or_expression`] with each term repeated `weight(term)` times: BM25 sums over the query's
/// phrases, so a term given twice counts twice.
pub fn weighted_or_expression(terms: &[String], weight: impl Fn(&str) -> usize) -> Option<String> {
    let repeated: Vec<String> = terms.iter().flat_map(|t| std::iter::repeat_n(t.clone(), weight(t).max(1))).collect();
    or_expression(&repeated)
}

/// The MATCH expression of every query term, unpruned (what a plain FTS5 recall would run).
pub fn match_expression(text: &str) -> Option<String> {
    or_expression(&query_terms(text))
}

/// Picks the terms to rank on, given each term's document frequency (`None`: unknown).
/// Rarest first; always at least one; a term known to match nothing is skipped.
pub fn select_terms(mut terms: Vec<(String, Option<u64>)>) -> Vec<String> {
    terms.retain(|(_, df)| *df != Some(0));
    terms.sort_by_key(|(_, df)| df.unwrap_or(1));
    let mut chosen = Vec::new();
    let mut postings = 0u64;
    for (term, df) in terms {
        let df = df.unwrap_or(1);
        if !chosen.is_empty() && (postings + df > POSTINGS_BUDGET || chosen.len() == MAX_QUERY_TERMS) {
            break;
        }
        postings += df;
        chosen.push(term);
    }
    chosen
}

/// [`select_terms`], then the rarest of the terms' alternatives that the store holds, at most
/// [`MAX_ALTERNATIVES`], within a postings budget of their own (so a question's own words are
/// never crowded out by its alternatives).
pub fn select_terms_and_alternatives(
    terms: Vec<(String, Option<u64>)>,
    mut alternatives: Vec<(String, Option<u64>)>,
) -> Vec<String> {
    alternatives.retain(|(_, df)| *df != Some(0));
    alternatives.sort_by_key(|(_, df)| df.unwrap_or(1));
    let mut chosen = select_terms(terms);
    let mut postings = 0u64;
    for (term, df) in alternatives.into_iter().take(MAX_ALTERNATIVES) {
        let df = df.unwrap_or(1);
        if postings + df > ALTERNATIVE_POSTINGS_BUDGET {
            break;
        }
        postings += df;
        chosen.push(term);
    }
    chosen
}

/// Every term the store holds, and its alternatives the store holds, without
/// [`select_terms_and_alternatives`]'s postings budgets (at most as many of each): what a recall
/// in one project ranks on when the budgets, spent on terms that are rare in the whole store
/// and only found in other projects, left its own words out.
pub fn all_known_terms(terms: Vec<(String, Option<u64>)>, alternatives: Vec<(String, Option<u64>)>) -> Vec<String> {
    let known = |list: Vec<(String, Option<u64>)>, most: usize| {
        let mut list: Vec<(String, Option<u64>)> = list.into_iter().filter(|(_, df)| *df != Some(0)).collect();
        list.sort_by_key(|(_, df)| df.unwrap_or(1));
        list.into_iter().take(most).map(|(t, _)| t).collect::<Vec<_>>()
    };
    let mut all = known(terms, MAX_QUERY_TERMS);
    all.extend(known(alternatives, MAX_ALTERNATIVES));
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn camel_case_names_are_indexed_whole_and_by_their_words() {
        assert_eq!(index_terms("read the retryAfter header"), "read the retryaft retri after header");
        assert_eq!(
            index_terms("fetchUserProfile HTTPServerError"),
            "fetchuserprofil fetch user profil httpservererror http server error"
        );
        // A piece of one letter, a digit, all capitals or all lowercase: whole; and a product's
        // name of two capitalised words.
        for whole in
            ["iPhone", "IPv6", "getX", "utf8Decode", "HTTP", "deploy", "Deploy", "OK", "ClickHouse", "TypeScript"]
        {
            assert_eq!(camel_parts(whole), None, "{whole}");
        }
        assert_eq!(camel_parts("ThumbnailImageGenerator"), Some(vec!["Thumbnail", "Image", "Generator"]));
        assert_eq!(camel_parts("parseJSONBody"), Some(vec!["parse", "JSON", "Body"]));
        assert!(split_differs("the SpoolWriter") && !split_differs("the spool writer, HTTP and IPV6"));
        // Asked for, such a name is also the phrase of its words, as a snake_case one is.
        assert_eq!(identifier_phrases("where is retryAfter read?"), vec!["retri after"]);
        assert_eq!(identifier_phrases("getUserByEmail or ClickHouse"), vec!["get user by email"]);
    }

    #[test]
    fn contractions_leave_no_pieces_to_rank_on() {
        assert_eq!(
            query_terms("I'm new here and don't know: who owns the gateway repo?"),
            vec!["new", "here", "know", "own", "gateway", "repo"]
        );
        assert_eq!(without_contractions("it’s what we'll do; they're sure I've, I'd"), "it what we do; they sure I, I");
        assert_eq!(without_contractions("we can't, won't, isn't"), "we can, will, is");
        // A quote that is no contraction stays a separator; Caroline's is Caroline.
        assert_eq!(without_contractions("'quoted' Caroline's rock'n'roll"), " quoted  Caroline rock n roll");
    }

    #[test]
    fn terms_are_stemmed_lowercased_and_safe() {
        assert_eq!(index_terms("Deploys (fast) AND café!"), "deploy fast and cafe");
        assert_eq!(query_terms("how do we deploy the \"services\" AND -x*"), vec!["deploy", "servic", "x"]);
        assert_eq!(query_terms("the"), vec!["the"]);
        // Past 32 distinct terms the longest stay, wherever they are.
        let filler: Vec<String> = (0..40).map(|i| format!("w{i}")).collect();
        let long = format!("{} which bucket holds invoices", filler.join(" "));
        let terms = query_terms(&long);
        assert_eq!(terms.len(), 32);
        assert!(terms.ends_with(&["bucket".to_owned(), "hold".to_owned(), "invoic".to_owned()]), "{terms:?}");
        assert!(query_terms("*** () -").is_empty());
        // Terms the index holds come first, however long the others.
        let frames: Vec<String> = (0..60).map(|i| format!("dispatcherinvoke{i}")).collect();
        let trace = format!("{} which environment variable turns on the flags?", frames.join(" "));
        let looked_up = query_terms_to_look_up(&trace);
        assert_eq!(looked_up.len(), 64);
        let known = ["environ", "variabl", "turn", "flag"];
        let with_df = looked_up.into_iter().map(|t| {
            let df = if known.contains(&t.as_str()) { Some(3) } else { Some(0) };
            (t, df)
        });
        let chosen: Vec<String> = known_first(with_df.collect()).into_iter().map(|(t, _)| t).collect();
        assert_eq!(chosen.len(), 32);
        assert!(chosen.ends_with(&known.map(str::to_owned)), "{chosen:?}");
        assert_eq!(or_expression(&query_terms("a b")), Some(r#""b""#.into()));
    }

    /// An accented Latin letter is folded before the word is stemmed: a word with and without
    /// its accents is one term, whatever the stemmer does with its ending (review121 #3).
    #[test]
    fn accents_are_folded_before_the_stemmer() {
        for (accented, plain) in [("André", "Andre"), ("résumé", "resume"), ("cliché", "cliche"), ("Malmö", "Malmo")]
        {
            assert_eq!(query_terms(accented), query_terms(plain), "{accented}");
            assert_eq!(index_terms(accented), index_terms(plain), "{accented}");
        }
        // Typed apart (`e` and U+0301) as typed together; letters that are no accented letter
        // (ß, æ, ø) and other scripts' letters stay as they are.
        assert_eq!(index_terms("cafe\u{301}"), index_terms("café"));
        assert_eq!(index_terms("Straße æble søster"), "straße æble søster");
        assert_eq!(index_terms("й"), "й");
        // Cyrillic and Greek typed apart are those typed whole, and stay unfolded (review123 #8).
        assert_eq!(index_terms("Йошкар"), index_terms("И\u{306}ошкар"));
        assert_ne!(index_terms("Йошкар"), index_terms("Иошкар"));
        assert_eq!(index_terms("ά"), index_terms("α\u{301}"));
    }

    #[test]
    fn identifiers_and_paths_are_phrases_and_prose_is_not() {
        assert_eq!(identifier_phrases("where is parse_config defined?"), vec!["pars config"]);
        assert_eq!(identifier_phrases("see src/config/parse.rs and Foo::Bar"), vec!["src config pars rs"]);
        for prose in ["self-care on Mother's Day", "at 2:30 or 2.5 hours", "e.g. this", "数据_库"] {
            assert!(identifier_phrases(prose).is_empty(), "{prose}");
        }
        let many = "ab_cd ef_gh ij_kl mn_op qr_st";
        assert_eq!(identifier_phrases(many).len(), MAX_PHRASES);
    }

    #[test]
    fn ideographs_and_kana_are_words_of_their_own() {
        assert_eq!(index_terms("キャッシュはRedisではなくMemcached"), "キ ャ ッ シ ュ は redi で は な く memcach");
        assert_eq!(index_terms("数据库用PostgreSQL"), "数 据 库 用 postgresql");
        assert_eq!(index_terms("데이터베이스 설정"), "데이터베이스 설정", "Korean words stay whole");
        assert_eq!(index_terms("ＱＳ＿ＦＥＡＴＵＲＥＳ ｍａｋｅ"), "qs featur make", "full-width forms fold");
        assert!(split_differs("数据") && split_differs("ｍａｋｅ") && split_differs("café") && !split_differs("make"));
    }

    #[test]
    fn thai_is_indexed_a_pair_of_letters_at_a_time_and_marks_are_of_their_word() {
        let mark = |c: char| char::from_u32(0xF0000 + c as u32).unwrap();
        // "queue": ค with its vowel sign, then ว; a run of one letter is itself.
        assert_eq!(index_terms("คิว"), format!("ค{}ว", mark('\u{e34}')));
        assert_eq!(index_terms("ทนทาน ก"), "ทน นท ทา าน ก");
        assert_eq!(index_terms("ใช้Redis"), format!("ใช{} redi", mark('\u{e49}')));
        // A Hindi word keeps its vowel signs: "work" is not "little".
        assert_ne!(index_terms("काम"), index_terms("कम"));
        assert_eq!(index_terms("काम").chars().count(), 3);
        // Optional marks go: an accent typed apart, Arabic's vowel points, a variation selector.
        assert_eq!(index_terms("cafe\u{301} كَتَبَ x\u{fe0f}"), index_terms("cafe كتب x"));
        // A mark with no letter before it is no word.
        assert_eq!(index_terms("a \u{e34}\u{301} b"), "a b");
        assert!(split_differs("คิว") && split_differs("काम") && split_differs("cafe\u{301}"));
    }

    #[test]
    fn remembered_stems_index_as_stemming_does() {
        let plain = |text: &str| words(text).map(|w| stemmer().stem(&w).into_owned()).collect::<Vec<_>>().join(" ");
        let texts = [
            "We deploy with cargo-dist; deploys run nightly",
            "ΟΔΟΣ Straße CAFÉ naïve İstanbul",
            "",
            "--- !!",
            "Running runs RAN runner 42 x86_64",
        ];
        for _ in 0..2 {
            for t in texts {
                assert_eq!(index_terms(t), plain(t), "{t}");
            }
        }
        // Past the cache's size it starts over and stays right.
        let many: String = (0..STEM_CACHE + 10).map(|i| format!("word{i}s ")).collect();
        assert_eq!(index_terms(&many), plain(&many));
        assert_eq!(index_terms(texts[0]), plain(texts[0]));
    }

    #[test]
    fn selection_prefers_rare_terms_within_budget() {
        let t = |s: &str, df: Option<u64>| (s.to_string(), df);
        assert_eq!(select_terms(vec![t("common", Some(9000)), t("rare", Some(3)), t("none", Some(0))]), vec!["rare"]);
        assert_eq!(select_terms(vec![t("a", Some(10)), t("b", Some(20)), t("?", None)]), vec!["?", "a", "b"]);
        assert_eq!(select_terms(vec![t("only", Some(50_000))]), vec!["only"]);
        assert!(select_terms(vec![t("none", Some(0))]).is_empty());
    }

    #[test]
    fn alternatives_follow_the_question_s_own_terms() {
        let t = |s: &str, df: Option<u64>| (s.to_string(), df);
        let own = vec![t("ship", Some(0)), t("releas", Some(40))];
        let alternatives: Vec<(String, Option<u64>)> =
            (0..20).map(|i| t(&format!("alt{i}"), Some(100 - i))).chain([t("absent", Some(0))]).collect();
        let chosen = select_terms_and_alternatives(own, alternatives);
        // The question's own term first, then the rarest alternatives the store holds.
        assert_eq!(chosen[0], "releas");
        assert_eq!(chosen.len(), 1 + MAX_ALTERNATIVES);
        assert_eq!(chosen[1], "alt19");
        assert!(!chosen.contains(&"absent".to_string()) && !chosen.contains(&"ship".to_string()));
        // Common alternatives stay within their own postings budget.
        let common = vec![t("a", Some(ALTERNATIVE_POSTINGS_BUDGET - 1)), t("b", Some(ALTERNATIVE_POSTINGS_BUDGET - 1))];
        assert_eq!(select_terms_and_alternatives(vec![t("q", Some(5))], common), vec!["q", "a"]);
    }
}
