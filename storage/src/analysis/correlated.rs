//! Pythia's second question about a group whose units vary: which labels go with
//! the cost? Besides the functions (`variance::explain`), a spread often follows a
//! label the grouping left out — a zone, a kernel, a machine type. For each value of
//! each remaining label, the units carrying it are compared with the group's other
//! units by a standardized effect size:
//!
//! effect = (mean cost of the units carrying the value − mean cost of the others) / σ
//!
//! with σ the population standard deviation of all the group's unit costs (the
//! figure `variance::group_variance` reports). +2 means the carriers cost two of the
//! group's standard deviations more than the rest. Cohen's d would divide by the
//! pooled within-side deviation instead, which is 0 exactly when the label explains
//! everything; σ of the group keeps the figure finite and comparable across labels.

use std::collections::{BTreeMap, BTreeSet};

use crate::exec::grouping::GroupAcc;

/// Most labels one group's correlation looks at (the first by name): each is a key
/// of one group-by, whose rows are bounded by the group's series anyway.
pub const MAX_LABELS: usize = 32;

/// A label value whose units cost more (or less) than the group's other units.
#[derive(Clone, Debug, PartialEq)]
pub struct LabelEffect {
    /// The label's name.
    pub label: String,
    /// The value whose carriers differ most from the rest.
    pub value: String,
    /// Units carrying the value (on any of their series).
    pub units: usize,
    /// Mean cost of those units.
    pub mean_with: f64,
    /// Mean cost of the group's other units.
    pub mean_without: f64,
    /// mean_with / mean_without; `None` when the others cost nothing.
    pub ratio: Option<f64>,
    /// (mean_with − mean_without) / σ of the group's unit costs.
    pub effect: f64,
}

/// From rows keyed `[unit, labels[0], labels[1], …]` (one group's units; an empty
/// value is an absent label): per label its value with the largest |effect|, the
/// `k` labels with the largest first (ties: costlier carriers first, then by label).
///
/// One entry per label, so that a two-valued label (`zone=a` / `zone=b`, mirror
/// images) does not take two places. A value carried by a single unit is left out:
/// it only renames that unit, which `max_unit` already names. So is a value every
/// unit carries: there is nothing to compare it with. A group without spread (σ = 0)
/// has nothing to explain.
pub fn correlated_labels(rows: &GroupAcc, labels: &[String], k: usize) -> Vec<LabelEffect> {
    let mut cost: BTreeMap<&str, i64> = BTreeMap::new();
    // (label index, value) → units carrying it.
    let mut carriers: BTreeMap<(usize, &str), BTreeSet<&str>> = BTreeMap::new();
    for (key, &v) in &rows.rows {
        let Some((unit, values)) = key.split_first() else {
            continue;
        };
        *cost.entry(unit.as_str()).or_insert(0) += v;
        for (i, value) in values.iter().enumerate().take(labels.len()) {
            if !value.is_empty() {
                carriers
                    .entry((i, value.as_str()))
                    .or_default()
                    .insert(unit.as_str());
            }
        }
    }
    let n = cost.len();
    if n < 3 {
        // Two units: every shared value is carried by both.
        return Vec::new();
    }
    let total: f64 = cost.values().map(|&c| c as f64).sum();
    let (_, sigma) = super::mean_and_sigma(cost.values());
    if sigma == 0.0 {
        return Vec::new();
    }
    let mut best: BTreeMap<usize, LabelEffect> = BTreeMap::new();
    for ((i, value), units) in carriers {
        if units.len() < 2 || units.len() == n {
            continue;
        }
        let with: f64 = units.iter().map(|u| cost[u] as f64).sum();
        let mean_with = with / units.len() as f64;
        let mean_without = (total - with) / (n - units.len()) as f64;
        let e = LabelEffect {
            label: labels[i].clone(),
            value: value.to_string(),
            units: units.len(),
            mean_with,
            mean_without,
            ratio: (mean_without > 0.0).then(|| mean_with / mean_without),
            effect: (mean_with - mean_without) / sigma,
        };
        match best.get(&i) {
            Some(b) if rank(b, &e).is_le() => {}
            _ => {
                best.insert(i, e);
            }
        }
    }
    let mut out: Vec<LabelEffect> = best.into_values().collect();
    out.sort_by(rank);
    out.truncate(k);
    out
}

