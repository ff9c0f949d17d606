//! The fleet analyses over a generated 1-day fleet (CPU plus `cycles` and
//! `instructions` hardware-event profiles with a `platform` label): p50 latency of
//! each `/api/v1/fleet/*` endpoint and of the noise-checked diff, cold (first ask
//! after a restart, data in segments) and cached (the same ask again). The hottest
//! functions also run in DuckDB over the same CPU rows in Parquet (when
//! `bench/setup.sh` installed it), with the answers compared; the other analyses
//! have no baseline: the Parquet holds no hardware events or hosts' platforms.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use anyhow::bail;
use clap::Args as ClapArgs;
use serde_json::{json, Value};

use crate::baselines::{duckdb_version, run_duckdb};
use crate::fleet::{Fleet, FleetConfig, CPU_TYPE};
use crate::query_specs::percentile;
use crate::report;
use crate::server::{push_patiently as push, Running};

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
    /// Skip the DuckDB baseline of the hottest functions.
    #[arg(long)]
    no_baseline: bool,
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
    let baseline = match (args.no_baseline, duckdb_version()) {
        (true, _) => None,
        (false, Some(v)) => Some(v),
        (false, None) if crate::external::required() => bail!(
            "DuckDB is not installed in bench/.venv (run bench/setup.sh), and PROFILEDB_REQUIRE_EXTERNAL=1 makes that a failure"
        ),
        (false, None) => {
            println!("baseline: DuckDB not installed in bench/.venv (run bench/setup.sh); skipping the DuckDB side");
            None
        }
    };
    // The CPU rows as the query suite's baseline reads them.
    let rows_dir = dir.path().join("rows");
    let mut rows_file = match baseline {
        Some(_) => {
            std::fs::create_dir_all(&rows_dir)?;
            let f = std::fs::File::create(rows_dir.join("samples-0.csv"))?;
            Some(std::io::BufWriter::new(f))
        }
        None => None,
    };
    let server = Running::start(dir.path(), 0)?;
    let client = reqwest::blocking::Client::new();
    let mut pushes = 0;
    let mut rows = Vec::new();
    let mut t = t_start;
    while t < t_end {
        for host in 0..args.hosts {
            rows.clear();
            let want_rows = rows_file.is_some().then_some(&mut rows);
            push(
                &client,
                &server.url,
                &fleet.host_push(host, t, false, want_rows).0,
            )?;
            if let Some(f) = rows_file.as_mut() {
                f.write_all(&rows)?;
            }
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
    let mut hottest_top = None;
    for (name, path, mut params) in asks {
        params.extend(window.iter().cloned());
        let url = format!("{}{path}", server.url);
        let mut last = Value::Null;
        let (cold, cached) = timed(args.cached, || {
            last = get(&client, &url, &params)?;
            Ok(last.clone())
        })?;
        println!("{name:<18} cold {cold:>8.1} ms   cached p50 {cached:>6.1} ms");
        results.push(json!({"analysis": name, "cold_ms": cold, "cached_p50_ms": cached}));
        if name == "hottest functions" {
            hottest_top = Some(last);
        }
    }
    let duckdb = match (&baseline, rows_file.take()) {
        (Some(version), Some(mut f)) => {
            f.flush()?;
            drop(f);
            let answer = hottest_top.unwrap_or(Value::Null);
            Some(duckdb_hottest(
                &fleet,
                &rows_dir,
                (t_start, t_end),
                args.cached,
                &answer,
                version,
            )?)
        }
        _ => None,
    };
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
            "duckdb_hottest_functions": duckdb,
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

/// The hottest functions of the window in DuckDB over the same CPU rows in Parquet
/// (the query suite's schema): timed like the query suite's baseline, and its top 20
/// compared with profiledb's answer (`answer`) name for name and value for value.
fn duckdb_hottest(
    fleet: &Fleet,
    rows_dir: &Path,
    (t_start, t_end): (i64, i64),
    iterations: usize,
    answer: &Value,
    version: &str,
) -> anyhow::Result<Value> {
    fleet.write_stacks_csv(&rows_dir.join("stacks.csv"))?;
    let dir = rows_dir.display().to_string();
    let convert = run_duckdb(&["convert", "--dir", &dir])?;
    // Same order as profiledb's ranking: value, then name.
    let sql = format!(
        "SELECT k.leaf AS name, count(DISTINCT s.service) AS services, sum(s.value) AS value \
         FROM samples s JOIN stacks k USING (stack_id) \
         WHERE s.profile_type = '{CPU_TYPE}' AND s.ts_ms >= {t_start} AND s.ts_ms < {t_end} \
         GROUP BY k.leaf ORDER BY value DESC, name LIMIT 20"
    );
    let spec_path = rows_dir.join("spec.json");
    std::fs::write(
        &spec_path,
        serde_json::to_vec(&json!([{"name": "hottest functions", "sql": sql}]))?,
    )?;
    let iterations = iterations.max(1).to_string();
    let out = run_duckdb(&[
        "run",
        "--dir",
        &dir,
        "--spec",
        &spec_path.display().to_string(),
        "--iterations",
        &iterations,
    ])?;
    let d = out["hottest functions"].clone();
    let ours: f64 = answer["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["value"].as_f64())
        .sum();
    let theirs = d["total"].as_f64();
    let agree = theirs.is_some_and(|t| (t - ours).abs() <= 1e-9 * ours.abs().max(1.0));
    println!(
        "{:<18} DuckDB {version}: first {:>8.1} ms   p50 {:>6.1} ms   top-20 total {} ({})",
        "hottest functions",
        d["first_ms"].as_f64().unwrap_or(f64::NAN),
        d["p50_ms"].as_f64().unwrap_or(f64::NAN),
        theirs.unwrap_or(f64::NAN),
        if agree {
            "same as profiledb"
        } else {
            "DIFFERS from profiledb"
        },
    );
    if !agree {
        bail!("DuckDB's top-20 hottest functions total {theirs:?}, profiledb's {ours}");
    }
    Ok(json!({"duckdb_version": version, "convert": convert, "query": d, "top20_total": ours}))
}
