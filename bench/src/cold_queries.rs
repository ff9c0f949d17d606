//! The query suite's cold and ad-hoc set: first queries after a restart.
//!
//! * **cold**: the suite's fixed queries, each asked once by a `profiledb serve`
//!   process started over the suite's directory, as soon as `/ready` answers;
//! * **ad-hoc**: the same, with a label selector never asked before (one host of one
//!   service, one zone), drawn new on every run and every invocation.
//!
//! Each is timed end to end over HTTP and by the server's CPU time (every thread of
//! the process but the warm-up, which goes on with older segments after `/ready`
//! and is reported apart), `--cold-runs` times with a restart each, and set beside
//! each baseline's first run of the same SQL (whose total must match).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

use crate::baselines::{self, EngineRun};
use crate::query_specs::{timed, AdHoc, QuerySpec};
use crate::server::ServeProcess;

/// CPU nanoseconds of a process's live threads from `/proc/<pid>/task/*/schedstat`
/// (nanosecond resolution, unlike the clock ticks of `stat`): the warm-up thread's
/// apart from all the others'.
#[derive(Clone, Copy, Default)]
struct ProcCpu {
    serving_ns: u64,
    warmup_ns: u64,
}

/// The warm-up thread's name as `comm` shows it (15 bytes at most).
const WARMUP_COMM: &str = "profiledb-warmu";

fn proc_cpu(pid: u32) -> anyhow::Result<ProcCpu> {
    let mut out = ProcCpu::default();
    let dir = format!("/proc/{pid}/task");
    for e in std::fs::read_dir(&dir).with_context(|| format!("reading {dir}"))? {
        let task = e?.path();
        // A thread that ended between the listing and the read has no CPU to add.
        let (Ok(stat), Ok(comm)) = (
            std::fs::read_to_string(task.join("schedstat")),
            std::fs::read_to_string(task.join("comm")),
        ) else {
            continue;
        };
        let ns: u64 = stat
            .split_whitespace()
            .next()
            .and_then(|f| f.parse().ok())
            .unwrap_or(0);
        if comm.trim() == WARMUP_COMM {
            out.warmup_ns += ns;
        } else {
            out.serving_ns += ns;
        }
    }
    Ok(out)
}

/// One first query after a restart.
struct First {
    ms: f64,
    cpu_ms: f64,
    warmup_cpu_ms: f64,
    ready_ms: f64,
    total: Option<f64>,
}

