//! CPI per (service, platform) and the platform-assignment suggestion under
//! `/api/v1/fleet`: the HTTP shape of `profiledb_storage::analysis::{cpi, assign}`.

use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use profiledb_storage::analysis::assign::{assign, cycles_of, AssignError, Placement};
use profiledb_storage::analysis::cpi::{CYCLES_TYPE, INSTRUCTIONS_TYPE};
use profiledb_storage::{GroupKey, Selector, TimeRange, SERVICE_NAME_LABEL};
use serde::Deserialize;
use serde_json::{json, Value};

use super::answers::cached_answer;
use super::native::{count, raw_query, to_json, JSON};
use crate::error::{ApiError, ApiResult};
use crate::http::request::{blocking, window, Params, Selection};
use crate::http::{tenant_of, AppRef};

pub fn routes() -> Router<AppRef> {
    Router::new()
        .route("/api/v1/fleet/cpi", get(cpi))
        .route("/api/v1/fleet/assignment", get(assignment))
}

#[derive(Debug, Default, Deserialize)]
struct CpiParams {
    /// Label matchers without a profile type: `{zone="a"}`.
    selector: Option<String>,
    from: Option<String>,
    until: Option<String>,
    cycles_type: Option<String>,
    instructions_type: Option<String>,
    service_label: Option<String>,
    platform_label: Option<String>,
    /// A label carrying the platform's clock rate in GHz.
    clock_label: Option<String>,
    /// CPI per function within each (service, platform) too.
    #[serde(default)]
    by_function: bool,
}

/// What both endpoints read: the two selections and the window.
struct Inputs {
    cycles: Selector,
    instructions: Selector,
    range: TimeRange,
    service: String,
    platform: String,
}

impl Inputs {
    /// The group-by keys of a (service, platform) cell.
    fn keys(&self) -> Vec<GroupKey> {
        vec![
            GroupKey::Label(self.service.clone()),
            GroupKey::Label(self.platform.clone()),
        ]
    }
}

fn inputs(p: &CpiParams) -> ApiResult<Inputs> {
    let sel = p.selector.as_deref().unwrap_or("{}");
    let of = |t: Option<&String>, default: &str| {
        Selection::from_parts(t.map_or(default, String::as_str), sel).map(|s| s.selector)
    };
    let label = |l: Option<&String>, default: &str| {
        l.filter(|s| !s.is_empty())
            .cloned()
            .unwrap_or_else(|| default.to_string())
    };
    Ok(Inputs {
        cycles: of(p.cycles_type.as_ref(), CYCLES_TYPE)?,
        instructions: of(p.instructions_type.as_ref(), INSTRUCTIONS_TYPE)?,
        range: window(("from", p.from.as_deref()), ("until", p.until.as_deref()))?,
        service: label(p.service_label.as_ref(), SERVICE_NAME_LABEL),
        platform: label(p.platform_label.as_ref(), "platform"),
    })
}

/// `GET /api/v1/fleet/cpi?selector=&from=&until=&service_label=&platform_label=&clock_label=&by_function=`
async fn cpi(
    State(state): State<AppRef>,
    headers: HeaderMap,
    uri: Uri,
    Params(p): Params<CpiParams>,
) -> ApiResult<Response> {
    count(&state);
    let inp = inputs(&p)?;
    let mut keys = inp.keys();
    let clock_at = p.clock_label.as_ref().filter(|c| !c.is_empty()).map(|c| {
        keys.push(GroupKey::Label(c.clone()));
        keys.len() - 1
    });
    if p.by_function {
        keys.push(GroupKey::Function);
    }
    let names: Vec<String> = keys.iter().map(|k| k.name().to_string()).collect();
    let tenant = tenant_of(&headers)?;
    let range = inp.range;
    cached_answer(&state, &tenant, &[range], raw_query(&uri), JSON, || async {
        let (querier, t) = (state.querier()?, tenant.clone());
        let cells = blocking(move || {
            let sels = (&inp.cycles, &inp.instructions);
            Ok(querier.fleet_cpi(&t, sels, range, &keys, clock_at)?)
        })
        .await?;
        let rows: Vec<Value> = cells
            .iter()
            .map(|c| {
                json!({"key": c.key, "cycles": c.cycles, "instructions": c.instructions,
                       "cpi": c.cpi, "ns_per_instruction": c.ns_per_instruction})
            })
            .collect();
        to_json(&json!({"keys": names, "rows": rows}))
    })
    .await
}

/// `GET /api/v1/fleet/assignment?selector=&from=&until=&service_label=&platform_label=`
async fn assignment(
    State(state): State<AppRef>,
    headers: HeaderMap,
    uri: Uri,
    Params(p): Params<CpiParams>,
) -> ApiResult<Response> {
    count(&state);
    if p.by_function || p.clock_label.is_some() {
        return Err(ApiError::bad_request(
            "the assignment is per (service, platform): by_function and clock_label do not apply",
        ));
    }
    let inp = inputs(&p)?;
    let keys = inp.keys();
    let tenant = tenant_of(&headers)?;
    let range = inp.range;
    cached_answer(&state, &tenant, &[range], raw_query(&uri), JSON, || async {
        let (querier, t) = (state.querier()?, tenant.clone());
        let (placement, solved) = blocking(move || {
            let sels = (&inp.cycles, &inp.instructions);
            let cells = querier.fleet_cpi(&t, sels, range, &keys, None)?;
            let placement = Placement::from_cells(&cells);
            let solved = assign(&placement.problem);
            Ok((placement, solved))
        })
        .await?;
        let solved = solved.map_err(|e| match e {
            AssignError::Infeasible | AssignError::InvalidInput(_) => {
                ApiError::bad_request(e.to_string())
            }
            _ => ApiError::internal(e.to_string()),
        })?;
        let today = cycles_of(&placement.problem.cpi, &placement.today);
        let mut moves = Vec::new();
        for (i, app) in placement.apps.iter().enumerate() {
            for (j, platform) in placement.platforms.iter().enumerate() {
                let (now, best) = (placement.today[i][j], solved.load[i][j]);
                if now > 0.0 || best > 0.0 {
                    moves.push(json!({"service": app, "platform": platform,
                        "cpi": placement.problem.cpi[i][j],
                        "instructions_today": now, "instructions_suggested": best}));
                }
            }
        }
        to_json(&json!({
            "services": placement.apps,
            "platforms": placement.platforms,
            "capacity_cycles": placement.problem.capacities,
            "cycles_today": today,
            "cycles_suggested": solved.cycles,
            "cycles_saved": today - solved.cycles,
            "placement": moves,
        }))
    })
    .await
}
