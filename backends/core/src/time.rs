//! Timestamp formats fixed by the contract (RFC 3339 UTC, and `YYYY-MM-DD HH:MM` for prompts).

use std::time::{Duration, SystemTime};

/// The last second these formats can write, 9999-12-31T23:59:59Z.
const LAST_WRITABLE: Duration = Duration::from_secs(253_402_300_799);

/// `at` within what the formats can write: the epoch for a time before it, the end of year 9999
/// for one after. A wall clock can be anywhere (a board with no clock battery boots in 1970 or
/// before it, `date -s` takes a typo), and the formatters panic outside that range: a retain
/// stamped with such a clock was a 500, and a delivery's task died holding its items.
pub fn writable(at: SystemTime) -> SystemTime {
    let last = SystemTime::UNIX_EPOCH + LAST_WRITABLE;
    match at.duration_since(SystemTime::UNIX_EPOCH) {
        Err(_) => SystemTime::UNIX_EPOCH,
        Ok(_) if at > last => last,
        Ok(_) => at,
    }
}

/// Whether these formats (and an HTTP Date header) can write `at` as it is.
pub fn is_writable(at: SystemTime) -> bool {
    writable(at) == at
}

/// `2026-01-02T03:04:05Z` (second precision, UTC).
pub fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(writable(at)).to_string()
}

/// `2026-01-02T03:04:05.123Z` (millisecond precision, UTC).
pub fn rfc3339_millis(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(writable(at)).to_string()
}

/// The "current time" shown to agents: UTC `YYYY-MM-DD HH:MM`.
pub fn prompt_time(at: SystemTime) -> String {
    let s = rfc3339(at);
    format!("{} {}", &s[..10], &s[11..16])
}

/// Whole seconds since the Unix epoch (0 for a clock before it).
pub fn unix_seconds(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Parses an RFC 3339 timestamp.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(s.trim_end_matches('Z')).ok().or_else(|| humantime::parse_rfc3339(s).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn formats() {
        let t = UNIX_EPOCH + Duration::from_secs(1_767_323_045);
        assert_eq!(rfc3339(t), "2026-01-02T03:04:05Z");
        assert_eq!(prompt_time(t), "2026-01-02 03:04");
        assert_eq!(parse_rfc3339("2026-01-02T03:04:05Z"), Some(t));
    }

    #[test]
    fn a_clock_out_of_range_is_written_at_the_nearest_end() {
        let before = UNIX_EPOCH - Duration::from_secs(3600);
        assert_eq!(rfc3339(before), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_millis(before), "1970-01-01T00:00:00.000Z");
        assert_eq!(prompt_time(before), "1970-01-01 00:00");
        let after = UNIX_EPOCH + Duration::from_secs(400_000_000_000);
        assert_eq!(rfc3339(after), "9999-12-31T23:59:59Z");
        assert_eq!(rfc3339_millis(after), "9999-12-31T23:59:59.000Z");
        assert!(!is_writable(before) && !is_writable(after) && is_writable(SystemTime::now()));
    }
}
