//! The evaluation step, free of I/O and clocks: a rule, its previous state, the time
//! and what the diff engine measured go in; the next state and the notifications to
//! send come out. The scheduler feeds it real time; the tests step simulated time.

use profiledb_storage::analysis::noise::{NoiseModel, Verdict};
use profiledb_storage::{DiffEntry, DiffStats, QueryError};
use rustc_hash::FxHashMap;

use super::rule::{Condition, Ranges, Rule, Watch};
use super::state::{
    AlertState, Measurement, Mover, NoiseCheck, Notification, NotificationKind, RuleState,
};

/// Turns a diff of the rule's two ranges into the rule's figures.
pub fn measure(
    rule: &Rule,
    ranges: Ranges,
    base: &FxHashMap<String, i64>,
    compare: &FxHashMap<String, i64>,
    top: &[DiffEntry],
    stats: &DiffStats,
) -> Measurement {
    let samples_base = stats.samples_base as f64 / rule.sample_value;
    let samples_compare = stats.samples_compare as f64 / rule.sample_value;
    // A share of 0 on the base side is "under one sample", so a new function gets a
    // finite relative increase.
    let relative = |b: f64, c: f64| {
        if c == 0.0 && b == 0.0 {
            // Nothing on either side: no change, not a 100 % drop.
            0.0
        } else {
            c / b.max(1.0 / samples_base.max(1.0)) - 1.0
        }
    };
    let movers: Vec<Mover> = top
        .iter()
        .map(|e| Mover {
            function: e.function.clone(),
            base_share: e.base_share,
            compare_share: e.compare_share,
            delta_pp: e.delta * 100.0,
        })
        .collect();
    let (function, base_share, compare_share) = match &rule.watch {
        Watch::Function { regex } => {
            let side = |f: &FxHashMap<String, i64>| {
                let total: i64 = f.values().sum();
                let mut best: Option<(&str, i64)> = None;
                let mut matched = 0i64;
                for (name, &v) in f {
                    if regex.is_match(name) {
                        matched += v;
                        if best.is_none_or(|(bn, bv)| v > bv || (v == bv && name.as_str() < bn)) {
                            best = Some((name.as_str(), v));
                        }
                    }
                }
                let share = if total > 0 {
                    matched as f64 / total as f64
                } else {
                    0.0
                };
                (best.map(|(n, _)| n.to_string()), share)
            };
            let (bf, bs) = side(base);
            let (cf, cs) = side(compare);
            (cf.or(bf), bs, cs)
        }
        Watch::TopK { .. } => {
            let pick = match rule.condition {
                Condition::RelativeIncrease(_) => movers.iter().max_by(|a, b| {
                    relative(a.base_share, a.compare_share)
                        .total_cmp(&relative(b.base_share, b.compare_share))
                }),
                _ => movers
                    .iter()
                    .max_by(|a, b| a.delta_pp.total_cmp(&b.delta_pp)),
            };
            match pick {
                Some(m) => (Some(m.function.clone()), m.base_share, m.compare_share),
                None => (None, 0.0, 0.0),
            }
        }
    };
    let delta_pp = (compare_share - base_share) * 100.0;
    let relative_increase = relative(base_share, compare_share);
    let (value, threshold) = match rule.condition {
        Condition::ShareDeltaPp(x) => (delta_pp, x),
        Condition::RelativeIncrease(x) => (relative_increase, x),
        Condition::Manhattan(x) => (stats.manhattan, x),
    };
    let required_samples = rule.required_samples(base_share);
    let enough_samples = samples_base.min(samples_compare) >= required_samples as f64;
    Measurement {
        ranges,
        function,
        base_share,
        compare_share,
        delta_pp,
        relative_increase,
        manhattan: stats.manhattan,
        entropy_base: stats.entropy_base,
        entropy_compare: stats.entropy_compare,
        total_base: stats.samples_base,
        total_compare: stats.samples_compare,
        samples_base,
        samples_compare,
        required_samples,
        value,
        threshold,
        enough_samples,
        condition_met: value >= threshold,
        top: movers,
        noise: None,
    }
}

/// The noise check of a diff's distance against a fitted model (`None`: the model
/// could not be fitted).
pub fn check_noise(model: Option<&NoiseModel>, stats: &DiffStats, margin: f64) -> NoiseCheck {
    let (nb, nc) = (stats.samples_base, stats.samples_compare);
    NoiseCheck {
        expected: model.and_then(|m| m.expected(nb, nc)),
        above: model
            .and_then(|m| m.verdict(stats.manhattan, nb, nc, margin))
            .map(|v| v == Verdict::Significant),
    }
}

