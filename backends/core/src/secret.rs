//! [`Secret`]: API tokens and keys in configuration.

use std::fmt;

/// A secret string: `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }

    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Secret {
    /// `text` with every copy of the secret replaced by `****`: as it is, and as a server or a
    /// proxy may say it back encoded (see [`mask`]).
    pub fn masked_in(&self, text: &str) -> String {
        mask(text, &self.0)
    }
}

/// `text` with every copy of `secret` replaced by `****`, spelled as it is or as a server may
/// echo it: JSON escapes (`\/`, `\"`, `\\`, `\uXXXX` and surrogate pairs), percent-encoding
/// (either case of hex), and `+` for a space, in any mix. A key echoed JSON-escaped (PHP's
/// encoder writes `/` as `\/`) or percent-encoded in a redirect's URL was shown in full.
pub fn mask(text: &str, secret: &str) -> String {
    let key: Vec<char> = secret.chars().collect();
    if key.is_empty() {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while let Some(c) = text[at..].chars().next() {
        match spelled_at(text, at, &key) {
            Some(end) => {
                out.push_str("****");
                at = end;
            }
            None => {
                out.push(c);
                at += c.len_utf8();
            }
        }
    }
    out
}

/// Where `key` ends when `text` spells it from `at` (see [`mask`]).
fn spelled_at(text: &str, at: usize, key: &[char]) -> Option<usize> {
    let Some((&c, rest)) = key.split_first() else { return Some(at) };
    // The longest spelling first: `\\` is a backslash, not one followed by another.
    let mut lens = spellings(c, &text[at..]);
    lens.sort_unstable_by(|a, b| b.cmp(a));
    lens.into_iter().flatten().find_map(|len| spelled_at(text, at + len, rest))
}

/// The lengths of the starts of `text` that spell `c` (at most one of each kind).
fn spellings(c: char, text: &str) -> [Option<usize>; 4] {
    let raw = text.starts_with(c).then(|| c.len_utf8());
    let plus = (c == ' ' && text.starts_with('+')).then_some(1);
    let mut utf8 = [0u8; 4];
    let percent = c.encode_utf8(&mut utf8).bytes().try_fold(0usize, |len, b| {
        let hex = text.get(len..len + 3)?;
        (hex.starts_with('%') && u8::from_str_radix(&hex[1..], 16).ok() == Some(b)).then_some(len + 3)
    });
    let short = match c {
        '/' => Some("\\/"),
        '"' => Some("\\\""),
        '\\' => Some("\\\\"),
        '\n' => Some("\\n"),
        '\t' => Some("\\t"),
        '\r' => Some("\\r"),
        _ => None,
    };
    let mut units = [0u16; 2];
    let unicode = c.encode_utf16(&mut units).iter().try_fold(0usize, |len, u| {
        let esc = text.get(len..len + 6)?;
        (esc.starts_with("\\u") && u16::from_str_radix(&esc[2..], 16).ok() == Some(*u)).then_some(len + 6)
    });
    let json = short.filter(|s| text.starts_with(s)).map(str::len).or(unicode);
    [raw, plus, percent, json]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_masked_however_it_is_echoed() {
        let key = "Zm9vYmFy/c2VjcmV0+a2V5MTIz== é\"\\";
        let echoes = [
            key.to_owned(),
            serde_json::to_string(key).unwrap().trim_matches('"').to_owned(),
            serde_json::to_string(key).unwrap().trim_matches('"').replace('/', "\\/"),
            "Zm9vYmFy%2Fc2VjcmV0%2Ba2V5MTIz%3D%3D%20%C3%A9%22%5C".to_owned(),
            "Zm9vYmFy%2fc2VjcmV0%2ba2V5MTIz%3d%3d+%c3%a9%22%5c".to_owned(),
            "Zm9vYmFy\\/c2VjcmV0+a2V5MTIz== \\u00E9\\\"\\\\".to_owned(),
        ];
        for echo in echoes {
            let text = format!("Incorrect API key provided: {echo}; try again");
            assert_eq!(mask(&text, key), "Incorrect API key provided: ****; try again", "{echo}");
        }
        assert_eq!(mask("a 😀 b", "😀"), "a **** b");
        assert_eq!(mask("a \\ud83d\\ude00 b", "😀"), "a **** b", "a surrogate pair");
        assert_eq!(mask("nothing here", "sk-123"), "nothing here");
        assert_eq!(mask("sk-12 sk-123", "sk-123"), "sk-12 ****");
        assert_eq!(mask("x", ""), "x");
    }
}
