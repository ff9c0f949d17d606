//! `SelectHeatmap`: how the individual profiles of a selection spread over value,
//! per time step. Each cell counts the profiles (see [`super::individual`]) whose
//! value falls in one of [`Y_BUCKETS`] equal value buckets between the smallest and
//! the largest profile of the answer (shared by all its series, so colours compare),
//! within one step. A slot's timestamp is the end of its step (Grafana reads it as
//! the cell's `xMax`); steps sit on whole multiples of the step, as time series do.
//! Each non-empty cell may carry the largest profile in it as its exemplar.

use std::collections::BTreeMap;

use profiledb_storage::TimeRange;

use super::connect::{ConnectResult, Ctx};
use super::grid;
use super::individual::{group_key, individuals, GroupKey, Individual, SPAN_LABEL};
use super::proto::querier::v1 as q;
use super::proto::types::v1 as t;
use crate::http::request::{blocking, window_ms, Selection};

/// Value buckets per slot (Grafana's heatmap default in Pyroscope).
pub const Y_BUCKETS: usize = 20;

/// What a heatmap is asked for, besides its profiles.
pub struct Shape<'a> {
    pub range: TimeRange,
    pub step_ms: i64,
    pub group_by: &'a [String],
    /// Attach the largest profile of each cell.
    pub exemplars: bool,
    /// Keep the series with the largest totals (0 = all).
    pub limit: usize,
}

/// The Connect method. `HEATMAP_QUERY_TYPE_SPAN` counts only the profiles of
/// series carrying a `span_id` (span profiles); the other types count all.
pub async fn select_heatmap(
    ctx: Ctx,
    r: q::SelectHeatmapRequest,
) -> ConnectResult<q::SelectHeatmapResponse> {
    let sel = Selection::from_parts(&r.profile_type_id, &r.label_selector)?.selector;
    let range = window_ms(r.start, r.end, ("start", "end"))?;
    let (store, querier, tenant) = (ctx.state.store()?, ctx.state.querier()?, ctx.tenant);
    let step_ms = super::querier::step_ms(r.step, store.config().step_ms);
    grid::check(range, step_ms)?;
    let spans_only = r.query_type == q::HeatmapQueryType::Span as i32;
    let exemplars = matches!(
        t::ExemplarType::try_from(r.exemplar_type),
        Ok(t::ExemplarType::Individual | t::ExemplarType::Span)
    );
    let limit = r.limit.map_or(0, |l| usize::try_from(l).unwrap_or(0));
    let group_by = r.group_by;
    let series = blocking(move || {
        let mut profiles = individuals(&querier, &tenant, &sel, range)?;
        if spans_only {
            profiles.retain(|p| p.labels.get(SPAN_LABEL).is_some());
        }
        let shape = Shape {
            range,
            step_ms,
            group_by: &group_by,
            exemplars,
            limit,
        };
        Ok(heatmap(&profiles, &shape))
    })
    .await?;
    Ok(q::SelectHeatmapResponse { series })
}

/// Lower bounds of the value buckets over `[min, max]`.
fn y_buckets(min: i64, max: i64) -> Vec<i64> {
    let max = if max == min { min + 1 } else { max };
    let width = (max - min) as f64 / Y_BUCKETS as f64;
    (0..Y_BUCKETS)
        .map(|i| min + (i as f64 * width) as i64)
        .collect()
}

/// The bucket of `v`: the last one whose lower bound is at most `v`.
fn y_index(lows: &[i64], v: i64) -> usize {
    lows.partition_point(|&lo| lo <= v).saturating_sub(1)
}

struct Cell<'a> {
    count: i32,
    top: &'a Individual,
}

