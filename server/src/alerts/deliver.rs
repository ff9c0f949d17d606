//! Payloads and HTTP delivery: Prometheus Alertmanager's `POST /api/v2/alerts` and a
//! generic JSON webhook. Calls are blocking (ureq) and run on the blocking pool.

use std::collections::BTreeMap;
use std::time::Duration;

use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::{json, Value};

use super::rule::Rule;
use super::state::{Measurement, Notification, NotificationKind, Target};
use crate::time::rfc3339;

/// Delay before retry `attempts` (1-based): 0.5 s doubling, at most one minute.
pub fn backoff_ms(attempts: u32) -> i64 {
    (500i64 << attempts.saturating_sub(1).min(7)).min(60_000)
}

/// After this many failed attempts (about 20 minutes of retries) a notification is
/// dropped with an error log and counted in `profiledb_alert_notifications_dropped_total`.
pub const MAX_ATTEMPTS: u32 = 25;

fn enc(s: &str) -> String {
    utf8_percent_encode(s, NON_ALPHANUMERIC).to_string()
}

/// The diff that reproduces a measurement: the `/api/v1/diff` request, and URLs of the
/// rendered diff flame graph (SVG) and of its Pyroscope flamebearer JSON.
pub fn links(rule: &Rule, m: &Measurement, external_url: &str) -> Value {
    let base = external_url.trim_end_matches('/');
    let r = m.ranges;
    let query = format!(
        "{}{}",
        rule.spec.profile_type,
        if rule.spec.selector.trim().is_empty() {
            "{}"
        } else {
            rule.spec.selector.trim()
        }
    );
    let tenant = rule.tenant.as_str();
    json!({
        "diff": {
            "method": "POST",
            "url": format!("{base}/api/v1/diff"),
            "headers": {"X-Scope-OrgID": tenant},
            "body": {
                "profile_type": rule.spec.profile_type,
                "selector": rule.spec.selector,
                "base": {"start": r.base_start_ms, "end": r.base_end_ms},
                "compare": {"start": r.compare_start_ms, "end": r.compare_end_ms},
                "top": rule.top_k(),
            },
        },
        "diff_flamegraph_svg": format!(
            "{base}/api/v1/diff.svg?query={}&base_from={}&base_until={}&compare_from={}&compare_until={}&tenant={}",
            enc(&query), r.base_start_ms, r.base_end_ms, r.compare_start_ms, r.compare_end_ms, enc(tenant)
        ),
        "diff_flamebearer": format!(
            "{base}/pyroscope/render-diff?leftQuery={q}&leftFrom={}&leftUntil={}&rightQuery={q}&rightFrom={}&rightUntil={}&format=json",
            r.base_start_ms, r.base_end_ms, r.compare_start_ms, r.compare_end_ms, q = enc(&query)
        ),
    })
}

/// The figures of both sides, as the webhook and `GET /api/v1/alerts` show them.
pub fn figures(m: &Measurement) -> Value {
    let r = m.ranges;
    json!({
        "function": m.function,
        "base": {
            "start": rfc3339(r.base_start_ms), "end": rfc3339(r.base_end_ms),
            "start_ms": r.base_start_ms, "end_ms": r.base_end_ms,
            "share": m.base_share, "total": m.total_base, "samples": m.samples_base,
            "entropy": m.entropy_base,
        },
        "compare": {
            "start": rfc3339(r.compare_start_ms), "end": rfc3339(r.compare_end_ms),
            "start_ms": r.compare_start_ms, "end_ms": r.compare_end_ms,
            "share": m.compare_share, "total": m.total_compare, "samples": m.samples_compare,
            "entropy": m.entropy_compare,
        },
        "delta_pp": m.delta_pp,
        "relative_increase": m.relative_increase,
        "manhattan": m.manhattan,
        "value": m.value,
        "threshold": m.threshold,
        "required_samples": m.required_samples,
        "enough_samples": m.enough_samples,
        "top": m.top,
    })
}

fn alert_labels(rule: &Rule) -> BTreeMap<String, String> {
    let mut l = rule.spec.labels.clone();
    l.insert("alertname".into(), rule.name().to_string());
    l
}

fn summary(rule: &Rule, m: &Measurement) -> String {
    format!(
        "{} share {:.2}% -> {:.2}% ({:+.2} pp) in {}{}",
        m.function.as_deref().unwrap_or("(none)"),
        m.base_share * 100.0,
        m.compare_share * 100.0,
        m.delta_pp,
        rule.spec.profile_type,
        rule.spec.selector
    )
}

