//! What a query would read before it runs: the sources, series, profiles and bytes
//! a selection over a window touches, split into the live head and the stored
//! segments. Grafana's Profiles Drilldown shows it (`AnalyzeQuery`) next to the
//! query box, so it must be cheap: it reads the precomputed per-step totals and the
//! label index, never a stack.

use rustc_hash::FxHashSet;

use super::Querier;
use crate::error::{QueryError, Result};
use crate::exec::{self, TimeRange};
use crate::model::TenantId;
use crate::selector::Selector;
use crate::store::Scope;

/// What one kind of source contributes to a query.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScopePlan {
    /// Head partitions or segments overlapping the window.
    pub sources: u64,
    /// Distinct selected series with data in the window.
    pub series: u64,
    /// Individual profiles: (series, storage step) pairs with data in the window.
    pub profiles: u64,
    /// Stored bytes of the sources (segment files; 0 for the head, which is memory).
    pub bytes: u64,
}

/// [`Querier::plan`]'s answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueryPlan {
    /// The in-memory head.
    pub head: ScopePlan,
    /// Immutable segments.
    pub segments: ScopePlan,
    /// Distinct selected series over both.
    pub series: u64,
}

#[derive(Default)]
struct Tally {
    sources: u64,
    profiles: u64,
    bytes: u64,
    series: FxHashSet<u64>,
}

impl Querier {
    /// What a query over `sel` and `range` would read (see the module docs).
    pub fn plan(
        &self,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
    ) -> Result<QueryPlan, QueryError> {
        let tally = |scope| -> Result<Tally> {
            let parts =
                self.store
                    .scan_summaries(tenant, range, scope, Tally::default, |acc, src| {
                        acc.sources += 1;
                        acc.bytes += src.stored_bytes();
                        let (lo, hi) = exec::steps(src, range);
                        for sid in src.index().select(&sel.matchers).iter() {
                            let mut profiles = 0;
                            src.step_totals(sid, &mut |t, _| {
                                if t >= lo && t < hi {
                                    profiles += 1;
                                }
                            })?;
                            if profiles > 0 {
                                acc.profiles += profiles;
                                if let Some(l) = src.labels(sid) {
                                    acc.series.insert(l.fingerprint());
                                }
                            }
                        }
                        Ok(())
                    })?;
            Ok(parts.into_iter().fold(Tally::default(), |mut a, p| {
                a.sources += p.sources;
                a.profiles += p.profiles;
                a.bytes += p.bytes;
                a.series.extend(p.series);
                a
            }))
        };
        let (head, segments) = (tally(Scope::Head)?, tally(Scope::Segments)?);
        let series = head.series.union(&segments.series).count() as u64;
        let scope = |t: &Tally| ScopePlan {
            sources: t.sources,
            series: t.series.len() as u64,
            profiles: t.profiles,
            bytes: t.bytes,
        };
        Ok(QueryPlan {
            head: scope(&head),
            segments: scope(&segments),
            series,
        })
    }
}
