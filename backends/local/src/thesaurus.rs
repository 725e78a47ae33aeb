//! A developer's thesaurus: a question's words also match their near-synonyms in a note
//! ("how do we ship a release?" finds "We deploy with cargo-dist").
//!
//! The words are in `thesaurus.txt` beside this file, one line a group:
//! - `deploy ship rollout`: every word may stand for every other;
//! - `database > postgres mysql`: a question's general word may be answered by a note naming an
//!   instance, not the other way round.
//!
//! Both sides go through the index's normalisation ([`crate::fts::index_terms`]), so a group's
//! words match every inflection the stemmer joins.
//!
//! The dense side gets them too: the question is embedded with its first few alternatives
//! appended as words ([`Thesaurus::dense_query`]), which moves its vector towards the notes that
//! use them.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use crate::fts;

/// The built-in list (`local.thesaurus = true`, the default).
const BUILTIN: &str = include_str!("thesaurus.txt");

/// A query's alternatives are looked up in the index at most this many (each is one lookup).
const MAX_LOOKED_UP: usize = 32;
/// The most candidates a query term's alternatives are read from (repeats included): a
/// millisecond's work. 4,096 left a category line out of reach behind a few thousand groups
/// sharing a word (review79 #5).
const MAX_WALKED: usize = 65_536;
/// Alternatives appended to the question that is embedded (see [`Thesaurus::dense_query`]).
const DENSE_ALTERNATIVES: usize = 4;

/// Which words a query's words may also match: the built-in list, a user's own lines, both or
/// neither (`local.thesaurus`, `local.thesaurus_file`).
///
/// Kept as read, each line once, and linked when asked: every word of a group linked to every
/// other took a line of 4,000 words a minute and 900 MB (review77 #2), and a file could ask for
/// more than any machine has.
#[derive(Debug, Default)]
pub struct Thesaurus {
    /// Each group line's stems: every word stands for every other.
    groups: Vec<Vec<String>>,
    /// Stem → the groups it is in, in the lines' order.
    groups_of: HashMap<String, Vec<usize>>,
    /// Stem → the instances its category lines name, in the lines' order, each once.
    instances: HashMap<String, Vec<String>>,
    /// How many stems have alternatives.
    linked: usize,
    /// Stem → the word it was first written as, lowercased (what the embedder is given).
    words: HashMap<String, String>,
}

/// A line of a thesaurus file that is not a group or a category line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ThesaurusError {
    /// 1-based line in the file.
    pub line: usize,
    /// What is wrong with it.
    pub message: String,
}

/// Why a thesaurus file holding a `<private>` tag is refused.
const PRIVATE_TAG: &str = "it holds a <private> tag, which a thesaurus has no use for (its words are matched and \
                           quoted as they are): take the tag, and what it keeps private, out of the file";

impl Thesaurus {
    /// The built-in developer's thesaurus (parsed once).
    pub fn builtin() -> Arc<Thesaurus> {
        static BUILT: OnceLock<Arc<Thesaurus>> = OnceLock::new();
        BUILT
            .get_or_init(|| {
                Arc::new(Thesaurus::parse(BUILTIN, None).expect("the built-in thesaurus is valid (tested)"))
            })
            .clone()
    }

    /// No alternatives at all (`local.thesaurus = false` and no file).
    pub fn none() -> Arc<Thesaurus> {
        Arc::new(Thesaurus::default())
    }

    /// The built-in lines (when `builtin`) followed by `extra`, lines in the same format (a
    /// user's `local.thesaurus_file`). An error names the line of `extra` at fault.
    pub fn with_lines(builtin: bool, extra: &str) -> Result<Thesaurus, ThesaurusError> {
        Thesaurus::parse(extra, builtin.then_some(BUILTIN))
    }

    /// Checks lines in the thesaurus format without building anything (a user's file, when the
    /// config is read). The error names the line at fault.
    pub fn check(lines: &str) -> Result<(), ThesaurusError> {
        Lines::default().add_checked(lines)
    }

    /// Whether it knows no word.
    pub fn is_empty(&self) -> bool {
        self.linked == 0
    }

    /// How many words (stems) have alternatives.
    pub fn words(&self) -> usize {
        self.linked
    }

