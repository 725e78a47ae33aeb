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

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::fts;

const SOURCE: &str = include_str!("thesaurus.txt");

/// The stems a query's stem may also match, in the file's order.
fn table() -> &'static HashMap<String, Vec<String>> {
    static TABLE: OnceLock<HashMap<String, Vec<String>>> = OnceLock::new();
    TABLE.get_or_init(|| parse(SOURCE))
}

/// A query's alternatives are looked up in the index at most this many (each is one lookup).
const MAX_LOOKED_UP: usize = 32;

/// The alternatives of `terms` (stemmed query terms) that are not query terms themselves, each
/// once, in the order of the terms they stand for, at most [`MAX_LOOKED_UP`].
pub(crate) fn alternatives(terms: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for term in terms {
        for alt in table().get(term).into_iter().flatten() {
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

fn parse(source: &str) -> HashMap<String, Vec<String>> {
    let stems = |words: &str| words.split_whitespace().map(fts::index_terms).collect::<Vec<_>>();
    let mut groups: Vec<Vec<String>> = Vec::new();
    let mut instances: HashMap<String, Vec<String>> = HashMap::new();
    for line in source.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        match line.split_once(" > ") {
            Some((general, specific)) => {
                for general in stems(general) {
                    instances.entry(general).or_default().extend(stems(specific));
                }
            }
            None => groups.push(stems(line)),
        }
    }
    let mut table: HashMap<String, Vec<String>> = HashMap::new();
    let mut link = |from: &str, to: &str| {
        let alts = table.entry(from.to_owned()).or_default();
        if from != to && !alts.iter().any(|a| a == to) {
            alts.push(to.to_owned());
        }
    };
    for group in &groups {
        for a in group {
            for b in group {
                link(a, b);
            }
        }
    }
    // A word's instances are its synonyms' too ("db" reaches what "database" names).
    for group in &groups {
        for a in group {
            for b in group {
                for instance in instances.get(b).into_iter().flatten() {
                    link(a, instance);
                }
            }
        }
    }
    for (general, specific) in &instances {
        for instance in specific {
            link(general, instance);
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_is_one_indexed_word() {
        for (n, line) in SOURCE.lines().enumerate() {
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
        let table = parse("deploy ship rollout\n# a comment\n\ndatabase > postgres mysql\ndb database\n");
        let alts = |t: &str| table.get(&fts::index_terms(t)).cloned().unwrap_or_default();
        assert_eq!(alts("shipping"), vec!["deploy", "rollout"]);
        assert_eq!(alts("deployed"), vec!["ship", "rollout"]);
        assert_eq!(alts("databases"), vec!["db", "postgr", "mysql"]);
        assert_eq!(alts("db"), vec!["databas", "postgr", "mysql"]);
        assert!(alts("postgres").is_empty());
    }

    #[test]
    fn a_release_question_reaches_deploy() {
        let terms = fts::query_terms("how do we ship a release?");
        assert!(alternatives(&terms).contains(&fts::index_terms("deploy")), "{:?}", alternatives(&terms));
        // A query term is never its own alternative.
        assert!(alternatives(&terms).iter().all(|a| !terms.contains(a)));
    }
}
