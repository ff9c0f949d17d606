//! The fleet analyses over a generated 1-day fleet (CPU plus `cycles` and
//! `instructions` hardware-event profiles with a `platform` label): p50 latency of
//! each `/api/v1/fleet/*` endpoint and of the noise-checked diff, cold (first ask
//! after a restart, data in segments) and cached (the same ask again). No DuckDB
//! baseline yet: the query suite's Parquet holds no hardware events or hosts'
//! platforms.

use std::time::Instant;

use anyhow::bail;
use clap::Args as ClapArgs;
use serde_json::{json, Value};

use crate::fleet::{Fleet, FleetConfig, CPU_TYPE};
use crate::query_suite::percentile;
use crate::report;
use crate::server::{push, Running};

#[derive(ClapArgs)]
pub struct Args {
    #[arg(long, default_value_t = 42)]
    seed: u64,
    #[arg(long, default_value_t = 12)]
    hosts: usize,
    #[arg(long, default_value_t = 5)]
    services: usize,
    /// Distinct stacks per service.
    #[arg(long, default_value_t = 2000)]
    stacks: usize,
    /// Seconds between pushes over the day.
    #[arg(long, default_value_t = 600)]
    interval: u64,
    /// Cached asks timed per analysis.
    #[arg(long, default_value_t = 10)]
    cached: usize,
    /// Small run for CI.
    #[arg(long)]
    quick: bool,
}

const HOUR: i64 = 3_600_000;

/// Query parameters of one ask.
type Params<'a> = Vec<(&'a str, String)>;

pub fn run(mut args: Args) -> anyhow::Result<()> {
    if args.quick {
        args.hosts = args.hosts.min(4);
        args.services = args.services.min(2);
        args.stacks = args.stacks.min(500);
        args.interval = args.interval.max(3600);
        args.cached = args.cached.min(3);
    }
    if args.interval == 0 || args.hosts == 0 || args.services == 0 {
        bail!("--interval, --hosts and --services must be positive");
    }
    let dir = tempfile::tempdir()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    let t_end = now / HOUR * HOUR;
    let t_start = t_end - 24 * HOUR;
    let fleet = Fleet::new(FleetConfig {
        seed: args.seed,
        services: args.services,
        stacks_per_service: args.stacks,
        draws_per_profile: 100,
        zipf_s: 1.1,
        deploy_ms: t_end - HOUR * 6,
    });
    let server = Running::start(dir.path(), 0)?;
    let client = reqwest::blocking::Client::new();
    let mut pushes = 0;
    let mut t = t_start;
    while t < t_end {
        for host in 0..args.hosts {
            push(
                &client,
                &server.url,
                &fleet.host_push(host, t, false, None).0,
            )?;
            push(&client, &server.url, &fleet.host_hw_push(host, t))?;
            pushes += 2;
        }
        t += args.interval as i64 * 1000;
    }
    // A restart flushes the head, so the day is read from segments as in production.
    server.stop()?;
    let server = Running::start(dir.path(), 0)?;
    println!(
        "fleet suite: {} services × {} hosts over 1 day every {} s ({pushes} pushes)",
        args.services, args.hosts, args.interval
    );
    let window = [("from", t_start.to_string()), ("until", t_end.to_string())];
    let cpu = format!("{CPU_TYPE}{{}}");
    let asks: Vec<(&str, &str, Params)> = vec![
        (
            "hottest functions",
            "/api/v1/fleet/hottest",
            vec![("query", cpu.clone())],
        ),
        (
            "hottest binaries",
            "/api/v1/fleet/hottest",
            vec![("query", cpu.clone()), ("by", "binary".into())],
        ),
        (
            "cpi",
            "/api/v1/fleet/cpi",
            vec![("clock_label", "clock_ghz".into())],
        ),
        ("assignment", "/api/v1/fleet/assignment", vec![]),
        (
            "variance",
            "/api/v1/fleet/variance",
            vec![
                ("query", cpu.clone()),
                ("group_by", "service_name,version".into()),
            ],
        ),
    ];
    let mut results = Vec::new();
    for (name, path, mut params) in asks {
        params.extend(window.iter().cloned());
        let url = format!("{}{path}", server.url);
        let (cold, cached) = timed(args.cached, || get(&client, &url, &params))?;
        println!("{name:<18} cold {cold:>8.1} ms   cached p50 {cached:>6.1} ms");
        results.push(json!({"analysis": name, "cold_ms": cold, "cached_p50_ms": cached}));
    }
    let diff = json!({"profile_type": CPU_TYPE, "selector": "{}",
        "base": {"start": t_start, "end": t_start + 12 * HOUR},
        "compare": {"start": t_start + 12 * HOUR, "end": t_end}, "noise": {}});
    let url = format!("{}/api/v1/diff", server.url);
    let (cold, cached) = timed(args.cached, || {
        let r = client.post(&url).json(&diff).send()?;
        answer(r)
    })?;
    println!(
        "{:<18} cold {cold:>8.1} ms   cached p50 {cached:>6.1} ms",
        "diff + noise"
    );
    results.push(json!({"analysis": "diff + noise", "cold_ms": cold, "cached_p50_ms": cached}));
    server.stop()?;
    let path = report::write(
        "fleet",
        json!({
            "fleet": {"hosts": args.hosts, "services": args.services, "stacks": args.stacks,
                      "interval_s": args.interval, "pushes": pushes, "quick": args.quick},
            "analyses": results,
        }),
    )?;
    println!("wrote {}", path.display());
    Ok(())
}

fn get(
    client: &reqwest::blocking::Client,
    url: &str,
    params: &[(&str, String)],
) -> anyhow::Result<Value> {
    answer(client.get(url).query(params).send()?)
}

fn answer(r: reqwest::blocking::Response) -> anyhow::Result<Value> {
    let status = r.status();
    let text = r.text()?;
    if !status.is_success() {
        bail!("HTTP {status}: {text:.300}");
    }
    Ok(serde_json::from_str(&text)?)
}

/// The first call's milliseconds and the p50 of `n` more.
fn timed(n: usize, mut f: impl FnMut() -> anyhow::Result<Value>) -> anyhow::Result<(f64, f64)> {
    let mut once = || -> anyhow::Result<f64> {
        let t = Instant::now();
        f()?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    let cold = once()?;
    let mut cached: Vec<f64> = (0..n).map(|_| once()).collect::<anyhow::Result<_>>()?;
    cached.sort_by(f64::total_cmp);
    Ok((cold, percentile(&cached, 50.0)))
}
