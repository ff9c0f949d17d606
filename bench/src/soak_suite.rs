//! Soak: ingest and queries together for a set time against a spawned `profiledb`
//! process with one `--memory-mb`, watching that memory, the WAL and query latency
//! stay bounded; then `kill -9` and the time until `/ready` answers 200 again.
//!
//! Three upload clients send folded profiles of one of two generators:
//! - `hicard`: random stacks of depth 5–40 over a 20,000-name vocabulary (nearly
//!   every stack new) across ~15,000 series (500 services × 30 hosts);
//! - `zipf`: the same vocabulary and series, names and series drawn Zipf(1.1), so a
//!   few stacks dominate as in a real fleet.
//!
//! A fourth client merges the last hour of one service twice a second. Every
//! interval the suite prints the server's VmHWM and VmRSS, each memory part's gauge,
//! the WAL's bytes and the query p50/p99 of the interval.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::json;

use crate::agent_suite::status_kib;
use crate::fleet::{Rng, CPU_TYPE};
use crate::query_specs::p50_p99;
use crate::report::{self, human_bytes};
use crate::server::{wait_ready, workspace_binary};

const VOCABULARY: usize = 20_000;
const SERVICES: usize = 500;
const HOSTS: usize = 30;
const LINES_PER_UPLOAD: usize = 100;
const UPLOADERS: usize = 3;

#[derive(clap::Args)]
pub struct Args {
    /// A short run of both generators (CI): 15 s each, 512 MiB budget.
    #[arg(long)]
    quick: bool,
    /// Minutes of load per generator.
    #[arg(long, default_value_t = 10.0)]
    minutes: f64,
    /// `--memory-mb` of the server.
    #[arg(long, default_value_t = 2048)]
    memory_mb: u64,
    /// Which load: hicard, zipf or both.
    #[arg(long, default_value = "hicard")]
    generator: String,
    /// Seconds between printed samples.
    #[arg(long, default_value_t = 15)]
    every_secs: u64,
    /// More flags for `profiledb serve`, one per use, e.g.
    /// `--server-arg=--open-merge-segments=0` to compare a setting in the same build.
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    server_args: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Generator {
    HighCardinality,
    Zipf,
}

/// Draws an index in `0..n` with probability ∝ 1/(i+1)^s, by inverse CDF.
struct Zipf(Vec<f64>);

impl Zipf {
    fn new(n: usize, s: f64) -> Self {
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = (0..n)
            .map(|i| {
                acc += 1.0 / ((i + 1) as f64).powf(s);
                acc
            })
            .collect();
        for c in &mut cdf {
            *c /= acc;
        }
        Zipf(cdf)
    }