fn first_after_restart(
    bin: &Path,
    dir: &Path,
    spec: &QuerySpec,
    client: &reqwest::blocking::Client,
) -> anyhow::Result<First> {
    let t = Instant::now();
    let server = ServeProcess::start(bin, dir, Duration::from_secs(300))?;
    let ready_ms = t.elapsed().as_secs_f64() * 1e3;
    let before = proc_cpu(server.pid())?;
    let (ms, v) = timed(client, &server.url, &(spec.http)(0))
        .with_context(|| format!("{} after a restart", spec.key()))?;
    let after = proc_cpu(server.pid())?;
    let ms_of = |a: u64, b: u64| a.saturating_sub(b) as f64 / 1e6;
    Ok(First {
        ms,
        cpu_ms: ms_of(after.serving_ns, before.serving_ns),
        warmup_cpu_ms: ms_of(after.warmup_ns, before.warmup_ns),
        ready_ms,
        total: (spec.total)(&v),
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// What the cold and ad-hoc runs ask and against what.
pub(crate) struct ColdSet<'a> {
    /// The `profiledb` binary to start.
    pub bin: &'a Path,
    /// The suite's server directory.
    pub dir: &'a Path,
    /// The fixed queries asked cold.
    pub cold: Vec<&'a QuerySpec>,
    /// Per run, its ad-hoc queries, in the same order in every run.
    pub adhoc: &'a [Vec<QuerySpec>],
    /// What each run selects.
    pub selections: &'a [AdHoc],
    /// Restarts per cold query.
    pub runs: usize,
    /// The same queries repeated (the suite's uncached p50), by key.
    pub repeated: &'a Value,
}

/// Runs the set; returns its figures for the results file and a line per
/// baseline total that differs from profiledb's.
pub(crate) fn run(
    set: &ColdSet<'_>,
    baselines: &[EngineRun],
    progress: impl Fn(&str),
) -> anyhow::Result<(Value, Vec<String>)> {
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()?;
    let mut rows = Vec::new();
    let mut mismatches = Vec::new();
    // Cold: the same query after each restart.
    for spec in &set.cold {
        progress(&spec.key());
        let firsts = (0..set.runs)
            .map(|_| first_after_restart(set.bin, set.dir, spec, &client))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let (row, bad) = summarize("cold", spec, &[spec], &firsts, baselines, set.repeated);
        mismatches.extend(bad);
        rows.push(row);
    }
    // Ad-hoc: query `i` of every run, each over its own selection.
    let per_run = set.adhoc.first().map_or(0, Vec::len);
    for i in 0..per_run {
        let specs: Vec<&QuerySpec> = set.adhoc.iter().filter_map(|r| r.get(i)).collect();
        let Some(first) = specs.first() else { continue };
        progress(&first.key());
        let firsts = specs
            .iter()
            .map(|s| first_after_restart(set.bin, set.dir, s, &client))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let (row, bad) = summarize("ad-hoc", first, &specs, &firsts, baselines, set.repeated);
        mismatches.extend(bad);
        rows.push(row);
    }
    print_table(&rows);
    let selections: Vec<Value> = set
        .selections
        .iter()
        .map(|a| json!({"service": a.service, "host": a.host, "zone": a.zone}))
        .collect();
    Ok((
        json!({"runs": set.runs, "adhoc_selections": selections, "queries": rows}),
        mismatches,
    ))
}

/// One row of the set: `firsts[r]` answers `specs[r]` (one spec for every run of a
/// cold query, one per run for an ad-hoc one). Ratios are taken per run, against
/// that run's SQL, and their median reported.
fn summarize(
    set: &str,
    spec: &QuerySpec,
    specs: &[&QuerySpec],
    firsts: &[First],
    baselines: &[EngineRun],
    repeated: &Value,
) -> (Value, Vec<String>) {
    let mut mismatches = Vec::new();
    let mut runs = Vec::new();
    for (r, f) in firsts.iter().enumerate() {
        let s = specs.get(r).or(specs.first()).copied().unwrap_or(spec);
        let c = baselines::compare_first(baselines, &s.key(), f.total, f.ms, f.cpu_ms);
        if !baselines.is_empty() {
            mismatches.extend(c.mismatches);
        }
        let mut run = json!({
            "key": s.key(), "ms": f.ms, "cpu_ms": f.cpu_ms,
            "warmup_cpu_ms": f.warmup_cpu_ms, "ready_ms": f.ready_ms, "total": f.total,
        });
        if let (Some(o), Some(c)) = (run.as_object_mut(), c.figures.as_object()) {
            o.extend(c.clone());
        }
        runs.push(run);
    }
    let med = |k: &str| median(runs.iter().filter_map(|r| r.get(k)?.as_f64()).collect());
    let row = json!({
        "set": set,
        "query": spec.name,
        "window": spec.window,
        "ms_median": med("ms"),
        "cpu_ms_median": med("cpu_ms"),
        "warmup_cpu_ms_median": med("warmup_cpu_ms"),
        "repeated_p50_ms": repeated.get(spec.key()).and_then(Value::as_f64),
        "clickhouse_first_ms_median": med("clickhouse_first_ms"),
        "clickhouse_first_cpu_ms_median": med("clickhouse_first_cpu_ms"),
        "clickhouse_first_over_ms_median": med("clickhouse_first_over_ms"),
        "clickhouse_first_cpu_over_cpu_median": med("clickhouse_first_cpu_over_cpu"),
        "fastest_first_over_ms_median": med("fastest_first_over_ms"),
        "totals_match": (!baselines.is_empty()).then_some(mismatches.is_empty()),
        "runs": runs,
    });
    (row, mismatches)
}

fn print_table(rows: &[Value]) {
    println!();
    println!(
        "{:<52} {:>4} {:>9} {:>9} {:>9} {:>10} {:>10} {:>7} {:>7} {:>7} {:>5}",
        "first query after a restart (median of runs)",
        "win",
        "wall",
        "CPU",
        "repeated",
        "CH first",
        "CH CPU",
        "×CH",
        "×CH CPU",
        "×first",
        "match"
    );
    let f = |r: &Value, k: &str| r.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
    for r in rows {
        let name = format!(
            "{}: {}",
            r.get("set").and_then(Value::as_str).unwrap_or(""),
            r.get("query").and_then(Value::as_str).unwrap_or("")
        );
        // Ad-hoc queries are new on every run: nothing repeated to show.
        let repeated = match r.get("repeated_p50_ms").and_then(Value::as_f64) {
            Some(ms) => format!("{ms:.2}ms"),
            None => "-".to_string(),
        };
        println!(
            "{:<52} {:>4} {:>7.1}ms {:>7.1}ms {:>9} {:>8.1}ms {:>8.1}ms {:>6.1}x {:>6.1}x {:>6.1}x {:>5}",
            name,
            r.get("window").and_then(Value::as_str).unwrap_or(""),
            f(r, "ms_median"),
            f(r, "cpu_ms_median"),
            repeated,
            f(r, "clickhouse_first_ms_median"),
            f(r, "clickhouse_first_cpu_ms_median"),
            f(r, "clickhouse_first_over_ms_median"),
            f(r, "clickhouse_first_cpu_over_cpu_median"),
            f(r, "fastest_first_over_ms_median"),
            match r.get("totals_match").and_then(Value::as_bool) {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            }
        );
    }
    println!("wall and CPU: profiledb's first answer after a restart once /ready answers (CPU: the server process's threads but the warm-up); CH first: ClickHouse's first run of the same SQL; ×CH = CH first / profiledb; ×first = the fastest baseline's first run / profiledb");
}
