//! Timestamp formats fixed by the contract (RFC 3339 UTC, and `YYYY-MM-DD HH:MM` for prompts).

use std::time::SystemTime;

/// `2026-01-02T03:04:05Z` (second precision, UTC).
pub fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

/// `2026-01-02T03:04:05.123Z` (millisecond precision, UTC).
pub fn rfc3339_millis(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
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
}
