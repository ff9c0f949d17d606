//! Diff statistics of two call trees, as in Google-Wide Profiling (Ren et al., 2010).
//!
//! Each side becomes a flat distribution over functions (self value / side total),
//! so the two sides are comparable whatever their sample counts. The Manhattan
//! distance is summed over the top-k functions (ranked by their larger share on
//! either side) and the entropy is over all functions, in bits.

use rustc_hash::FxHashMap;

use super::tree::CallTree;

#[derive(Clone, Debug, PartialEq)]
pub struct DiffEntry {
    pub function: String,
    pub base_share: f64,
    pub compare_share: f64,
    /// `compare_share − base_share`.
    pub delta: f64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct DiffStats {
    /// Σ |p_base(f) − p_compare(f)| over the top-k functions.
    pub manhattan: f64,
    /// −Σ p log2 p of the base side.
    pub entropy_base: f64,
    pub entropy_compare: f64,
    /// Total value of each side, in the profile type's unit (the sample count for
    /// `…:samples:count` types).
    pub samples_base: i64,
    pub samples_compare: i64,
}

/// Self value per function (frame) name.
pub fn flat(tree: &CallTree) -> FxHashMap<String, i64> {
    let mut out: FxHashMap<String, i64> = FxHashMap::default();
    for (i, n) in tree.nodes().iter().enumerate().skip(1) {
        if n.self_value != 0 {
            *out.entry(tree.node_name(i as u32).to_string()).or_insert(0) += n.self_value;
        }
    }
    out
}

fn shares(flat: &FxHashMap<String, i64>) -> (FxHashMap<&str, f64>, i64) {
    let total: i64 = flat.values().sum();
    let t = total as f64;
    let m = flat
        .iter()
        .map(|(k, &v)| (k.as_str(), if total == 0 { 0.0 } else { v as f64 / t }))
        .collect();
    (m, total)
}

pub fn entropy<'a>(p: impl Iterator<Item = &'a f64>) -> f64 {
    -p.filter(|&&x| x > 0.0).map(|&x| x * x.log2()).sum::<f64>()
}

/// Returns the `k` functions whose share moved most (by |delta|), and the statistics.
pub fn diff_stats(base: &CallTree, compare: &CallTree, k: usize) -> (Vec<DiffEntry>, DiffStats) {
    let (fb, fc) = (flat(base), flat(compare));
    let ((pb, tb), (pc, tc)) = (shares(&fb), shares(&fc));
    let mut names: Vec<&str> = pb.keys().chain(pc.keys()).copied().collect();
    names.sort_unstable();
    names.dedup();
    let entries: Vec<DiffEntry> = names
        .iter()
        .map(|&n| {
            let (b, c) = (
                pb.get(n).copied().unwrap_or(0.0),
                pc.get(n).copied().unwrap_or(0.0),
            );
            DiffEntry {
                function: n.to_string(),
                base_share: b,
                compare_share: c,
                delta: c - b,
            }
        })
        .collect();
    let mut top = entries.clone();
    top.sort_by(|a, b| {
        b.base_share
            .max(b.compare_share)
            .total_cmp(&a.base_share.max(a.compare_share))
            .then_with(|| a.function.cmp(&b.function))
    });
    top.truncate(k);
    let manhattan = top.iter().map(|e| e.delta.abs()).sum();
    let mut movers = entries;
    movers.sort_by(|a, b| {
        b.delta
            .abs()
            .total_cmp(&a.delta.abs())
            .then_with(|| a.function.cmp(&b.function))
    });
    movers.truncate(k);
    let stats = DiffStats {
        manhattan,
        entropy_base: entropy(pb.values()),
        entropy_compare: entropy(pc.values()),
        samples_base: tb,
        samples_compare: tc,
    };
    (movers, stats)
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
}