    /// The question the dense side embeds: `query` with the words of its first
    /// [`DENSE_ALTERNATIVES`] alternatives appended in parentheses ("how do we ship a release?
    /// (deploy, rollout, publish)"), or as it is when it has none. Measured on the dev sets: the
    /// vectors alone found coding paraphrases at hit@5 0.727 instead of 0.679, LoCoMo turns
    /// 0.509 instead of 0.503 (BENCHMARKS.md).
    pub(crate) fn dense_query(&self, query: &str) -> String {
        let words: Vec<&str> = self
            .alternatives(&fts::query_terms(query))
            .iter()
            .filter_map(|stem| self.words.get(stem).map(String::as_str))
            .take(DENSE_ALTERNATIVES)
            .collect();
        if words.is_empty() {
            query.to_owned()
        } else {
            format!("{query} ({})", words.join(", "))
        }
    }

    /// The alternatives of `terms` (stemmed query terms) that are not query terms themselves,
    /// each once, in the order of the terms they stand for, at most [`MAX_LOOKED_UP`].
    pub(crate) fn alternatives(&self, terms: &[String]) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for term in terms {
            // Bounded walk: a file can give a word more groups than a recall should read (every
            // ordering of nine words, review78 #3: 2 s a question).
            for alt in self.alternatives_of(term).take(MAX_WALKED) {
                if out.len() == MAX_LOOKED_UP {
                    return out;
                }
                if !terms.contains(alt) && !out.contains(alt) {
                    out.push(alt.clone());
                }
            }
        }
        out
    }

    /// What `stem` may also match, in the lines' order, with repeats: its groups' other words,
    /// then the instances of its groups' words (a word's instances are its synonyms' too: "db"
    /// reaches what "database" names), then its own instances.
    fn alternatives_of<'a>(&'a self, stem: &'a str) -> impl Iterator<Item = &'a String> + 'a {
        let groups = self.groups_of.get(stem).into_iter().flatten().map(|g| &self.groups[*g]);
        let synonyms = groups.clone().flatten();
        let their_instances = groups.flatten().flat_map(|word| self.instances.get(word).into_iter().flatten());
        let own_instances = self.instances.get(stem).into_iter().flatten();
        synonyms.chain(their_instances).chain(own_instances).filter(move |alt| alt.as_str() != stem)
    }

    /// `before`'s lines (trusted: the built-in list), then `source`'s (checked, line by line).
    fn parse(source: &str, before: Option<&str>) -> Result<Thesaurus, ThesaurusError> {
        let mut lines = Lines::default();
        for line in before.into_iter().flat_map(str::lines) {
            lines.add(line).expect("the built-in thesaurus is valid (tested)");
        }
        lines.add_checked(source)?;
        Ok(lines.into_thesaurus())
    }
}

/// Groups and categories as read, before they are linked.
#[derive(Default)]
struct Lines {
    groups: Vec<Vec<String>>,
    /// The groups read (fingerprints of their words in any order), each kept once: a line
    /// given twice, or its words in another order, adds nothing.
    groups_seen: HashSet<u64>,
    instances: HashMap<String, Vec<String>>,
    /// (general, instance) pairs read (fingerprints), each kept once.
    instances_seen: HashSet<u64>,
    /// Stem → the word it was first written as.
    words: HashMap<String, String>,
}

impl Lines {
    /// Adds every line of `source`; the error names the line at fault.
    fn add_checked(&mut self, source: &str) -> Result<(), ThesaurusError> {
        // A span may open on one line (a comment's too) and close lines later: every word
        // between is private, and an error quoting one of them wrote it to a notice and the log
        // (review80 #2, review83 #2). A file holding a tag anywhere is refused, naming its line.
        if let Some(n) = source.lines().position(mneme_core::text::has_private_tag) {
            return Err(ThesaurusError { line: n + 1, message: PRIVATE_TAG.into() });
        }
        for (n, line) in source.lines().enumerate() {
            self.add(line).map_err(|message| ThesaurusError { line: n + 1, message })?;
        }
        Ok(())
    }

