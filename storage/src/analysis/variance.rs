//! Variance hunting (Pythia): units (hosts, pods, processes) that should behave
//! alike — the members of one group, e.g. one `service_name` + `version` — but
//! don't. Per group, the coefficient of variation (CoV = σ / mean, σ the population
//! standard deviation) of the units' cost over the window ranks where to look; for
//! a group, the functions whose share differs most between its costly units (above
//! the group's mean) and the others say what explains the spread.

use std::collections::BTreeMap;

use crate::exec::grouping::GroupAcc;

/// One group's spread of unit costs.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupVariance {
    /// The grouping labels' values.
    pub group: Vec<String>,
    /// Units (values of the unit label) with data.
    pub units: usize,
    /// Mean cost per unit.
    pub mean: f64,
    /// Population standard deviation of the unit costs.
    pub stddev: f64,
    /// stddev / mean.
    pub cov: f64,
    /// The costliest unit and its cost.
    pub max_unit: (String, i64),
    /// The cheapest unit and its cost.
    pub min_unit: (String, i64),
}

/// A function whose share differs between a group's costly and cheap units.
#[derive(Clone, Debug, PartialEq)]
pub struct Explainer {
    /// The function (leaf frame).
    pub function: String,
    /// Its share of the costly units' total.
    pub high_share: f64,
    /// Its share of the other units' total.
    pub low_share: f64,
}

/// Unit costs per group, from rows keyed by the grouping labels then the unit.
fn units_by_group(rows: &GroupAcc) -> BTreeMap<&[String], BTreeMap<&str, i64>> {
    let mut out: BTreeMap<&[String], BTreeMap<&str, i64>> = BTreeMap::new();
    for (key, &v) in &rows.rows {
        if let Some((unit, group)) = key.split_last() {
            *out.entry(group).or_default().entry(unit).or_insert(0) += v;
        }
    }
    out
}

/// CoV per group of rows keyed `[group labels…, unit]`, by CoV descending (ties by
/// group). Groups of fewer than two units have no spread and are left out.
pub fn group_variance(rows: &GroupAcc) -> Vec<GroupVariance> {
    let mut out: Vec<GroupVariance> = units_by_group(rows)
        .into_iter()
        .filter(|(_, units)| units.len() >= 2)
        .map(|(group, units)| {
            let (mean, stddev) = super::mean_and_sigma(units.values());
            let pick = |better: fn(i64, i64) -> bool| {
                let mut best: Option<(&str, i64)> = None;
                for (&u, &v) in &units {
                    if best.is_none_or(|(_, b)| better(v, b)) {
                        best = Some((u, v));
                    }
                }
                best.map_or((String::new(), 0), |(u, v)| (u.to_string(), v))
            };
            GroupVariance {
                group: group.to_vec(),
                units: units.len(),
                mean,
                stddev,
                cov: if mean > 0.0 { stddev / mean } else { 0.0 },
                max_unit: pick(|v, b| v > b),
                min_unit: pick(|v, b| v < b),
            }
        })
        .collect();
    out.sort_by(|a, b| b.cov.total_cmp(&a.cov).then_with(|| a.group.cmp(&b.group)));
    out
}

