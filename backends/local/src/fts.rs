//! Turns arbitrary user text into an FTS5 query that cannot be a syntax error.
//!
//! Words are runs of letters and digits; each becomes a quoted term (so `AND`, `*`, `-`, quotes and
//! parentheses in the input are just text) and terms are OR-ed so BM25 ranks by how many and how
//! rare the matches are. Very common English words are dropped unless nothing else is left: they
//! match most rows and only slow ranking down.

const MAX_TERMS: usize = 32;

const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "do", "does", "for", "from", "had", "has", "have", "how",
    "i", "if", "in", "is", "it", "its", "me", "my", "of", "on", "or", "our", "so", "that", "the", "their", "then",
    "there", "these", "this", "to", "was", "we", "were", "what", "when", "where", "which", "who", "why", "will",
    "with", "you", "your",
];

/// The FTS5 MATCH expression for `text`, or `None` when it has no words.
pub fn match_expression(text: &str) -> Option<String> {
    let mut words: Vec<String> = Vec::new();
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        let word = word.to_lowercase();
        if !words.contains(&word) {
            words.push(word);
        }
    }
    if words.is_empty() {
        return None;
    }
    let content: Vec<&String> = words.iter().filter(|w| !STOPWORDS.contains(&w.as_str())).collect();
    let chosen: Vec<&String> = if content.is_empty() { words.iter().collect() } else { content };
    let terms: Vec<String> = chosen.iter().take(MAX_TERMS).map(|w| format!("\"{w}\"")).collect();
    Some(terms.join(" OR "))
}

#[cfg(test)]
mod tests {
    use super::match_expression;

    #[test]
    fn quotes_every_word_and_drops_syntax() {
        assert_eq!(match_expression("foo AND (bar*) -baz \"q\"").unwrap(), r#""foo" OR "bar" OR "baz" OR "q""#);
        assert_eq!(match_expression("the cache"), Some(r#""cache""#.into()));
        assert_eq!(match_expression("the"), Some(r#""the""#.into()));
        assert_eq!(match_expression("*** () -"), None);
        assert_eq!(match_expression("Café 日本語"), Some(r#""café" OR "日本語""#.into()));
    }
}
