//! `GET /api/v1/diff.svg`: a rendered differential flame graph of two time ranges
//! (red grew, blue shrank: [`picture`]), so an alert can link to a picture of the
//! diff it measured. Colours compare shares of each side's total, so they show the
//! profile's shape moving rather than load changing.

mod picture;

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use profiledb_storage::{TenantId, TimeRange};
use serde::Deserialize;

use crate::error::{ApiError, ApiResult};
use crate::http::request::{blocking, window, Params, Selection};
use crate::http::{tenant_of, AppRef, TENANT_HEADER};
use profiledb_storage::query::merged::flamegraph_diff_merged;

pub fn routes() -> Router<AppRef> {
    Router::new().route("/api/v1/diff.svg", get(diff_svg))
}

#[derive(Debug, Default, Deserialize)]
struct DiffSvgParams {
    query: Option<String>,
    base_from: Option<String>,
    base_until: Option<String>,
    compare_from: Option<String>,
    compare_until: Option<String>,
    /// For links, which cannot carry `X-Scope-OrgID`; the header wins when both exist.
    tenant: Option<String>,
    title: Option<String>,
}

/// A side's window: both ends are required, since a link must show the same
/// picture tomorrow.
fn side(
    names: (&'static str, &'static str),
    from: Option<&String>,
    until: Option<&String>,
) -> ApiResult<TimeRange> {
    for (name, v) in [(names.0, from), (names.1, until)] {
        if v.is_none() {
            return Err(ApiError::bad_request(format!("{name} is required")));
        }
    }
    window(
        (names.0, from.map(String::as_str)),
        (names.1, until.map(String::as_str)),
    )
}

async fn diff_svg(
    State(state): State<AppRef>,
    headers: HeaderMap,
    Params(p): Params<DiffSvgParams>,
) -> ApiResult<Response> {
    let query = p.query.clone().unwrap_or_default();
    let Selection {
        profile_type: pt,
        selector: sel,
    } = Selection::from_query(Some(&query))?;
    let base = side(
        ("base_from", "base_until"),
        p.base_from.as_ref(),
        p.base_until.as_ref(),
    )?;
    let cmp = side(
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
    let (store, engine) = (state.store()?, state.engine()?);
    let title = p.title.clone().unwrap_or_else(|| format!("diff {query}"));
    let svg = blocking(move || {
        let (b, c) = store.merge_both(&engine, &tenant, (&sel, base), (&sel, cmp))?;
        let d = flamegraph_diff_merged(&b, &c, MAX_FRAMES);
        let labels = picture::Labels {
            title: &title,
            unit: pt.sample_unit(),
            base: (base.start_ms, base.end_ms),
            compare: (cmp.start_ms, cmp.end_ms),
        };
        Ok(picture::draw(&d, &labels).into_bytes())
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, "image/svg+xml")], svg).into_response())
}

/// Frames drawn at most; smaller ones fold into `other`, as in the flame graph API.
const MAX_FRAMES: usize = 2048;
