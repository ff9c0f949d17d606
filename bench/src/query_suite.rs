//! The `query` and `baseline` suites: a generated fleet pushed through a real
//! in-process server, then merge, 2-key group-by with a function filter, time series
//! and diff over 1 hour and 1 day (merge, group-by and time series also over 7 and
//! 30 days), timed over HTTP (first query after a restart, result-cache misses,
//! cache hits); and the same queries over the same rows in the
//! baseline engines of `baselines.rs` (DuckDB over Parquet, DuckDB's native tables,
//! ClickHouse through chdb), from the bench virtualenv (`bench/setup.sh`) in the same
//! invocation.
//!
//! Data layout: the fleet covers `--days` days ending at `t_end` (the last whole hour
//! before now, minus one hour). The final hour is at full density (one push per
//! process per `--interval` s); the 23 hours before it at `--day-interval` s, and the
//! days before those at `--old-interval` s, so the long queries stay affordable on a
//! small machine (and the baselines' CSV within a few GB). Every density is printed
//! and recorded. After the ingest the server's compactor is run once (the admin
//! API), so past UTC days are day blocks, and past weeks week blocks, as a
//! long-running server keeps them.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};

use crate::baselines::{self, Asked, Installed};
use crate::cold_queries::{self, ColdSet};
use crate::fleet::{dense, heap_due, Fleet, FleetConfig, Replay};
use crate::query_specs::{adhoc_specs, p50_p99, send, specs, timed, AdHoc, Req};
use crate::report::{self, human_bytes};
use crate::same_rows;
use crate::server::{workspace_binary, Running};
use crate::thread_cpu;

mod push;
mod table;

use table::print_table;

#[derive(clap::Args, Clone)]
pub struct Args {
    /// Seed of the fleet generator (same seed, same fleet).
    #[arg(long, default_value_t = dense::SEED)]
    seed: u64,
    /// Simulated hosts.
    #[arg(long, default_value_t = dense::HOSTS)]
    hosts: usize,
    /// Simulated services on every host.
    #[arg(long, default_value_t = dense::SERVICES)]
    services: usize,
    /// Distinct stacks per service.
    #[arg(long, default_value_t = dense::STACKS_PER_SERVICE)]
    stacks: usize,
    /// CPU samples drawn per 10 s profile (before ±30 % host jitter).
    #[arg(long, default_value_t = dense::DRAWS_PER_PROFILE)]
    draws: usize,
    /// Seconds between pushes in the last hour.
    #[arg(long, default_value_t = dense::INTERVAL_SECS)]
    interval: u64,
    /// Seconds between pushes in the 23 hours before it.
    #[arg(long, default_value_t = 300)]
    day_interval: u64,
    /// Days of fleet data (the 7- and 30-day queries read what exists).
    #[arg(long, default_value_t = 30)]
    days: u64,
    /// Seconds between pushes before the last day.
    #[arg(long, default_value_t = 10_800)]
    old_interval: u64,
    /// Hosts replaying the real fixture profiles (own profile name `fixture`, pushed
    /// every 5 minutes in the last hour; 0 = none).
    #[arg(long, default_value_t = 10)]
    replay_hosts: usize,
    /// Real pprof profiles the replay hosts push.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/fixtures/pprof"))]
    fixtures: PathBuf,
    /// Concurrent push clients. A fleet pushes from every host at once; with 2
    /// clients at most two pushes were ever inside the server.
    #[arg(long, default_value_t = 6)]
    clients: usize,
    /// Timed runs per query for cache misses (and for each baseline).
    #[arg(long, default_value_t = 20)]
    iterations: usize,
    /// Timed runs per query for cache hits.
    #[arg(long, default_value_t = 200)]
    cached_iterations: usize,
    /// Skip the baselines (DuckDB, ClickHouse).
    #[arg(long)]
    no_baseline: bool,
    /// Stop once the fleet is ingested and its figures printed: no same-rows
    /// store, no queries (for comparing ingest builds).
    #[arg(long, conflicts_with = "reuse")]
    ingest_only: bool,
    /// Keep the data (server directory, CSV, Parquet, the baselines' tables) here
    /// instead of a temp dir.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// With `--data-dir`: when the directory already holds a finished ingest of the
    /// same fleet (its `manifest.json`), skip pushing and converting and only query.
    /// Lets query-engine work be measured repeatedly without re-ingesting.
    #[arg(long, requires = "data_dir")]
    reuse: bool,
    /// Restarts per query of the cold set (the fixed queries first after a
    /// restart) and ad-hoc runs (a new selector each); 0 skips both.
    #[arg(long, default_value_t = 3)]
    cold_runs: usize,
    /// Only the cold and ad-hoc set: not the uncached and cached runs.
    #[arg(long)]
    cold_only: bool,
    /// Small run for CI.
    #[arg(long)]
    quick: bool,
}

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;