/// For the group `group`, from rows keyed `[group labels…, unit, function]`: the
/// `k` functions whose share differs most between the units costing more than the
/// group's mean and the rest.
pub fn explain(rows: &GroupAcc, group: &[String], k: usize) -> Vec<Explainer> {
    // unit → function → value, for this group only.
    let mut units: BTreeMap<&str, BTreeMap<&str, i64>> = BTreeMap::new();
    for (key, &v) in &rows.rows {
        let [head @ .., unit, function] = key.as_slice() else {
            continue;
        };
        if head == group {
            *units
                .entry(unit.as_str())
                .or_default()
                .entry(function.as_str())
                .or_insert(0) += v;
        }
    }
    let totals: BTreeMap<&str, i64> = units.iter().map(|(&u, f)| (u, f.values().sum())).collect();
    if totals.is_empty() {
        return Vec::new();
    }
    let mean = totals.values().sum::<i64>() as f64 / totals.len() as f64;
    let mut high: BTreeMap<&str, i64> = BTreeMap::new();
    let mut low: BTreeMap<&str, i64> = BTreeMap::new();
    for (u, funcs) in &units {
        let side = if totals[u] as f64 > mean {
            &mut high
        } else {
            &mut low
        };
        for (&f, &v) in funcs {
            *side.entry(f).or_insert(0) += v;
        }
    }
    let share = |side: &BTreeMap<&str, i64>, f: &str| {
        let t: i64 = side.values().sum();
        if t == 0 {
            0.0
        } else {
            side.get(f).copied().unwrap_or(0) as f64 / t as f64
        }
    };
    let mut names: Vec<&str> = high.keys().chain(low.keys()).copied().collect();
    names.sort_unstable();
    names.dedup();
    let mut out: Vec<Explainer> = names
        .into_iter()
        .map(|f| Explainer {
            function: f.to_string(),
            high_share: share(&high, f),
            low_share: share(&low, f),
        })
        .collect();
    let gap = |e: &Explainer| (e.high_share - e.low_share).abs();
    out.sort_by(|a, b| {
        gap(b)
            .total_cmp(&gap(a))
            .then_with(|| a.function.cmp(&b.function))
    });
    out.truncate(k);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::test_rows as acc;

    #[test]
    fn one_slow_host_gives_the_highest_cov() {
        let rows = acc(&[
            (&["api", "h1"], 100),
            (&["api", "h2"], 100),
            (&["api", "h3"], 100),
            (&["api", "h4"], 300),
            (&["db", "h5"], 90),
            (&["db", "h6"], 110),
            (&["web", "h7"], 50),
        ]);
        let g = group_variance(&rows);
        assert_eq!(g.len(), 2, "web has one unit: no spread");
        // api: mean 150, σ = √((3·50² + 150²)/4) = √7500.
        assert_eq!(g[0].group, ["api"]);
        assert_eq!((g[0].units, g[0].mean), (4, 150.0));
        assert!((g[0].stddev - 7500f64.sqrt()).abs() < 1e-9);
        assert!((g[0].cov - 7500f64.sqrt() / 150.0).abs() < 1e-12);
        assert_eq!(g[0].max_unit, ("h4".to_string(), 300));
        assert_eq!(g[0].min_unit, ("h1".to_string(), 100));
        // db: mean 100, σ 10.
        assert_eq!(g[1].group, ["db"]);
        assert!((g[1].cov - 0.1).abs() < 1e-12);
    }

    #[test]
    fn the_slow_hosts_lock_explains_it() {
        let mut rows = vec![(["api", "h4", "lock"], 200), (["db", "h5", "lock"], 999)];
        for h in ["h1", "h2", "h3", "h4"] {
            rows.push((["api", h, "serve"], 100));
            rows.push((["api", h, "gc"], 10));
        }
        let rows: Vec<(&[&str], i64)> = rows.iter().map(|(k, v)| (&k[..], *v)).collect();
        let e = explain(&acc(&rows), &["api".to_string()], 5);
        // Costly: h4 (310 > mean 160); the rest: h1..h3 (330 together).
        let want = [
            ("lock", 200.0 / 310.0, 0.0),
            ("serve", 100.0 / 310.0, 300.0 / 330.0),
            ("gc", 10.0 / 310.0, 30.0 / 330.0),
        ];
        assert_eq!(e.len(), 3);
        for (got, (f, hi, lo)) in e.iter().zip(want) {
            assert_eq!(got.function, f);
            assert!((got.high_share - hi).abs() < 1e-12, "{got:?}");
            assert!((got.low_share - lo).abs() < 1e-12, "{got:?}");
        }
        assert!(explain(&acc(&rows), &["nope".to_string()], 5).is_empty());
    }
}
