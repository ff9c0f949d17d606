//! The baseline engines the query suite compares profiledb with, run from the bench
//! virtualenv (`bench/setup.sh`) by the scripts in `bench/baselines/`:
//! * DuckDB over the Parquet files, a fresh connection per query;
//! * DuckDB over its own native tables, loaded once into a database file;
//! * ClickHouse in-process (chdb) over MergeTree tables loaded once.
//!
//! Each engine answers the same queries over the same rows; the suite compares every
//! engine's total with profiledb's and each query's latency with the fastest engine.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::report::human_bytes;

pub(crate) fn venv_python() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python")
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("baselines")
        .join(name)
}

const DUCKDB_SCRIPT: &str = "duckdb_queries.py";
const CLICKHOUSE_SCRIPT: &str = "clickhouse_queries.py";

/// `Some(version)` when the bench virtualenv imports `module`.
fn module_version(module: &str) -> Option<String> {
    let out = Command::new(venv_python())
        .args([
            "-c",
            &format!("import {module}; print({module}.__version__)"),
        ])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `Some(version)` when the bench virtualenv has DuckDB.
pub(crate) fn duckdb_version() -> Option<String> {
    module_version("duckdb")
}

fn run_script(name: &str, args: &[&str]) -> anyhow::Result<Value> {
    let out = Command::new(venv_python())
        // The scripts import a sibling module: no __pycache__ in the source tree.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .arg(script(name))
        .args(args)
        .output()
        .with_context(|| format!("running bench/baselines/{name}"))?;
    if !out.status.success() {
        bail!(
            "{name} {} failed: {}",
            args.first().copied().unwrap_or(""),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    serde_json::from_slice(&out.stdout).with_context(|| format!("{name} printed no JSON"))
}

/// The DuckDB script (`convert`, and `run` over Parquet), as the fleet suite uses it.
pub(crate) fn run_duckdb(args: &[&str]) -> anyhow::Result<Value> {
    run_script(DUCKDB_SCRIPT, args)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Engine {
    DuckdbParquet,
    DuckdbNative,
    Clickhouse,
}

impl Engine {
    pub(crate) const ALL: [Engine; 3] = [
        Engine::DuckdbParquet,
        Engine::DuckdbNative,
        Engine::Clickhouse,
    ];

    /// Key in the JSON results.
    pub(crate) fn id(self) -> &'static str {
        match self {
            Engine::DuckdbParquet => "duckdb_parquet",
            Engine::DuckdbNative => "duckdb_native",
            Engine::Clickhouse => "clickhouse",
        }
    }

    /// Column heading in the printed table.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Engine::DuckdbParquet => "DuckDB/Parquet",
            Engine::DuckdbNative => "DuckDB native",
            Engine::Clickhouse => "ClickHouse",
        }
    }
}

/// The baseline engines installed in the bench virtualenv.
#[derive(Default)]
pub(crate) struct Installed {
    pub(crate) duckdb: Option<String>,
    pub(crate) chdb: Option<String>,
}

impl Installed {
    /// Finds the engines, printing what is skipped and why. `required`: fail instead
    /// of skipping (the `baseline` suite outside `--quick`), as everywhere with
    /// `PROFILEDB_REQUIRE_EXTERNAL=1` (CI, whose `bench/setup.sh` installs both).
    pub(crate) fn detect(skip: bool, required: bool) -> anyhow::Result<Self> {
        if skip {
            return Ok(Self::default());
        }
        let required = required || crate::external::required();
        let duckdb = duckdb_version();
        // chdb loads the Parquet that DuckDB converts the rows to.
        let chdb = duckdb.as_ref().and_then(|_| module_version("chdb"));
        match (&duckdb, &chdb) {
            (None, _) if required => {
                bail!("DuckDB is not installed in bench/.venv (required by `baseline` and by PROFILEDB_REQUIRE_EXTERNAL=1): run bench/setup.sh first")
            }
            (Some(_), None) if required => {
                bail!("chdb is not installed in bench/.venv (required by `baseline` and by PROFILEDB_REQUIRE_EXTERNAL=1): run bench/setup.sh first")
            }
            (None, _) => println!(
                "baseline: DuckDB not installed in bench/.venv (run bench/setup.sh); skipping the DuckDB and ClickHouse sides"
            ),
            (Some(_), None) => println!(
                "baseline: chdb not installed in bench/.venv (run bench/setup.sh); skipping the ClickHouse side"
            ),
            (Some(_), Some(_)) => {}
        }
        Ok(Self { duckdb, chdb })
    }

    pub(crate) fn any(&self) -> bool {
        self.duckdb.is_some()
    }

    fn engines(&self) -> Vec<Engine> {
        Engine::ALL
            .into_iter()
            .filter(|e| match e {
                Engine::DuckdbParquet | Engine::DuckdbNative => self.duckdb.is_some(),
                Engine::Clickhouse => self.chdb.is_some(),
            })
            .collect()
    }

    pub(crate) fn versions(&self) -> Value {
        json!({"duckdb": self.duckdb, "chdb": self.chdb})
    }
}

/// Which figure of a baseline's answer is compared with profiledb's total.
#[derive(Clone, Copy)]
pub(crate) enum Total {
    /// The last column summed over all rows.
    Sum,
    /// The last column of the first row (answers repeating a grand total per row).
    FirstRow,
}

/// One query in both SQL dialects.
pub(crate) struct Sql {
    pub(crate) duckdb: String,
    pub(crate) clickhouse: String,
    pub(crate) total: Total,
}

impl Sql {
    /// SQL both engines read the same way.
    pub(crate) fn portable(sql: String) -> Self {
        Self {
            clickhouse: sql.clone(),
            duckdb: sql,
            total: Total::Sum,
        }
    }
}

/// One engine's figures: its load step (native tables only) and, by query key,
/// `{first_ms, p50_ms, p99_ms, rows, total}`.
pub(crate) struct EngineRun {
    pub(crate) engine: Engine,
    pub(crate) load: Option<Value>,
    pub(crate) queries: Value,
}

/// One query a baseline is asked: its key in the answers, its SQL and whether it
/// runs once only (the ad-hoc set: its first run is the figure).
pub(crate) struct Asked<'a> {
    pub(crate) key: String,
    pub(crate) sql: &'a Sql,
    pub(crate) first_only: bool,
}

