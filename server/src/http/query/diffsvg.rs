//! `GET /api/v1/diff.svg`: a rendered differential flame graph of two time ranges
//! (inferno: red grew, blue shrank), so an alert can link to a picture of the diff it
//! measured. The base side is normalised to the compare side's total, so colours show
//! shares moving rather than load changing.

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use profiledb_ingest::parse_time;
use profiledb_storage::{now_ms, TenantId, TimeRange};
use serde::Deserialize;

use super::native::flame_svg;
use super::render::profile_type_of;
use super::{blocking, selector_for, storage_error};
use crate::error::{ApiError, ApiResult};
use crate::http::{tenant_of, AppRef, TENANT_HEADER};

pub fn routes() -> Router<AppRef> {
    Router::new().route("/api/v1/diff.svg", get(diff_svg))
}

#[derive(Debug, Default, Deserialize)]
struct Params {
    query: Option<String>,
    base_from: Option<String>,
    base_until: Option<String>,
    compare_from: Option<String>,
    compare_until: Option<String>,
    /// For links, which cannot carry `X-Scope-OrgID`; the header wins when both exist.
    tenant: Option<String>,
    title: Option<String>,
}

fn range(
    what: (&'static str, &'static str),
    from: Option<&String>,
    until: Option<&String>,
) -> ApiResult<TimeRange> {
    let now = now_ms();
    let need = |name: &'static str, v: Option<&String>| {
        v.ok_or_else(|| ApiError::bad_request(format!("{name} is required")))
            .and_then(|s| Ok(parse_time(name, s, now)?))
    };
    let (s, e) = (need(what.0, from)?, need(what.1, until)?);
    if e < s {
        return Err(ApiError::bad_request(format!(
            "{} is before {}",
            what.1, what.0
        )));
    }
    Ok(TimeRange::new(s, e))
}

async fn diff_svg(
    State(state): State<AppRef>,
    headers: HeaderMap,
    q: Result<Query<Params>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    let p = q.map(|Query(p)| p).map_err(|e| {
        ApiError::bad_request(format!("invalid query parameters: {}", e.body_text()))
    })?;
    let query = p.query.clone().unwrap_or_default();
    let pt = profile_type_of(Some(&query));
    let sel_text = query.get(pt.len()..).unwrap_or("").trim().to_string();
    let sel = selector_for(&pt, &sel_text)?;
    let base = range(
        ("base_from", "base_until"),
        p.base_from.as_ref(),
        p.base_until.as_ref(),
    )?;
    let cmp = range(
        ("compare_from", "compare_until"),
        p.compare_from.as_ref(),
        p.compare_until.as_ref(),
    )?;
    let tenant = match (&p.tenant, headers.contains_key(TENANT_HEADER)) {
        (Some(t), false) => {
            TenantId::new(t.trim()).map_err(|e| ApiError::bad_request(e.to_string()))?
        }
        _ => tenant_of(&headers)?,
    };
    let querier = state.querier()?;
    let title = p.title.clone().unwrap_or_else(|| format!("diff {query}"));
    let svg = blocking(move || {
        let b = querier.merge_tree(&tenant, &sel, base).map_err(storage_error)?;
        let c = querier.merge_tree(&tenant, &sel, cmp).map_err(storage_error)?;
        let (bt, ct) = (b.to_folded_text(), c.to_folded_text());
        if bt.is_empty() && ct.is_empty() {
            return Ok(
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1200\" height=\"60\"><text x=\"600\" y=\"35\" text-anchor=\"middle\" font-family=\"Verdana\" font-size=\"15\">no samples in either range</text></svg>".as_bytes().to_vec());
        }
        let mut folded = Vec::new();
        let opts = inferno::differential::Options {
            normalize: true,
            strip_hex: false,
        };
        inferno::differential::from_readers(opts, bt.as_bytes(), ct.as_bytes(), &mut folded)
            .map_err(|e| ApiError::internal(format!("diff folding failed: {e}")))?;
        flame_svg(title, &pt, &String::from_utf8_lossy(&folded))
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, "image/svg+xml")], svg).into_response())
}
