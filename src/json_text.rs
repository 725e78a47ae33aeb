//! Reading JSON that a client wrote with half an emoji: a text cut by UTF-16 units (as
//! JavaScript's `slice` cuts it) is written by `JSON.stringify` with a lone `\ud83d`, which
//! serde_json refuses. mneme reads it as U+FFFD, as the Hindsight server does, on every path a
//! client's JSON comes in by: the API's bodies, MCP messages, the Claude Code hook's events and
//! transcripts, and `mneme import`'s files.

use serde::de::DeserializeOwned;

/// `json` read as a `T`; one that holds unpaired surrogate escapes is read with U+FFFD in their
/// places. The error is the mended text's, when it was mended: what else is wrong with it (the
/// half emoji, which is read, was blamed for a wrong type elsewhere).
pub fn from_slice_mended<T: DeserializeOwned>(json: &[u8]) -> serde_json::Result<T> {
    let refused = match serde_json::from_slice(json) {
        Ok(value) => return Ok(value),
        Err(e) => e,
    };
    match lone_surrogates_mended(json) {
        Some(mended) => serde_json::from_slice(&mended),
        None => Err(refused),
    }
}

/// A JSON text with each `\u` escape of an unpaired UTF-16 surrogate written as `\uFFFD`; `None`
/// when it holds none. (Other escapes are passed over whole, so `\\ud83d`, an escaped backslash
/// before `ud83d`, is no escape of a surrogate.)
pub fn lone_surrogates_mended(json: &[u8]) -> Option<Vec<u8>> {
    let unit_at = |i: usize| -> Option<u16> {
        if json.get(i) != Some(&b'\\') || json.get(i + 1) != Some(&b'u') {
            return None;
        }
        u16::from_str_radix(std::str::from_utf8(json.get(i + 2..i + 6)?).ok()?, 16).ok()
    };
    let (mut out, mut mended, mut i) = (Vec::with_capacity(json.len()), false, 0);
    while i < json.len() {
        if json[i] != b'\\' {
            out.push(json[i]);
            i += 1;
            continue;
        }
        let len = match unit_at(i) {
            Some(0xD800..=0xDBFF) if matches!(unit_at(i + 6), Some(0xDC00..=0xDFFF)) => 12,
            Some(0xD800..=0xDFFF) => {
                out.extend_from_slice(b"\\uFFFD");
                mended = true;
                i += 6;
                continue;
            }
            Some(_) => 6,
            None => 2,
        };
        let end = (i + len).min(json.len());
        out.extend_from_slice(&json[i..end]);
        i = end;
    }
    mended.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::{from_slice_mended, lone_surrogates_mended};

    #[test]
    fn unpaired_surrogates_are_mended_and_nothing_else() {
        let mended = |s: &str| lone_surrogates_mended(s.as_bytes()).map(|b| String::from_utf8(b).unwrap());
        assert_eq!(mended(r#"{"q": "go \ud83d"}"#).as_deref(), Some(r#"{"q": "go \uFFFD"}"#));
        assert_eq!(mended(r#"{"q": "\udc00 x \ud800\u0041"}"#).as_deref(), Some(r#"{"q": "\uFFFD x \uFFFD\u0041"}"#));
        assert_eq!(mended(r#"{"q": "a pair \ud83d\ude80 stays"}"#), None);
        assert_eq!(mended(r#"{"q": "an escaped backslash \\ud83d"}"#), None);
        assert_eq!(mended(r#"{"q": "cut \ud8"#), None);
        let v: serde_json::Value =
            serde_json::from_slice(&lone_surrogates_mended(br#"{"q": "go \ud83d"}"#).unwrap()).unwrap();
        assert_eq!(v["q"], "go \u{fffd}");
    }

    #[test]
    fn a_text_with_half_an_emoji_is_read_and_other_errors_are_kept() {
        let v: serde_json::Value = from_slice_mended(br#"{"q": "go \ud83d", "n": 1}"#).unwrap();
        assert_eq!((v["q"].as_str(), v["n"].as_i64()), (Some("go \u{fffd}"), Some(1)));
        // What else is wrong is said, not the half emoji, which is read (review54 #3).
        let e = from_slice_mended::<serde_json::Value>(br#"{"q": "go \ud83d", "n": }"#).unwrap_err();
        assert!(e.to_string().contains("expected value") && !e.to_string().contains("surrogate"), "{e}");
        assert!(from_slice_mended::<serde_json::Value>(br#"{"q": "fine"#).unwrap_err().is_eof());
    }
}
