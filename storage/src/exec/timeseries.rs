//! Time series: totals per step, optionally grouped by labels, top-N limited.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use super::{steps, SummarySource, TimeRange};
use crate::error::Result;
use crate::model::Labels;
use crate::selector::Selector;

/// One output series: the group's label pairs and its `(timestamp ms, value)` points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeriesPoints {
    /// The group's label pairs.
    pub labels: Vec<(String, String)>,
    /// `(bucket start ms, value)`, in time order.
    pub points: Vec<(i64, i64)>,
}

impl SeriesPoints {
    /// The sum of the points.
    pub fn total(&self) -> i64 {
        self.points.iter().map(|p| p.1).sum()
    }
}

/// Buckets per group kept in a flat array; wider series use a sorted map.
const DENSE_BUCKETS: i64 = 4096;

/// Points of one group by bucket index.
#[derive(Debug)]
enum Points {
    /// Every bucket of the range; `None` where no step had data.
    Dense(Vec<Option<i64>>),
    Sparse(BTreeMap<i64, i64>),
}

impl Points {
    fn add(&mut self, bucket: i64, v: i64) {
        match self {
            Points::Dense(d) => {
                if let Some(slot) = usize::try_from(bucket).ok().and_then(|b| d.get_mut(b)) {
                    *slot = Some(slot.unwrap_or(0).saturating_add(v));
                }
            }
            Points::Sparse(m) => {
                let e = m.entry(bucket).or_insert(0);
                *e = e.saturating_add(v);
            }
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = (i64, i64)> + '_> {
        match self {
            Points::Dense(d) => Box::new(
                d.iter()
                    .enumerate()
                    .filter_map(|(i, v)| v.map(|v| (i as i64, v))),
            ),
            Points::Sparse(m) => Box::new(m.iter().map(|(&b, &v)| (b, v))),
        }
    }
}

/// Per-thread accumulator of a grouped time series: step totals of the selected
/// series summed per group of `group_by` label values and per bucket of `step_ms`
/// aligned on whole multiples of the step. Groups are found by an encoded key, once per series
/// and source; points go to flat arrays.
#[derive(Debug)]
pub struct SeriesGroups {
    start_ms: i64,
    step_ms: i64,
    buckets: i64,
    keys: FxHashMap<String, usize>,
    labels: Vec<Vec<(String, String)>>,
    points: Vec<Points>,
    /// Scratch: the encoded group key and one series' points.
    key: String,
    series_points: Vec<(i64, i64)>,
}

impl SeriesGroups {
    pub fn new(range: TimeRange, step_ms: i64) -> Self {
        let step_ms = step_ms.max(1);
        // Buckets sit on whole multiples of the step, as in Pyroscope and Prometheus,
        // so two queries over overlapping windows agree on every shared bucket.
        // A range from the beginning of time (`TimeRange::all()`) starts the grid
        // at -2^62 ms instead, 146 million years back: a point's offset from it
        // then fits an i64, and no stored time is earlier.
        let start_ms = range.start_ms.max(-(1 << 62)).div_euclid(step_ms) * step_ms;
        let span = range.end_ms.saturating_sub(start_ms).max(0);
        SeriesGroups {
            start_ms,
            step_ms,
            buckets: span / step_ms + 1,
            keys: FxHashMap::default(),
            labels: Vec::new(),
            points: Vec::new(),
            key: String::new(),
            series_points: Vec::new(),
        }
    }

    /// The group of `labels`, created on first sight.
    fn group(&mut self, labels: &Labels, group_by: &[String]) -> usize {
        self.key.clear();
        for n in group_by {
            match labels.get(n) {
                // Length-prefixed, so no value can forge another key.
                Some(v) => {
                    self.key.push_str(&v.len().to_string());
                    self.key.push(':');
                    self.key.push_str(v);
                }
                None => self.key.push('-'),
            }
        }
        if let Some(&g) = self.keys.get(self.key.as_str()) {
            return g;
        }
        let g = self.labels.len();
        self.labels.push(
            group_by
                .iter()
                .filter_map(|n| labels.get(n).map(|v| (n.clone(), v.to_string())))
                .collect(),
        );
        self.points.push(if self.buckets <= DENSE_BUCKETS {
            Points::Dense(vec![None; self.buckets as usize])
        } else {
            Points::Sparse(BTreeMap::new())
        });
        self.keys.insert(self.key.clone(), g);
        g
    }

    /// Adds the step totals of `src`'s series selected by `sel` within `range`.
    pub fn add_source(
        &mut self,
        src: &dyn SummarySource,
        sel: &Selector,
        range: TimeRange,
        group_by: &[String],
    ) -> Result<()> {
        let (lo, hi) = steps(src, range);
        if lo >= hi {
            return Ok(());
        }
        let (p0, step) = (src.partition_start(), src.step());
        let mut points = std::mem::take(&mut self.series_points);
        for sid in src.index().select(&sel.matchers).iter() {
            let Some(labels) = src.labels(sid) else {
                continue;
            };
            points.clear();
            src.step_totals(sid, &mut |t, v| {
                if t >= lo && t < hi {
                    points.push((p0 + i64::from(t) * step, v));
                }
            })?;
            self.add_points(labels, group_by, &points);
        }
        self.series_points = points;
        Ok(())
    }

