//! Individual profiles: what Grafana's exemplars, heatmaps and `profile_id_selector`
//! count and name.
//!
//! profiledb sums samples per series and storage step (10 s by default) on ingest,
//! so the finest unit it can name is one series' total over one step: that is an
//! individual profile here. A push every 10–60 s (every SDK's cadence) is exactly
//! one. Its id, `<label fingerprint as 16 hex digits>-<step start in ms>`, names it
//! without storing anything: [`merge_profiles`] resolves ids back to series and
//! steps. The fingerprint is [`Labels::fingerprint`], fixed by definition, so ids stay
//! valid across restarts and releases.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use profiledb_storage::{
    CallTree, Labels, MatchOp, Matcher, Querier, Selector, TenantId, TimeRange,
};

use super::proto::types::v1 as t;
use crate::error::{ApiError, ApiResult};

/// The id of one individual profile (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ProfileId {
    pub fingerprint: u64,
    pub at_ms: i64,
}

impl fmt::Display for ProfileId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}-{}", self.fingerprint, self.at_ms)
    }
}

impl ProfileId {
    pub fn parse(text: &str) -> ApiResult<ProfileId> {
        let bad = || {
            ApiError::bad_request(format!(
                "profile id {text:?} is not one of ours: expected <16 hex digits>-<ms>, \
                 as the exemplars of SelectSeries and SelectHeatmap name them"
            ))
        };
        let (fp, at) = text.split_once('-').ok_or_else(bad)?;
        if fp.len() != 16 {
            return Err(bad());
        }
        Ok(ProfileId {
            fingerprint: u64::from_str_radix(fp, 16).map_err(|_| bad())?,
            at_ms: at.parse().map_err(|_| bad())?,
        })
    }
}

/// One individual profile: a series' total over one storage step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Individual {
    /// Shared by every step of the series: a day of 10 s steps is 8,640 profiles.
    pub labels: Arc<Labels>,
    /// Start of the step (ms since the epoch).
    pub at_ms: i64,
    pub value: i64,
}

impl Individual {
    pub fn id(&self) -> ProfileId {
        ProfileId {
            fingerprint: self.labels.fingerprint(),
            at_ms: self.at_ms,
        }
    }

    /// The exemplar naming this profile. Its labels are the series' labels other than
    /// `shown` (those the chart already groups by) and the reserved `__…__` ones.
    pub fn exemplar(&self, shown: &[String]) -> t::Exemplar {
        t::Exemplar {
            timestamp: self.at_ms,
            profile_id: self.id().to_string(),
            span_id: self.labels.get(SPAN_LABEL).unwrap_or_default().to_string(),
            value: self.value,
            labels: self
                .labels
                .iter()
                .filter(|(k, _)| !k.starts_with("__") && !shown.iter().any(|s| s == k))
                .map(|(k, v)| t::LabelPair {
                    name: k.to_string(),
                    value: v.to_string(),
                })
                .collect(),
            trace_id: String::new(),
        }
    }
}

/// The label our decoders give a pprof sample's `span_id` (span profiles).
pub const SPAN_LABEL: &str = "span_id";

/// Every individual profile selected by `sel` in `range`, in (labels, time) order.
pub fn individuals(
    querier: &Querier,
    tenant: &TenantId,
    sel: &Selector,
    range: TimeRange,
) -> profiledb_storage::Result<Vec<Individual>> {
    let totals = querier.series_totals(tenant, sel, range)?;
    Ok(totals
        .into_iter()
        .flat_map(|(labels, points)| {
            let labels = Arc::new(labels);
            points.into_iter().map(move |(at_ms, value)| Individual {
                labels: Arc::clone(&labels),
                at_ms,
                value,
            })
        })
        .collect())
}

/// A chart series' labels: the `group_by` names with their values.
pub type GroupKey = Vec<(String, String)>;

/// The labels of a chart's series: `group_by`'s values, as the time series has them.
pub fn group_key(labels: &Labels, group_by: &[String]) -> GroupKey {
    group_by
        .iter()
        .filter_map(|n| labels.get(n).map(|v| (n.clone(), v.to_string())))
        .collect()
}

/// For each (group, bucket start), the individual profile with the largest value:
/// the one exemplar a time series point links to. Buckets are `step_ms` wide and sit
/// on whole multiples of the step, as the series' points do.
pub fn top_per_bucket<'a>(
    profiles: &'a [Individual],
    group_by: &[String],
    step_ms: i64,
) -> BTreeMap<(GroupKey, i64), &'a Individual> {
    let step = step_ms.max(1);
    let mut out: BTreeMap<(GroupKey, i64), &Individual> = BTreeMap::new();
    for p in profiles {
        let key = (
            group_key(&p.labels, group_by),
            p.at_ms.div_euclid(step) * step,
        );
        match out.get(&key) {
            Some(best) if best.value >= p.value => {}
            _ => {
                out.insert(key, p);
            }
        }
    }
    out
}

