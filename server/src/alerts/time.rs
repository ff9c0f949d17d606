//! Durations (`90s`, `1h30m`, `7d`) and instants (RFC 3339, unix, `now-1h`) as rules
//! and the `diff` command write them, and RFC 3339 output for Alertmanager.

use profiledb_ingest::parse_time;

/// Parses a duration such as `500ms`, `30s`, `5m`, `1h30m`, `7d`, `2w` into ms.
/// A bare number is seconds. Negative durations are refused with a message that says so.
pub fn parse_duration(what: &str, text: &str) -> Result<i64, String> {
    let s = text.trim();
    if s.starts_with('-') {
        return Err(format!("{what} must not be negative (got {text:?})"));
    }
    if s.is_empty() {
        return Err(format!("{what} is empty"));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse::<i64>()
            .ok()
            .and_then(|n| n.checked_mul(1000))
            .ok_or_else(|| format!("{what} {text:?} is too large"));
    }
    let bad = || format!("{what} {text:?} is not a duration like 30s, 5m, 1h30m, 7d");
    let mut total: i64 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let n: i64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit_ms = profiledb_ingest::duration_unit_ms(&rest[..unit_len]).ok_or_else(bad)?;
        rest = &rest[unit_len..];
        total = n
            .checked_mul(unit_ms)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(|| format!("{what} {text:?} is too large"))?;
    }
    Ok(total)
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
    for (u, v) in UNITS {
        if rest >= v {
            out.push_str(&format!("{}{u}", rest / v));
            rest %= v;
        }
    }
    out
}

/// Parses an instant: RFC 3339 (`2026-01-02T03:04:05Z`, offsets and fractions
/// allowed), unix seconds/ms/µs/ns (by digit count), or `now`, `now-1h`.
pub fn parse_instant(what: &'static str, text: &str, now_ms: i64) -> Result<i64, String> {
    let s = text.trim();
    if s.len() >= 19 && s.as_bytes().get(4) == Some(&b'-') {
        return parse_rfc3339(s).ok_or_else(|| format!("{what}: {text:?} is not valid RFC 3339"));
    }
    parse_time(what, s, now_ms).map_err(|e| format!("{e}; RFC 3339 is accepted too"))
}

fn num(s: &str) -> Option<i64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn parse_rfc3339(s: &str) -> Option<i64> {
    // Byte slicing below needs one byte per character.
    if !s.is_ascii() {
        return None;
    }
    let b = s.as_bytes();
    if !(b[4] == b'-' && b[7] == b'-' && matches!(b[10], b'T' | b't' | b' ') && b[13] == b':')
        || b[16] != b':'
    {
        return None;
    }
    let (y, mo, d) = (num(&s[0..4])?, num(&s[5..7])?, num(&s[8..10])?);
    let (h, mi, se) = (num(&s[11..13])?, num(&s[14..16])?, num(&s[17..19])?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut frac_ms = 0;
    if let Some(r) = rest.strip_prefix('.') {
        let n = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
        let digits = &r[..n];
        let mut ms = digits.chars().take(3).collect::<String>();
        while ms.len() < 3 {
            ms.push('0');
        }
        frac_ms = num(&ms)?;
        rest = &r[n..];
    }
    let offset_ms = match rest {
        "Z" | "z" => 0,
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) && &o[3..4] == ":" => {
            let v = (num(&o[1..3])? * 60 + num(&o[4..6])?) * 60_000;
            if o.starts_with('-') {
                -v
            } else {
                v
            }
        }
        _ => return None,
    };
    let days = days_from_civil(y, mo, d);
    Some(((days * 24 + h) * 60 + mi) * 60_000 + se * 1000 + frac_ms - offset_ms)
}

/// RFC 3339 in UTC with milliseconds, as Alertmanager expects for `startsAt`/`endsAt`.
pub fn rfc3339(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    )
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
    fn durations() {
        assert_eq!(parse_duration("w", "1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration("w", "7d"), Ok(604_800_000));
        assert_eq!(parse_duration("w", "250ms"), Ok(250));
        assert_eq!(parse_duration("w", "15"), Ok(15_000));
        assert!(parse_duration("w", "-1h").unwrap_err().contains("negative"));
        assert!(parse_duration("w", "1y").is_err());
        assert!(parse_duration("w", "h").is_err());
        assert_eq!(format_duration(5_400_000), "1h30m");
        assert_eq!(format_duration(86_400_000), "1d");
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
