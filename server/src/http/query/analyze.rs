//! `AnalyzeQuery`: what a query would read, before the user runs it. Grafana's
//! Profiles Drilldown shows it beside the query box. profiledb is one process, so
//! each scope has one component; the scopes are the live head and the stored
//! segments. Sample counts are left at 0: counting rows would read every stack
//! column, which is the cost this call exists to predict.

use super::connect::{ConnectResult, Ctx};
use super::proto::querier::v1 as q;
use crate::http::request::{blocking, discovery_selector, window_ms};
use profiledb_storage::ScopePlan;

pub async fn analyze_query(
    ctx: Ctx,
    r: q::AnalyzeQueryRequest,
) -> ConnectResult<q::AnalyzeQueryResponse> {
    let range = window_ms(r.start, r.end, ("start", "end"))?;
    let sel = discovery_selector(Some(&r.query))?;
    let (querier, tenant) = (ctx.state.querier()?, ctx.tenant);
    let plan = blocking(move || Ok(querier.plan(&tenant, &sel, range)?)).await?;
    let scope = |name: &str, s: &ScopePlan| q::QueryScope {
        component_type: name.into(),
        component_count: 1,
        block_count: s.sources,
        series_count: s.series,
        profile_count: s.profiles,
        sample_count: 0,
        index_bytes: 0,
        profile_bytes: s.bytes,
        symbol_bytes: 0,
    };
    Ok(q::AnalyzeQueryResponse {
        query_scopes: vec![scope("Head", &plan.head), scope("Segments", &plan.segments)],
        query_impact: Some(q::QueryImpact {
            total_bytes_in_time_range: plan.segments.bytes,
            total_queried_series: plan.series,
            // One copy of each sample is stored: no replicas to reconcile at query time.
            deduplication_needed: false,
        }),
    })
}