/// Larger |effect| first, then the costlier side, then by label and value.
fn rank(a: &LabelEffect, b: &LabelEffect) -> std::cmp::Ordering {
    b.effect
        .abs()
        .total_cmp(&a.effect.abs())
        .then_with(|| b.effect.total_cmp(&a.effect))
        .then_with(|| (&a.label, &a.value).cmp(&(&b.label, &b.value)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::test_rows as acc;

    fn names(l: &[&str]) -> Vec<String> {
        l.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_slow_zone_comes_first_with_its_exact_effect() {
        // Keys: [host, zone, kernel, pod, arch]. Zone b's hosts cost exactly twice
        // zone a's; the kernel is spread evenly; every pod is one host's (h1 has two
        // series).
        let rows = acc(&[
            (&["h1", "a", "k1", "p1", ""], 60),
            (&["h1", "a", "k1", "p0", ""], 40),
            (&["h2", "a", "k2", "p2", "arm"], 100),
            (&["h3", "b", "k1", "p3", "arm"], 200),
            (&["h4", "b", "k2", "p4", "arm"], 200),
        ]);
        let labels = names(&["zone", "kernel", "pod", "arch"]);
        let got = correlated_labels(&rows, &labels, 10);
        // mean 150, σ = 50.
        let want = [
            ("zone", "b", 2, 200.0, 100.0, Some(2.0), 2.0),
            // (500/3 − 100) / 50.
            (
                "arch",
                "arm",
                3,
                500.0 / 3.0,
                100.0,
                Some(5.0 / 3.0),
                4.0 / 3.0,
            ),
            ("kernel", "k1", 2, 150.0, 150.0, Some(1.0), 0.0),
        ];
        assert_eq!(got.len(), want.len(), "{got:#?}");
        for (g, (l, v, units, with, without, ratio, effect)) in got.iter().zip(want) {
            assert_eq!((g.label.as_str(), g.value.as_str(), g.units), (l, v, units));
            assert!((g.mean_with - with).abs() < 1e-9, "{g:?}");
            assert!((g.mean_without - without).abs() < 1e-9, "{g:?}");
            assert!((g.ratio.unwrap() - ratio.unwrap()).abs() < 1e-12, "{g:?}");
            assert!((g.effect - effect).abs() < 1e-12, "{g:?}");
        }
        assert_eq!(got[0].effect, 2.0, "exact");
        assert_eq!(correlated_labels(&rows, &labels, 1).len(), 1);
    }

    #[test]
    fn a_cheaper_zone_has_a_negative_effect() {
        // Zone c holds two of five hosts, both at 0: the others cost 100.
        let rows = acc(&[
            (&["h1", "c"], 0),
            (&["h2", "c"], 0),
            (&["h3", "d"], 100),
            (&["h4", "e"], 100),
            (&["h5", "f"], 100),
        ]);
        let got = correlated_labels(&rows, &names(&["zone"]), 5);
        // mean 60, σ = √((2·60² + 3·40²)/5) = √2400.
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].value.as_str(), got[0].units), ("c", 2));
        assert!((got[0].effect - (-100.0 / 2400f64.sqrt())).abs() < 1e-12);
        assert_eq!(got[0].ratio, Some(0.0));
    }

    #[test]
    fn nothing_to_say_without_spread_or_units() {
        let flat = acc(&[(&["h1", "a"], 5), (&["h2", "a"], 5), (&["h3", "b"], 5)]);
        assert!(correlated_labels(&flat, &names(&["zone"]), 5).is_empty());
        let two = acc(&[(&["h1", "a"], 5), (&["h2", "a"], 50)]);
        assert!(correlated_labels(&two, &names(&["zone"]), 5).is_empty());
        let none = acc(&[(&["h1"], 5), (&["h2"], 50), (&["h3"], 7)]);
        assert!(correlated_labels(&none, &[], 5).is_empty());
    }
}
