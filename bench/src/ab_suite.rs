//! Two server builds answering the same queries, request by request.
//!
//! On a shared VM, timings drift by ±20 % over minutes, more than most single
//! changes move a query; two builds benchmarked one after the other compare the
//! drift as much as the builds. Here both servers run at once over copies of one
//! `query`-suite directory, each request is sent to both (in alternating order, with
//! the same range), and the figure is the median of the per-request differences:
//! drift slows both alike and cancels out.
//!
//! With `--restarts N` it compares first queries after a restart instead: each
//! server is started over its copy, asked one query right after `/ready` and
//! stopped, A and B alternating, N times each. `--data-dir-b` gives B another
//! directory (the same fleet written another way, e.g. in another segment format).
//! `--idle-ms N` leaves both servers idle N ms before each request.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use serde_json::{json, Value};

use crate::query_specs::{specs, timed, QuerySpec};
use crate::query_suite::wait_warm;
use crate::report;
use crate::server::ServeProcess;

#[derive(Parser, Debug)]
pub struct Args {
    /// The first (baseline) `profiledb` binary.
    #[arg(long)]
    a: PathBuf,
    /// The second `profiledb` binary.
    #[arg(long)]
    b: PathBuf,
    /// A directory the `query` suite wrote (`--data-dir`): its `manifest.json` gives
    /// the fleet's end time and its `profiledb/` is copied once per server.
    #[arg(long)]
    data_dir: PathBuf,
    /// Queries whose name contains this (`merge`, `diff`, `filter new`, ...).
    #[arg(long, default_value = "diff")]
    query: String,
    /// Window: 1h, 1d, 7d or 30d.
    #[arg(long, default_value = "1h")]
    window: String,
    /// Requests to each server per query (the first three are not counted).
    #[arg(long, default_value_t = 300)]
    requests: usize,
    /// Time the first query after a restart instead, this many restarts of each
    /// server (alternating A and B).
    #[arg(long)]
    restarts: Option<usize>,
    /// B's query-suite directory when it is not `--data-dir` (same fleet and end
    /// time, stored differently).
    #[arg(long)]
    data_dir_b: Option<PathBuf>,
    /// With `--restarts`: ask the first query once the server's background warm-up
    /// of its segment cache has finished (`profiledb_segment_cache_warming` back
    /// to 0), not right after `/ready`; the time to each point is printed.
    #[arg(long)]
    after_warm_up: bool,
    /// Idle this long before every request (0 = back to back), as a dashboard's
    /// requests arrive: an idle server's threads sleep and its CPU caches cool,
    /// which back-to-back requests never see.
    #[arg(long, default_value_t = 0)]
    idle_ms: u64,
}

/// A server process over its own copy of the data (deleted after it).
struct Server {
    process: ServeProcess,
    _copy: tempfile::TempDir,
}

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let target = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &target)?;
        } else if e.file_name() != "LOCK" {
            std::fs::copy(e.path(), &target)?;
        }
    }
    Ok(())
}

fn copy_of(data: &Path) -> anyhow::Result<tempfile::TempDir> {
    let copy = tempfile::tempdir()?;
    copy_dir(data, copy.path()).with_context(|| format!("copying {}", data.display()))?;
    Ok(copy)
}

fn spawn(bin: &Path, data: &Path, client: &reqwest::blocking::Client) -> anyhow::Result<Server> {
    let copy = copy_of(data)?;
    let process = ServeProcess::start(bin, copy.path(), Duration::from_secs(120))?;
    wait_warm(client, &process.url)?;
    Ok(Server {
        process,
        _copy: copy,
    })
}

/// `--restarts`: per matching query, `restarts` first queries after a restart of
/// each server, alternating which goes first.
fn restarts(
    args: &Args,
    restarts: usize,
    dirs: [&Path; 2],
    t_end: i64,
    client: &reqwest::blocking::Client,
) -> anyhow::Result<Vec<Value>> {
    let bins = [&args.a, &args.b];
    let copies = [copy_of(dirs[0])?, copy_of(dirs[1])?];
    let mut rows = Vec::new();
    for s in specs(t_end, "svc-00")
        .iter()
        .filter(|s| s.window == args.window && s.name.contains(&args.query))
    {
        let mut ms: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        // Milliseconds from the start to `/ready` and to the end of the warm-up.
        let mut ready: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        let mut warm: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        for i in 0..restarts {
            let req = (s.http)(i as i64 + 1);
            for k in [i % 2, 1 - i % 2] {
                let t = Instant::now();
                let server =
                    ServeProcess::start(bins[k], copies[k].path(), Duration::from_secs(120))?;
                ready[k].push(t.elapsed().as_secs_f64() * 1000.0);
                if args.after_warm_up {
                    wait_warm(client, &server.url)?;
                    warm[k].push(t.elapsed().as_secs_f64() * 1000.0);
                }
                ms[k].push(timed(client, &server.url, &req)?.0);
            }
        }
        let what = if args.after_warm_up {
            "first after warm-up"
        } else {
            "first after restart"
        };
        let mut row = compare(s, what, ms);
        let medians = |v: &[Vec<f64>; 2]| [median(v[0].clone()), median(v[1].clone())];
        let (r, w) = (medians(&ready), medians(&warm));
        println!(
            "{:<45} {:>4}  start to /ready: a {:>7.0} ms  b {:>7.0} ms{}",
            "",
            "",
            r[0],
            r[1],
            if args.after_warm_up {
                format!("   start to warm: a {:>7.0} ms  b {:>7.0} ms", w[0], w[1])
            } else {
                String::new()
            }
        );
        row["ready_ms"] = json!({"a": r[0], "b": r[1]});
        if args.after_warm_up {
            row["warm_ms"] = json!({"a": w[0], "b": w[1]});
        }
        rows.push(row);
    }
    Ok(rows)
}

