//! The one place times and durations are read and written: every endpoint, rule and
//! command parses `from`/`until`, steps, windows and ages here, so `now-1h` means the
//! same everywhere. Instants are RFC 3339, unix seconds/ms/µs/ns (by digit count) or
//! `now[±<n><unit>]`; durations are `500ms`, `30s`, `5m`, `1h30m`, `7d`, `2w` or bare
//! seconds. Values shown to people (tables, tooltips) are formatted in human units here.

use profiledb_ingest::parse_time;
pub use profiledb_ingest::time::rfc3339;
use thiserror::Error;

/// A time or duration that could not be read; `what` names the parameter.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TimeError {
    #[error("{what} must not be negative (got {text:?})")]
    Negative { what: String, text: String },
    #[error("{what} is empty")]
    Empty { what: String },
    #[error("{what} {text:?} is too large")]
    TooLarge { what: String, text: String },
    #[error("{what} {text:?} is not a duration like 30s, 5m, 1h30m, 7d")]
    NotDuration { what: String, text: String },
    #[error("{what}: {text:?} is not a time: use RFC 3339 (2026-01-02T15:04:05Z), unix seconds or ms, or now-<n>(s|m|h|d|w)")]
    NotInstant { what: String, text: String },
}

/// Parses a duration such as `500ms`, `30s`, `5m`, `1h30m`, `7d`, `2w` into ms.
/// A bare number is seconds (fractions allowed: `0.5` is 500 ms). Negative durations
/// are refused with a message that says so.
pub fn parse_duration(what: &str, text: &str) -> Result<i64, TimeError> {
    let s = text.trim();
    let err = |f: fn(String, String) -> TimeError| f(what.to_string(), text.to_string());
    if s.starts_with('-') {
        return Err(err(|what, text| TimeError::Negative { what, text }));
    }
    if s.is_empty() {
        return Err(TimeError::Empty {
            what: what.to_string(),
        });
    }
    let too_large = || err(|what, text| TimeError::TooLarge { what, text });
    let bad = || err(|what, text| TimeError::NotDuration { what, text });
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse::<i64>()
            .ok()
            .and_then(|n| n.checked_mul(1000))
            .ok_or_else(too_large);
    }
    if s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let secs: f64 = s.parse().map_err(|_| bad())?;
        let ms = (secs * 1000.0).round();
        return if ms.is_finite() && ms < 1e15 {
            Ok(ms as i64)
        } else {
            Err(too_large())
        };
    }
    let mut total: i64 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let n: i64 = rest[..digits].parse().map_err(|_| too_large())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit_ms = profiledb_ingest::duration_unit_ms(&rest[..unit_len]).ok_or_else(bad)?;
        rest = &rest[unit_len..];
        total = n
            .checked_mul(unit_ms)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(too_large)?;
    }
    Ok(total)
}

/// Parses a retention age: a duration, or `forever`/`none`/`0` for no limit.
pub fn parse_max_age(what: &str, text: &str) -> Result<Option<i64>, TimeError> {
    match text.trim() {
        "forever" | "none" | "0" | "" => Ok(None),
        _ => parse_duration(what, text).map(|ms| (ms > 0).then_some(ms)),
    }
}

/// Formats ms as the shortest exact duration text (`3600000` → `1h`).
pub fn format_duration(ms: i64) -> String {
    const UNITS: [(&str, i64); 6] = [
        ("w", 7 * 86_400_000),
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ];
    if ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let mut rest = ms.unsigned_abs() as i64;
    if ms < 0 {
        out.push('-');
    }
    // Weeks only when whole: `30d` reads better than `4w2d`.
    let week = UNITS[0].1;
    for (u, v) in UNITS {
        if v == week && rest % week != 0 {
            continue;
        }
        if rest >= v {
            out.push_str(&format!("{}{u}", rest / v));
            rest %= v;
        }
    }
    out
}

/// A retention age as `parse_max_age` reads it: `30d`, or `forever`.
pub fn format_max_age(ms: Option<i64>) -> String {
    ms.map_or_else(|| "forever".to_string(), format_duration)
}

/// Parses an instant: RFC 3339 (`2026-01-02T03:04:05Z`, offsets and fractions
/// allowed), unix seconds/ms/µs/ns (by digit count), or `now`, `now-1h`.
pub fn parse_instant(what: &'static str, text: &str, now_ms: i64) -> Result<i64, TimeError> {
    parse_time(what, text, now_ms).map_err(|_| TimeError::NotInstant {
        what: what.to_string(),
        text: text.to_string(),
    })
}