    /// Adds `(timestamp ms, value)` points of one series with `labels`.
    pub fn add_points(&mut self, labels: &Labels, group_by: &[String], points: &[(i64, i64)]) {
        if points.is_empty() {
            return;
        }
        let g = self.group(labels, group_by);
        for &(t, v) in points {
            let bucket = (t - self.start_ms).div_euclid(self.step_ms);
            self.points[g].add(bucket, v);
        }
    }

    /// Folds the per-thread accumulators into the output series: the `limit` with the
    /// largest totals (0 = all), by total descending, then labels.
    pub fn finish(accs: Vec<SeriesGroups>, limit: usize) -> Vec<SeriesPoints> {
        let mut accs = accs.into_iter();
        let Some(mut all) = accs.next() else {
            return Vec::new();
        };
        for mut acc in accs {
            for (key, g) in acc.keys {
                let points = std::mem::replace(&mut acc.points[g], Points::Sparse(BTreeMap::new()));
                match all.keys.get(&key) {
                    Some(&mine) => {
                        for (b, v) in points.iter() {
                            all.points[mine].add(b, v);
                        }
                    }
                    None => {
                        all.keys.insert(key, all.labels.len());
                        all.labels.push(std::mem::take(&mut acc.labels[g]));
                        all.points.push(points);
                    }
                }
            }
        }
        let (start, step) = (all.start_ms, all.step_ms);
        let mut out: Vec<SeriesPoints> = all
            .labels
            .into_iter()
            .zip(&all.points)
            .map(|(labels, pts)| SeriesPoints {
                labels,
                points: pts.iter().map(|(b, v)| (start + b * step, v)).collect(),
            })
            .collect();
        top_series(&mut out, limit);
        out
    }
}

/// Orders series by total, largest first (ties by labels), and keeps `limit`
/// of them (0 = all): what a time-series query answers, split or not.
pub(crate) fn top_series(out: &mut Vec<SeriesPoints>, limit: usize) {
    out.sort_by(|a, b| {
        b.total()
            .cmp(&a.total())
            .then_with(|| a.labels.cmp(&b.labels))
    });
    if limit > 0 {
        out.truncate(limit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn all_of_time_is_a_valid_range() {
        let mut all = SeriesGroups::new(TimeRange::all(), 60_000);
        assert_eq!(all.start_ms % 60_000, 0);
        all.add_points(&Labels::new([("host", "a")]), &[], &[(120_000, 5)]);
        let got = SeriesGroups::finish(vec![all], 0);
        assert_eq!(got[0].points, vec![(120_000, 5)]);
    }

    #[test]
    fn regroup_and_rebucket() {
        let l = |h: &str| Labels::new([("host", h), ("svc", "api")]);
        let a: &[(i64, i64)] = &[(0, 1), (10_000, 2), (60_000, 4)];
        let b: &[(i64, i64)] = &[(10_000, 10)];
        let range = TimeRange::new(0, 120_000);
        for dense_or_sparse in [60_000, 1] {
            let mut all = SeriesGroups::new(range, dense_or_sparse);
            all.add_points(&l("a"), &[], a);
            all.add_points(&l("b"), &[], b);
            let all = SeriesGroups::finish(vec![all], 0);
            assert_eq!(all.len(), 1);
            if dense_or_sparse == 60_000 {
                assert_eq!(all[0].points, vec![(0, 13), (60_000, 4)]);
            } else {
                assert_eq!(all[0].points, vec![(0, 1), (10_000, 12), (60_000, 4)]);
            }
        }
        // Two threads' accumulators grouped by host (`zone` is missing everywhere).
        let threads = || {
            let (mut t1, mut t2) = (
                SeriesGroups::new(range, 60_000),
                SeriesGroups::new(range, 60_000),
            );
            t1.add_points(&l("a"), &by(&["host", "zone"]), a);
            t2.add_points(&l("b"), &by(&["host", "zone"]), b);
            t2.add_points(&l("a"), &by(&["host", "zone"]), &[(70_000, 1)]);
            vec![t1, t2]
        };
        let by_host = SeriesGroups::finish(threads(), 0);
        assert_eq!(by_host.len(), 2);
        assert_eq!(
            by_host[0].labels,
            vec![("host".to_string(), "b".to_string())]
        );
        assert_eq!(by_host[0].points, vec![(0, 10)]);
        assert_eq!(
            by_host[1].labels,
            vec![("host".to_string(), "a".to_string())]
        );
        assert_eq!(by_host[1].points, vec![(0, 3), (60_000, 5)]);
        // Top 1: host b (10) outweighs host a (8).
        let top = SeriesGroups::finish(threads(), 1);
        assert_eq!(top, by_host[..1].to_vec());
        let top1 = SeriesGroups::finish(vec![], 1);
        assert!(top1.is_empty());
    }
}
