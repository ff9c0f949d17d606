//! `profiledb diff`: asks a running server's `POST /api/v1/diff` and prints the
//! top-movers table the alerts use.

use std::fmt::Write;
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};

use crate::time::{human_value, rfc3339};

/// What `profiledb diff` asks for; ranges are `[start, end)` in ms.
#[derive(Clone, Debug)]
pub struct DiffArgs {
    pub server: String,
    pub profile_type: String,
    pub selector: String,
    pub base: (i64, i64),
    pub compare: (i64, i64),
    pub top: usize,
    pub tenant: Option<String>,
}

/// The server's diff answer (JSON).
pub fn diff(a: &DiffArgs) -> anyhow::Result<Value> {
    let url = format!("{}/api/v1/diff", a.server.trim_end_matches('/'));
    let body = json!({
        "profile_type": a.profile_type,
        "selector": a.selector,
        "base": {"start": a.base.0, "end": a.base.1},
        "compare": {"start": a.compare.0, "end": a.compare.1},
        "top": a.top,
        "max_nodes": 16,
    });
    let mut req = agent()
        .post(&url)
        .header("content-type", "application/json");
    if let Some(t) = &a.tenant {
        req = req.header("X-Scope-OrgID", t);
    }
    let resp = req
        .send(body.to_string())
        .with_context(|| format!("cannot reach {url}"))?;
    read_answer(&url, resp)
}

/// An HTTP client for asking a server: generous timeout, error statuses returned
/// as answers (their JSON message is the useful part).
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(120)))
        .http_status_as_error(false)
        .build()
        .new_agent()
}

/// A server's JSON answer, or its error message as the error.
pub fn read_answer(url: &str, mut resp: ureq::http::Response<ureq::Body>) -> anyhow::Result<Value> {
    let status = resp.status();
    let text = resp
        .body_mut()
        .read_to_string()
        .with_context(|| format!("cannot read the answer of {url}"))?;
    let v: Value = serde_json::from_str(&text)
        .with_context(|| format!("{url} answered HTTP {status} with non-JSON: {text:.200}"))?;
    if !status.is_success() {
        let msg = v["message"].as_str().unwrap_or(&text);
        anyhow::bail!("{url} answered HTTP {status}: {msg}");
    }
    Ok(v)
}

fn pct(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0) * 100.0
}

/// The table: one row per function (base share, compare share, delta in pp), then
/// the stability figures.
pub fn diff_table(a: &DiffArgs, v: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "profile type: {}", a.profile_type);
    let _ = writeln!(
        out,
        "selector:     {}",
        if a.selector.is_empty() {
            "{}"
        } else {
            &a.selector
        }
    );
    let _ = writeln!(
        out,
        "base:         {} .. {}",
        rfc3339(a.base.0),
        rfc3339(a.base.1)
    );
    let _ = writeln!(
        out,
        "compare:      {} .. {}\n",
        rfc3339(a.compare.0),
        rfc3339(a.compare.1)
    );
    let unit = a.profile_type.split(':').nth(2).unwrap_or("");
    let s = &v["stats"];
    let totals = format!(
        "totals:   base {}, compare {}",
        human_value(s["samples_base"].as_f64().unwrap_or(0.0), unit),
        human_value(s["samples_compare"].as_f64().unwrap_or(0.0), unit)
    );
    if let Some(notice) = v["notice"].as_str() {
        // Shares against an empty side would read as ±100 pp moves: say what it is.
        let _ = writeln!(out, "{notice}: no comparison\n{totals}");
        return out;
    }
    let rows = v["top"].as_array().cloned().unwrap_or_default();
    let width = rows
        .iter()
        .filter_map(|r| r["function"].as_str())
        .map(|f| f.chars().count())
        .max()
        .unwrap_or(8)
        .clamp(8, 80);
    let _ = writeln!(
        out,
        "{:<width$}  {:>10}  {:>13}  {:>9}",
        "function", "base share", "compare share", "delta pp"
    );
    for r in &rows {
        let f: String = r["function"]
            .as_str()
            .unwrap_or("?")
            .chars()
            .take(80)
            .collect();
        let _ = writeln!(
            out,
            "{f:<width$}  {:>9.2}%  {:>12.2}%  {:>+9.2}",
            pct(&r["base_share"]),
            pct(&r["compare_share"]),
            pct(&r["delta"])
        );
    }
    if rows.is_empty() {
        let _ = writeln!(out, "(no samples in either range)");
    }
    let _ = writeln!(
        out,
        "\nmanhattan (top {}): {:.4}\nentropy:  base {:.3} bits, compare {:.3} bits\n{totals}",
        a.top,
        s["manhattan"].as_f64().unwrap_or(0.0),
        s["entropy_base"].as_f64().unwrap_or(0.0),
        s["entropy_compare"].as_f64().unwrap_or(0.0),
    );
    out
}
