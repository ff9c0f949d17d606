//! `profiledb fleet …`: asks a running server's fleet analyses
//! (`/api/v1/fleet/{hottest,cpi,assignment,variance}`) and prints the answer.

use std::fmt::Write;

use anyhow::Context;
use clap::{Args, ValueEnum};
use serde_json::Value;

use crate::cli::{agent, read_answer};

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
    /// Print the server's JSON answer instead of the table (always JSON for the
    /// analyses other than `hottest`).
    #[arg(long)]
    pub json: bool,
}

fn name_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("expected name=value, got {s:?}"))
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