/// The merged call tree of the profiles named by `ids`, within what `sel` selects.
/// An id whose series has no data at its step under `sel` is an error, not an empty
/// answer: the caller asked for something specific.
pub fn merge_profiles(
    querier: &Querier,
    tenant: &TenantId,
    sel: &Selector,
    ids: &[String],
) -> ApiResult<CallTree> {
    let mut out = CallTree::new();
    for text in ids {
        let id = ProfileId::parse(text)?;
        let step = TimeRange::new(id.at_ms, id.at_ms.saturating_add(1));
        let labels = querier
            .series(tenant, sel, step)?
            .into_iter()
            .find(|l| l.fingerprint() == id.fingerprint)
            .ok_or_else(|| {
                ApiError::new(
                    axum::http::StatusCode::NOT_FOUND,
                    "not_found",
                    format!(
                        "profile {text} not found: no series selected by the query has \
                         that fingerprint with data at {} ms",
                        id.at_ms
                    ),
                )
            })?;
        let exact = exactly(querier, tenant, sel, step, &labels)?;
        out.merge(&querier.merge_tree(tenant, &exact, step)?);
    }
    out.finalize();
    Ok(out)
}

/// A selector matching the series with exactly `labels` and no other: each of its
/// labels by equality, and every other label name present in the window as absent
/// (`name=""`), so a series with more labels is not taken along.
fn exactly(
    querier: &Querier,
    tenant: &TenantId,
    sel: &Selector,
    range: TimeRange,
    labels: &Labels,
) -> ApiResult<Selector> {
    let mut exact = sel.clone();
    for (k, v) in labels.iter() {
        exact = exact.with(Matcher::eq(k, v));
    }
    for name in querier.label_names(tenant, sel, range)? {
        if labels.get(&name).is_none() {
            let absent = Matcher::new(name, MatchOp::Eq, "")
                .map_err(|e| ApiError::internal(e.to_string()))?;
            exact = exact.with(absent);
        }
    }
    Ok(exact)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ind(pairs: &[(&str, &str)], at_ms: i64, value: i64) -> Individual {
        Individual {
            labels: Arc::new(Labels::new(pairs.iter().copied())),
            at_ms,
            value,
        }
    }

    #[test]
    fn ids_round_trip_and_bad_ids_say_what_is_expected() {
        let p = ind(&[("service_name", "shop")], 1_700_000_010_000, 5);
        let id = p.id();
        assert_eq!(id.to_string(), "6a6cca34b64b675e-1700000010000");
        assert_eq!(ProfileId::parse(&id.to_string()).unwrap(), id);
        for bad in ["", "abc", "6a6cca34b64b675e", "xyz-1", "6a6cca34b64b675e-x"] {
            let e = ProfileId::parse(bad).unwrap_err();
            assert_eq!(e.code, "invalid_argument");
            assert!(e.message.contains("<16 hex digits>-<ms>"), "{}", e.message);
        }
    }

    #[test]
    fn the_largest_profile_of_each_bucket_is_its_exemplar() {
        let ps = vec![
            ind(&[("host", "a"), ("service_name", "s")], 10_000, 3),
            ind(&[("host", "b"), ("service_name", "s")], 20_000, 7),
            ind(&[("host", "a"), ("service_name", "s")], 70_000, 2),
            ind(&[("host", "c"), ("service_name", "t")], 10_000, 9),
        ];
        let by = vec!["service_name".to_string()];
        let top = top_per_bucket(&ps, &by, 60_000);
        let s = vec![("service_name".to_string(), "s".to_string())];
        let t = vec![("service_name".to_string(), "t".to_string())];
        assert_eq!(top.len(), 3);
        assert_eq!(top[&(s.clone(), 0)].value, 7);
        assert_eq!(top[&(s, 60_000)].value, 2);
        assert_eq!(top[&(t, 0)].value, 9);
        // The exemplar leaves out what the chart shows and the reserved labels.
        let e = ind(
            &[("__name__", "cpu"), ("host", "b"), ("service_name", "s")],
            20_000,
            7,
        )
        .exemplar(&by);
        assert_eq!(e.labels.len(), 1);
        assert_eq!(
            (e.labels[0].name.as_str(), e.labels[0].value.as_str()),
            ("host", "b")
        );
        assert_eq!((e.timestamp, e.value), (20_000, 7));
    }
}