/// One alert in Alertmanager's v2 format. `ends_at_ms` is in the future for a firing
/// alert (Alertmanager resolves it by itself if refreshes stop) and the resolve time
/// for a resolved one.
pub fn alertmanager_payload(
    rule: &Rule,
    m: &Measurement,
    starts_at_ms: i64,
    ends_at_ms: i64,
    external_url: &str,
) -> Value {
    let mut ann = rule.spec.annotations.clone();
    ann.entry("summary".into())
        .or_insert_with(|| summary(rule, m));
    if let Some(f) = &m.function {
        ann.insert("function".into(), f.clone());
    }
    ann.insert("base_share".into(), format!("{:.6}", m.base_share));
    ann.insert("compare_share".into(), format!("{:.6}", m.compare_share));
    ann.insert("delta_pp".into(), format!("{:.4}", m.delta_pp));
    ann.insert("samples_base".into(), format!("{:.0}", m.samples_base));
    ann.insert(
        "samples_compare".into(),
        format!("{:.0}", m.samples_compare),
    );
    let l = links(rule, m, external_url);
    if let Some(u) = l["diff_flamegraph_svg"].as_str() {
        ann.insert("diff_flamegraph".into(), u.to_string());
    }
    json!([{
        "labels": alert_labels(rule),
        "annotations": ann,
        "startsAt": rfc3339(starts_at_ms),
        "endsAt": rfc3339(ends_at_ms),
        "generatorURL": l["diff_flamegraph_svg"],
    }])
}

/// The webhook body: the rule, the figures of both sides and the links.
pub fn webhook_payload(rule: &Rule, n: &Notification, external_url: &str) -> Value {
    let status = match n.kind {
        NotificationKind::Firing => "firing",
        NotificationKind::Resolved => "resolved",
    };
    json!({
        "version": "1",
        "status": status,
        "rule": rule.spec,
        "labels": alert_labels(rule),
        "annotations": n.annotations,
        "startsAt": rfc3339(n.starts_at_ms),
        "at": rfc3339(n.at_ms),
        "summary": summary(rule, &n.measurement),
        "figures": figures(&n.measurement),
        "links": links(rule, &n.measurement, external_url),
    })
}

/// Why a notification was not delivered; every kind is retried (with backoff) and
/// counted as a failed delivery.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// The receiver answered, but not with a 2xx.
    #[error("{url} answered HTTP {status}")]
    Refused { url: String, status: u16 },
    /// No answer: connection, TLS, timeout.
    #[error("{url}: {source}")]
    Transport {
        url: String,
        #[source]
        source: ureq::Error,
    },
    /// The blocking task that posts panicked or was cancelled.
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
}

/// POSTs `body` as JSON; any non-2xx answer or transport error is an `Err`.
pub fn post_json(agent: &ureq::Agent, url: &str, body: &Value) -> Result<(), DeliveryError> {
    let url = url.to_string();
    match agent
        .post(&url)
        .header("content-type", "application/json")
        .send(body.to_string())
    {
        Ok(_) => Ok(()),
        Err(ureq::Error::StatusCode(status)) => Err(DeliveryError::Refused { url, status }),
        Err(source) => Err(DeliveryError::Transport { url, source }),
    }
}

pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .new_agent()
}

/// Where a target's notifications go.
pub fn target_url(
    target: Target,
    alertmanager: Option<&str>,
    webhook: Option<&str>,
) -> Option<String> {
    match target {
        Target::Alertmanager => {
            alertmanager.map(|u| format!("{}/api/v2/alerts", u.trim_end_matches('/')))
        }
        Target::Webhook => webhook.map(str::to_string),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_a_minute() {
        let v: Vec<i64> = (1..=9).map(backoff_ms).collect();
        assert_eq!(v, [500, 1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000]);
        let total: i64 = (1..MAX_ATTEMPTS).map(backoff_ms).sum();
        assert!((15 * 60_000..30 * 60_000).contains(&total), "{total}");
    }

    #[test]
    fn target_urls() {
        assert_eq!(
            target_url(Target::Alertmanager, Some("http://am:9093/"), None).as_deref(),
            Some("http://am:9093/api/v2/alerts")
        );
        assert_eq!(target_url(Target::Webhook, None, None), None);
    }
}