    fn add(&mut self, line: &str) -> Result<(), String> {
        // `#` starts a comment at a line's start or after a space (`c#` is a word: the index
        // reads it as `c`).
        let line = line.trim();
        let comment =
            line.match_indices('#').map(|(at, _)| at).find(|&at| at == 0 || line[..at].ends_with(char::is_whitespace));
        let line = comment.map_or(line, |at| &line[..at]).trim();
        if line.is_empty() {
            return Ok(());
        }
        match line.split_once(" > ") {
            Some((general, specific)) => {
                let (general, specific) = (stems(general)?, stems(specific)?);
                self.remember_words(line);
                if general.is_empty() || specific.is_empty() {
                    return Err("a category line needs words on both sides of ` > `".into());
                }
                for g in general {
                    for i in &specific {
                        if self.instances_seen.insert(mneme_core::text::fnv1a(format!("{g}>{i}").as_bytes())) {
                            self.instances.entry(g.clone()).or_default().push(i.clone());
                        }
                    }
                }
            }
            // `shop >` (trimmed, no ` > ` left): a category missing a side, not a bad word.
            None if line.split_whitespace().any(|w| w == ">") => {
                return Err("a category line needs words on both sides of ` > `".into());
            }
            None => {
                let group = stems(line)?;
                if group.len() < 2 {
                    return Err(format!(
                        "{line:?} is one word; a group lists words that stand for one another, \
                         e.g. `deploy ship rollout`"
                    ));
                }
                self.remember_words(line);
                let mut seen = HashSet::new();
                let group: Vec<String> = group.into_iter().filter(|w| seen.insert(w.clone())).collect();
                let mut words: Vec<&str> = group.iter().map(String::as_str).collect();
                words.sort_unstable();
                if self.groups_seen.insert(mneme_core::text::fnv1a(words.join(" ").as_bytes())) {
                    self.groups.push(group);
                }
            }
        }
        Ok(())
    }

    /// Keeps how each of a (valid) line's words was written, the first time its stem is seen.
    fn remember_words(&mut self, line: &str) {
        for word in line.split_whitespace().filter(|w| *w != ">") {
            let stem = fts::index_terms(word);
            self.words.entry(stem).or_insert_with(|| word.to_lowercase());
        }
    }

    fn into_thesaurus(self) -> Thesaurus {
        let mut groups_of: HashMap<String, Vec<usize>> = HashMap::new();
        for (g, group) in self.groups.iter().enumerate() {
            for word in group {
                groups_of.entry(word.clone()).or_default().push(g);
            }
        }
        let mut thesaurus =
            Thesaurus { groups: self.groups, groups_of, instances: self.instances, linked: 0, words: self.words };
        let stems: HashSet<&String> = thesaurus.groups_of.keys().chain(thesaurus.instances.keys()).collect();
        let linked = stems.into_iter().filter(|stem| thesaurus.alternatives_of(stem).next().is_some()).count();
        thesaurus.linked = linked;
        thesaurus
    }
}

/// Each word of `words` as the index stores it; a word the index would split is an error.
fn stems(words: &str) -> Result<Vec<String>, String> {
    words
        .split_whitespace()
        .map(|word| {
            let stem = fts::index_terms(word);
            if !(stem.is_empty() || stem.contains(' ') || word.contains('>')) {
                return Ok(stem);
            }
            let shown = shown(word);
            if word.chars().any(|c| fts::is_cjk(c) || fts::is_unspaced(c)) {
                return Err(format!(
                    "{shown} is written in a script the index reads a character at a time (Chinese, Japanese) or two \
                     letters at a time (Thai, Lao, Khmer, Myanmar), so the thesaurus cannot name its words: leave it out"
                ));
            }
            let joined: String = word.chars().filter(|c| c.is_alphanumeric()).collect::<String>().to_lowercase();
            Err(match joined.is_empty() {
                true => format!("{shown} is no word: it holds no letter or digit"),
                false => format!(
                    "{shown} is not one word: the index splits text at anything but letters, digits and their marks; \
                     write it joined (\"{joined}\") or as words of their own"
                ),
            })
        })
        .collect()
}

