//! ISO 8601 date-times as Hindsight clients send them (`2026-01-02T03:04:05.123+01:00`, `…Z`, or
//! no offset, meaning UTC) normalised to the RFC 3339 UTC form mneme stores, so that stored times
//! sort as text.
//!
//! Read by hand rather than with `humantime`, which reads years from 1970 only: the server (its
//! Python `datetime.fromisoformat`) takes any year from 1, a time without seconds or minutes,
//! the basic forms without separators and a decimal comma, and a whole retain was refused for a
//! date it would have stored.

/// The same instant as RFC 3339 UTC with milliseconds, or `None` when `s` is not a date-time
/// (or, moved to UTC, falls outside years 1 to 9999).
pub fn normalize(s: &str) -> Option<String> {
    let s = s.trim();
    // Every form is ASCII, and the readers below cut the text at byte offsets (`2025Waé` cut
    // inside its `é`: a panic, answered 500; review77 #1).
    if !s.is_ascii() {
        return None;
    }
    let (date, rest) = match s.find(['T', 't', ' ']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let days = days_of_date(date)?;
    let (millis_of_day, offset_minutes) = match rest {
        Some(rest) => time_of_day(rest)?,
        None => (0, 0),
    };
    let millis = days * DAY_MS + millis_of_day - offset_minutes * 60_000;
    (FIRST_MS..=LAST_MS).contains(&millis).then(|| format_millis(millis))
}

/// Days from 1970-01-01 of an ISO week date: `YYYY-Www-D` or `YYYYWwwD` (D: 1 Monday … 7).
fn days_of_week_date(date: &str) -> Option<i64> {
    let mut compact: String = date.chars().filter(|c| *c != '-').collect();
    let extended = (date.len() == 10 && date.as_bytes()[4] == b'-' && date.as_bytes()[8] == b'-')
        || (date.len() == 8 && date.as_bytes()[4] == b'-');
    if compact.len() == 7 && (extended || date.len() == 7) {
        compact.push('1'); // a week without its day: its Monday, as the server reads it
    } else if !(extended || date.len() == 8) {
        return None;
    }
    if compact.len() != 8 || compact.as_bytes()[4] != b'W' {
        return None;
    }
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit()).then(|| s.parse::<i64>().ok()).flatten();
    let (y, w, d) = (digits(&compact[..4])?, digits(&compact[5..7])?, digits(&compact[7..])?);
    // Week 1 holds 4 January; a year has 53 weeks when it starts on a Thursday, or on a
    // Wednesday in a leap year.
    let jan4 = days_from_civil(y, 1, 4);
    let monday_of_week1 = jan4 - (jan4 + 3).rem_euclid(7);
    let weeks_in = |y: i64| {
        let jan1 = (days_from_civil(y, 1, 1) + 3).rem_euclid(7); // 0: Monday
        let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
        if jan1 == 3 || (leap && jan1 == 2) {
            53
        } else {
            52
        }
    };
    if y < 1 || !(1..=weeks_in(y)).contains(&w) || !(1..=7).contains(&d) {
        return None;
    }
    Some(monday_of_week1 + (w - 1) * 7 + (d - 1))
}

const DAY_MS: i64 = 86_400_000;
/// 0001-01-01T00:00:00.000Z and 9999-12-31T23:59:59.999Z, in milliseconds from 1970.
const FIRST_MS: i64 = -62_135_596_800_000;
const LAST_MS: i64 = 253_402_300_799_999;

/// Days from 1970-01-01 of `YYYY-MM-DD` or `YYYYMMDD`, or of an ISO week date (`YYYY-Www-D`,
/// `YYYYWwwD`), as the server reads them.
fn days_of_date(date: &str) -> Option<i64> {
    if let Some(days) = days_of_week_date(date) {
        return Some(days);
    }
    let digits: String = date.chars().filter(|c| *c != '-').collect();
    let extended = date.len() == 10 && date.as_bytes()[4] == b'-' && date.as_bytes()[7] == b'-';
    if !(extended || date.len() == 8) || digits.len() != 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (y, m, d): (i64, i64, i64) = (digits[..4].parse().ok()?, digits[4..6].parse().ok()?, digits[6..].parse().ok()?);
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let month_days = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if y < 1 || !(1..=12).contains(&m) || d < 1 || d > month_days[(m - 1) as usize] {
        return None;
    }
    Some(days_from_civil(y, m, d))
}

