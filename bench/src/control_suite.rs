//! The `control` suite: the fleet loop's costs.
//!
//! 1. A simulated fleet of `--agents` agents (threads sending real `control.v1`
//!    check-ins, protobuf over HTTP, with reports) against one `profiledb serve`
//!    process under GWP-style machine sampling: check-ins per second, their latency,
//!    the server's CPU (from `/proc/<pid>/stat`), and how many machines profile per
//!    period.
//! 2. The real agent with `--control` at 19 and 99 Hz (the plan set through the admin
//!    API): its own CPU and RSS as it reports them, and check-ins made.
//! 3. mmap tracking: the agent at 99 Hz on a workload that keeps starting short-lived
//!    processes, with and without the dummy tracking event: samples whose leaf lay in
//!    no known mapping (unsymbolized) or whose task was unknown (unattributed).
//!
//! Parts 2 and 3 skip with the kernel's reason where perf_event_open is refused.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::bail;
use indicatif::{ProgressBar, ProgressStyle};
use profiledb_proto::control::v1 as c;
use prost::Message;
use serde_json::{json, Value};

use crate::agent_suite::cpu_seconds;
use crate::report;
use crate::server::{workspace_binary, ServeProcess};

#[derive(clap::Args)]
pub struct Args {
    /// Agents in the simulated fleet.
    #[arg(long, default_value_t = 1000)]
    agents: usize,
    /// Check-in period of the simulated fleet, seconds.
    #[arg(long, default_value_t = 10)]
    period_secs: u32,
    /// Periods the simulated fleet runs.
    #[arg(long, default_value_t = 6)]
    periods: u32,
    /// Fraction of machines profiled per period.
    #[arg(long, default_value_t = 0.1)]
    machine_fraction: f64,
    /// Seconds the real agent runs per measurement.
    #[arg(long, default_value_t = 30)]
    agent_seconds: u64,
    /// Short run for CI: 200 agents, 2 periods of 2 s, 5 s agent runs.
    #[arg(long)]
    quick: bool,
}

/// The server under test, over a data directory of its own.
struct Serve {
    server: ServeProcess,
    _dir: tempfile::TempDir,
}

fn serve() -> anyhow::Result<Serve> {
    let bin = workspace_binary("profiledb", "profiledb")?;
    let dir = tempfile::tempdir()?;
    let server = ServeProcess::start(&bin, dir.path(), Duration::from_secs(60))?;
    Ok(Serve { server, _dir: dir })
}