/// Runs the server's compactor once, as its background clock would after the
/// ingest: past UTC days become day blocks, past weeks week blocks. Prints and
/// returns what it did.
fn compact(url: &str) -> anyhow::Result<Value> {
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(3600))
        .build()?;
    let t = Instant::now();
    let r = send(&client, url, &Req::Post("/api/v1/admin/compact", json!({})))
        .context("compacting after the ingest")?;
    let n = |k: &str| r.get(k).and_then(Value::as_u64).unwrap_or(0);
    let out = json!({
        "seconds": t.elapsed().as_secs_f64(),
        "segments_before": n("segments_before"),
        "segments_after": n("segments_after"),
        "bytes_before": n("bytes_before"),
        "bytes_after": n("bytes_after"),
        "skipped": r.get("skipped").cloned().unwrap_or(Value::Null),
    });
    let skipped = out["skipped"].as_array().map_or(0, Vec::len);
    println!(
        "compaction: {} → {} segments, {} → {} in {:.1} s{}",
        out["segments_before"],
        out["segments_after"],
        human_bytes(n("bytes_before") as f64),
        human_bytes(n("bytes_after") as f64),
        out["seconds"].as_f64().unwrap_or(0.0),
        if skipped > 0 {
            format!(" ({skipped} partitions skipped)")
        } else {
            String::new()
        }
    );
    Ok(out)
}

