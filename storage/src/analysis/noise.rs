//! GWP's sampling-noise model: the Manhattan distance between two profiles of the
//! same behaviour, drawn with N samples each, shrinks as M(N) ≈ C / √N.
//!
//! C is fitted per profile type from stored data the way the paper does it: split
//! the machines (hosts) into two random halves many times, measure the distance
//! between the halves' profiles (the same top-k Manhattan distance the diff
//! reports) and solve for C. For sides of unequal size the expectation generalises
//! to M ≈ C · √((1/N₁ + 1/N₂) / 2), which is C/√N when both sides hold N.
//!
//! N is the sides' total value in the profile type's unit (samples × period for
//! CPU time): for one profile type the period is a constant factor, which C
//! absorbs, so a C fitted from values applies to values.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use crate::exec::diff::diff_stats_by_name;
use crate::exec::grouping::GroupAcc;

/// How many random host splits a fit averages over by default.
pub const DEFAULT_SPLITS: usize = 16;

/// A diff is significant when its distance exceeds the expected noise by this
/// factor (about two standard errors: noise alone rarely gets there).
pub const DEFAULT_MARGIN: f64 = 2.0;

/// A fitted noise model of one profile type.
#[derive(Clone, Debug, PartialEq)]
pub struct NoiseModel {
    /// The constant of M(N) ≈ C / √N.
    pub c: f64,
    /// Hosts the fit split.
    pub hosts: usize,
    /// Splits it averaged over.
    pub splits: usize,
}

/// What a diff's distance means against the noise for its sample counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Above what sampling noise alone explains.
    Significant,
    /// Within the noise: the profiles may not differ at all.
    WithinNoise,
}

impl Verdict {
    /// `significant` or `within_noise`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Significant => "significant",
            Verdict::WithinNoise => "within_noise",
        }
    }
}

/// Self value per function, per host, from a group-by keyed by `[host, function]`.
pub fn per_host(rows: &GroupAcc) -> BTreeMap<&str, FxHashMap<&str, i64>> {
    let mut out: BTreeMap<&str, FxHashMap<&str, i64>> = BTreeMap::new();
    for (key, &v) in &rows.rows {
        if let [host, function] = key.as_slice() {
            *out.entry(host.as_str())
                .or_default()
                .entry(function.as_str())
                .or_insert(0) += v;
        }
    }
    out
}

/// Fits C over `splits` random halvings of `hosts` (seeded, so a fit is
/// reproducible), measuring the top-`k` Manhattan distance. `None` with fewer than
/// two hosts holding data: there is nothing to split.
pub fn fit(
    hosts: &BTreeMap<&str, FxHashMap<&str, i64>>,
    k: usize,
    splits: usize,
    seed: u64,
) -> Option<NoiseModel> {
    let hosts: Vec<&FxHashMap<&str, i64>> = hosts
        .values()
        .filter(|f| f.values().any(|&v| v > 0))
        .collect();
    if hosts.len() < 2 || splits == 0 {
        return None;
    }
    let half = hosts.len() / 2;
    let mut sum = 0.0;
    for s in 0..splits as u64 {
        let mut order: Vec<(u64, usize)> = (0..hosts.len())
            .map(|i| (mix(seed ^ mix(s) ^ mix(i as u64 + 1)), i))
            .collect();
        order.sort_unstable();
        let (a, b) = order.split_at(half);
        let (pa, pb) = (merge_hosts(&hosts, a), merge_hosts(&hosts, b));
        let (_, stats) = diff_stats_by_name(&pa, &pb, k);
        sum += stats.manhattan / spread(stats.samples_base, stats.samples_compare)?;
    }
    Some(NoiseModel {
        c: sum / splits as f64,
        hosts: hosts.len(),
        splits,
    })
}

impl NoiseModel {
    /// The distance sampling noise alone gives two sides of these totals; `None`
    /// when a side is empty (no distance is expected of nothing).
    pub fn expected(&self, n_base: i64, n_compare: i64) -> Option<f64> {
        Some(self.c * spread(n_base, n_compare)?)
    }