/// Why an evaluation made no measurement (the rule's state is kept, its
/// `last_error` says why).
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// A query of the rule failed.
    #[error(transparent)]
    Query(#[from] QueryError),
    /// The blocking task that queries panicked or was cancelled.
    #[error("evaluation task failed: {0}")]
    Task(tokio::task::JoinError),
}

/// One evaluation at `now`. `outcome` is the measurement, or why it could not be
/// made (the state is then kept: a failing query neither fires nor resolves).
///
/// As in Prometheus: the condition holding moves inactive/resolved → pending, and
/// pending → firing once it has held for the rule's `for` (at once when `for` is 0);
/// it stopping moves pending → inactive and firing → resolved. Too few samples counts
/// as "not holding", so thin data can resolve an alert but never fire one.
pub fn step(
    rule: &Rule,
    prev: &RuleState,
    now: i64,
    outcome: Result<Measurement, EvalError>,
) -> (RuleState, Vec<Notification>) {
    let mut s = prev.clone();
    s.last_eval_ms = Some(now);
    let m = match outcome {
        Err(e) => {
            s.last_error = Some(e.to_string());
            return (s, Vec::new());
        }
        Ok(m) => m,
    };
    s.last_error = None;
    let mut out = Vec::new();
    let notify = |kind, starts_at_ms, m: &Measurement| Notification {
        rule: rule.name().to_string(),
        kind,
        starts_at_ms,
        at_ms: now,
        labels: rule.spec.labels.clone(),
        annotations: rule.spec.annotations.clone(),
        measurement: m.clone(),
    };
    if m.active() {
        if matches!(s.state, AlertState::Inactive | AlertState::Resolved) {
            s.state = AlertState::Pending;
            s.active_at_ms = Some(now);
            s.fired_at_ms = None;
            s.resolved_at_ms = None;
            s.fired_with = None;
        }
        let active_at = s.active_at_ms.unwrap_or(now);
        if s.state == AlertState::Pending && now - active_at >= rule.for_ms {
            s.state = AlertState::Firing;
            s.fired_at_ms = Some(now);
            s.fired_with = Some(m.clone());
            out.push(notify(NotificationKind::Firing, active_at, &m));
        }
    } else {
        match s.state {
            AlertState::Pending => {
                s.state = AlertState::Inactive;
                s.active_at_ms = None;
            }
            AlertState::Firing => {
                s.state = AlertState::Resolved;
                s.resolved_at_ms = Some(now);
                let starts = s.active_at_ms.unwrap_or(now);
                out.push(notify(NotificationKind::Resolved, starts, &m));
            }
            AlertState::Inactive | AlertState::Resolved => {}
        }
    }
    s.last = Some(m);
    (s, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerts::rule::{BaselineSpec, RuleSpec, WatchSpec};
    use profiledb_storage::CallTree;
    use profiledb_storage::{diff_stats, self_by_name};

    const MIN: i64 = 60_000;

    fn rule(for_: &str, condition: Condition, watch: WatchSpec) -> Rule {
        Rule::validate(RuleSpec {
            name: "r".into(),
            profile_type: "process_cpu:cpu:nanoseconds:cpu:nanoseconds".into(),
            selector: String::new(),
            watch,
            window: "10m".into(),
            baseline: BaselineSpec::Offset("1d".into()),
            condition,
            min_samples: None,
            sample_value: Some(1.0),
            above_noise: None,
            for_duration: for_.into(),
            interval: "1m".into(),
            labels: [("severity".to_string(), "page".to_string())].into(),
            annotations: Default::default(),
            tenant: None,
        })
        .unwrap()
    }

    /// A profile with `n` samples, `share` of them in `hot`, the rest spread evenly
    /// over ten other functions (deterministic).
    fn tree(n: i64, share: f64) -> CallTree {
        let mut t = CallTree::new();
        let hot = (n as f64 * share).round() as i64;
        t.add_stack(&["main", "hot"], hot);
        let rest = n - hot;
        for i in 0..10 {
            let name = format!("f{i}");
            t.add_stack(&["main", &name], rest / 10 + i64::from(i < rest % 10));
        }
        t.finalize();
        t
    }

    fn measured(r: &Rule, now: i64, base: &CallTree, cmp: &CallTree) -> Measurement {
        let (top, stats) = diff_stats(base, cmp, r.top_k());
        measure(
            r,
            r.ranges(now),
            &self_by_name(base),
            &self_by_name(cmp),
            &top,
            &stats,
        )
    }

    fn function_rule(for_: &str) -> Rule {
        rule(
            for_,
            Condition::ShareDeltaPp(10.0),
            WatchSpec::Function("^hot$".into()),
        )
    }

    #[test]
    fn measures_the_watched_function() {
        let r = function_rule("5m");
        let m = measured(&r, 0, &tree(10_000, 0.05), &tree(10_000, 0.20));
        assert_eq!(m.function.as_deref(), Some("hot"));
        assert!((m.base_share - 0.05).abs() < 1e-9);
        assert!((m.compare_share - 0.20).abs() < 1e-9);
        assert!((m.delta_pp - 15.0).abs() < 1e-6);
        assert!((m.relative_increase - 3.0).abs() < 1e-9);
        assert_eq!(m.required_samples, 800);
        assert!(m.active());
        let thin = measured(&r, 0, &tree(500, 0.05), &tree(500, 0.20));
        assert!(thin.condition_met && !thin.enough_samples && !thin.active());
    }

    #[test]
    fn noise_requirement_blocks_changes_within_noise() {
        let r = function_rule("0s");
        let (base, cmp) = (tree(10_000, 0.05), tree(10_000, 0.20));
        let (_, stats) = diff_stats(&base, &cmp, r.top_k());
        // Top 10 by larger share: hot (+0.15) and nine of the ten others
        // (0.095 → 0.08 each): M = 0.15 + 9 × 0.015 = 0.285.
        assert!(
            (stats.manhattan - 0.285).abs() < 1e-9,
            "{}",
            stats.manhattan
        );
        let model = |c: f64| NoiseModel {
            c,
            hosts: 4,
            splits: 16,
        };
        let mut m = measured(&r, 0, &base, &cmp);
        // C = 10 at 10 000 samples a side: expected 0.1, 2 × 0.1 < 0.285.
        m.noise = Some(check_noise(Some(&model(10.0)), &stats, 2.0));
        let n = m.noise.clone().unwrap();
        assert!((n.expected.unwrap() - 0.1).abs() < 1e-12);
        assert_eq!(n.above, Some(true));
        assert!(m.active());
        // C = 20: expected 0.2, 2 × 0.2 > 0.285: the same change is noise.
        m.noise = Some(check_noise(Some(&model(20.0)), &stats, 2.0));
        assert_eq!(m.noise.as_ref().unwrap().above, Some(false));
        assert!(m.condition_met && m.enough_samples && !m.active());
        let (s, sent) = step(&r, &RuleState::default(), 0, Ok(m.clone()));
        assert_eq!((s.state, sent.len()), (AlertState::Inactive, 0));
        // No fit (one host): the sample guard alone decides.
        m.noise = Some(check_noise(None, &stats, 2.0));
        assert_eq!(m.noise.as_ref().unwrap().expected, None);
        assert!(m.active());
    }

    #[test]
    fn pending_firing_resolved_with_simulated_time() {
        let r = function_rule("5m");
        let (normal, hot) = (tree(10_000, 0.05), tree(10_000, 0.20));
        let mut s = RuleState::default();
        let mut t = 0;
        let mut sent = Vec::new();
        let mut states = Vec::new();
        // Minute 0..3 normal, 3..12 regressed, 12.. normal again.
        for minute in 0..15 {
            t = minute * MIN;
            let cmp = if (3..12).contains(&minute) {
                &hot
            } else {
                &normal
            };
            let (ns, n) = step(&r, &s, t, Ok(measured(&r, t, &normal, cmp)));
            s = ns;
            states.push(s.state);
            sent.extend(n);
        }
        use AlertState::*;
        assert_eq!(
            states,
            [
                Inactive, Inactive, Inactive, Pending, Pending, Pending, Pending, Pending, Firing,
                Firing, Firing, Firing, Resolved, Resolved, Resolved
            ]
        );
        // Fires at the first evaluation at least `for` after it became pending.
        assert_eq!(sent.len(), 2);
        assert_eq!(sent[0].kind, NotificationKind::Firing);
        assert_eq!(sent[0].starts_at_ms, 3 * MIN);
        assert_eq!(sent[0].at_ms, 8 * MIN);
        assert_eq!(sent[0].measurement.function.as_deref(), Some("hot"));
        assert_eq!(sent[1].kind, NotificationKind::Resolved);
        assert_eq!(sent[1].starts_at_ms, 3 * MIN);
        assert_eq!(sent[1].at_ms, 12 * MIN);
        assert_eq!(sent[0].labels["severity"], "page");
        assert_eq!(s.resolved_at_ms, Some(12 * MIN));
        let _ = t;
    }

    #[test]
    fn pending_that_stops_goes_back_to_inactive_and_errors_keep_state() {
        let r = function_rule("5m");
        let (normal, hot) = (tree(10_000, 0.05), tree(10_000, 0.20));
        let (s, n) = step(
            &r,
            &RuleState::default(),
            0,
            Ok(measured(&r, 0, &normal, &hot)),
        );
        assert_eq!((s.state, n.len()), (AlertState::Pending, 0));
        let (s2, n) = step(&r, &s, MIN, Err(QueryError::Timeout.into()));
        assert_eq!((s2.state, n.len()), (AlertState::Pending, 0));
        assert_eq!(
            s2.last_error.as_deref(),
            Some("query timed out: narrow the time range or the selector")
        );
        let (s3, n) = step(&r, &s2, 2 * MIN, Ok(measured(&r, 0, &normal, &normal)));
        assert_eq!((s3.state, n.len()), (AlertState::Inactive, 0));
        assert_eq!(s3.active_at_ms, None);
    }

    #[test]
    fn for_zero_fires_at_once_and_a_new_episode_is_a_new_notification() {
        let r = function_rule("0s");
        let (normal, hot) = (tree(10_000, 0.05), tree(10_000, 0.20));
        let mut s = RuleState::default();
        let mut keys = Vec::new();
        for (i, cmp) in [&hot, &normal, &hot, &normal].into_iter().enumerate() {
            let t = i as i64 * MIN;
            let (ns, n) = step(&r, &s, t, Ok(measured(&r, t, &normal, cmp)));
            s = ns;
            keys.extend(n.iter().map(Notification::key));
        }
        assert_eq!(keys.len(), 4);
        assert_ne!(keys[0].starts_at_ms, keys[2].starts_at_ms);
    }

    #[test]
    fn top_k_and_manhattan() {
        let r = rule("0s", Condition::Manhattan(0.2), WatchSpec::TopK(5));
        let m = measured(&r, 0, &tree(100_000, 0.05), &tree(100_000, 0.30));
        assert_eq!(m.function.as_deref(), Some("hot"));
        assert!(m.manhattan >= 0.25, "{}", m.manhattan);
        assert!(m.active());
        let r = rule("0s", Condition::ShareDeltaPp(10.0), WatchSpec::TopK(5));
        let m = measured(&r, 0, &tree(100_000, 0.30), &tree(100_000, 0.05));
        // A drop is not a regression.
        assert!(!m.condition_met);
    }

    /// Noise only: same distribution, independent samples. With the default guard
    /// (800 samples for 10 pp) it never fires; the samples are drawn from a fixed
    /// seed so the test is deterministic.
    #[test]
    fn noise_never_fires() {
        let r = rule(
            "0s",
            Condition::ShareDeltaPp(10.0),
            WatchSpec::Function("^hot$".into()),
        );
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut draw = |n: usize| {
            let mut t = CallTree::new();
            for _ in 0..n {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let u = (rng >> 11) as f64 / (1u64 << 53) as f64;
                let f = if u < 0.05 {
                    "hot".to_string()
                } else {
                    format!("f{}", (u * 1000.0) as u32 % 10)
                };
                t.add_stack(&["main", &f], 1);
            }
            t.finalize();
            t
        };
        let mut s = RuleState::default();
        for i in 0..300 {
            // Small counts (20..) up to well past the guard.
            let n = 20 + (i % 30) * 60;
            let (b, c) = (draw(n), draw(n));
            let (ns, sent) = step(&r, &s, i as i64 * MIN, Ok(measured(&r, 0, &b, &c)));
            assert!(sent.is_empty(), "noise fired at n={n}: {:?}", ns.last);
            assert_eq!(ns.state, AlertState::Inactive);
            s = ns;
        }
    }
}
