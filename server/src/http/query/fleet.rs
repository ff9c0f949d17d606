//! Fleet analyses under `/api/v1/fleet`: the hottest shared code of every service,
//! and the sampling-noise verdict the native diff adds on request. The algorithms
//! live in `profiledb_storage::analysis`; this file is their HTTP shape.

use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use profiledb_storage::analysis::hottest::{cpu_cost, Cost, HotDimension};
use profiledb_storage::analysis::noise::{Verdict, DEFAULT_MARGIN, DEFAULT_SPLITS};
use profiledb_storage::{DiffStats, Querier, Selector, TenantId, TimeRange, SERVICE_NAME_LABEL};
use serde::Deserialize;
use serde_json::{json, Value};

use super::answers::cached_answer;
use super::native::{count, raw_query, to_json, with_warnings, JSON};
use super::warnings;
use crate::error::{ApiError, ApiResult};
use crate::http::request::{blocking, window, Params, Selection};
use crate::http::{tenant_of, AppRef};

pub fn routes() -> Router<AppRef> {
    Router::new().route("/api/v1/fleet/hottest", get(hottest))
}

#[derive(Debug, Default, Deserialize)]
struct HottestParams {
    query: Option<String>,
    from: Option<String>,
    until: Option<String>,
    /// `function` (self, the default), `function_total` (inclusive) or `binary`.
    by: Option<String>,
    /// The label whose values count as services.
    service_label: Option<String>,
    limit: Option<usize>,
    price_per_core_hour: Option<f64>,
}

fn dimension(by: Option<&str>) -> ApiResult<HotDimension> {
    match by.unwrap_or("function") {
        "function" => Ok(HotDimension::Function),
        "function_total" => Ok(HotDimension::FunctionTotal),
        "binary" => Ok(HotDimension::Binary),
        other => Err(ApiError::bad_request(format!(
            "unknown by {other:?}: expected function, function_total or binary"
        ))),
    }
}

fn cost_json(c: Option<Cost>) -> Value {
    match c {
        None => Value::Null,
        Some(c) => json!({"core_seconds_per_day": c.core_seconds_per_day, "per_year": c.per_year}),
    }
}

/// `GET /api/v1/fleet/hottest?query=&from=&until=&by=&service_label=&limit=&price_per_core_hour=`
async fn hottest(
    State(state): State<AppRef>,
    headers: HeaderMap,
    uri: Uri,
    Params(p): Params<HottestParams>,
) -> ApiResult<Response> {
    count(&state);
    let Selection {
        profile_type,
        selector: sel,
    } = Selection::from_query(p.query.as_deref())?;
    let range = window(("from", p.from.as_deref()), ("until", p.until.as_deref()))?;
    let by = dimension(p.by.as_deref())?;
    let service_label = p
        .service_label
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| SERVICE_NAME_LABEL.to_string());
    if let Some(price) = p.price_per_core_hour {
        if !(price.is_finite() && price >= 0.0) {
            return Err(ApiError::bad_request(format!(
                "price_per_core_hour must be a non-negative number, got {price}"
            )));
        }
    }
    // Cost is CPU time per wall time: only CPU-time profiles have one.
    let [_, sample_type, unit, ..] = profile_type.parts();
    let is_cpu_time = sample_type == "cpu" && unit == "nanoseconds";
    let tenant = tenant_of(&headers)?;
    cached_answer(&state, &tenant, &[range], raw_query(&uri), JSON, || async {
        let (querier, t, label) = (state.querier()?, tenant.clone(), service_label.clone());
        let limit = p.limit.unwrap_or(20);
        let (h, warnings) = blocking(move || {
            let h = querier.fleet_hottest(&t, &sel, range, by, &label, limit)?;
            let w = warnings::of_answer(&querier, &t, &sel, range, h.total, &[label.as_str()])?;
            Ok((h, w))
        })
        .await?;
        let window_ms = range.end_ms.saturating_sub(range.start_ms);
        let cost = |v: i64| match is_cpu_time {
            true => cost_json(cpu_cost(v, window_ms, p.price_per_core_hour)),
            false => Value::Null,
        };
        let entries: Vec<Value> = h
            .entries
            .iter()
            .map(|e| {
                json!({"name": e.name, "value": e.value, "share": e.share,
                       "services": e.services, "cost": cost(e.value)})
            })
            .collect();
        let mut answer = json!({
            "by": p.by.as_deref().unwrap_or("function"),
            "service_label": service_label,
            "window_ms": window_ms,
            "total": h.total,
            "services": h.services,
            "cost": cost(h.total),
            "entries": entries,
        });
        with_warnings(&mut answer, warnings);
        to_json(&answer)
    })
    .await
}

/// The noise options of a native diff request.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoiseOptions {
    /// The label naming machines, split to fit the noise model (default `host`).
    host_label: Option<String>,
    /// How far above the expected noise a distance must be to count as significant.
    margin: Option<f64>,
    /// How many random host splits the fit averages over.
    splits: Option<usize>,
}

impl NoiseOptions {
    /// Refuses margins and split counts no fit can use.
    pub fn check(&self) -> ApiResult<()> {
        if let Some(m) = self.margin {
            if !(m.is_finite() && m > 0.0) {
                return Err(ApiError::bad_request(format!(
                    "noise.margin must be a positive number, got {m}"
                )));
            }
        }
        if let Some(s) = self.splits {
            if !(1..=1024).contains(&s) {
                return Err(ApiError::bad_request(format!(
                    "noise.splits must be between 1 and 1024, got {s}"
                )));
            }
        }
        Ok(())
    }
}

/// The noise figure of a diff: C fitted on the base side's selection and window,
/// the distance noise alone gives these sample counts, and the verdict. Runs on
/// the blocking pool's thread of the diff.
pub fn noise_answer(
    querier: &Querier,
    tenant: &TenantId,
    (sel, range): (&Selector, TimeRange),
    opts: &NoiseOptions,
    top: usize,
    stats: &DiffStats,
) -> ApiResult<Value> {
    let label = opts.host_label.as_deref().unwrap_or("host");
    let margin = opts.margin.unwrap_or(DEFAULT_MARGIN);
    let splits = opts.splits.unwrap_or(DEFAULT_SPLITS);
    let model = querier.noise_model(tenant, sel, range, label, top, splits)?;
    let Some(model) = model else {
        return Ok(json!({"verdict": "unknown", "host_label": label,
            "reason": format!("fewer than two values of {label:?} have data in the base window: nothing to split")}));
    };
    let (nb, nc) = (stats.samples_base, stats.samples_compare);
    let verdict = model.verdict(stats.manhattan, nb, nc, margin);
    Ok(json!({
        "verdict": verdict.map_or("unknown", Verdict::as_str),
        "expected": model.expected(nb, nc),
        "c": model.c,
        "margin": margin,
        "hosts": model.hosts,
        "splits": model.splits,
        "host_label": label,
    }))
}
