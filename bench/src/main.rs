//! Reproducible profiledb benchmarks.
//!
//! `cargo run -p bench --release -- <suite> [--quick]`. Each suite prints a table
//! and writes a JSON file of its figures (with machine facts and the git commit) to
//! `bench/results/`, so runs can be compared.

mod ab_suite;
mod agent_suite;
mod baselines;
mod cluster_suite;
mod cold_queries;
mod control_suite;
#[path = "../../storage/tests/support/external.rs"]
mod external;
mod fleet;
mod fleet_suite;
mod ingest_fleet;
mod ingest_suite;
mod lifecycle_suite;
mod memtouch_suite;
mod pprof_writer;
mod query_specs;
mod query_suite;
mod report;
mod same_rows;
mod sections;
mod server;
mod soak_suite;
mod storage_suite;
mod symbolize_suite;
mod thread_cpu;
mod ui_suite;

use clap::{Parser, Subcommand};

// Same allocator as the server binary, so figures match what it does.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "bench", about = "profiledb benchmarks", version)]
struct Cli {
    #[command(subcommand)]
    suite: Suite,
}

#[derive(Subcommand)]
enum Suite {
    /// Bytes per stored sample and ingest rate into the storage engine, for a pprof
    /// profile replicated over many series and minutes, against the same data as
    /// gzip'd pprof files.
    Storage(storage_suite::Args),
    /// pprof decoding on one core, and end-to-end HTTP ingest with concurrent
    /// clients against an in-process server.
    Ingest(ingest_suite::Args),
    /// A generated fleet pushed through an in-process server, then merge, 2-key
    /// group-by with a function filter, time series and diff over 1 h and 1 day:
    /// p50/p99 after a restart, on result-cache misses and hits; and the same queries
    /// over the same rows in the baselines `bench/setup.sh` installs (DuckDB over
    /// Parquet, DuckDB's native tables, ClickHouse's MergeTree through chdb), each
    /// query's ratio taken against the fastest of them.
    Query(query_suite::Args),
    /// The `query` suite with the baselines required (in `--quick` mode a missing
    /// engine only skips its side, with a message, unless
    /// PROFILEDB_REQUIRE_EXTERNAL=1).
    Baseline(query_suite::Args),
    /// A generated fleet over 7 simulated days written with several level-0 segments
    /// per hourly partition, then compacted and downsampled to 60 s and 1 h: bytes on
    /// disk after each step, compaction throughput and peak RSS, with merge answers
    /// checked unchanged after every step.
    Lifecycle(lifecycle_suite::Args),
    /// The real `profiledb-agent` sampling the whole machine at 19 and 99 Hz while
    /// both cores are busy (a release Rust program built with and without frame
    /// pointers), pushing to an in-process server: agent CPU % of one CPU, peak RSS,
    /// fds, samples/s delivered, unsymbolized frames, stack depth. Skips when
    /// perf_event_open is not permitted.
    Agent(agent_suite::Args),
    /// Server-side symbolization on this bench's own binary (DWARF line tables):
    /// cold and warm CPU per frame, the file's parse, bytes held per build id.
    Symbolize(symbolize_suite::Args),
    /// The fleet loop: a simulated fleet of agents checking in with one server under
    /// machine sampling (check-ins/s, latency, server CPU, machines per period), the
    /// real agent under `--control` at 19 and 99 Hz (CPU, RSS), and unsymbolized /
    /// unattributed samples with and without mmap tracking on a workload starting
    /// short-lived processes.
    Control(control_suite::Args),
    /// The web UI in headless Chromium over a generated 1-day fleet: asset bytes
    /// served, navigation to a drawn flame graph (cold and cached), and frames per
    /// second while zooming a 10,000-node flame graph. Skips without Chromium.
    Ui(ui_suite::Args),
    /// The fleet analyses (hottest shared code, CPI, assignment, variance, diff with
    /// the noise verdict) over a generated 1-day fleet with hardware events: p50
    /// latency, cold and cached.
    Fleet(fleet_suite::Args),
    /// Ingest (high-cardinality and Zipf generators) and queries together against a
    /// spawned `profiledb --memory-mb`: RSS, each memory part, WAL bytes and query
    /// p50/p99 over time, then the restart time to /ready after kill -9.
    Soak(soak_suite::Args),
    /// The cluster (writers, queriers, a compactor over a real S3-protocol server)
    /// against the single node on the same fleet: ingest rate with 1 and 2
    /// writers, bucket requests and bytes per profile, a fresh querier's time to
    /// ready and merge latency. Skips without moto.
    Cluster(cluster_suite::Args),
    /// Two `profiledb` builds serving copies of one `query`-suite directory at
    /// once, each request sent to both: the median per-request difference, which
    /// the machine's drift cancels out of.
    Ab(ab_suite::Args),
    /// What fresh memory costs here: pages faulted in and zeroed, with and
    /// without transparent huge pages, right after other pages were freed and
    /// after memory rested (a VM's balloon reports rested free memory to its
    /// host, and faulting it in again waits for the host).
    Memtouch(memtouch_suite::Args),
    /// One compaction pass of the `lifecycle` suite in a process of its own (its
    /// peak RSS is that pass's alone). Internal.
    #[command(hide = true)]
    LifecycleStep(lifecycle_suite::StepArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().suite {
        Suite::Storage(args) => storage_suite::run(args),
        Suite::Cluster(args) => cluster_suite::run(args),
        Suite::Ingest(args) => ingest_suite::run(args),
        Suite::Query(args) => query_suite::run(args, false),
        Suite::Baseline(args) => query_suite::run(args, true),
        Suite::Lifecycle(args) => lifecycle_suite::run(args),
        Suite::Agent(args) => agent_suite::run(args),
        Suite::Symbolize(args) => symbolize_suite::run(args),
        Suite::Control(args) => control_suite::run(args),
        Suite::Ui(args) => ui_suite::run(args),
        Suite::Fleet(args) => fleet_suite::run(args),
        Suite::Soak(args) => soak_suite::run(args),
        Suite::Ab(args) => ab_suite::run(args),
        Suite::Memtouch(args) => memtouch_suite::run(args),
        Suite::LifecycleStep(args) => lifecycle_suite::run_step(args),
    }
}