fn put_policy(url: &str, policy: Value) -> anyhow::Result<()> {
    let r = reqwest::blocking::Client::new()
        .put(format!("{url}/api/v1/admin/agents/policy"))
        .json(&policy)
        .send()?;
    if !r.status().is_success() {
        bail!("policy refused: {}", r.text().unwrap_or_default());
    }
    Ok(())
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// Part 1: the simulated fleet.
fn fleet(args: &Args) -> anyhow::Result<Value> {
    let s = serve()?;
    put_policy(
        &s.server.url,
        json!({"period_secs": args.period_secs, "window_secs": args.period_secs,
               "machine_fraction": args.machine_fraction}),
    )?;
    let pid = s.server.pid();
    let threads = 8usize;
    let url = format!("{}/control.v1.ControlService/GetPlan", s.server.url);
    let bar = ProgressBar::new(u64::from(args.periods));
    bar.set_style(ProgressStyle::with_template(
        "  fleet period {pos}/{len} {bar:30} {elapsed}",
    )?);
    let cpu0 = cpu_seconds(pid).unwrap_or(0.0);
    let t0 = Instant::now();
    let mut latencies: Vec<f64> = Vec::new();
    let mut profiling: Vec<usize> = Vec::new();
    let mut failures = 0usize;
    for period in 0..args.periods {
        let start = Instant::now();
        let results: Vec<(Vec<f64>, usize, usize)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let url = url.clone();
                    scope.spawn(move || {
                        let client = reqwest::blocking::Client::new();
                        let (mut lat, mut on, mut bad) = (Vec::new(), 0usize, 0usize);
                        for i in (t..args.agents).step_by(threads) {
                            let host = format!("sim-{i:05}");
                            let req = c::GetPlanRequest {
                                agent_id: host.clone(),
                                host: host.clone(),
                                service: format!("svc-{}", i % 50),
                                report: Some(c::AgentReport {
                                    samples: u64::from(period) * 1000,
                                    cpu_percent: 0.3,
                                    rss_bytes: 20 << 20,
                                    services: vec![c::ServiceSamples {
                                        service: format!("svc-{}", i % 50),
                                        samples: u64::from(period) * 1000,
                                    }],
                                    ..Default::default()
                                }),
                                ..Default::default()
                            };
                            let t = Instant::now();
                            let r = client
                                .post(&url)
                                .header("Content-Type", "application/proto")
                                .body(req.encode_to_vec())
                                .send()
                                .and_then(|r| r.bytes());
                            lat.push(t.elapsed().as_secs_f64() * 1000.0);
                            match r.ok().and_then(|b| c::GetPlanResponse::decode(&b[..]).ok()) {
                                Some(p) if p.plan.as_ref().is_some_and(|p| p.profile) => on += 1,
                                Some(_) => {}
                                None => bad += 1,
                            }
                        }
                        (lat, on, bad)
                    })
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).collect()
        });
        let mut on = 0;
        for (lat, o, b) in results {
            latencies.extend(lat);
            on += o;
            failures += b;
        }
        profiling.push(on);
        bar.inc(1);
        let period_len = Duration::from_secs(u64::from(args.period_secs));
        if let Some(rest) = period_len.checked_sub(start.elapsed()) {
            std::thread::sleep(rest);
        }
    }
    bar.finish_and_clear();
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid).unwrap_or(cpu0) - cpu0;
    let requests = latencies.len();
    let p50 = percentile(&mut latencies, 0.5);
    let p99 = percentile(&mut latencies, 0.99);
    let mean_on = profiling.iter().sum::<usize>() as f64 / profiling.len().max(1) as f64;
    println!(
        "  simulated fleet: {} agents, period {} s, fraction {}: {} check-ins in {wall:.1} s ({:.0}/s), \
         latency p50 {p50:.2} ms p99 {p99:.2} ms, {failures} failed; server CPU {:.2}% of one CPU; \
         machines profiling per period {:?} (mean {mean_on:.1} = {:.1}%)",
        args.agents,
        args.period_secs,
        args.machine_fraction,
        requests,
        requests as f64 / wall,
        100.0 * cpu / wall,
        profiling,
        100.0 * mean_on / args.agents.max(1) as f64
    );
    if failures > 0 {
        bail!("{failures} check-ins failed");
    }
    Ok(json!({
        "agents": args.agents, "period_secs": args.period_secs, "periods": args.periods,
        "machine_fraction": args.machine_fraction, "check_ins": requests,
        "check_ins_per_sec": requests as f64 / wall, "latency_p50_ms": p50, "latency_p99_ms": p99,
        "server_cpu_percent": 100.0 * cpu / wall, "profiling_per_period": profiling,
    }))
}

/// A figure from the agent's summary line, such as `agent CPU 0.412%`.
fn figure(summary: &str, before: &str, after: &str) -> Option<f64> {
    let i = summary.find(after)?;
    let head = &summary[..i];
    let j = head.rfind(before)? + before.len();
    head[j..].trim().trim_end_matches('%').parse().ok()
}

fn run_agent(url: &str, secs: u64, extra: &[&str]) -> anyhow::Result<String> {
    let bin = workspace_binary("profiledb-agent", "profiledb-agent")?;
    let out = Command::new(bin)
        .args([
            "--server",
            url,
            "--duration",
            &format!("{secs}s"),
            "--push-interval",
            "2s",
        ])
        .args(extra)
        .stdout(Stdio::null())
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        bail!("agent failed: {stderr}");
    }
    Ok(stderr
        .lines()
        .rfind(|l| l.contains("done:"))
        .unwrap_or_default()
        .to_string())
}