    /// Whether `manhattan` exceeds `margin` × the expected noise.
    pub fn verdict(
        &self,
        manhattan: f64,
        n_base: i64,
        n_compare: i64,
        margin: f64,
    ) -> Option<Verdict> {
        let noise = self.expected(n_base, n_compare)?;
        Some(if manhattan > margin * noise {
            Verdict::Significant
        } else {
            Verdict::WithinNoise
        })
    }
}

/// √((1/N₁ + 1/N₂) / 2): the noise scale of two sides, 1/√N when equal.
fn spread(n1: i64, n2: i64) -> Option<f64> {
    if n1 <= 0 || n2 <= 0 {
        return None;
    }
    Some(((1.0 / n1 as f64 + 1.0 / n2 as f64) / 2.0).sqrt())
}

fn merge_hosts<'a>(
    hosts: &[&FxHashMap<&'a str, i64>],
    pick: &[(u64, usize)],
) -> FxHashMap<&'a str, i64> {
    let mut out: FxHashMap<&str, i64> = FxHashMap::default();
    for &(_, i) in pick {
        for (&f, &v) in hosts[i] {
            *out.entry(f).or_insert(0) += v;
        }
    }
    out
}

/// SplitMix64's finaliser: a well-spread hash of a counter, enough to shuffle hosts
/// reproducibly without a random-number crate.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts<'a>(rows: &[(&'a str, &'a str, i64)]) -> BTreeMap<&'a str, FxHashMap<&'a str, i64>> {
        let mut out: BTreeMap<&str, FxHashMap<&str, i64>> = BTreeMap::new();
        for &(h, f, v) in rows {
            *out.entry(h).or_default().entry(f).or_insert(0) += v;
        }
        out
    }

    #[test]
    fn two_hosts_fit_exactly() {
        // Every split is {h1} | {h2}: M = |0.6 − 0.4| + |0.4 − 0.6| = 0.4 at
        // N = 100 a side, so C = 0.4 · √100 = 4.
        let h = hosts(&[
            ("h1", "a", 60),
            ("h1", "b", 40),
            ("h2", "a", 40),
            ("h2", "b", 60),
        ]);
        let m = fit(&h, 10, 8, 1).unwrap();
        assert!((m.c - 4.0).abs() < 1e-12, "{}", m.c);
        assert_eq!((m.hosts, m.splits), (2, 8));
        // Sides of 400 samples: expected 4/√400 = 0.2.
        let e = m.expected(400, 400).unwrap();
        assert!((e - 0.2).abs() < 1e-12, "{e}");
        assert_eq!(m.verdict(0.3, 400, 400, 2.0), Some(Verdict::WithinNoise));
        assert_eq!(m.verdict(0.5, 400, 400, 2.0), Some(Verdict::Significant));
        assert_eq!(m.verdict(0.5, 0, 400, 2.0), None);
    }

    #[test]
    fn identical_hosts_have_no_noise_and_one_host_no_fit() {
        let h = hosts(&[("h1", "a", 5), ("h2", "a", 7), ("h3", "a", 9)]);
        assert_eq!(fit(&h, 10, 4, 7).unwrap().c, 0.0);
        assert_eq!(fit(&hosts(&[("h1", "a", 5)]), 10, 4, 7), None);
    }

    #[test]
    fn splits_are_balanced_and_reproducible() {
        let rows: Vec<(String, &str, i64)> = (0..9)
            .flat_map(|i| {
                [
                    (format!("h{i}"), "a", 10 + i),
                    (format!("h{i}"), "b", 20 - i),
                ]
            })
            .collect();
        let borrowed: Vec<(&str, &str, i64)> =
            rows.iter().map(|(h, f, v)| (h.as_str(), *f, *v)).collect();
        let h = hosts(&borrowed);
        let (m1, m2) = (fit(&h, 10, 16, 3).unwrap(), fit(&h, 10, 16, 3).unwrap());
        assert_eq!(m1, m2);
        assert!(m1.c > 0.0);
    }
}