/// Milliseconds into the day and the offset east of UTC in minutes, of `HH[:MM[:SS[.fff]]]`
/// (or without colons) followed by nothing, `Z`, or `±HH[:MM]`.
fn time_of_day(t: &str) -> Option<(i64, i64)> {
    let (clock, offset) = match t.find(['Z', 'z', '+', '-']) {
        // A space before the zone is read past, as the server reads it (`10:20:30 Z`).
        Some(i) => (t[..i].trim_end(), Some(&t[i..])),
        None => (t, None),
    };
    let offset_minutes = match offset {
        None => 0,
        Some(o) if o.eq_ignore_ascii_case("z") => 0,
        Some(o) => {
            let sign = if o.starts_with('-') { -1 } else { 1 };
            let digits: String = o[1..].chars().filter(|c| *c != ':').collect();
            if !(digits.len() == 2 || digits.len() == 4) || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let hours: i64 = digits[..2].parse().ok()?;
            let minutes: i64 = if digits.len() == 4 { digits[2..].parse().ok()? } else { 0 };
            if hours > 23 || minutes > 59 {
                return None;
            }
            sign * (hours * 60 + minutes)
        }
    };
    let (whole, fraction) = match clock.find(['.', ',']) {
        Some(i) => (&clock[..i], Some(&clock[i + 1..])),
        None => (clock, None),
    };
    let digits: String = whole.chars().filter(|c| *c != ':').collect();
    let colons = whole.matches(':').count();
    let fields = digits.len() / 2;
    let well_formed = digits.len().is_multiple_of(2)
        && (1..=3).contains(&fields)
        && (colons == 0 || colons == fields - 1 && whole.split(':').all(|f| f.len() == 2))
        && digits.bytes().all(|b| b.is_ascii_digit());
    if !well_formed || fraction.is_some() && fields != 3 {
        return None;
    }
    let field = |i: usize| -> i64 { digits.get(2 * i..2 * i + 2).and_then(|f| f.parse().ok()).unwrap_or(0) };
    let (hours, minutes, seconds) = (field(0), field(1), field(2));
    if hours > 23 || minutes > 59 || seconds > 59 {
        return None;
    }
    let millis = match fraction {
        Some(f) if f.is_empty() || !f.bytes().all(|b| b.is_ascii_digit()) => return None,
        Some(f) => format!("{f:0<3}")[..3].parse::<i64>().ok()?,
        None => 0,
    };
    Some((((hours * 60 + minutes) * 60 + seconds) * 1000 + millis, offset_minutes))
}

/// Days from 1970-01-01 of a date of the proleptic Gregorian calendar (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day counted from 1970-01-01 (the inverse of [`days_from_civil`]).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` of milliseconds from 1970.
fn format_millis(millis: i64) -> String {
    let (days, ms) = (millis.div_euclid(DAY_MS), millis.rem_euclid(DAY_MS));
    let (y, m, d) = civil_from_days(days);
    let (h, min, s, frac) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{frac:03}Z")
}

#[cfg(test)]
mod tests {
    use super::normalize;

    #[test]
    fn text_other_than_ascii_is_no_date() {
        for given in ["2025Waé", "2025W日", "2025W1ü", "2025W1\u{301}", "２０２６-01-02", "2026-01-02T03:04:05Ｚ"]
        {
            assert_eq!(normalize(given), None, "{given}");
        }
    }

    #[test]
    fn offsets_and_forms() {
        for (given, stored) in [
            ("2026-01-02T03:04:05Z", "2026-01-02T03:04:05.000Z"),
            ("2026-01-02T03:04:05.250+01:00", "2026-01-02T02:04:05.250Z"),
            ("2026-01-02T23:30:00-02:00", "2026-01-03T01:30:00.000Z"),
            ("2026-01-02T03:04:05", "2026-01-02T03:04:05.000Z"),
            ("2026-01-02 03:04:05", "2026-01-02T03:04:05.000Z"),
            ("2026-01-02", "2026-01-02T00:00:00.000Z"),
            ("2026-01-02T03:04:05+0530", "2026-01-01T21:34:05.000Z"),
            ("2026-01-02T03:04:05.123456Z", "2026-01-02T03:04:05.123Z"),
            // As the server takes them: no seconds, no minutes, the basic form, a decimal comma.
            ("2025-03-04T10:20", "2025-03-04T10:20:00.000Z"),
            ("2025-03-04T10", "2025-03-04T10:00:00.000Z"),
            ("20250304T102030Z", "2025-03-04T10:20:30.000Z"),
            ("2025-03-04T10:20:30,5Z", "2025-03-04T10:20:30.500Z"),
            // Any year from 1: before 1970 too.
            ("1969-07-20T20:17:00Z", "1969-07-20T20:17:00.000Z"),
            ("0002-03-01T00:00:00Z", "0002-03-01T00:00:00.000Z"),
            ("1600-02-29", "1600-02-29T00:00:00.000Z"),
            ("1970-01-01T00:00:00+01:00", "1969-12-31T23:00:00.000Z"),
            ("9999-12-31T23:59:59.999Z", "9999-12-31T23:59:59.999Z"),
            // As the server reads them too (review59 #5): week dates, a space before the zone.
            ("2025-W10-2", "2025-03-04T00:00:00.000Z"),
            ("2025W102T10:20:30Z", "2025-03-04T10:20:30.000Z"),
            ("2020-W53-5", "2021-01-01T00:00:00.000Z"),
            ("2026-W01-1", "2025-12-29T00:00:00.000Z"),
            ("2025-03-04T10:20:30 Z", "2025-03-04T10:20:30.000Z"),
            ("2025-W10", "2025-03-03T00:00:00.000Z"),
            ("2025W10", "2025-03-03T00:00:00.000Z"),
        ] {
            assert_eq!(normalize(given).as_deref(), Some(stored), "{given:?}");
        }
        for bad in [
            "2025-W53-1",
            "2025-W00-1",
            "2025-W10-8",
            "2025-W1-2",
            "yesterday",
            "2026-13-01T00:00:00Z",
            "2026-02-29",
            "1900-02-29",
            "2026-01-02T03:04:05+25:00",
            "2026-01-02T24:00:00Z",
            "2026-01-02T23:59:60Z",
            "2026-01-02T03:04:05Z+01:00",
            "2026-01-02T03:04.5",
            "2026-01-02T1:020",
            "2026-01-02T102:0",
            "",
            "12:00",
            "0000-01-01",
            "0001-01-01T00:00:00+01:00",
            "9999-12-31T23:00:00-02:00",
        ] {
            assert_eq!(normalize(bad), None, "{bad:?}");
        }
    }
}
