//! `profiledb diff`: asks a running server's `POST /api/v1/diff` and prints the
//! top-movers table the alerts use.

use std::fmt::Write;

use anyhow::Context;
use serde_json::{json, Value};

use super::client::{agent, read_answer};
use crate::time::{human_value, parse_instant, rfc3339};

/// The flags of `profiledb diff`.
#[derive(clap::Args, Clone, Debug)]
pub struct DiffArgs {
    /// The server to ask.
    #[arg(long, default_value = "http://127.0.0.1:4040")]
    pub server: String,
    /// Profile type id.
    #[arg(long, default_value = "process_cpu:cpu:nanoseconds:cpu:nanoseconds")]
    pub profile_type: String,
    /// Label selector, e.g. '{service_name="api"}'.
    #[arg(long, default_value = "")]
    pub selector: String,
    /// Start of the base range.
    #[arg(long)]
    pub base_from: String,
    /// End of the base range.
    #[arg(long)]
    pub base_until: String,
    /// Start of the compare range.
    #[arg(long)]
    pub compare_from: String,
    /// End of the compare range (default now).
    #[arg(long, default_value = "now")]
    pub compare_until: String,
    /// Rows (and the k of the Manhattan distance).
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Tenant (X-Scope-OrgID).
    #[arg(long)]
    pub tenant: Option<String>,
    /// Print the server's JSON answer instead of the table.
    #[arg(long)]
    pub json: bool,
}

impl DiffArgs {
    /// The request, with the times read relative to `now` (ms).
    pub fn request(&self, now: i64) -> anyhow::Result<DiffRequest> {
        let t =
            |what: &'static str, v: &str| parse_instant(what, v, now).map_err(anyhow::Error::msg);
        Ok(DiffRequest {
            server: self.server.clone(),
            profile_type: self.profile_type.clone(),
            selector: self.selector.clone(),
            base: (
                t("--base-from", &self.base_from)?,
                t("--base-until", &self.base_until)?,
            ),
            compare: (
                t("--compare-from", &self.compare_from)?,
                t("--compare-until", &self.compare_until)?,
            ),
            top: self.top,
            tenant: self.tenant.clone(),
        })
    }

    pub fn run(&self) -> anyhow::Result<()> {
        let req = self.request(profiledb_storage::now_ms())?;
        let answer = diff(&req)?;
        if self.json {
            println!("{answer:#}");
        } else {
            print!("{}", diff_table(&req, &answer));
        }
        Ok(())
    }
}

/// What `profiledb diff` asks for; ranges are `[start, end)` in ms.
#[derive(Clone, Debug)]
pub struct DiffRequest {
    pub server: String,
    pub profile_type: String,
    pub selector: String,
    pub base: (i64, i64),
    pub compare: (i64, i64),
    pub top: usize,
    pub tenant: Option<String>,
}

/// The server's diff answer (JSON).
pub fn diff(a: &DiffRequest) -> anyhow::Result<Value> {
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

fn pct(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0) * 100.0
}

/// The table: one row per function (base share, compare share, delta in pp), then
/// the stability figures.
pub fn diff_table(a: &DiffRequest, v: &Value) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: DiffArgs,
    }

    #[test]
    fn times_are_read_relative_to_now() {
        let a = Cmd::try_parse_from([
            "diff",
            "--base-from",
            "now-2h",
            "--base-until",
            "now-1h",
            "--compare-from",
            "1970-01-01T01:00:00Z",
        ])
        .unwrap()
        .args;
        let now = 10 * 3_600_000;
        let r = a.request(now).unwrap();
        assert_eq!(r.base, (8 * 3_600_000, 9 * 3_600_000));
        assert_eq!(r.compare, (3_600_000, now));
        assert_eq!(
            r.profile_type,
            "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
        );
        assert_eq!(r.top, 10);
        let mut bad = a.clone();
        bad.base_from = "yesterday".into();
        let e = bad.request(now).unwrap_err().to_string();
        assert!(e.contains("--base-from"), "{e}");
    }
}
