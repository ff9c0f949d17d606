//! `profiledb-agent`: the perf_event sampler that feeds profiledb.
//!
//! The crate stays small on purpose: it depends on neither the storage engine nor
//! the server, only on what it needs to sample, symbolize and push pprof.
//! Sampling itself is not built yet; the command line is fixed now so deployment
//! scripts can be written against it.

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "profiledb-agent",
    version,
    about = "Samples CPU stacks with perf_event and pushes them to profiledb"
)]
struct Cli {
    /// Base URL of the profiledb server.
    #[arg(long, default_value = "http://127.0.0.1:4040")]
    server: String,
    /// Sample only these processes (repeatable); default: the whole machine.
    #[arg(long)]
    pid: Vec<u32>,
}

fn main() {
    let cli = Cli::parse();
    eprintln!(
        "profiledb-agent: sampling is not implemented in this build yet (would push to {} for {}).",
        cli.server,
        if cli.pid.is_empty() {
            "the whole machine".to_string()
        } else {
            format!("pids {:?}", cli.pid)
        }
    );
    std::process::exit(2);
}