    fn draw(&self, rng: &mut Rng) -> usize {
        let u = rng.unit();
        self.0.partition_point(|&c| c < u).min(self.0.len() - 1)
    }
}

/// One upload: `(ingest name with labels, folded body)`.
fn upload(g: Generator, rng: &mut Rng, names: &Zipf, series: &Zipf) -> (String, String) {
    let pick = |rng: &mut Rng, z: &Zipf, n: usize| match g {
        Generator::HighCardinality => rng.below(n),
        Generator::Zipf => z.draw(rng),
    };
    let s = pick(rng, series, SERVICES * HOSTS);
    let name = format!("svc{}.cpu{{host=h{}}}", s % SERVICES, s / SERVICES);
    let mut body = String::with_capacity(LINES_PER_UPLOAD * 200);
    for _ in 0..LINES_PER_UPLOAD {
        let depth = 5 + rng.below(36);
        for d in 0..depth {
            if d > 0 {
                body.push(';');
            }
            body.push_str("pkg.fn_");
            body.push_str(&pick(rng, names, VOCABULARY).to_string());
        }
        body.push(' ');
        body.push_str(&(1 + rng.below(100)).to_string());
        body.push('\n');
    }
    (name, body)
}

struct Spawned {
    child: Child,
    url: String,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Starts the server and waits for `/ready`; returns it and the seconds it took.
fn spawn(
    bin: &Path,
    dir: &Path,
    memory_mb: u64,
    extra: &[String],
) -> anyhow::Result<(Spawned, f64)> {
    let port = free_port()?;
    let t = Instant::now();
    let child = Command::new(bin)
        .args(["serve", "--fsync", "interval", "--data-dir"])
        .arg(dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--memory-mb", &memory_mb.to_string()])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let url = format!("http://127.0.0.1:{port}");
    wait_ready(&url, t, Duration::from_secs(600))?;
    Ok((Spawned { child, url }, t.elapsed().as_secs_f64()))
}

/// `profiledb_memory_bytes`/`_limit_bytes` by part, `profiledb_wal_bytes` and
/// `profiledb_segments`.
fn gauges(url: &str) -> (BTreeMap<String, (u64, u64)>, u64, u64) {
    let text = reqwest::blocking::get(format!("{url}/metrics"))
        .and_then(|r| r.text())
        .unwrap_or_default();
    let mut parts: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let (mut wal, mut segments) = (0, 0);
    for line in text.lines() {
        let Some((key, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(v) = value.parse::<u64>() else {
            continue;
        };
        let part = |prefix: &str| {
            key.strip_prefix(prefix)
                .and_then(|k| k.strip_prefix("{part=\""))
                .and_then(|k| k.strip_suffix("\"}"))
                .map(str::to_string)
        };
        if let Some(p) = part("profiledb_memory_bytes") {
            parts.entry(p).or_default().0 = v;
        } else if let Some(p) = part("profiledb_memory_limit_bytes") {
            parts.entry(p).or_default().1 = v;
        } else if key == "profiledb_wal_bytes" {
            wal = v;
        } else if key == "profiledb_segments" {
            segments = v;
        }
    }
    (parts, wal, segments)
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[derive(Default)]
struct Counts {
    acked: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
}

/// Runs one generator for `secs`; returns its figures.
fn soak(
    bin: &Path,
    g: Generator,
    secs: f64,
    memory_mb: u64,
    every: Duration,
    extra: &[String],
) -> anyhow::Result<serde_json::Value> {
    let tmp = tempfile::tempdir()?;
    let (mut server, _) = spawn(bin, tmp.path(), memory_mb, extra)?;
    let pid = server.child.id();
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    let latencies = Arc::new(Mutex::new(Vec::<f64>::new()));
    let query_status = Arc::new(Mutex::new(BTreeMap::<u16, u64>::new()));
    let names = Arc::new(Zipf::new(VOCABULARY, 1.1));
    let series = Arc::new(Zipf::new(SERVICES * HOSTS, 1.1));
    let mut threads = Vec::new();
    for c in 0..UPLOADERS {
        let (stop, counts, names, series, url) = (
            stop.clone(),
            counts.clone(),
            names.clone(),
            series.clone(),
            server.url.clone(),
        );
        threads.push(std::thread::spawn(move || {
            let client = reqwest::blocking::Client::new();
            let mut rng = Rng::keyed(20, &[c as u64]);
            while !stop.load(Ordering::Relaxed) {
                let (name, body) = upload(g, &mut rng, &names, &series);
                let r = client
                    .post(format!("{url}/ingest"))
                    .query(&[("name", name), ("from", (now_secs() - 5).to_string())])
                    .body(body)
                    .send();
                match r.map(|r| r.status().as_u16()) {
                    Ok(200) => counts.acked.fetch_add(1, Ordering::Relaxed),
                    Ok(429) => {
                        std::thread::sleep(Duration::from_millis(200));
                        counts.refused.fetch_add(1, Ordering::Relaxed)
                    }
                    _ => counts.failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    {
        let (stop, latencies, query_status, url) = (
            stop.clone(),
            latencies.clone(),
            query_status.clone(),
            server.url.clone(),
        );
        threads.push(std::thread::spawn(move || {
            let client = reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(120))
                .build()
                .unwrap_or_default();
            let mut rng = Rng::keyed(21, &[]);
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let svc = rng.below(8);
                let r = client
                    .get(format!("{url}/api/v1/merge"))
                    .query(&[
                        ("query", format!("{CPU_TYPE}{{service_name=\"svc{svc}\"}}")),
                        ("from", "now-1h".into()),
                        ("until", "now".into()),
                    ])
                    .send()
                    .and_then(|r| {
                        let s = r.status().as_u16();
                        r.bytes().map(|_| s)
                    });
                let status = r.unwrap_or(0);
                if status == 200 {
                    if let Ok(mut l) = latencies.lock() {
                        l.push(t.elapsed().as_secs_f64() * 1000.0);
                    }
                }
                if let Ok(mut q) = query_status.lock() {
                    *q.entry(status).or_default() += 1;
                }
                std::thread::sleep(Duration::from_millis(500).saturating_sub(t.elapsed()));
            }
        }));
    }

    println!(
        "\n== soak {g:?}: {secs:.0} s, --memory-mb {memory_mb}, {UPLOADERS} upload clients + 1 query client"
    );
    println!(
        "{:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {:>5} {:>9} {:>9} {:>8}",
        "t (s)",
        "VmHWM",
        "VmRSS",
        "head",
        "seg cache",
        "query",
        "ingest",
        "WAL",
        "segs",
        "p50 ms",
        "p99 ms",
        "uploads"
    );
    let start = Instant::now();
    let mut samples = Vec::new();
    let mut peak_wal = 0u64;
    let mut seen_latencies = 0;
    let mut all_p = Vec::new();
    while start.elapsed().as_secs_f64() < secs {
        std::thread::sleep(every.min(Duration::from_secs_f64(
            (secs - start.elapsed().as_secs_f64()).max(0.1),
        )));
        let hwm = status_kib(pid, "VmHWM:").unwrap_or(0) * 1024;
        let rss = status_kib(pid, "VmRSS:").unwrap_or(0) * 1024;
        let (parts, wal, segments) = gauges(&server.url);
        peak_wal = peak_wal.max(wal);
        let window: Vec<f64> = latencies
            .lock()
            .map(|l| l[seen_latencies..].to_vec())
            .unwrap_or_default();
        seen_latencies += window.len();
        all_p.extend_from_slice(&window);
        let (p50, p99) = if window.is_empty() {
            (f64::NAN, f64::NAN)
        } else {
            p50_p99(window)
        };
        let part = |p: &str| parts.get(p).map_or(0, |v| v.0);
        println!(
            "{:>6.0} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {:>5} {:>9.0} {:>9.0} {:>8}",
            start.elapsed().as_secs_f64(),
            human_bytes(hwm as f64),
            human_bytes(rss as f64),
            human_bytes(part("head") as f64),
            human_bytes(part("segment_cache") as f64),
            human_bytes(part("query") as f64),
            human_bytes(part("ingest") as f64),
            human_bytes(wal as f64),
            segments,
            p50,
            p99,
            counts.acked.load(Ordering::Relaxed),
        );
        samples.push(json!({
            "t_s": start.elapsed().as_secs_f64(),
            "vmhwm_bytes": hwm,
            "vmrss_bytes": rss,
            "wal_bytes": wal,
            "segments": segments,
            "parts": parts.iter().map(|(k, v)| (k.clone(), json!({"bytes": v.0, "limit": v.1}))).collect::<serde_json::Map<_, _>>(),
            "query_p50_ms": p50,
            "query_p99_ms": p99,
        }));
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    let peak_rss = status_kib(pid, "VmHWM:").unwrap_or(0) * 1024;
    let (parts, _, _) = gauges(&server.url);
    let head_budget = parts.get("head").map_or(0, |v| v.1);
    let wal_now = std::fs::read_dir(tmp.path().join("wal"))?
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum::<u64>();
    server.child.kill()?; // SIGKILL
    server.child.wait()?;
    let (mut restarted, restart_s) = spawn(bin, tmp.path(), memory_mb, extra)?;
    restarted.child.kill()?;
    restarted.child.wait()?;
    let (p50, p99) = if all_p.is_empty() {
        (f64::NAN, f64::NAN)
    } else {
        p50_p99(all_p.clone())
    };
    let statuses = query_status.lock().map(|q| q.clone()).unwrap_or_default();
    println!(
        "peak RSS {} for --memory-mb {memory_mb}; WAL peak {} / at kill {} for a head budget of {}; \
         query p50 {p50:.0} ms p99 {p99:.0} ms ({} ok); uploads {} acknowledged, {} refused (429), {} failed; \
         restart to /ready after kill -9: {restart_s:.2} s",
        human_bytes(peak_rss as f64),
        human_bytes(peak_wal as f64),
        human_bytes(wal_now as f64),
        human_bytes(head_budget as f64),
        all_p.len(),
        counts.acked.load(Ordering::Relaxed),
        counts.refused.load(Ordering::Relaxed),
        counts.failed.load(Ordering::Relaxed),
    );
    Ok(json!({
        "generator": format!("{g:?}"),
        "seconds": secs,
        "memory_mb": memory_mb,
        "server_args": extra,
        "peak_rss_bytes_vmhwm": peak_rss,
        "head_budget_bytes": head_budget,
        "wal_peak_bytes": peak_wal,
        "wal_bytes_at_kill": wal_now,
        "query_p50_ms": p50,
        "query_p99_ms": p99,
        "queries_ok": all_p.len(),
        "query_statuses": statuses.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "uploads_acked": counts.acked.load(Ordering::Relaxed),
        "uploads_refused_429": counts.refused.load(Ordering::Relaxed),
        "uploads_failed": counts.failed.load(Ordering::Relaxed),
        "restart_to_ready_s": restart_s,
        "samples": samples,
    }))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let bin = workspace_binary("profiledb", "profiledb")?;
    let (secs, memory_mb, every, gens) = if args.quick {
        (
            15.0,
            512,
            Duration::from_secs(5),
            vec![Generator::HighCardinality, Generator::Zipf],
        )
    } else {
        let gens = match args.generator.as_str() {
            "hicard" => vec![Generator::HighCardinality],
            "zipf" => vec![Generator::Zipf],
            "both" => vec![Generator::HighCardinality, Generator::Zipf],
            other => bail!("unknown generator {other}: hicard, zipf or both"),
        };
        (
            args.minutes * 60.0,
            args.memory_mb,
            Duration::from_secs(args.every_secs.max(1)),
            gens,
        )
    };
    let mut runs = Vec::new();
    for g in gens {
        runs.push(soak(&bin, g, secs, memory_mb, every, &args.server_args)?);
    }
    let path = report::write("soak", json!({ "quick": args.quick, "runs": runs }))?;
    println!("\nwrote {}", path.display());
    Ok(())
}
