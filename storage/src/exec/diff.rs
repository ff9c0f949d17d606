//! Diff statistics of two call trees, as in Google-Wide Profiling (Ren et al., 2010).
//!
//! Each side becomes a flat distribution over functions (self value / side total),
//! so the two sides are comparable whatever their sample counts. The Manhattan
//! distance is summed over the top-k functions (ranked by their larger share on
//! either side) and the entropy is over all functions, in bits.

use rustc_hash::FxHashMap;

use super::tree::CallTree;

/// A function whose share of the profile moved between the two sides.
#[derive(Clone, Debug, PartialEq)]
pub struct DiffEntry {
    /// The function (frame) name.
    pub function: String,
    /// Its share of the base side's value.
    pub base_share: f64,
    /// Its share of the compared side's value.
    pub compare_share: f64,
    /// `compare_share − base_share`.
    pub delta: f64,
}

/// GWP stability figures of a diff.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DiffStats {
    /// Σ |p_base(f) − p_compare(f)| over the top-k functions.
    pub manhattan: f64,
    /// −Σ p log2 p of the base side.
    pub entropy_base: f64,
    /// −Σ p log2 p of the compared side.
    pub entropy_compare: f64,
    /// Total value of each side, in the profile type's unit (the sample count for
    /// `…:samples:count` types).
    pub samples_base: i64,
    /// Total value of the compared side.
    pub samples_compare: i64,
}

/// Self value per function (frame) name.
pub fn self_by_name(tree: &CallTree) -> FxHashMap<String, i64> {
    let mut out: FxHashMap<String, i64> = FxHashMap::default();
    for (i, n) in tree.nodes().iter().enumerate().skip(1) {
        if n.self_value != 0 {
            *out.entry(tree.node_name(i as u32).to_string()).or_insert(0) += n.self_value;
        }
    }
    out
}

/// Returns the `k` functions whose share moved most (by |delta|), and the statistics.
pub fn diff_stats(base: &CallTree, compare: &CallTree, k: usize) -> (Vec<DiffEntry>, DiffStats) {
    let (fb, fc) = (self_by_name(base), self_by_name(compare));
    diff_stats_by_name(&borrowed(&fb), &borrowed(&fc), k)
}

fn borrowed(f: &FxHashMap<String, i64>) -> FxHashMap<&str, i64> {
    f.iter().map(|(k, &v)| (k.as_str(), v)).collect()
}

/// [`diff_stats`] of two flat distributions (self value per function name). Strings
/// are copied only for the `k` entries returned.
pub fn diff_stats_by_name(
    base: &FxHashMap<&str, i64>,
    compare: &FxHashMap<&str, i64>,
    k: usize,
) -> (Vec<DiffEntry>, DiffStats) {
    let total = |f: &FxHashMap<&str, i64>| f.values().sum::<i64>();
    let (tb, tc) = (total(base), total(compare));
    let share = |v: i64, t: i64| if t == 0 { 0.0 } else { v as f64 / t as f64 };
    // (name, base share, compare share) over the union of both sides' functions.
    let mut rows: Vec<(&str, f64, f64)> = base
        .iter()
        .map(|(&n, &v)| {
            (
                n,
                share(v, tb),
                share(compare.get(n).copied().unwrap_or(0), tc),
            )
        })
        .chain(
            compare
                .iter()
                .filter(|(n, _)| !base.contains_key(*n))
                .map(|(&n, &v)| (n, 0.0, share(v, tc))),
        )
        .collect();
    // `0.0 - sum` and the folds below never yield -0.0 (an empty f64 `sum()` is -0.0,
    // which JSON shows as `-0.0`).
    let entropy_of = |side: fn(&(&str, f64, f64)) -> f64| {
        0.0 - rows
            .iter()
            .map(side)
            .filter(|&x| x > 0.0)
            .map(|x| x * x.log2())
            .fold(0.0, |a, b| a + b)
    };
    let (entropy_base, entropy_compare) = (entropy_of(|r| r.1), entropy_of(|r| r.2));
    // Names are distinct, so both orders are total and the results deterministic.
    let by_share = |a: &(&str, f64, f64), b: &(&str, f64, f64)| {
        b.1.max(b.2)
            .total_cmp(&a.1.max(a.2))
            .then_with(|| a.0.cmp(b.0))
    };
    let by_delta = |a: &(&str, f64, f64), b: &(&str, f64, f64)| {
        (b.2 - b.1)
            .abs()
            .total_cmp(&(a.2 - a.1).abs())
            .then_with(|| a.0.cmp(b.0))
    };
    let manhattan = first_k(&mut rows, k, by_share)
        .iter()
        .map(|r| (r.2 - r.1).abs())
        .fold(0.0, |a, b| a + b);
    let movers = first_k(&mut rows, k, by_delta)
        .iter()
        .map(|&(n, b, c)| DiffEntry {
            function: n.to_string(),
            base_share: b,
            compare_share: c,
            delta: c - b,
        })
        .collect();
    let stats = DiffStats {
        manhattan,
        entropy_base,
        entropy_compare,
        samples_base: tb,
        samples_compare: tc,
    };
    (movers, stats)
}

/// The first `k` of `rows` in `order`, sorted (a partial sort).
fn first_k<T>(
    rows: &mut [T],
    k: usize,
    mut order: impl FnMut(&T, &T) -> std::cmp::Ordering,
) -> &[T] {
    let k = k.min(rows.len());
    if k == 0 {
        return &[];
    }
    if k < rows.len() {
        rows.select_nth_unstable_by(k - 1, &mut order);
    }
    let head = &mut rows[..k];
    head.sort_unstable_by(order);
    head
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed() {
        let mut b = CallTree::new();
        b.add_stack(&["main", "a"], 50);
        b.add_stack(&["main", "b"], 50);
        b.finalize();
        let mut c = CallTree::new();
        c.add_stack(&["main", "a"], 25);
        c.add_stack(&["main", "b"], 25);
        c.add_stack(&["x", "c"], 50);
        c.finalize();
        let (movers, s) = diff_stats(&b, &c, 2);
        // Base: a .5 b .5. Compare: a .25 b .25 c .5. Top 2 by max share: a, b (.5
        // each; c ties at .5 but sorts after by name): M = .25 + .25.
        assert!((s.manhattan - 0.5).abs() < 1e-12);
        assert!((s.entropy_base - 1.0).abs() < 1e-12);
        assert!((s.entropy_compare - 1.5).abs() < 1e-12);
        assert_eq!((s.samples_base, s.samples_compare), (100, 100));
        assert_eq!(movers[0].function, "c");
        assert!((movers[0].delta - 0.5).abs() < 1e-12);
        assert_eq!(movers[1].function, "a");
    }

    #[test]
    fn empty_sides_give_positive_zeros() {
        let mut empty = CallTree::new();
        empty.finalize();
        let mut one = CallTree::new();
        one.add_stack(&["main"], 10);
        one.finalize();
        for (b, c) in [(&empty, &empty), (&one, &one)] {
            let (_, s) = diff_stats(b, c, 10);
            for v in [s.manhattan, s.entropy_base, s.entropy_compare] {
                assert_eq!(v, 0.0);
                assert!(v.is_sign_positive(), "{v:?} prints as -0.0");
            }
        }
    }
}