/// Waits until the server's segment-cache warm-up is over (its metric reads 0).
pub(crate) fn wait_warm(client: &reqwest::blocking::Client, url: &str) -> anyhow::Result<()> {
    let t = Instant::now();
    loop {
        let warming = crate::server::metric(client, url, "profiledb_segment_cache_warming")?;
        if warming != Some(1.0) {
            return Ok(());
        }
        if t.elapsed() > Duration::from_secs(300) {
            bail!("the segment cache warm-up did not finish in 300 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| {
            let p = e.path();
            if p.is_dir() {
                dir_bytes(&p)
            } else {
                e.metadata().map_or(0, |m| m.len())
            }
        })
        .sum()
}

pub fn run(mut args: Args, require_baseline: bool) -> anyhow::Result<()> {
    if args.quick {
        args.hosts = args.hosts.min(5);
        args.services = args.services.min(3);
        args.stacks = args.stacks.min(1000);
        args.day_interval = args.day_interval.max(1800);
        args.days = args.days.min(2);
        args.old_interval = args.old_interval.max(21_600);
        args.replay_hosts = args.replay_hosts.min(2);
        args.iterations = args.iterations.min(5);
        args.cached_iterations = args.cached_iterations.min(30);
        args.cold_runs = args.cold_runs.min(1);
    }
    if args.interval == 0
        || args.day_interval == 0
        || args.old_interval == 0
        || args.days == 0
        || args.hosts == 0
        || args.services == 0
    {
        bail!("--interval, --day-interval, --old-interval, --days, --hosts and --services must be positive");
    }
    let installed = Installed::detect(args.no_baseline, require_baseline && !args.quick)?;

    let tmp;
    let root = match &args.data_dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let server_dir = root.join("profiledb");
    let rows_dir = root.join("rows");
    std::fs::create_dir_all(&rows_dir)?;

    // Everything that shapes the stored data; a reused directory must match it.
    let fleet_key = json!({
        "seed": args.seed, "hosts": args.hosts, "services": args.services,
        "stacks": args.stacks, "draws": args.draws, "interval": args.interval,
        "day_interval": args.day_interval, "replay_hosts": args.replay_hosts,
        "days": args.days, "old_interval": args.old_interval,
    });
    let manifest_path = root.join("manifest.json");
    let reused: Option<Value> = if args.reuse {
        std::fs::read(&manifest_path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .filter(|m| m.get("fleet") == Some(&fleet_key))
    } else {
        None
    };
    if reused.is_none() && std::fs::read_dir(&server_dir).is_ok_and(|mut d| d.next().is_some()) {
        bail!(
            "{} already holds data (of another fleet, or an unfinished run); remove it or pass --reuse with the same fleet flags",
            server_dir.display()
        );
    }
    // A reused directory ingested without the baselines has no Parquet to load.
    let installed = match &reused {
        Some(m) if m.get("duckdb_convert").is_none_or(Value::is_null) => {
            if installed.any() {
                println!(
                    "baseline: the reused directory has no Parquet rows; skipping the baselines"
                );
            }
            Installed::default()
        }
        _ => installed,
    };
    let t_end = match reused
        .as_ref()
        .and_then(|m| m.get("t_end"))
        .and_then(Value::as_i64)
    {
        Some(t) => t,
        None => {
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_millis() as i64;
            now_ms / HOUR * HOUR - HOUR
        }
    };
    let fleet = Arc::new(Fleet::new(FleetConfig {
        seed: args.seed,
        services: args.services,
        stacks_per_service: args.stacks,
        draws_per_profile: args.draws,
        zipf_s: 1.1,
        deploy_ms: t_end - HOUR / 2,
    }));
    let replay = if args.replay_hosts > 0 {
        let r = Replay::load(&args.fixtures);
        if r.is_none() {
            println!(
                "fixtures: none decodable in {}; the fleet is generated only",
                args.fixtures.display()
            );
        }
        r.map(Arc::new)
    } else {
        None
    };

    // Ticks: the days before the last at the old density, 23 h sparse, 1 h dense.
    let mut ticks: Vec<i64> = Vec::new();
    let mut t = t_end - args.days as i64 * DAY;
    while t < t_end - DAY {
        ticks.push(t);
        t += args.old_interval as i64 * 1000;
    }
    let mut t = t_end - DAY;
    while t < t_end - HOUR {
        ticks.push(t);
        t += args.day_interval as i64 * 1000;
    }
    let mut t = t_end - HOUR;
    while t < t_end {
        ticks.push(t);
        t += args.interval as i64 * 1000;
    }
    let ticks = Arc::new(ticks);

    let reusing = reused.is_some();
    let ingest: Value = match reused {
        Some(m) => {
            println!("reusing the ingested fleet in {} (--reuse)", root.display());
            m
        }
        None => {
            let jobs = (ticks.len() * args.hosts) as u64;
            println!(
            "query suite: {} services × {} hosts; last hour every {} s, 23 h before every {} s, {} days before every {} s; {} stacks/service, ~{} samples/profile; {} pushes (one per host per tick, all its services){}",
            args.services,
            args.hosts,
            args.interval,
            args.day_interval,
            args.days - 1,
            args.old_interval,
            args.stacks,
            args.draws,
            jobs,
            replay.as_ref().map_or(String::new(), |r| format!(
                "; {} replay hosts cycling {} fixtures",
                args.replay_hosts,
                r.len()
            ))
        );
            fleet
                .write_stacks_csv(&rows_dir.join("stacks.csv"))
                .context("writing stacks.csv")?;

            // Ingest.
            let peak_reset = report::reset_peak_rss();
            let server = Running::start(&server_dir, 0)?;
            let pb = ProgressBar::new(jobs).with_style(
                ProgressStyle::with_template(
                    "push  [{bar:40}] {pos}/{len} host pushes, {per_sec}, eta {eta}",
                )?
                .progress_chars("=> "),
            );
            let cpu_before = thread_cpu::Snapshot::now();
            let t_ingest = Instant::now();
            let pushed = push::push_all(
                &push::Pushes {
                    fleet: fleet.clone(),
                    replay: replay.clone(),
                    ticks: ticks.clone(),
                    hosts: args.hosts,
                    replay_hosts: args.replay_hosts,
                    seed: args.seed,
                    t_end,
                    clients: args.clients,
                    rows_dir: installed.any().then(|| rows_dir.clone()),
                    url: server.url.clone(),
                },
                &pb,
            )?;
            let ingest_secs = t_ingest.elapsed().as_secs_f64();
            pb.finish();
            let ingest_peak_rss = report::peak_rss_bytes();
            let ingest_cpu = thread_cpu::Snapshot::now().since(&cpu_before);
            let wal_name = "profiledb_storage_wal_bytes_written_total";
            let wal_written =
                crate::server::metric(&reqwest::blocking::Client::new(), &server.url, wal_name)?
                    .with_context(|| format!("{wal_name} missing from /metrics"))?;
            let t_flush = Instant::now();
            server.stop()?;
            let flush_secs = t_flush.elapsed().as_secs_f64();
            // The stop flushed the head, so every past hour is a segment the
            // compactor can merge.
            let server = Running::start(&server_dir, 0)?;
            let compaction = compact(&server.url)?;
            server.stop()?;
            let stored = dir_bytes(&server_dir.join("segments"));
            let values = pushed.values;
            println!(
            "ingested {values} values ({} of push bodies, {} of WAL records = {:.1} B/value) in {ingest_secs:.1} s = {:.0} values/s over HTTP; shutdown flush {flush_secs:.1} s; {} of segments; peak RSS {}",
            human_bytes(pushed.bytes_sent as f64),
            human_bytes(wal_written),
            wal_written / values.max(1) as f64,
            values as f64 / ingest_secs,
            human_bytes(stored as f64),
            human_bytes(ingest_peak_rss as f64)
        );
            println!("ingest CPU: {}", ingest_cpu.describe(values));

            // Baseline data: CSV → Parquet (not timed as part of any query).
            let convert = if installed.any() {
                Some(push::convert_rows(&rows_dir)?)
            } else {
                None
            };
            let m = json!({
                "fleet": fleet_key,
                "t_end": t_end,
                "host_pushes": jobs,
                "values_ingested": values,
                "push_bytes": pushed.bytes_sent,
                "ingest_seconds": ingest_secs,
                "ingest_values_per_second": values as f64 / ingest_secs,
                // The server runs in this process: its peak, plus the push
                // clients' buffers.
                "ingest_peak_rss_bytes": ingest_peak_rss,
                "ingest_peak_rss_since": if peak_reset { "ingest start" } else { "process start" },
                "ingest_retries": pushed.retries,
                "ingest_cpu": ingest_cpu.to_json(values),
                "shutdown_flush_seconds": flush_secs,
                "compaction": compaction,
                "segment_bytes": stored,
                "duckdb_convert": convert,
            });
            std::fs::write(&manifest_path, serde_json::to_vec_pretty(&m)?)
                .with_context(|| format!("writing {}", manifest_path.display()))?;
            m
        }
    };

    if args.ingest_only {
        return Ok(());
    }

    // The same rows as the baselines, in a store of their own (built once per
    // data directory).
    let same_rows_path = root.join("same-rows.json");
    let same_rows: Value = match std::fs::read(&same_rows_path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .filter(|_| reusing)
    {
        Some(v) => v,
        None => {
            let dir = root.join("same-rows");
            if dir.exists() {
                std::fs::remove_dir_all(&dir)
                    .with_context(|| format!("removing {}", dir.display()))?;
            }
            let v = same_rows::build(&fleet, &ticks, args.hosts, &dir)?;
            std::fs::write(&same_rows_path, serde_json::to_vec_pretty(&v)?)
                .with_context(|| format!("writing {}", same_rows_path.display()))?;
            v
        }
    };

    let specs = specs(t_end, fleet.service_name(0));
    // The ad-hoc selections are new on every invocation: drawn with the clock.
    let adhoc_seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos() as u64;
    let selections = AdHoc::draw(
        &fleet,
        args.services,
        args.hosts,
        args.cold_runs,
        adhoc_seed,
    );
    let adhoc: Vec<_> = selections
        .iter()
        .enumerate()
        .map(|(r, a)| adhoc_specs(t_end, a, r))
        .collect();
    let asked: Vec<Asked> = specs
        .iter()
        .map(|s| (s, false))
        .chain(adhoc.iter().flatten().map(|s| (s, true)))
        .map(|(s, first_only)| Asked {
            key: s.key(),
            sql: &s.sql,
            first_only,
        })
        .collect();
    let runs = baselines::run_all(&installed, &rows_dir, &asked, args.iterations)?;

    // profiledb queries.
    let client = reqwest::blocking::Client::new();
    let per_query = 1 + args.iterations + args.cached_iterations;
    let pb = ProgressBar::new((specs.len() * per_query) as u64).with_style(
        ProgressStyle::with_template("query [{bar:40}] {pos}/{len} requests {msg}")?
            .progress_chars("=> "),
    );
    let query_peak_reset = report::reset_peak_rss();
    let mut results = Vec::new();
    let mut mismatches = Vec::new();
    let mut shift = 0i64;
    for s in specs.iter().filter(|_| !args.cold_only) {
        pb.set_message(format!("{} [{}]", s.name, s.window));
        // First query after a restart: empty result cache and segment cache.
        let server = Running::start(&server_dir, 0)?;
        shift += 1;
        let (restart_ms, v) = timed(&client, &server.url, &(s.http)(shift))
            .with_context(|| format!("{} [{}]", s.name, s.window))?;
        pb.inc(1);
        let total = (s.total)(&v);
        // The timed runs measure the steady state: after the background warm-up of
        // the segment cache, which competes for the CPU while it runs.
        wait_warm(&client, &server.url)?;
        let mut miss = Vec::with_capacity(args.iterations);
        for _ in 0..args.iterations {
            shift += 1;
            miss.push(timed(&client, &server.url, &(s.http)(shift))?.0);
            pb.inc(1);
        }
        let hit_req = (s.http)(0);
        // Answers are cached from their second ask on.
        send(&client, &server.url, &hit_req)?;
        send(&client, &server.url, &hit_req)?;
        let mut hit = Vec::with_capacity(args.cached_iterations);
        for _ in 0..args.cached_iterations {
            hit.push(timed(&client, &server.url, &hit_req)?.0);
            pb.inc(1);
        }
        server.stop()?;
        let (miss50, miss99) = p50_p99(miss);
        let (hit50, hit99) = p50_p99(hit);
        let compared = baselines::compare(&runs, &s.key(), total, miss50, hit50);
        mismatches.extend(compared.mismatches);
        let mut r = json!({
            "query": s.name,
            "window": s.window,
            "restart_first_ms": restart_ms,
            "uncached_p50_ms": miss50,
            "uncached_p99_ms": miss99,
            "cached_p50_ms": hit50,
            "cached_p99_ms": hit99,
            "total": total,
        });
        if let (Some(r), Some(c)) = (r.as_object_mut(), compared.figures.as_object()) {
            r.extend(c.clone());
        }
        results.push(r);
    }
    pb.finish_and_clear();
    let query_peak_rss = report::peak_rss_bytes();

    if !args.cold_only {
        print_table(&results);
    }
    println!(
        "peak RSS of the server (in this process) while querying: {}{}",
        human_bytes(query_peak_rss as f64),
        if query_peak_reset {
            ""
        } else {
            " (since the bench started)"
        }
    );
    let bytes = baselines::bytes_on_disk(
        &rows_dir,
        ingest.get("segment_bytes").and_then(Value::as_u64),
        ingest.get("values_ingested").and_then(Value::as_u64),
        &same_rows,
        &runs,
    );
    let cold = if args.cold_runs > 0 {
        let bin = workspace_binary("profiledb", "profiledb")?;
        let repeated: serde_json::Map<String, Value> = results
            .iter()
            .filter_map(|r| {
                let key = format!(
                    "{} [{}]",
                    r.get("query")?.as_str()?,
                    r.get("window")?.as_str()?
                );
                Some((key, r.get("uncached_p50_ms")?.clone()))
            })
            .collect();
        let set = ColdSet {
            bin: &bin,
            dir: &server_dir,
            // After a restart every filter is new: the fresh-filter variant
            // asks nothing the fixed one does not.
            cold: specs
                .iter()
                .filter(|s| !s.name.contains("filter new"))
                .collect(),
            adhoc: &adhoc,
            selections: &selections,
            runs: args.cold_runs,
            repeated: &Value::Object(repeated),
        };
        let pb = ProgressBar::new_spinner();
        let (v, bad) = cold_queries::run(&set, &runs, |m| pb.set_message(format!("cold: {m}")))?;
        pb.finish_and_clear();
        mismatches.extend(bad);
        v
    } else {
        Value::Null
    };
    let mut figures = json!({
        "seed": args.seed,
        "services": args.services,
        "hosts": args.hosts,
        "stacks_per_service": args.stacks,
        "draws_per_profile": args.draws,
        "interval_s_last_hour": args.interval,
        "interval_s_day": args.day_interval,
        "days": args.days,
        "interval_s_before_the_day": args.old_interval,
        "replay_hosts": if replay.is_some() { args.replay_hosts } else { 0 },
        "iterations_uncached": args.iterations,
        "iterations_cached": args.cached_iterations,
        "baseline_versions": installed.versions(),
        "baseline_loads": baselines::loads(&runs),
        "bytes_on_disk": bytes,
        "same_rows": same_rows,
        "query_peak_rss_bytes": query_peak_rss,
        "queries": results,
        "cold": cold,
        "note": "HTTP latency from an in-process client on loopback; uncached = result-cache miss (start shifted by a few ms), segments already decoded; restart = first query after a server restart",
    });
    // The ingest figures (from this run, or from the reused directory's manifest).
    if let (Some(f), Some(i)) = (figures.as_object_mut(), ingest.as_object()) {
        for (k, v) in i {
            if k != "fleet" {
                f.insert(k.clone(), v.clone());
            }
        }
    }
    let path = report::write(
        if require_baseline {
            "baseline"
        } else {
            "query"
        },
        figures,
    )?;
    println!("results {}", path.display());
    if !mismatches.is_empty() {
        bail!(
            "a baseline's total differs from profiledb's:\n  {}",
            mismatches.join("\n  ")
        );
    }
    Ok(())
}
