//! The fleet control plane over HTTP.
//!
//! - `POST /control.v1.ControlService/GetPlan` (Connect, proto or JSON): an agent's
//!   check-in; answers its plan. The ingest credential of a tenant may call it.
//! - `GET /api/v1/agents`: the tenant's agents, their plans and reports.
//! - `GET|PUT /api/v1/admin/agents/policy`, `GET|POST /api/v1/admin/agents/overrides`,
//!   `DELETE /api/v1/admin/agents/overrides/{id}`: the admin's levers, per tenant
//!   (`X-Scope-OrgID`).

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use bytes::Bytes;
use profiledb_proto::control::v1 as c;
use serde::Deserialize;
use serde_json::{json, Value};

use super::admin::authorize;
use super::query::connect::{self, ConnectError, ConnectResult};
use super::{tenant_of, AppRef};
use crate::control::overrides::OverrideSpec;
use crate::control::policy::Policy;
use crate::control::{ControlError, Controller};
use crate::error::{ApiError, ApiResult};
use crate::time::{parse_instant, rfc3339};

const GET_PLAN: &str = "control.v1.GetPlanRequest";
const PLAN_RESPONSE: &str = "control.v1.GetPlanResponse";

pub fn routes() -> Router<AppRef> {
    Router::new()
        .route("/control.v1.ControlService/GetPlan", post(get_plan))
        .route("/api/v1/agents", get(list_agents))
        .route(
            "/api/v1/admin/agents/policy",
            get(get_policy).put(put_policy),
        )
        .route(
            "/api/v1/admin/agents/overrides",
            get(list_overrides).post(add_override),
        )
        .route(
            "/api/v1/admin/agents/overrides/{id}",
            delete(delete_override),
        )
}

impl From<ControlError> for ApiError {
    fn from(e: ControlError) -> Self {
        match e {
            ControlError::Invalid(m) => ApiError::bad_request(m),
            ControlError::NotFound(_) => {
                ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string())
            }
            ControlError::Full { .. } => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "resource_exhausted",
                e.to_string(),
            )
            .with_retry_after(60),
            ControlError::Save { .. }
            | ControlError::Read { .. }
            | ControlError::Corrupt { .. } => ApiError::internal(e.to_string()),
        }
    }
}

pub(super) fn now_ms() -> i64 {
    profiledb_storage::now_ms()
}

pub(super) fn controller(state: &AppRef) -> ApiResult<&Controller> {
    state
        .control
        .get()
        .map(|c| c.as_ref())
        .ok_or_else(|| ApiError::unavailable("the controller is not running"))
}

async fn get_plan(
    State(state): State<AppRef>,
    headers: HeaderMap,
    body: Bytes,
) -> ConnectResult<Response> {
    let (req, enc) = connect::decode::<c::GetPlanRequest>(&headers, &body, GET_PLAN, 1 << 20)?;
    let tenant = tenant_of(&headers)?;
    let ctl = controller(&state)?;
    let plan = ctl
        .get_plan(tenant.as_str(), &req, now_ms())
        .map_err(|e| ConnectError::from(ApiError::from(e)))?;
    connect::respond(&c::GetPlanResponse { plan: Some(plan) }, PLAN_RESPONSE, enc)
}

async fn list_agents(State(state): State<AppRef>, headers: HeaderMap) -> ApiResult<Json<Value>> {
    let tenant = tenant_of(&headers)?;
    let now = now_ms();
    let agents = controller(&state)?.agents(tenant.as_str(), now);
    let silent = agents.iter().filter(|a| a.status == "silent").count();
    let profiling = agents
        .iter()
        .filter(|a| a.status == "ok" && a.plan.profile)
        .count();
    Ok(Json(json!({
        "now": rfc3339(now),
        "summary": {"agents": agents.len(), "silent": silent, "profiling": profiling},
        "agents": agents,
    })))
}

async fn get_policy(State(state): State<AppRef>, headers: HeaderMap) -> ApiResult<Json<Policy>> {
    authorize(&state, &headers)?;
    let tenant = tenant_of(&headers)?;
    Ok(Json(controller(&state)?.policy(tenant.as_str())))
}

async fn put_policy(
    State(state): State<AppRef>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<Policy>> {
    authorize(&state, &headers)?;
    let tenant = tenant_of(&headers)?;
    let policy: Policy = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid policy: {e}")))?;
    let ctl = controller(&state)?;
    ctl.set_policy(tenant.as_str(), policy)?;
    Ok(Json(ctl.policy(tenant.as_str())))
}

async fn list_overrides(State(state): State<AppRef>, headers: HeaderMap) -> ApiResult<Json<Value>> {
    authorize(&state, &headers)?;
    let tenant = tenant_of(&headers)?;
    let list = controller(&state)?.overrides(tenant.as_str(), now_ms());
    Ok(Json(json!({ "overrides": list })))
}

/// The body of `POST /api/v1/admin/agents/overrides`: an override whose expiry is
/// `until` (RFC 3339, Unix ms, or `now+2h` / `2h` ahead).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewOverride {
    #[serde(default)]
    host: Option<String>,
    #[serde(default)]
    service: Option<String>,
    #[serde(default)]
    event: Option<String>,
    #[serde(default)]
    frequency_hz: Option<u64>,
    #[serde(default)]
    profile: Option<bool>,
    until: Value,
    #[serde(default)]
    reason: Option<String>,
}

fn until_ms(v: &Value, now: i64) -> ApiResult<i64> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .ok_or_else(|| ApiError::bad_request("until must be an integer of Unix milliseconds")),
        Value::String(s) => {
            let s = s.trim();
            let relative = s.strip_prefix("now+").unwrap_or(s);
            if let Ok(d) = crate::time::parse_duration("until", relative) {
                return Ok(now + d);
            }
            parse_instant("until", s, now).map_err(|e| ApiError::bad_request(e.to_string()))
        }
        _ => Err(ApiError::bad_request(
            "until is a time: RFC 3339, Unix milliseconds, or a duration ahead such as \"2h\"",
        )),
    }
}

async fn add_override(
    State(state): State<AppRef>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<Value>)> {
    authorize(&state, &headers)?;
    let tenant = tenant_of(&headers)?;
    let n: NewOverride = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid override: {e}")))?;
    let now = now_ms();
    let spec = OverrideSpec {
        host: n.host,
        service: n.service,
        event: n.event,
        frequency_hz: n.frequency_hz,
        profile: n.profile.unwrap_or(true),
        until_ms: until_ms(&n.until, now)?,
        reason: n.reason,
    };
    let o = controller(&state)?.add_override(tenant.as_str(), spec, now)?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"override": o, "until": rfc3339(o.spec.until_ms)})),
    ))
}

async fn delete_override(
    State(state): State<AppRef>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    authorize(&state, &headers)?;
    let tenant = tenant_of(&headers)?;
    let id: u64 = id
        .parse()
        .map_err(|_| ApiError::bad_request(format!("override id {id:?} is not a number")))?;
    controller(&state)?.delete_override(tenant.as_str(), id)?;
    Ok(StatusCode::NO_CONTENT)
}
