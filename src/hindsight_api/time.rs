//! ISO 8601 date-times as Hindsight clients send them (`2026-01-02T03:04:05.123+01:00`, `…Z`, or
//! no offset, meaning UTC) normalised to the RFC 3339 UTC form mneme stores, so that stored times
//! sort as text.

use std::time::Duration;

/// The same instant as RFC 3339 UTC with milliseconds, or `None` when `s` is not a date-time.
pub fn normalize(s: &str) -> Option<String> {
    let s = s.trim();
    let (local, offset) = split_offset(s)?;
    // A date alone is midnight.
    let local = if local.len() == 10 { format!("{local}T00:00:00") } else { local.replace(' ', "T") };
    let at = humantime::parse_rfc3339_weak(&local).ok()?;
    let at = if offset >= 0 {
        at.checked_sub(Duration::from_secs(offset as u64))?
    } else {
        at.checked_add(Duration::from_secs(offset.unsigned_abs()))?
    };
    // Moved by its offset, a time may leave what RFC 3339 UTC (and the formatter, which
    // panics) can write: before 1970 or past year 9999.
    let since_epoch = at.duration_since(std::time::UNIX_EPOCH).ok()?;
    (since_epoch <= LATEST).then(|| mneme_core::time::rfc3339_millis(at))
}

/// The latest instant written: 9999-12-31T23:59:59.999Z.
const LATEST: Duration = Duration::from_millis(253_402_300_799_999);

/// The local part and the offset east of UTC in seconds.
fn split_offset(s: &str) -> Option<(&str, i64)> {
    if s.len() == 10 {
        return Some((s, 0));
    }
    if let Some(local) = s.strip_suffix(['Z', 'z']) {
        return Some((local, 0));
    }
    // An offset is the last '+' or '-' after the date (which holds '-' too).
    let t = s.find(['T', 't', ' '])?;
    match s[t..].rfind(['+', '-']).map(|i| i + t) {
        Some(i) => {
            let (hours, minutes) = parse_offset(&s[i + 1..])?;
            let sign = if s.as_bytes()[i] == b'-' { -1 } else { 1 };
            Some((&s[..i], sign * (hours * 3600 + minutes * 60)))
        }
        None => Some((s, 0)),
    }
}

fn parse_offset(o: &str) -> Option<(i64, i64)> {
    let digits: String = o.chars().filter(|c| *c != ':').collect();
    if digits.len() != 4 && digits.len() != 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let hours: i64 = digits[..2].parse().ok()?;
    let minutes: i64 = if digits.len() == 4 { digits[2..].parse().ok()? } else { 0 };
    (hours <= 23 && minutes <= 59).then_some((hours, minutes))
}

#[cfg(test)]
mod tests {
    use super::normalize;

    #[test]
    fn offsets_and_forms() {
        assert_eq!(normalize("2026-01-02T03:04:05Z").as_deref(), Some("2026-01-02T03:04:05.000Z"));
        assert_eq!(normalize("2026-01-02T03:04:05.250+01:00").as_deref(), Some("2026-01-02T02:04:05.250Z"));
        assert_eq!(normalize("2026-01-02T23:30:00-02:00").as_deref(), Some("2026-01-03T01:30:00.000Z"));
        assert_eq!(normalize("2026-01-02T03:04:05").as_deref(), Some("2026-01-02T03:04:05.000Z"));
        assert_eq!(normalize("2026-01-02").as_deref(), Some("2026-01-02T00:00:00.000Z"));
        assert_eq!(normalize("2026-01-02T03:04:05+0530").as_deref(), Some("2026-01-01T21:34:05.000Z"));
        // The ends of what can be written, and past them once the offset is applied (these
        // panicked in the formatter).
        assert_eq!(normalize("1970-01-01T00:00:00Z").as_deref(), Some("1970-01-01T00:00:00.000Z"));
        assert_eq!(normalize("9999-12-31T23:59:59.999Z").as_deref(), Some("9999-12-31T23:59:59.999Z"));
        for bad in [
            "yesterday",
            "2026-13-01T00:00:00Z",
            "2026-01-02T03:04:05+25:00",
            "",
            "12:00",
            "1970-01-01T00:00:00+01:00",
            "9999-12-31T23:00:00-02:00",
        ] {
            assert_eq!(normalize(bad), None, "{bad:?}");
        }
    }
}