fn write_spec(path: &Path, queries: &[Asked<'_>], engine: Engine) -> anyhow::Result<()> {
    let spec: Vec<Value> = queries
        .iter()
        .map(|q| {
            let text = match engine {
                Engine::Clickhouse => &q.sql.clickhouse,
                Engine::DuckdbParquet | Engine::DuckdbNative => &q.sql.duckdb,
            };
            let total = match q.sql.total {
                Total::Sum => "sum",
                Total::FirstRow => "first_row",
            };
            let mut v = json!({"name": q.key, "sql": text, "total": total});
            if q.first_only {
                v["iterations"] = json!(0);
            }
            v
        })
        .collect();
    std::fs::write(path, serde_json::to_vec(&spec)?)
        .with_context(|| format!("writing {}", path.display()))
}

fn duckdb_file(rows_dir: &Path) -> String {
    rows_dir.join("native.duckdb").display().to_string()
}

fn chdb_dir(rows_dir: &Path) -> String {
    rows_dir.join("chdb").display().to_string()
}

/// Loads the engine's own tables from the Parquet files (timed by the script).
fn load(engine: Engine, rows_dir: &Path) -> anyhow::Result<Option<Value>> {
    let dir = rows_dir.display().to_string();
    let loaded = match engine {
        Engine::DuckdbParquet => return Ok(None),
        Engine::DuckdbNative => run_script(
            DUCKDB_SCRIPT,
            &["load", "--dir", &dir, "--db", &duckdb_file(rows_dir)],
        )?,
        Engine::Clickhouse => run_script(
            CLICKHOUSE_SCRIPT,
            &["load", "--dir", &dir, "--path", &chdb_dir(rows_dir)],
        )?,
    };
    let figure = |k: &str| loaded.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
    println!(
        "baseline: {} loaded {} rows + {} stacks in {:.1} s, {} on disk",
        engine.label(),
        figure("rows"),
        figure("stack_rows"),
        figure("seconds"),
        human_bytes(figure("bytes"))
    );
    Ok(Some(loaded))
}

fn run_queries(
    engine: Engine,
    rows_dir: &Path,
    spec: &Path,
    iterations: usize,
) -> anyhow::Result<Value> {
    let (dir, spec, iterations) = (
        rows_dir.display().to_string(),
        spec.display().to_string(),
        iterations.max(1).to_string(),
    );
    let common = ["--spec", &spec, "--iterations", &iterations];
    match engine {
        Engine::DuckdbParquet => run_script(
            DUCKDB_SCRIPT,
            &[&["run", "--dir", &dir][..], &common].concat(),
        ),
        Engine::DuckdbNative => run_script(
            DUCKDB_SCRIPT,
            &[
                &["run", "--dir", &dir, "--db", &duckdb_file(rows_dir)][..],
                &common,
            ]
            .concat(),
        ),
        Engine::Clickhouse => run_script(
            CLICKHOUSE_SCRIPT,
            &[&["run", "--path", &chdb_dir(rows_dir)][..], &common].concat(),
        ),
    }
}

/// Loads and queries every installed engine over the Parquet rows in `rows_dir`.
/// The keys of `queries` index each engine's answers.
pub(crate) fn run_all(
    installed: &Installed,
    rows_dir: &Path,
    queries: &[Asked<'_>],
    iterations: usize,
) -> anyhow::Result<Vec<EngineRun>> {
    let mut runs = Vec::new();
    for engine in installed.engines() {
        let load = load(engine, rows_dir).with_context(|| format!("{} load", engine.label()))?;
        let spec = rows_dir.join(format!("spec-{}.json", engine.id()));
        write_spec(&spec, queries, engine)?;
        println!("baseline: {} queries …", engine.label());
        let answers = run_queries(engine, rows_dir, &spec, iterations)
            .with_context(|| format!("{} queries", engine.label()))?;
        runs.push(EngineRun {
            engine,
            load,
            queries: answers,
        });
    }
    Ok(runs)
}

/// The load step of each engine that has one (its own tables), by engine id.
pub(crate) fn loads(runs: &[EngineRun]) -> Value {
    runs.iter()
        .filter_map(|r| Some((r.engine.id().to_string(), r.load.clone()?)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

fn same_total(ours: Option<f64>, theirs: Option<f64>) -> bool {
    match (ours, theirs) {
        (Some(a), Some(b)) => (a - b).abs() <= 1e-6 * a.abs().max(1.0),
        _ => false,
    }
}

/// One query against every baseline: the JSON figures, and a line per baseline whose
/// total differs from profiledb's.
pub(crate) struct Comparison {
    pub(crate) figures: Value,
    pub(crate) mismatches: Vec<String>,
}

/// Every baseline's answer to one query.
struct Answers {
    /// By engine id.
    per_engine: serde_json::Map<String, Value>,
    /// The engine with the lowest figure asked for, and that figure.
    fastest: Option<(Engine, f64)>,
    /// A line per baseline whose total differs from profiledb's.
    mismatches: Vec<String>,
}

/// Every baseline's answer to `key`, the fastest by `field` (`p50_ms`, `first_ms`).
fn answers(runs: &[EngineRun], key: &str, total: Option<f64>, field: &str) -> Answers {
    let mut per_engine = serde_json::Map::new();
    let mut mismatches = Vec::new();
    let mut fastest: Option<(Engine, f64)> = None;
    for run in runs {
        let answer = run.queries.get(key).cloned().unwrap_or(Value::Null);
        let theirs = answer.get("total").and_then(Value::as_f64);
        if !same_total(total, theirs) {
            mismatches.push(format!(
                "{key}: {} total {theirs:?}, profiledb {total:?}",
                run.engine.label()
            ));
        }
        if let Some(ms) = answer.get(field).and_then(Value::as_f64) {
            if fastest.is_none_or(|(_, best)| ms < best) {
                fastest = Some((run.engine, ms));
            }
        }
        per_engine.insert(run.engine.id().to_string(), answer);
    }
    Answers {
        per_engine,
        fastest,
        mismatches,
    }
}

/// Compares profiledb's answer to `key` (its total and uncached / cached p50) with
/// every baseline that ran.
pub(crate) fn compare(
    runs: &[EngineRun],
    key: &str,
    total: Option<f64>,
    uncached_p50: f64,
    cached_p50: f64,
) -> Comparison {
    let Answers {
        per_engine,
        fastest,
        mismatches,
    } = answers(runs, key, total, "p50_ms");
    let figures = json!({
        "baselines": per_engine,
        "fastest_baseline": fastest.map(|(e, _)| e.id()),
        "fastest_baseline_p50_ms": fastest.map(|(_, p)| p),
        "fastest_p50_over_uncached_p50": fastest.map(|(_, p)| p / uncached_p50),
        "fastest_p50_over_cached_p50": fastest.map(|(_, p)| p / cached_p50),
        "totals_match": (!runs.is_empty()).then_some(mismatches.is_empty()),
    });
    Comparison {
        figures,
        mismatches,
    }
}

/// Compares profiledb's first answer to `key` after a restart (its total, wall
/// and server CPU milliseconds) with every baseline's first run of the same SQL:
/// ClickHouse's first run over profiledb's, wall and CPU, and the fastest first run.
pub(crate) fn compare_first(
    runs: &[EngineRun],
    key: &str,
    total: Option<f64>,
    ms: f64,
    cpu_ms: f64,
) -> Comparison {
    let Answers {
        per_engine,
        fastest,
        mismatches,
    } = answers(runs, key, total, "first_ms");
    let ch = |field: &str| {
        per_engine
            .get(Engine::Clickhouse.id())
            .and_then(|a| a.get(field))
            .and_then(Value::as_f64)
    };
    let figures = json!({
        "baselines": per_engine,
        "clickhouse_first_ms": ch("first_ms"),
        "clickhouse_first_cpu_ms": ch("first_cpu_ms"),
        "clickhouse_first_over_ms": ch("first_ms").map(|c| c / ms),
        "clickhouse_first_cpu_over_cpu": ch("first_cpu_ms").map(|c| c / cpu_ms),
        "fastest_first_baseline": fastest.map(|(e, _)| e.id()),
        "fastest_first_ms": fastest.map(|(_, f)| f),
        "fastest_first_over_ms": fastest.map(|(_, f)| f / ms),
        "totals_match": (!runs.is_empty()).then_some(mismatches.is_empty()),
    });
    Comparison {
        figures,
        mismatches,
    }
}

fn file_bytes(path: &Path) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.len())
}

/// Bytes each system keeps for the same fleet, with what rows each holds: printed,
/// and returned for the results file.
pub(crate) fn bytes_on_disk(
    rows_dir: &Path,
    segment_bytes: Option<u64>,
    values_ingested: Option<u64>,
    same_rows_store: &Value,
    runs: &[EngineRun],
) -> Value {
    let load_of = |engine: Engine| runs.iter().find(|r| r.engine == engine)?.load.clone();
    let count = |v: &Option<Value>, k: &str| v.as_ref()?.get(k)?.as_u64();
    // Every engine holds the same rows as the Parquet: the count its loads report.
    let loaded = load_of(Engine::DuckdbNative).or_else(|| load_of(Engine::Clickhouse));
    let same_rows = match (count(&loaded, "rows"), count(&loaded, "stack_rows")) {
        (Some(r), Some(s)) => format!("{r} CPU-nanosecond sample rows + {s} stack rows"),
        _ => "the CPU-nanosecond sample rows + the stacks".to_string(),
    };
    let parquet = match (
        file_bytes(&rows_dir.join("samples.parquet")),
        file_bytes(&rows_dir.join("stacks.parquet")),
    ) {
        (Some(a), Some(b)) => Some(a + b),
        _ => None,
    };
    let engine_bytes = |engine| count(&load_of(engine), "bytes");
    let same_rows_bytes = same_rows_store.get("bytes").and_then(Value::as_u64);
    let rows: [(&str, &str, Option<u64>, String); 5] = [
        (
            "profiledb_segments",
            "profiledb segments",
            segment_bytes,
            format!(
                "every series pushed: {} values (CPU samples and nanoseconds, heap objects and bytes once a minute, replayed fixtures)",
                values_ingested.map_or("?".to_string(), |v| v.to_string())
            ),
        ),
        (
            "profiledb_same_rows",
            "profiledb segments, same rows",
            same_rows_bytes,
            format!(
                "{} CPU-nanosecond sample rows, written like the pushes (stacks as frame trees)",
                same_rows_store
                    .get("rows")
                    .and_then(Value::as_u64)
                    .map_or("?".to_string(), |r| r.to_string())
            ),
        ),
        ("parquet", "Parquet (zstd)", parquet, same_rows.clone()),
        (
            "duckdb_native",
            "DuckDB native file",
            engine_bytes(Engine::DuckdbNative),
            same_rows.clone(),
        ),
        (
            "clickhouse_mergetree",
            "ClickHouse MergeTree parts",
            engine_bytes(Engine::Clickhouse),
            same_rows,
        ),
    ];
    println!("bytes on disk:");
    let mut out = serde_json::Map::new();
    for (id, label, bytes, holds) in rows {
        let Some(bytes) = bytes else { continue };
        println!("  {label:<28} {:>11}  {holds}", human_bytes(bytes as f64));
        out.insert(id.to_string(), json!({"bytes": bytes, "holds": holds}));
    }
    // The comparison #19 asks for: profiledb's bytes on the same rows as a
    // fraction of each baseline's.
    if let Some(ours) = same_rows_bytes {
        let mut ratios = serde_json::Map::new();
        for (id, label, bytes) in [
            ("parquet", "Parquet", parquet),
            (
                "duckdb_native",
                "DuckDB native",
                engine_bytes(Engine::DuckdbNative),
            ),
            (
                "clickhouse_mergetree",
                "MergeTree",
                engine_bytes(Engine::Clickhouse),
            ),
        ] {
            let Some(b) = bytes.filter(|&b| b > 0) else {
                continue;
            };
            let r = ours as f64 / b as f64;
            println!("  same rows: profiledb = {r:.2} × {label}");
            ratios.insert(id.to_string(), json!(r));
        }
        out.insert("same_rows_ratio".to_string(), Value::Object(ratios));
    }
    if let Some(tables) = load_of(Engine::Clickhouse).and_then(|l| l.get("tables").cloned()) {
        out.insert("clickhouse_tables".to_string(), tables);
    }
    Value::Object(out)
}

/// The printed comparison columns of one query: each baseline's p50, the fastest,
/// and fastest ÷ profiledb (uncached, cached).
pub(crate) fn table_header() -> String {
    format!(
        "{:>14} {:>14} {:>14} {:>14} {:>8} {:>8} {:>5}",
        Engine::DuckdbParquet.label(),
        Engine::DuckdbNative.label(),
        Engine::Clickhouse.label(),
        "fastest",
        "×uncach",
        "×cached",
        "match"
    )
}

pub(crate) fn table_cells(result: &Value) -> String {
    let f = |v: Option<&Value>| v.and_then(Value::as_f64).unwrap_or(f64::NAN);
    // A baseline that did not run shows as "-", not as NaN.
    let p50 = |e: Engine| {
        result
            .pointer(&format!("/baselines/{}/p50_ms", e.id()))
            .and_then(Value::as_f64)
            .map_or("-".to_string(), |ms| format!("{ms:.1}ms"))
    };
    let fastest = result
        .get("fastest_baseline")
        .and_then(Value::as_str)
        .and_then(|id| Engine::ALL.into_iter().find(|e| e.id() == id))
        .map_or("-", Engine::label);
    format!(
        "{:>14} {:>14} {:>14} {:>14} {:>7.1}x {:>7.0}x {:>5}",
        p50(Engine::DuckdbParquet),
        p50(Engine::DuckdbNative),
        p50(Engine::Clickhouse),
        fastest,
        f(result.get("fastest_p50_over_uncached_p50")),
        f(result.get("fastest_p50_over_cached_p50")),
        match result.get("totals_match").and_then(Value::as_bool) {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        }
    )
}
