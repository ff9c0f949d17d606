//! Alert rules and alerts: `GET/POST /api/v1/alerts/rules`,
//! `GET/PUT/DELETE /api/v1/alerts/rules/{name}` and `GET /api/v1/alerts`.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use axum::{Json, Router};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Value};

use super::request::Params;
use super::{tenant_of, AppRef, TENANT_HEADER};
use crate::alerts::deliver::{figures, links};
use crate::alerts::rule::{Condition, Rule, RuleSpec};
use crate::alerts::state::{AlertState, RuleState};
use crate::alerts::{AlertError, Alerts};
use crate::error::{ApiError, ApiResult};
use crate::time::rfc3339;

pub fn routes() -> Router<AppRef> {
    Router::new()
        .route("/api/v1/alerts", get(list_alerts))
        .route("/api/v1/alerts/rules", get(list_rules).post(create_rule))
        .route(
            "/api/v1/alerts/rules/{name}",
            get(get_rule).put(put_rule).delete(delete_rule),
        )
}

impl From<AlertError> for ApiError {
    fn from(e: AlertError) -> Self {
        match e {
            AlertError::Invalid(m) => ApiError::bad_request(m.to_string()),
            AlertError::Exists(_) => {
                ApiError::new(StatusCode::CONFLICT, "already_exists", e.to_string())
            }
            AlertError::NotFound(_) => {
                ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string())
            }
            AlertError::Storage(s) => s.into(),
            AlertError::Encode(_) | AlertError::Task(_) => ApiError::internal(e.to_string()),
        }
    }
}

fn alerts(state: &AppRef) -> ApiResult<Arc<Alerts>> {
    state
        .alerts
        .get()
        .cloned()
        .ok_or_else(|| ApiError::unavailable("the store is still opening (replaying the WAL)"))
}

/// The body as a rule of the request's tenant (`X-Scope-OrgID`, or the default).
fn spec_of(headers: &HeaderMap, body: &Bytes) -> ApiResult<RuleSpec> {
    let mut spec: RuleSpec = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid rule: {e}")))?;
    let tenant = tenant_of(headers)?;
    match &spec.tenant {
        Some(t) if t.trim() != tenant.as_str() => {
            return Err(ApiError::bad_request(format!(
                "the rule names tenant {t:?} but the request is for {:?} ({TENANT_HEADER})",
                tenant.as_str()
            )))
        }
        _ => spec.tenant = Some(tenant.as_str().to_string()),
    }
    Ok(spec)
}

/// Rules are visible only to their tenant; another tenant's rule is "not found".
fn own(a: &Alerts, headers: &HeaderMap, name: &str) -> ApiResult<(Arc<Rule>, RuleState)> {
    let tenant = tenant_of(headers)?;
    a.list()
        .into_iter()
        .find(|(r, _)| r.name() == name && r.tenant == tenant)
        .ok_or_else(|| ApiError::from(AlertError::NotFound(name.to_string())))
}

fn ms(t: Option<i64>) -> Value {
    t.map_or(Value::Null, |t| Value::String(rfc3339(t)))
}

/// `1234567` → `1,234,567`.
fn thousands(v: f64) -> String {
    let digits = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0.0 {
        out.insert(0, '-');
    }
    out
}

/// Why a rule is in its state, in a sentence a person reads beside the state.
fn reason(rule: &Rule, s: &RuleState) -> String {
    if let Some(e) = &s.last_error {
        return format!("the last evaluation failed: {e}");
    }
    let Some(m) = &s.last else {
        return "not evaluated yet".to_string();
    };
    let (value, threshold) = match rule.spec.condition {
        Condition::ShareDeltaPp(_) => {
            (format!("{:+.2} pp", m.value), format!("{} pp", m.threshold))
        }
        Condition::RelativeIncrease(_) => (
            format!("{:+.1} %", m.value * 100.0),
            format!("{} %", m.threshold * 100.0),
        ),
        Condition::Manhattan(_) => (format!("{:.4}", m.value), format!("{}", m.threshold)),
    };
    let what = m.function.as_deref().unwrap_or("the watched functions");
    let noise = m.noise.as_ref().filter(|n| n.above == Some(false));
    match s.state {
        AlertState::Firing => format!("{what} moved {value}, at or over {threshold}"),
        AlertState::Pending => format!(
            "{what} moved {value}, at or over {threshold}; fires once that has held for {}",
            rule.spec.for_duration
        ),
        AlertState::Inactive | AlertState::Resolved if !m.enough_samples => format!(
            "too few samples to judge: {} on the smaller side, {} required",
            thousands(m.samples_base.min(m.samples_compare)),
            thousands(m.required_samples as f64)
        ),
        AlertState::Inactive | AlertState::Resolved if m.condition_met && noise.is_some() => {
            format!("{what} moved {value}, but no more than sampling noise explains")
        }
        AlertState::Inactive | AlertState::Resolved => {
            format!("{what} moved {value}, under the threshold {threshold}")
        }
    }
}

