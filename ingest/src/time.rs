//! Times as clients write them: RFC 3339 (`2026-01-02T15:04:05Z`), unix seconds,
//! milliseconds, microseconds or nanoseconds (told apart by digit count), and
//! `now[±<n><unit>]`. `/ingest`'s `from`/`until` and every query endpoint read them
//! with [`parse_time`], so a time means the same wherever it is written.

use crate::error::IngestError;

/// Milliseconds in one duration unit: `ms`, `s`, `m`, `h`, `d`, `w` (the units of
/// relative times here and of durations elsewhere in the server).
pub fn duration_unit_ms(unit: &str) -> Option<i64> {
    Some(match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 7 * 86_400_000,
        _ => return None,
    })
}

/// Parses a time into ms since the epoch; `param` names it in the error.
pub fn parse_time(param: &'static str, value: &str, now_ms: i64) -> Result<i64, IngestError> {
    let v = value.trim();
    let bad = || {
        IngestError::param(
            param,
            format!(
                "{value:?} is not a time: use RFC 3339 (2026-01-02T15:04:05Z), a unix time or now[-<n>(s|m|h|d|w)]"
            ),
        )
    };
    if v.len() >= 19 && v.as_bytes().get(4) == Some(&b'-') {
        return parse_rfc3339(v).ok_or_else(bad);
    }
    if let Some(rest) = v.strip_prefix("now") {
        if rest.is_empty() {
            return Ok(now_ms);
        }
        let (sign, amount) = match rest.split_at_checked(1) {
            Some(("-", a)) => (-1, a),
            Some(("+", a)) => (1, a),
            _ => return Err(bad()),
        };
        let unit_at = amount.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let (n, unit) = amount.split_at(unit_at);
        let n: i64 = n.parse().map_err(|_| bad())?;
        let unit_ms = duration_unit_ms(unit).ok_or_else(bad)?;
        let delta = n.checked_mul(unit_ms).ok_or_else(bad)?;
        return now_ms.checked_add(sign * delta).ok_or_else(bad);
    }
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n: i64 = v.parse().map_err(|_| bad())?;
    Ok(match v.len() {
        0..=10 => n.saturating_mul(1_000),
        11..=13 => n,
        14..=16 => n / 1_000,
        _ => n / 1_000_000,
    })
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

/// RFC 3339 in UTC with milliseconds (what Alertmanager expects, and what answers show) for `startsAt`/`endsAt`.
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

    const NOW: i64 = 1_700_000_000_000;

    #[test]
    fn times_by_digit_count_and_relative() {
        assert_eq!(parse_time("from", "1700000000", NOW).unwrap(), NOW);
        assert_eq!(parse_time("from", "1700000000123", NOW).unwrap(), NOW + 123);
        assert_eq!(
            parse_time("from", "1700000000123456", NOW).unwrap(),
            NOW + 123
        );
        assert_eq!(
            parse_time("from", "1700000000123456789", NOW).unwrap(),
            NOW + 123
        );
        assert_eq!(parse_time("from", "now", NOW).unwrap(), NOW);
        assert_eq!(parse_time("from", "now-1h", NOW).unwrap(), NOW - 3_600_000);
        assert_eq!(parse_time("from", "now-30m", NOW).unwrap(), NOW - 1_800_000);
        assert_eq!(parse_time("from", "now-15s", NOW).unwrap(), NOW - 15_000);
        for bad in ["", "abc", "now-", "now-1y", "now1h", "-5", "1.5"] {
            let err = parse_time("from", bad, NOW).unwrap_err();
            assert!(
                err.to_string().starts_with("invalid parameter from:"),
                "{err}"
            );
        }
    }

    #[test]
    fn rfc3339_in_and_out() {
        let t = parse_time("t", "2026-11-22T01:02:03.456Z", 0).unwrap();
        assert_eq!(rfc3339(t), "2026-11-22T01:02:03.456Z");
        assert_eq!(parse_time("t", "1970-01-01T01:00:00+01:00", 0).unwrap(), 0);
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert!(parse_time("t", "2026-13-01T00:00:00Z", 0).is_err());
        assert!(parse_time("t", "2026-0é-01T00:00:00Z", 0).is_err());
    }
}
