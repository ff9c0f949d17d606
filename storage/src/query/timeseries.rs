//! Time series: totals per step, optionally grouped by labels, top-N limited.

use std::collections::BTreeMap;

use crate::model::Labels;

/// One output series: the group's label pairs and its `(timestamp ms, value)` points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeriesPoints {
    pub labels: Vec<(String, String)>,
    pub points: Vec<(i64, i64)>,
}

impl SeriesPoints {
    pub fn total(&self) -> i64 {
        self.points.iter().map(|p| p.1).sum()
    }
}

/// Regroups per-series totals (at storage resolution) by `group_by` label names and
/// re-buckets them to `step_ms` aligned on `start_ms`. Keeps the `limit` series with
/// the largest totals (0 = all), ordered by total descending.
pub fn group_series(
    totals: &BTreeMap<Labels, BTreeMap<i64, i64>>,
    group_by: &[String],
    start_ms: i64,
    step_ms: i64,
    limit: usize,
) -> Vec<SeriesPoints> {
    let step = step_ms.max(1);
    let mut groups: BTreeMap<Vec<(String, String)>, BTreeMap<i64, i64>> = BTreeMap::new();
    for (labels, points) in totals {
        let key: Vec<(String, String)> = group_by
            .iter()
            .filter_map(|n| labels.get(n).map(|v| (n.clone(), v.to_string())))
            .collect();
        let g = groups.entry(key).or_default();
        for (&t, &v) in points {
            let bucket = start_ms + (t - start_ms).div_euclid(step) * step;
            let e = g.entry(bucket).or_insert(0);
            *e = e.saturating_add(v);
        }
    }
    let mut out: Vec<SeriesPoints> = groups
        .into_iter()
        .map(|(labels, pts)| SeriesPoints {
            labels,
            points: pts.into_iter().collect(),
        })
        .collect();
    out.sort_by(|a, b| {
        b.total()
            .cmp(&a.total())
            .then_with(|| a.labels.cmp(&b.labels))
    });
    if limit > 0 {
        out.truncate(limit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regroup_and_rebucket() {
        let mut m = BTreeMap::new();
        let l = |h: &str| Labels::new([("host", h), ("svc", "api")]);
        m.insert(l("a"), BTreeMap::from([(0, 1), (10_000, 2), (60_000, 4)]));
        m.insert(l("b"), BTreeMap::from([(10_000, 10)]));
        let all = group_series(&m, &[], 0, 60_000, 0);
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].points, vec![(0, 13), (60_000, 4)]);
        let by_host = group_series(&m, &["host".into()], 0, 60_000, 1);
        assert_eq!(by_host.len(), 1);
        assert_eq!(
            by_host[0].labels,
            vec![("host".to_string(), "b".to_string())]
        );
    }
}
