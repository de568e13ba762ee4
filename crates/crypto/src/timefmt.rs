//! Tor's document time, `YYYY-MM-DD HH:MM:SS` in UTC (dir-spec §1.3), to
//! and from Unix seconds. Calendar arithmetic and validation are the
//! `time` crate's; there is no wall clock here (callers pass Unix seconds).

use time::format_description::BorrowedFormatItem;
use time::macros::format_description;
use time::{OffsetDateTime, PrimitiveDateTime};

/// `YYYY-MM-DD HH:MM:SS`.
const TOR_TIME: &[BorrowedFormatItem<'static>] =
    format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");

/// The latest time tor writes (`9999-12-31 23:59:59`); later times are
/// written as this, as tor does.
pub const MAX_UNIX: u64 = 253_402_300_799;

/// Format Unix seconds as `YYYY-MM-DD HH:MM:SS` (UTC), tor's document time.
/// Times after [`MAX_UNIX`] are written as `9999-12-31 23:59:59`.
pub fn format_utc(unix: u64) -> String {
    let t = i64::try_from(unix.min(MAX_UNIX)).unwrap_or(i64::MAX);
    OffsetDateTime::from_unix_timestamp(t)
        .ok()
        .and_then(|t| t.format(TOR_TIME).ok())
        .unwrap_or_else(|| "9999-12-31 23:59:59".to_string())
}

/// Parse `YYYY-MM-DD HH:MM:SS` (UTC, years 1970-9999) into Unix seconds.
/// Impossible dates and times (2026-02-31, hour 24, minute 60) are refused.
/// Second 60 (a leap second, which tor accepts) counts as the next second.
pub fn parse_utc(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    // Fixed shape: exactly four year digits, two of everything else.
    let shape = b"dddd-dd-dd dd:dd:dd";
    if b.len() != shape.len()
        || !b.iter().zip(shape).all(|(c, f)| match f {
            b'd' => c.is_ascii_digit(),
            _ => c == f,
        })
    {
        return None;
    }
    let (text, leap) = if s.ends_with(":60") {
        (format!("{}59", &s[..17]), 1)
    } else {
        (s.to_string(), 0)
    };
    let t = PrimitiveDateTime::parse(&text, TOR_TIME)
        .ok()?
        .assume_utc()
        .unix_timestamp();
    u64::try_from(t).ok()?.checked_add(leap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        assert_eq!(format_utc(0), "1970-01-01 00:00:00");
        assert_eq!(format_utc(1_600_000_000), "2020-09-13 12:26:40");
        assert_eq!(format_utc(951_782_400), "2000-02-29 00:00:00");
        for t in [
            0u64,
            86_399,
            951_782_400,
            1_600_000_000,
            4_102_444_800,
            1_709_164_800,
            MAX_UNIX,
        ] {
            assert_eq!(parse_utc(&format_utc(t)), Some(t));
        }
        assert_eq!(parse_utc("2020-13-01 00:00:00"), None);
        assert_eq!(parse_utc("2020-01-01T00:00:00"), None);
        assert_eq!(parse_utc("+020-01-01 00:00:00"), None);
    }

    #[test]
    fn impossible_dates_are_refused() {
        for bad in [
            "2026-02-31 00:00:00",
            "2026-02-29 00:00:00",
            "2100-02-29 00:00:00",
            "2026-04-31 12:00:00",
            "2026-00-10 00:00:00",
            "2026-01-00 00:00:00",
            "2026-01-32 00:00:00",
            "2026-11-23 24:00:00",
            "2026-11-23 10:60:00",
            "2026-11-23 10:00:61",
            "1969-12-31 23:59:59",
            "2026-11-23 10:00:0",
            "2026-11-23 10:00:00 ",
            " 2026-11-23 10:00:00",
            "2026-11-23 1a:00:00",
            "２026-11-23 10:00:00",
            "",
        ] {
            assert_eq!(parse_utc(bad), None, "{bad}");
        }
    }

    #[test]
    fn leap_years_and_leap_seconds() {
        // 2000 and 2024 are leap years, 1900 and 2100 are not.
        assert_eq!(parse_utc("2000-02-29 00:00:00"), Some(951_782_400));
        assert_eq!(parse_utc("2024-02-29 12:00:00"), Some(1_709_208_000));
        assert_eq!(parse_utc("2024-03-01 00:00:00"), Some(1_709_251_200));
        assert_eq!(parse_utc("2100-03-01 00:00:00"), Some(4_107_542_400));
        assert_eq!(format_utc(1_709_208_000), "2024-02-29 12:00:00");
        assert_eq!(format_utc(1_709_251_200 - 1), "2024-02-29 23:59:59");
        // The year's last second, a leap second and the next day.
        assert_eq!(
            parse_utc("2016-12-31 23:59:60"),
            parse_utc("2017-01-01 00:00:00")
        );
        // Beyond tor's range: written as its last second.
        assert_eq!(format_utc(u64::MAX), "9999-12-31 23:59:59");
        assert_eq!(format_utc(MAX_UNIX + 1), "9999-12-31 23:59:59");
    }
}