/// A value in its sample unit, as people read it: `120 ms`, `1.23 GiB`, `4.5 k`.
/// JSON answers keep raw numbers; this is for text, tables and tooltips.
pub fn human_value(value: f64, unit: &str) -> String {
    let (scaled, suffix) = match unit {
        "nanoseconds" => scale_time(value / 1e9),
        "microseconds" => scale_time(value / 1e6),
        "milliseconds" => scale_time(value / 1e3),
        "seconds" => scale_time(value),
        "bytes" => scale_by(value, 1024.0, &["B", "KiB", "MiB", "GiB", "TiB", "PiB"]),
        _ => scale_by(value, 1000.0, &["", "k", "M", "G", "T", "P"]),
    };
    let digits = if scaled.abs() >= 100.0 || scaled.fract() == 0.0 {
        0
    } else if scaled.abs() >= 10.0 {
        1
    } else {
        2
    };
    let n = format!("{scaled:.digits$}");
    if suffix.is_empty() {
        n
    } else {
        format!("{n} {suffix}")
    }
}

fn scale_time(secs: f64) -> (f64, &'static str) {
    let a = secs.abs();
    if a == 0.0 {
        (0.0, "s")
    } else if a < 1e-6 {
        (secs * 1e9, "ns")
    } else if a < 1e-3 {
        (secs * 1e6, "µs")
    } else if a < 1.0 {
        (secs * 1e3, "ms")
    } else if a < 120.0 {
        (secs, "s")
    } else if a < 7200.0 {
        (secs / 60.0, "min")
    } else if a < 2.0 * 86400.0 {
        (secs / 3600.0, "h")
    } else {
        (secs / 86400.0, "d")
    }
}

fn scale_by(v: f64, base: f64, units: &[&'static str]) -> (f64, &'static str) {
    let mut v = v;
    let mut i = 0;
    while v.abs() >= base && i + 1 < units.len() {
        v /= base;
        i += 1;
    }
    (v, units[i])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Rule text is user input: parsing must answer, never panic.
        #[test]
        fn parsers_never_panic(s in "\\PC{0,40}", t in "[0-9TZ:.+-]{0,30}") {
            let _ = parse_duration("d", &s);
            let _ = parse_instant("i", &s, 0);
            let _ = parse_instant("i", &t, 0);
        }

        #[test]
        fn rfc3339_round_trips(ms in 0i64..4_102_444_800_000) {
            prop_assert_eq!(parse_instant("t", &rfc3339(ms), 0), Ok(ms));
        }
    }

    #[test]
    fn human_units() {
        assert_eq!(human_value(120e6, "nanoseconds"), "120 ms");
        assert_eq!(human_value(1.5e9, "nanoseconds"), "1.50 s");
        assert_eq!(human_value(3.0 * 3600e9, "nanoseconds"), "3 h");
        assert_eq!(
            human_value(1.25 * 1024.0 * 1024.0 * 1024.0, "bytes"),
            "1.25 GiB"
        );
        assert_eq!(human_value(512.0, "bytes"), "512 B");
        assert_eq!(human_value(4500.0, "count"), "4.50 k");
        assert_eq!(human_value(7.0, "count"), "7");
        assert_eq!(human_value(0.0, "nanoseconds"), "0 s");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("w", "1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration("w", "7d"), Ok(604_800_000));
        assert_eq!(parse_duration("w", "250ms"), Ok(250));
        assert_eq!(parse_duration("w", "15"), Ok(15_000));
        assert!(matches!(
            parse_duration("w", "-1h"),
            Err(TimeError::Negative { .. })
        ));
        assert_eq!(parse_duration("w", "0.5"), Ok(500));
        assert_eq!(parse_max_age("a", "forever"), Ok(None));
        assert_eq!(parse_max_age("a", "30d"), Ok(Some(30 * 86_400_000)));
        assert!(parse_max_age("a", "30x").is_err());
        assert!(parse_max_age("a", "d").is_err());
        assert_eq!(parse_max_age("a", "90m"), Ok(Some(90 * 60_000)));
        assert_eq!(parse_max_age("a", "15"), Ok(Some(15_000)));
        assert_eq!(format_max_age(Some(30 * 86_400_000)), "30d");
        assert_eq!(format_max_age(None), "forever");
        assert!(parse_duration("w", "1y").is_err());
        assert!(parse_duration("w", "h").is_err());
        assert_eq!(format_duration(5_400_000), "1h30m");
        assert_eq!(format_duration(86_400_000), "1d");
        assert_eq!(format_duration(30 * 86_400_000), "30d");
        assert_eq!(format_duration(14 * 86_400_000), "2w");
    }

    #[test]
    fn instants_round_trip() {
        let t = parse_instant("t", "2026-11-22T01:02:03.456Z", 0).unwrap();
        assert_eq!(rfc3339(t), "2026-11-22T01:02:03.456Z");
        assert_eq!(parse_instant("t", "1970-01-01T01:00:00+01:00", 0), Ok(0));
        assert_eq!(parse_instant("t", "now-1h", 3_600_000), Ok(0));
        assert_eq!(parse_instant("t", "1700000000", 0), Ok(1_700_000_000_000));
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert!(parse_instant("t", "2026-13-01T00:00:00Z", 0).is_err());
        assert!(parse_instant("t", "2026-0é-01T00:00:00Z", 0).is_err());
    }
}
