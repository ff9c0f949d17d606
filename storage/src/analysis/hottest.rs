//! Hottest shared code: which functions or binaries cost the most across the whole
//! fleet, and in how many services they appear (the query that found zlib at ~5 %
//! of Google's cycles).

use rustc_hash::FxHashMap;

use crate::exec::grouping::{GroupAcc, GroupKey};

/// What the ranking is keyed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HotDimension {
    /// The leaf function of each stack (self value: where the time is spent).
    Function,
    /// Every function on each stack (inclusive value: what it and its callees cost).
    FunctionTotal,
    /// The binary (mapping file) of each stack's leaf: libraries such as zlib.
    Binary,
}

impl HotDimension {
    /// The group-by key that projects samples onto this dimension.
    pub fn group_key(self) -> GroupKey {
        match self {
            HotDimension::Function => GroupKey::Function,
            HotDimension::FunctionTotal => GroupKey::FunctionTotal,
            HotDimension::Binary => GroupKey::Binary,
        }
    }
}

/// One function or binary of the ranking.
#[derive(Clone, Debug, PartialEq)]
pub struct HotEntry {
    /// Function name or binary path.
    pub name: String,
    /// Its summed value over every service, in the profile type's unit.
    pub value: i64,
    /// `value` / the fleet total of the selection.
    pub share: f64,
    /// How many distinct services it has samples in.
    pub services: usize,
}

/// The ranking, hottest first, and what it is a share of.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Hottest {
    /// Entries by value descending (ties by name), at most the requested limit.
    pub entries: Vec<HotEntry>,
    /// Total value of every selected sample: the denominator of the shares.
    pub total: i64,
    /// Distinct services in the selection.
    pub services: usize,
}

/// Ranks the rows of a group-by keyed by `[service label, dimension]`.
///
/// Rows with another arity are ignored (they cannot come from that group-by).
/// `limit` 0 keeps every entry.
pub fn rank_shared(rows: &GroupAcc, limit: usize) -> Hottest {
    let mut by_name: FxHashMap<&str, (i64, Vec<&str>)> = FxHashMap::default();
    let mut services: Vec<&str> = Vec::new();
    for (key, &value) in &rows.rows {
        let [service, name] = key.as_slice() else {
            continue;
        };
        let e = by_name.entry(name.as_str()).or_default();
        e.0 = e.0.saturating_add(value);
        e.1.push(service.as_str());
        services.push(service.as_str());
    }
    services.sort_unstable();
    services.dedup();
    let share = |v: i64| {
        if rows.total == 0 {
            0.0
        } else {
            v as f64 / rows.total as f64
        }
    };
    let mut entries: Vec<HotEntry> = by_name
        .into_iter()
        .map(|(name, (value, mut svcs))| {
            // One group-by row per (service, name): still dedup, in case the service
            // label was absent on some series and came back as "".
            svcs.sort_unstable();
            svcs.dedup();
            HotEntry {
                name: name.to_string(),
                value,
                share: share(value),
                services: svcs.len(),
            }
        })
        .collect();
    entries.sort_by(|a, b| b.value.cmp(&a.value).then_with(|| a.name.cmp(&b.name)));
    if limit > 0 {
        entries.truncate(limit);
    }
    Hottest {
        entries,
        total: rows.total,
        services: services.len(),
    }
}

/// Cost of a CPU-time value spread over a window, as GWP reported it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost {
    /// Core-seconds spent per day at the window's rate.
    pub core_seconds_per_day: f64,
    /// Money per year at the given price per core-hour, when one was given.
    pub per_year: Option<f64>,
}

const MS_PER_DAY: f64 = 86_400_000.0;

/// The cost of `cpu_nanoseconds` of CPU time observed over `window_ms`, projected
/// to a day (and a 365-day year when `price_per_core_hour` is set). `None` for an
/// empty window, which has no rate.
pub fn cpu_cost(
    cpu_nanoseconds: i64,
    window_ms: i64,
    price_per_core_hour: Option<f64>,
) -> Option<Cost> {
    if window_ms <= 0 {
        return None;
    }
    let core_seconds = cpu_nanoseconds as f64 / 1e9;
    let core_seconds_per_day = core_seconds * MS_PER_DAY / window_ms as f64;
    Some(Cost {
        core_seconds_per_day,
        per_year: price_per_core_hour.map(|p| core_seconds_per_day / 3600.0 * p * 365.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(rows: &[(&str, &str, i64)], total: i64) -> GroupAcc {
        GroupAcc {
            rows: rows
                .iter()
                .map(|&(s, n, v)| (vec![s.to_string(), n.to_string()], v))
                .collect(),
            total,
        }
    }

    #[test]
    fn ranks_by_fleet_share_and_counts_services() {
        let rows = acc(
            &[
                ("api", "libz.so", 30),
                ("db", "libz.so", 20),
                ("web", "libz.so", 10),
                ("db", "libc.so", 100),
                ("api", "api", 40),
            ],
            200,
        );
        let h = rank_shared(&rows, 0);
        assert_eq!(h.total, 200);
        assert_eq!(h.services, 3);
        let got: Vec<(&str, i64, f64, usize)> = h
            .entries
            .iter()
            .map(|e| (e.name.as_str(), e.value, e.share, e.services))
            .collect();
        assert_eq!(
            got,
            vec![
                ("libc.so", 100, 0.5, 1),
                ("libz.so", 60, 0.3, 3),
                ("api", 40, 0.2, 1),
            ]
        );
        assert_eq!(rank_shared(&rows, 1).entries.len(), 1);
    }

    #[test]
    fn cost_of_one_core_for_a_day() {
        // One core busy for an hour, observed over an hour: 86 400 core-seconds a
        // day, 24 core-hours a day, at 0.05 per core-hour 438 per year.
        let c = cpu_cost(3_600_000_000_000, 3_600_000, Some(0.05)).unwrap();
        assert_eq!(c.core_seconds_per_day, 86_400.0);
        let per_year = c.per_year.unwrap();
        assert!((per_year - 438.0).abs() < 1e-9, "{per_year}");
        assert_eq!(cpu_cost(1, 0, None), None);
    }
}
