//! Reproducible profiledb benchmarks.
//!
//! `cargo run -p bench --release -- <suite> [--quick]`. Each suite prints a table
//! and writes a JSON file of its figures (with machine facts and the git commit) to
//! `bench/results/`, so runs can be compared.

mod ingest_suite;
mod report;
mod storage_suite;

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
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().suite {
        Suite::Storage(args) => storage_suite::run(args),
        Suite::Ingest(args) => ingest_suite::run(args),
    }
}
