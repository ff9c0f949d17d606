//! `profiledb fleet …`: asks a running server's fleet analyses
//! (`/api/v1/fleet/{hottest,cpi,assignment,variance}`) and prints the answer.

use std::fmt::Write;

use anyhow::Context;
use clap::{Args, ValueEnum};
use serde_json::Value;

use super::client::{agent, read_answer};

/// Which analysis to ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Analysis {
    /// Functions or binaries by share of the whole fleet.
    Hottest,
    /// Cycles per instruction per (service, platform).
    Cpi,
    /// The platform assignment minimising cycles.
    Assignment,
    /// Groups whose units' costs vary most, and why.
    Variance,
}

impl Analysis {
    fn path(self) -> &'static str {
        match self {
            Analysis::Hottest => "/api/v1/fleet/hottest",
            Analysis::Cpi => "/api/v1/fleet/cpi",
            Analysis::Assignment => "/api/v1/fleet/assignment",
            Analysis::Variance => "/api/v1/fleet/variance",
        }
    }
}

/// `profiledb fleet <analysis> [--param name=value]…`
#[derive(Args, Clone, Debug)]
pub struct FleetArgs {
    /// The analysis.
    #[arg(value_enum)]
    pub analysis: Analysis,
    /// The server to ask.
    #[arg(long, default_value = "http://127.0.0.1:4040")]
    pub server: String,
    /// Tenant (X-Scope-OrgID).
    #[arg(long)]
    pub tenant: Option<String>,
    /// A query parameter of the endpoint, `name=value` (repeatable), e.g.
    /// `--param query=process_cpu:cpu:nanoseconds:cpu:nanoseconds{} --param by=binary`.
    #[arg(long = "param", value_parser = name_value)]
    pub params: Vec<(String, String)>,
    /// Print the server's JSON answer instead of the table (always JSON for `cpi`
    /// and `assignment`).
    #[arg(long)]
    pub json: bool,
}

fn name_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("expected name=value, got {s:?}"))
}

impl FleetArgs {
    pub fn run(&self) -> anyhow::Result<()> {
        let answer = ask(self)?;
        match table(self.analysis, &answer) {
            Some(t) if !self.json => print!("{t}"),
            _ => println!("{answer:#}"),
        }
        Ok(())
    }
}

/// The server's answer (JSON).
pub fn ask(a: &FleetArgs) -> anyhow::Result<Value> {
    let url = format!("{}{}", a.server.trim_end_matches('/'), a.analysis.path());
    let mut req = agent().get(&url);
    for (k, v) in &a.params {
        req = req.query(k, v);
    }
    if let Some(t) = &a.tenant {
        req = req.header("X-Scope-OrgID", t);
    }
    let resp = req.call().with_context(|| format!("cannot reach {url}"))?;
    read_answer(&url, resp)
}

/// The hottest ranking as a table: share, services, cost, name.
pub fn hottest_table(v: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>7}  {:>8}  {:>14}  {:>12}  name",
        "share", "services", "core-s/day", "per year"
    );
    let num = |v: &Value, digits: usize| {
        v.as_f64()
            .map_or_else(|| "-".to_string(), |x| format!("{x:.digits$}"))
    };
    for e in v["entries"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "{:>6.2}%  {:>8}  {:>14}  {:>12}  {}",
            e["share"].as_f64().unwrap_or(0.0) * 100.0,
            e["services"].as_u64().unwrap_or(0),
            num(&e["cost"]["core_seconds_per_day"], 1),
            num(&e["cost"]["per_year"], 2),
            e["name"].as_str().unwrap_or("?"),
        );
    }
    let _ = writeln!(
        out,
        "\ntotal {} over {} services",
        v["total"],
        v["services"].as_u64().unwrap_or(0)
    );
    out
}

/// The variance groups as a table (group, units, mean, CoV, costliest unit), each
/// explained group followed by its explaining functions and correlated labels.
pub fn variance_table(v: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>7}  {:>5}  {:>14}  {:<20}  group",
        "cov", "units", "mean", "costliest"
    );
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    for g in v["groups"].as_array().into_iter().flatten() {
        let group: Vec<String> = g["group"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{k}={}", text(v)))
            .collect();
        let _ = writeln!(
            out,
            "{:>7.3}  {:>5}  {:>14.1}  {:<20}  {}",
            g["cov"].as_f64().unwrap_or(0.0),
            g["units"].as_u64().unwrap_or(0),
            g["mean"].as_f64().unwrap_or(0.0),
            format!(
                "{} ({})",
                text(&g["max_unit"]["name"]),
                g["max_unit"]["value"]
            ),
            group.join(","),
        );
        for e in g["explainers"].as_array().into_iter().flatten() {
            let _ = writeln!(
                out,
                "         function {}: {:.1}% of the costly units, {:.1}% of the others",
                text(&e["function"]),
                e["high_share"].as_f64().unwrap_or(0.0) * 100.0,
                e["low_share"].as_f64().unwrap_or(0.0) * 100.0,
            );
        }
        for c in g["correlated_labels"].as_array().into_iter().flatten() {
            let ratio = c["ratio"]
                .as_f64()
                .map_or_else(|| "-".to_string(), |r| format!("{r:.2}x"));
            let _ = writeln!(
                out,
                "         label {}={}: effect {:+.2}, {} units at {} the others' cost",
                text(&c["label"]),
                text(&c["value"]),
                c["effect"].as_f64().unwrap_or(0.0),
                c["units"].as_u64().unwrap_or(0),
                ratio,
            );
        }
    }
    out
}

/// The table for an analysis that has one.
pub fn table(a: Analysis, v: &Value) -> Option<String> {
    match a {
        Analysis::Hottest => Some(hottest_table(v)),
        Analysis::Variance => Some(variance_table(v)),
        Analysis::Cpi | Analysis::Assignment => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn variance_table_lists_explainers_and_labels() {
        let v = json!({"group_by": ["service_name"], "unit": "host", "groups": [{
            "group": {"service_name": "api"}, "units": 4, "mean": 150.0, "stddev": 50.0,
            "cov": 1.0 / 3.0, "max_unit": {"name": "h3", "value": 200},
            "min_unit": {"name": "h1", "value": 100},
            "explainers": [{"function": "lock", "high_share": 0.5, "low_share": 0.0}],
            "correlated_labels": [{"label": "zone", "value": "b", "units": 2,
                "mean_with": 200.0, "mean_without": 100.0, "ratio": 2.0, "effect": 2.0}]}]});
        let want = [
            "    cov  units            mean  costliest             group",
            "  0.333      4           150.0  h3 (200)              service_name=api",
            "         function lock: 50.0% of the costly units, 0.0% of the others",
            "         label zone=b: effect +2.00, 2 units at 2.00x the others' cost",
            "",
        ];
        assert_eq!(variance_table(&v), want.join("\n"));
    }
}