/// One compared query: the medians of A's and B's times, of their paired
/// differences, and how often B was faster; printed, and returned for the report.
fn compare(s: &QuerySpec, what: &str, ms: [Vec<f64>; 2]) -> Value {
    let diffs: Vec<f64> = ms[0].iter().zip(&ms[1]).map(|(a, b)| b - a).collect();
    let faster = diffs.iter().filter(|d| **d < 0.0).count() as f64 / diffs.len().max(1) as f64;
    let (a, b, d) = (
        median(ms[0].clone()),
        median(ms[1].clone()),
        median(diffs.clone()),
    );
    println!(
        "{:<45} {:>4}  {what}: a {a:>7.2} ms  b {b:>7.2} ms  median(b - a) {d:>+8.3} ms  b faster in {:>3.0} %",
        s.name,
        s.window,
        100.0 * faster,
    );
    json!({
        "query": s.name, "window": s.window, "what": what, "pairs": diffs.len(),
        "a_median_ms": a, "b_median_ms": b, "median_b_minus_a_ms": d,
        "b_faster_share": faster, "a_ms": ms[0], "b_ms": ms[1],
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(args.data_dir.join("manifest.json")).context("reading manifest.json")?,
    )?;
    let Some(t_end) = manifest.get("t_end").and_then(Value::as_i64) else {
        bail!("manifest.json has no t_end: not a query-suite directory");
    };
    let data = args.data_dir.join("profiledb");
    let data_b = args.data_dir_b.as_ref().map(|d| d.join("profiledb"));
    let data_b = data_b.as_deref().unwrap_or(&data);
    let client = reqwest::blocking::Client::new();
    let rows = match args.restarts {
        Some(n) => restarts(&args, n, [&data, data_b], t_end, &client)?,
        None => requests(&args, [&data, data_b], t_end, &client)?,
    };
    if rows.is_empty() {
        bail!(
            "no query of the suite matches --query {:?} --window {:?}",
            args.query,
            args.window
        );
    }
    let path = report::write(
        "ab",
        json!({"a": args.a, "b": args.b, "data_dir": args.data_dir,
               "data_dir_b": args.data_dir_b, "restarts": args.restarts, "rows": rows}),
    )?;
    println!("wrote {}", path.display());
    Ok(())
}

/// Both servers at once, every request to both.
fn requests(
    args: &Args,
    dirs: [&Path; 2],
    t_end: i64,
    client: &reqwest::blocking::Client,
) -> anyhow::Result<Vec<Value>> {
    let servers = [
        spawn(&args.a, dirs[0], client)?,
        spawn(&args.b, dirs[1], client)?,
    ];
    let mut rows = Vec::new();
    for s in specs(t_end, "svc-00")
        .iter()
        .filter(|s| s.window == args.window && s.name.contains(&args.query))
    {
        let mut ms: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        for i in 0..args.requests {
            // The same range to both; a new one every request, as the suite's
            // uncached runs ask.
            let req = (s.http)(i as i64 + 1);
            for k in [i % 2, 1 - i % 2] {
                if args.idle_ms > 0 {
                    std::thread::sleep(Duration::from_millis(args.idle_ms));
                }
                let (t, _) = timed(client, &servers[k].process.url, &req)?;
                if i >= 3 {
                    ms[k].push(t);
                }
            }
        }
        let what = match args.idle_ms {
            0 => "p50".to_string(),
            n => format!("p50 after {n} ms idle"),
        };
        let mut row = compare(s, &what, ms);
        row["idle_ms"] = json!(args.idle_ms);
        rows.push(row);
    }
    Ok(rows)
}