fn rule_json(a: &Alerts, rule: &Rule, s: &RuleState) -> Value {
    json!({
        "rule": rule.spec,
        "state": s.state.as_str(),
        "reason": reason(rule, s),
        "active_at": ms(s.active_at_ms),
        "fired_at": ms(s.fired_at_ms),
        "resolved_at": ms(s.resolved_at_ms),
        "last_evaluation": ms(s.last_eval_ms),
        "last_error": s.last_error,
        "figures": s.last.as_ref().map(figures),
        "links": s.last.as_ref().map(|m| links(rule, m, &a.external_url)),
        "notifications_queued": s.outbox.iter().map(|o| json!({
            "target": o.target.as_str(),
            "kind": o.notification.kind,
            "attempts": o.attempts,
            "last_error": o.last_error,
        })).collect::<Vec<_>>(),
    })
}

async fn list_rules(State(state): State<AppRef>, headers: HeaderMap) -> ApiResult<Json<Value>> {
    let a = alerts(&state)?;
    let tenant = tenant_of(&headers)?;
    let rules: Vec<Value> = a
        .list()
        .iter()
        .filter(|(r, _)| r.tenant == tenant)
        .map(|(r, s)| rule_json(&a, r, s))
        .collect();
    Ok(Json(json!({ "rules": rules })))
}

async fn get_rule(
    State(state): State<AppRef>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    let a = alerts(&state)?;
    let (r, s) = own(&a, &headers, &name)?;
    Ok(Json(rule_json(&a, &r, &s)))
}

async fn store_rule(
    state: &AppRef,
    spec: RuleSpec,
    replace: bool,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let rule = alerts(state)?.upsert(spec, replace).await?;
    let status = if replace {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(json!({ "rule": rule.spec }))))
}

/// `POST /api/v1/alerts/rules`: creates a rule (409 if the name is taken).
async fn create_rule(
    State(state): State<AppRef>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let spec = spec_of(&headers, &body)?;
    store_rule(&state, spec, false).await
}

/// `PUT /api/v1/alerts/rules/{name}`: creates or replaces a rule.
async fn put_rule(
    State(state): State<AppRef>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let spec = spec_of(&headers, &body)?;
    let a = alerts(&state)?;
    if a.rule(&name).is_some() {
        // Replacing needs the rule to be the caller's.
        own(&a, &headers, &name)?;
    }
    if spec.name.trim() != name {
        return Err(ApiError::bad_request(format!(
            "the body names rule {:?} but the path names {name:?}",
            spec.name
        )));
    }
    store_rule(&state, spec, true).await
}

async fn delete_rule(
    State(state): State<AppRef>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    let a = alerts(&state)?;
    own(&a, &headers, &name)?;
    a.remove(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Default, Deserialize)]
struct ListParams {
    /// `true` lists every rule's alert, including inactive and resolved ones.
    all: Option<bool>,
}

/// `GET /api/v1/alerts`: pending and firing alerts with their figures.
async fn list_alerts(
    State(state): State<AppRef>,
    headers: HeaderMap,
    Params(p): Params<ListParams>,
) -> ApiResult<Json<Value>> {
    let tenant = tenant_of(&headers)?;
    let all = p.all.unwrap_or(false);
    let a = alerts(&state)?;
    let list: Vec<Value> = a
        .list()
        .iter()
        .filter(|(r, _)| r.tenant == tenant)
        .filter(|(_, s)| all || matches!(s.state, AlertState::Pending | AlertState::Firing))
        .map(|(r, s)| {
            let mut labels = r.spec.labels.clone();
            labels.insert("alertname".into(), r.name().to_string());
            let shown = match s.state {
                AlertState::Firing | AlertState::Resolved => {
                    s.fired_with.as_ref().or(s.last.as_ref())
                }
                _ => s.last.as_ref(),
            };
            json!({
                "rule": r.name(),
                "state": s.state.as_str(),
                "reason": reason(r, s),
                "labels": labels,
                "annotations": r.spec.annotations,
                "active_at": ms(s.active_at_ms),
                "fired_at": ms(s.fired_at_ms),
                "resolved_at": ms(s.resolved_at_ms),
                "figures": s.last.as_ref().map(figures),
                "fired_with": s.fired_with.as_ref().map(figures),
                "links": shown.map(|m| links(r, m, &a.external_url)),
            })
        })
        .collect();
    Ok(Json(json!({ "alerts": list })))
}

#[cfg(test)]
mod tests {
    use super::thousands;

    #[test]
    fn counts_read_in_thousands() {
        assert_eq!(thousands(144_866.0), "144,866");
        assert_eq!(thousands(8_000_000.0), "8,000,000");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(-1234.4), "-1,234");
    }
}