/// Part 2: the agent under the controller at 19 and 99 Hz.
fn controlled(args: &Args) -> anyhow::Result<Value> {
    let s = serve()?;
    let mut rows = Vec::new();
    for hz in [19u64, 99] {
        put_policy(
            &s.server.url,
            json!({"period_secs": 5, "window_secs": 5, "max_cpu_percent": 100,
                   "events": [{"event": "cpu-clock", "frequency_hz": hz}]}),
        )?;
        // Something to sample on both cores.
        let busy: Vec<Child> = (0..2)
            .map(|_| {
                Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .spawn()
            })
            .collect::<Result<_, _>>()?;
        let line = run_agent(&s.server.url, args.agent_seconds, &["--control"]);
        for mut b in busy {
            let _ = b.kill();
            let _ = b.wait();
        }
        let line = line?;
        let cpu = figure(&line, "agent CPU", "%,").unwrap_or(f64::NAN);
        let agents: Value =
            reqwest::blocking::get(format!("{}/api/v1/agents", s.server.url))?.json()?;
        let rss = agents["agents"][0]["rss_bytes"].as_f64().unwrap_or(0.0);
        println!(
            "  agent --control at {hz} Hz: CPU {cpu:.3}% of one CPU, RSS {} (as reported to the controller)",
            report::human_bytes(rss)
        );
        rows.push(json!({"hz": hz, "cpu_percent": cpu, "rss_bytes": rss, "summary": line}));
    }
    Ok(Value::Array(rows))
}

/// Part 3: unsymbolized and unattributed samples with and without mmap tracking.
fn tracking(args: &Args) -> anyhow::Result<Value> {
    let s = serve()?;
    let mut rows = Vec::new();
    for (name, extra) in [
        ("with tracking", vec![]),
        ("without tracking", vec!["--no-mmap-tracking"]),
    ] {
        // Short-lived processes, each burning a few tens of milliseconds.
        let mut churn = Command::new("sh")
            .args([
                "-c",
                "while :; do awk 'BEGIN{for(i=0;i<200000;i++)s+=i}'; done",
            ])
            .spawn()?;
        let mut flags = vec!["--frequency", "99"];
        flags.extend(extra);
        let line = run_agent(&s.server.url, args.agent_seconds, &flags);
        let _ = churn.kill();
        let _ = churn.wait();
        let line = line?;
        let samples = figure(&line, "fds,", "samples (").unwrap_or(0.0);
        let unsym = figure(&line, "unsymbolized,", "samples outside").unwrap_or(0.0);
        let unattr = figure(&line, "known mappings,", "of unknown").unwrap_or(0.0);
        let pct = |x: f64| {
            if samples > 0.0 {
                100.0 * x / samples
            } else {
                0.0
            }
        };
        println!(
            "  {name}: {samples:.0} samples, {unsym:.0} unsymbolized ({:.1}%), {unattr:.0} unattributed ({:.1}%)",
            pct(unsym),
            pct(unattr)
        );
        rows.push(
            json!({"mode": name, "samples": samples, "unsymbolized": unsym,
                         "unattributed": unattr, "summary": line}),
        );
    }
    Ok(Value::Array(rows))
}

pub fn run(mut args: Args) -> anyhow::Result<()> {
    if args.quick {
        args.agents = 200;
        args.period_secs = 2;
        args.periods = 2;
        args.agent_seconds = 5;
    }
    println!("control suite");
    let fleet = fleet(&args)?;
    let (agent, tracking) = match profiledb_agent::perf::probe_system_wide() {
        Ok(()) => (controlled(&args)?, tracking(&args)?),
        Err(reason) => {
            println!("  SKIP the agent parts: perf_event_open not permitted here: {reason}");
            (Value::Null, Value::Null)
        }
    };
    let path = report::write(
        "control",
        json!({"fleet": fleet, "agent": agent, "tracking": tracking}),
    )?;
    println!("  figures written to {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_come_from_the_summary_line() {
        let l = "profiledb-agent: done: events [\"cpu-clock\"], 6 fds, 387 samples (0 idle, ...), \
                 8.3% frames unsymbolized, 12 samples outside known mappings, 3 of unknown tasks, \
                 avg user stack depth 16.0, agent CPU 2.481%, 2 plans followed";
        assert_eq!(figure(l, "fds,", "samples ("), Some(387.0));
        assert_eq!(figure(l, "unsymbolized,", "samples outside"), Some(12.0));
        assert_eq!(figure(l, "known mappings,", "of unknown"), Some(3.0));
        assert_eq!(figure(l, "agent CPU", "%,"), Some(2.481));
    }
}