pub fn heatmap(profiles: &[Individual], shape: &Shape) -> Vec<t::HeatmapSeries> {
    let (Some(min), Some(max)) = (
        profiles.iter().map(|p| p.value).min(),
        profiles.iter().map(|p| p.value).max(),
    ) else {
        return Vec::new();
    };
    let lows = y_buckets(min, max);
    let step = shape.step_ms.max(1);
    let (first, _) = grid::grid(shape.range, step);
    // series → slot end → y bucket → cell
    type Cells<'a> = BTreeMap<i64, BTreeMap<usize, Cell<'a>>>;
    let mut series: BTreeMap<GroupKey, (i64, Cells)> = BTreeMap::new();
    for p in profiles {
        let (total, cells) = series
            .entry(group_key(&p.labels, shape.group_by))
            .or_default();
        *total = total.saturating_add(p.value);
        let end = first + ((p.at_ms - first).div_euclid(step) + 1) * step;
        let cell = cells
            .entry(end)
            .or_default()
            .entry(y_index(&lows, p.value))
            .or_insert(Cell { count: 0, top: p });
        cell.count = cell.count.saturating_add(1);
        if p.value > cell.top.value {
            cell.top = p;
        }
    }
    let mut ranked: Vec<_> = series.into_iter().collect();
    // Largest totals first; labels break ties so the answer is deterministic.
    ranked.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then_with(|| a.0.cmp(&b.0)));
    if shape.limit > 0 {
        ranked.truncate(shape.limit);
    }
    let y_min: Vec<f64> = lows.iter().map(|&v| v as f64).collect();
    ranked
        .into_iter()
        .map(|(labels, (_, cells))| t::HeatmapSeries {
            labels: labels
                .into_iter()
                .map(|(name, value)| t::LabelPair { name, value })
                .collect(),
            slots: cells
                .into_iter()
                .map(|(timestamp, row)| {
                    let mut counts = vec![0; Y_BUCKETS];
                    for (&y, c) in &row {
                        counts[y] = c.count;
                    }
                    t::HeatmapSlot {
                        timestamp,
                        y_min: y_min.clone(),
                        counts,
                        exemplars: if shape.exemplars {
                            row.values()
                                .map(|c| c.top.exemplar(shape.group_by))
                                .collect()
                        } else {
                            Vec::new()
                        },
                    }
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use profiledb_storage::Labels;

    fn ind(host: &str, at_ms: i64, value: i64) -> Individual {
        Individual {
            labels: std::sync::Arc::new(Labels::new([("host", host), ("service_name", "s")])),
            at_ms,
            value,
        }
    }

    #[test]
    fn buckets_span_min_to_max_and_the_last_takes_the_max() {
        let lows = y_buckets(0, 200);
        assert_eq!(lows.len(), 20);
        assert_eq!((lows[0], lows[1], lows[19]), (0, 10, 190));
        assert_eq!(y_index(&lows, 0), 0);
        assert_eq!(y_index(&lows, 9), 0);
        assert_eq!(y_index(&lows, 10), 1);
        assert_eq!(y_index(&lows, 200), 19);
        // One value everywhere: the range becomes [v, v + 1), whose 20 integer lower
        // bounds are all v; the value goes to the last bucket starting at or below it
        // (as in Pyroscope, whose earlier buckets are then empty).
        let one = y_buckets(5, 5);
        assert!(one.iter().all(|&lo| lo == 5));
        assert_eq!(y_index(&one, 5), 19);
    }

    #[test]
    fn profiles_are_counted_per_step_and_value_bucket() {
        // Values 0..=200; steps of 60 s from 0: two profiles in the first step (one
        // small, one large), one in the second.
        let ps = vec![
            ind("a", 10_000, 0),
            ind("b", 50_000, 200),
            ind("a", 70_000, 105),
        ];
        let shape = Shape {
            range: TimeRange::new(0, 120_000),
            step_ms: 60_000,
            group_by: &[],
            exemplars: true,
            limit: 0,
        };
        let hm = heatmap(&ps, &shape);
        assert_eq!(hm.len(), 1);
        assert!(hm[0].labels.is_empty());
        let slots = &hm[0].slots;
        assert_eq!(slots.len(), 2);
        assert_eq!(slots[0].timestamp, 60_000);
        assert_eq!(slots[0].counts[0], 1);
        assert_eq!(slots[0].counts[19], 1);
        assert_eq!(slots[0].counts.iter().sum::<i32>(), 2);
        assert_eq!(slots[0].y_min[10], 100.0);
        assert_eq!(slots[1].timestamp, 120_000);
        assert_eq!(slots[1].counts[10], 1);
        // Exemplars in bucket order; each names its profile.
        let ex: Vec<i64> = slots[0].exemplars.iter().map(|e| e.value).collect();
        assert_eq!(ex, vec![0, 200]);
        assert_eq!(slots[0].exemplars[1].profile_id, ps[1].id().to_string());
    }

    #[test]
    fn grouped_series_share_buckets_and_limit_keeps_the_largest() {
        let ps = vec![ind("a", 0, 10), ind("b", 0, 30), ind("b", 10_000, 30)];
        let by = vec!["host".to_string()];
        let shape = Shape {
            range: TimeRange::new(0, 60_000),
            step_ms: 60_000,
            group_by: &by,
            exemplars: false,
            limit: 1,
        };
        let hm = heatmap(&ps, &shape);
        assert_eq!(hm.len(), 1);
        assert_eq!(hm[0].labels[0].value, "b");
        assert_eq!(hm[0].slots[0].counts[19], 2);
        assert!(hm[0].slots[0].exemplars.is_empty());
        assert!(heatmap(&[], &shape).is_empty());
    }
}
