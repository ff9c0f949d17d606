//! `POST /api/v1/admin/fleet/variance/boost`: Pythia's follow-up as one admin
//! action. The groups whose units vary most get more samples for a while, so the
//! next look at them has less sampling noise: a time-limited override per host of
//! the top groups, through the control plane's overrides. The overrides expire by
//! themselves, which lowers the rate again; the budget bounds how many hosts and at
//! what frequency.

use std::collections::BTreeSet;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::admin::authorize;
use super::control::{controller, now_ms};
use super::query::fleet_variance::groups_and_unit;
use super::request::{blocking, window, Params, Selection};
use super::{tenant_of, AppRef};
use crate::control::overrides::OverrideSpec;
use crate::control::policy::{check_event_name, check_hz};
use crate::error::{ApiError, ApiResult};
use crate::time::{parse_duration, rfc3339};

/// Longest boost: an investigation's hour or a day, not a policy change.
const MAX_DURATION_MS: i64 = 24 * 3600 * 1000;
/// Most groups one boost takes.
const MAX_TOP: usize = 20;
/// Most hosts one boost may raise.
const MAX_HOSTS: usize = 1000;

pub fn routes() -> Router<AppRef> {
    Router::new().route("/api/v1/admin/fleet/variance/boost", post(boost))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BoostParams {
    query: Option<String>,
    from: Option<String>,
    until: Option<String>,
    group_by: Option<String>,
    unit: Option<String>,
    /// The first groups by CoV that are boosted (default 3).
    top: Option<usize>,
    /// How long the overrides last (default 1h).
    duration: Option<String>,
    /// The raised sampling frequency (default 99 Hz).
    frequency_hz: Option<u64>,
    /// Sample this event at `frequency_hz` (default: the plan's events).
    event: Option<String>,
    /// At most this many hosts are raised in all (default 10).
    max_hosts: Option<usize>,
    /// The label naming the agents' hosts on the profiles (default `host`).
    host_label: Option<String>,
}

fn bounded(name: &str, v: Option<usize>, default: usize, max: usize) -> ApiResult<usize> {
    let v = v.unwrap_or(default);
    if (1..=max).contains(&v) {
        Ok(v)
    } else {
        Err(ApiError::bad_request(format!(
            "{name} must be between 1 and {max}, got {v}"
        )))
    }
}

/// `POST /api/v1/admin/fleet/variance/boost?query=&from=&until=&group_by=&unit=&top=&duration=&frequency_hz=&event=&max_hosts=&host_label=`
async fn boost(
    State(state): State<AppRef>,
    headers: HeaderMap,
    Params(p): Params<BoostParams>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    authorize(&state, &headers)?;
    let tenant = tenant_of(&headers)?;
    let sel = Selection::from_query(p.query.as_deref())?.selector;
    let range = window(("from", p.from.as_deref()), ("until", p.until.as_deref()))?;
    let (group_labels, unit) = groups_and_unit(p.group_by.as_deref(), p.unit.as_deref())?;
    let top = bounded("top", p.top, 3, MAX_TOP)?;
    let max_hosts = bounded("max_hosts", p.max_hosts, 10, MAX_HOSTS)?;
    let duration_ms = parse_duration("duration", p.duration.as_deref().unwrap_or("1h"))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    if !(1..=MAX_DURATION_MS).contains(&duration_ms) {
        return Err(ApiError::bad_request(
            "duration must be more than 0 and at most 24h: a boost is for an investigation",
        ));
    }
    let hz = p.frequency_hz.unwrap_or(99);
    check_hz("frequency_hz", hz)?;
    if let Some(e) = &p.event {
        check_event_name("event", e)?;
    }
    let host_label = p
        .host_label
        .clone()
        .filter(|h| !h.trim().is_empty())
        .unwrap_or_else(|| "host".into());
    let ctl = controller(&state)?;

    let querier = state.querier()?;
    let (t, labels, u) = (tenant.clone(), group_labels.clone(), unit.clone());
    let groups = blocking(move || {
        let mut groups = querier.fleet_variance(&t, &sel, range, &labels, &u)?;
        groups.truncate(top);
        let mut out = Vec::with_capacity(groups.len());
        for g in groups {
            let narrowed = sel.narrowed_to(&labels, &g.group);
            let hosts = querier.label_values(&t, &host_label, &narrowed, range)?;
            out.push((g, hosts));
        }
        Ok(out)
    })
    .await?;

    // Highest CoV first, each group's hosts by name; a host in two groups is
    // raised once, for the first.
    let now = now_ms();
    let until_ms = now + duration_ms;
    let mut taken: BTreeSet<String> = BTreeSet::new();
    let (mut specs, mut answer_groups, mut over_budget) = (Vec::new(), Vec::new(), Vec::new());
    for (g, hosts) in &groups {
        let name: Vec<String> = group_labels
            .iter()
            .zip(&g.group)
            .map(|(l, v)| format!("{l}={v}"))
            .collect();
        let mut boosted = Vec::new();
        for h in hosts {
            if taken.contains(h) {
                continue;
            }
            if taken.len() == max_hosts {
                over_budget.push(h.clone());
                continue;
            }
            taken.insert(h.clone());
            boosted.push(h.clone());
            specs.push(OverrideSpec {
                host: Some(h.clone()),
                service: None,
                event: p.event.clone(),
                frequency_hz: Some(hz),
                profile: true,
                until_ms,
                reason: Some(format!(
                    "variance boost: {} (CoV {:.3})",
                    name.join(","),
                    g.cov
                )),
            });
        }
        let group: serde_json::Map<String, Value> = group_labels
            .iter()
            .zip(&g.group)
            .map(|(l, v)| (l.clone(), Value::String(v.clone())))
            .collect();
        answer_groups
            .push(json!({"group": group, "cov": g.cov, "units": g.units, "hosts": boosted}));
    }
    let created = if specs.is_empty() {
        Vec::new()
    } else {
        ctl.add_overrides(tenant.as_str(), specs, now)?
    };
    let status = match created.is_empty() {
        true => StatusCode::OK,
        false => StatusCode::CREATED,
    };
    Ok((
        status,
        Json(json!({
            "until": rfc3339(until_ms),
            "frequency_hz": hz,
            "groups": answer_groups,
            "overrides": created,
            "over_budget": over_budget,
        })),
    ))
}