/// A word as a message quotes it: as written, but for control characters, which are escaped.
fn shown(word: &str) -> String {
    match word.chars().any(char::is_control) {
        true => format!("{word:?}"),
        false => format!("\"{word}\""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_with_private_text_is_refused_without_quoting_it() {
        for line in
            ["staging <private>PRIVWORD prod</private> env", "a b <PRIVATE>PRIVWORD", "x > y </private>PRIVWORD"]
        {
            let e = Thesaurus::check(&format!("deploy ship\n{line}")).unwrap_err();
            assert_eq!(e.line, 2);
            assert!(e.message.contains("<private> tag") && !e.message.contains("PRIVWORD"), "{}", e.message);
        }
        // Nor in a comment, or across lines: the words between are private (review83 #2).
        for file in ["deploy ship # <private>\nPRIVWORD-x\n# </private>", "deploy ship\nPRIVWORD-y\nz w </private>"] {
            let e = Thesaurus::check(file).unwrap_err();
            assert!(e.message.contains("<private> tag") && !e.message.contains("PRIVWORD"), "{}", e.message);
        }
    }

    #[test]
    fn the_dense_side_embeds_the_question_with_its_alternatives_as_written() {
        let t = Thesaurus::with_lines(false, "deploy ship rollout publish release\nshop > Storefront").unwrap();
        // The question's own words are not repeated; alternatives come as written, lowercased,
        // at most DENSE_ALTERNATIVES of them.
        assert_eq!(t.dense_query("how do we ship it?"), "how do we ship it? (deploy, rollout, publish, release)");
        assert_eq!(t.dense_query("Which shops?"), "Which shops? (storefront)");
        assert_eq!(t.dense_query("nothing to add"), "nothing to add");
        assert_eq!(Thesaurus::none().dense_query("how do we ship it?"), "how do we ship it?");
    }

    #[test]
    fn every_word_is_one_indexed_word() {
        for (n, line) in BUILTIN.lines().enumerate() {
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let words = line.split_once(" > ").map_or(line.to_owned(), |(g, i)| format!("{g} {i}"));
            for word in words.split_whitespace() {
                assert!(
                    word.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()),
                    "thesaurus.txt line {}: {word:?} is not one lowercase word",
                    n + 1
                );
            }
            assert!(!words.contains('>'), "thesaurus.txt line {}: one ` > ` a line", n + 1);
        }
    }

    #[test]
    fn groups_are_symmetric_and_categories_one_way() {
        let thesaurus = Thesaurus::with_lines(
            false,
            "deploy ship rollout\n# a comment\n\ndatabase > postgres mysql\ndb database\n",
        )
        .unwrap();
        let alts = |t: &str| thesaurus.alternatives(&[fts::index_terms(t)]);
        assert_eq!(alts("shipping"), vec!["deploy", "rollout"]);
        assert_eq!(alts("deployed"), vec!["ship", "rollout"]);
        assert_eq!(alts("databases"), vec!["db", "postgr", "mysql"]);
        assert_eq!(alts("db"), vec!["databas", "postgr", "mysql"]);
        assert!(alts("postgres").is_empty());
    }

    #[test]
    fn a_release_question_reaches_deploy() {
        let terms = fts::query_terms("how do we ship a release?");
        let alternatives = Thesaurus::builtin().alternatives(&terms);
        assert!(alternatives.contains(&fts::index_terms("deploy")), "{alternatives:?}");
        // A query term is never its own alternative.
        assert!(alternatives.iter().all(|a| !terms.contains(a)));
    }

    #[test]
    fn a_file_is_kept_as_read_and_linked_when_asked() {
        // One group of 1,000 words, and a category of as many given twice (review77 #2: a group of
        // 4,000, every word linked to every other, took a minute and 900 MB to build).
        let words: Vec<String> = (0..1000).map(|i| format!("w{i}x")).collect();
        let lines =
            format!("{}\nshop store\nshop > {}\nshop > {}\n", words.join(" "), words.join(" "), words.join(" "));
        let t = Thesaurus::with_lines(false, &lines).unwrap();
        assert_eq!(t.groups.iter().map(Vec::len).sum::<usize>(), 1002);
        assert_eq!(t.instances["shop"].len(), 1000, "each instance once");
        assert_eq!(t.words(), 1002);
        let alts = t.alternatives(&["store".to_owned()]);
        assert_eq!(alts.len(), MAX_LOOKED_UP);
        assert_eq!(alts[..3], ["shop", "w0x", "w1x"], "the synonym, then its instances, in order");
        assert_eq!(t.alternatives(&["w5x".to_owned()])[..2], ["w0x", "w1x"]);
        // The same words in another order are the same group (review78 #3: every ordering of nine
        // words, 16 MB, made a question read 3 million candidates).
        let t = Thesaurus::with_lines(false, "alpha beta gamma\ngamma alpha beta\nbeta gamma alpha\n").unwrap();
        assert_eq!(t.groups.len(), 1);
        assert_eq!(t.alternatives(&["beta".to_owned()]), ["alpha", "gamma"]);
    }

    #[test]
    fn the_built_in_list_parses_line_by_line() {
        // `builtin()` trusts the file; this names the line should it ever be wrong.
        let thesaurus = Thesaurus::parse(BUILTIN, None).unwrap();
        assert!(!thesaurus.is_empty());
    }

    #[test]
    fn a_user_s_lines_extend_or_replace_the_built_in_list() {
        let terms = fts::query_terms("which orchestrator runs the shop?");
        let own = "# our words\norchestrator k8s kubernetes\nshop > orchard\n";
        let both = Thesaurus::with_lines(true, own).unwrap();
        let alternatives = both.alternatives(&terms);
        assert!(alternatives.contains(&"k8s".to_owned()), "{alternatives:?}");
        assert!(alternatives.contains(&"orchard".to_owned()), "{alternatives:?}");
        // The built-in lines are still there.
        let release = fts::query_terms("how do we ship a release?");
        assert!(both.alternatives(&release).contains(&fts::index_terms("deploy")));
        // Alone, only the user's lines count.
        let alone = Thesaurus::with_lines(false, own).unwrap();
        assert!(alone.alternatives(&terms).contains(&"k8s".to_owned()));
        assert!(alone.alternatives(&release).is_empty());
        assert!(Thesaurus::none().alternatives(&terms).is_empty());
    }

    #[test]
    fn a_bad_line_is_named() {
        let bad = |text: &str| Thesaurus::with_lines(true, text).unwrap_err();
        let e = bad("deploy ship\n\npull-request pr\n");
        assert_eq!(e.line, 3);
        assert!(e.to_string().starts_with("line 3: \"pull-request\" is not one word"), "{e}");
        // Words of scripts the index reads a letter or two at a time cannot be named, and the
        // message says so (it advised writing "数据库" joined, as it was); Thai is shown as written.
        let e = bad("数据库 postgres\n");
        assert!(
            e.to_string().contains("\"数据库\" is written in a script") && e.to_string().contains("leave it out"),
            "{e}"
        );
        let e = bad("deploy ship\nฐานข้อมูล postgres\n");
        assert_eq!(e.line, 2);
        assert!(e.to_string().contains("\"ฐานข้อมูล\" is written in a script"), "{e}");
        // A Hindi word with its vowel signs is one word.
        assert!(Thesaurus::with_lines(false, "काम कार्य\n").is_ok());
        // A comment after a line's words is a comment; a word of no letters is said to be one.
        let t = Thesaurus::with_lines(false, "k8s kubernetes   # container orchestration\n# alone").unwrap();
        assert_eq!(t.dense_query("k8s?"), "k8s? (kubernetes)");
        // A `#` inside a word is no comment's start.
        let t = Thesaurus::with_lines(false, "csharp c# dotnet").unwrap();
        assert_eq!(t.dense_query("csharp?"), "csharp? (c#, dotnet)");
        let e = Thesaurus::with_lines(false, "ship ++ deploy").unwrap_err();
        assert!(e.to_string().contains("\"++\" is no word: it holds no letter or digit"), "{e}");
        assert_eq!(bad("# fine\nlonely\n").line, 2);
        assert_eq!(bad("database > \n").line, 1);
        assert!(bad("shop >\n").message.contains("both sides"), "said as a category missing a side");
        assert_eq!(bad("a > b > c\n").line, 1);
        assert_eq!(bad("cache>redis\n").line, 1);
        assert!(Thesaurus::with_lines(true, "").is_ok());
    }
}
