//! `profiledb`: the continuous-profiling database server and its admin commands.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;

use clap::{Parser, Subcommand, ValueEnum};
use profiledb::{shutdown_signal, ServeOptions, Server};
use profiledb_storage::{FsyncPolicy, StoreConfig};

// glibc's allocator returns freed memory to the kernel between uploads and pays for
// it in page faults (~40% of pprof decode time measured); mimalloc keeps it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "profiledb",
    version,
    about = "A time-series database for continuous profiling",
    long_about = "profiledb stores CPU and memory profiles from whole fleets and answers \
                  flame graph, group-by and diff queries over them.\n\n\
                  Start it with `profiledb serve`: data goes to ./data, the API listens on \
                  http://127.0.0.1:4040."
)]
struct Cli {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum Fsync {
    /// fsync every group commit before acknowledging (default).
    Always,
    /// fsync at most every 100 ms (a machine crash can lose the last 100 ms).
    Interval,
    /// Never fsync (tests and benchmarks only).
    Never,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server.
    Serve {
        /// Directory holding the WAL, segments and catalog (created if missing).
        #[arg(long, default_value = "./data")]
        data_dir: PathBuf,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:4040")]
        listen: SocketAddr,
        /// WAL durability policy.
        #[arg(long, value_enum, default_value_t = Fsync::Always)]
        fsync: Fsync,
        /// Head memory budget in MiB before partitions are flushed early.
        #[arg(long, default_value_t = 512)]
        head_max_mb: usize,
        /// Time partition width in minutes (one segment never spans two).
        #[arg(long, default_value_t = 60)]
        partition_minutes: i64,
        /// Largest request body accepted, in MiB, before decompression (413 above).
        #[arg(long, default_value_t = 64)]
        max_body_mb: usize,
        /// Uploads waiting for a decoder before clients get 429.
        #[arg(long, default_value_t = 64)]
        ingest_queue: usize,
        /// Refuse samples more than this many seconds in the future.
        #[arg(long, default_value_t = 600)]
        max_future_skew_secs: i64,
        /// Refuse samples older than this many seconds (off by default: history
        /// imports are welcome).
        #[arg(long)]
        ingestion_window_secs: Option<i64>,
        /// Query result cache size in MiB (0 disables it).
        #[arg(long, default_value_t = 256)]
        query_cache_mb: u64,
        /// Queries running longer than this many seconds fail with 503.
        #[arg(long, default_value_t = 60)]
        query_timeout_secs: u64,
    },
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match cli.command {
        Command::Serve {
            data_dir,
            listen,
            fsync,
            head_max_mb,
            partition_minutes,
            max_body_mb,
            ingest_queue,
            max_future_skew_secs,
            ingestion_window_secs,
            query_cache_mb,
            query_timeout_secs,
        } => {
            let store = StoreConfig {
                fsync: match fsync {
                    Fsync::Always => FsyncPolicy::Always,
                    Fsync::Interval => FsyncPolicy::Interval { ms: 100 },
                    Fsync::Never => FsyncPolicy::Never,
                },
                head_max_bytes: head_max_mb << 20,
                partition_ms: partition_minutes * 60_000,
                ..StoreConfig::default()
            };
            store.validate().context("invalid storage options")?;
            let defaults = ServeOptions::default();
            let opts = ServeOptions {
                listen,
                data_dir,
                store,
                ingest: profiledb_ingest::PipelineConfig {
                    queue: ingest_queue,
                    max_future_skew_ms: max_future_skew_secs.saturating_mul(1000),
                    max_age_ms: ingestion_window_secs.map(|s| s.saturating_mul(1000)),
                    ..defaults.ingest
                },
                max_body_bytes: max_body_mb << 20,
                query_cache_bytes: query_cache_mb << 20,
                query_limits: profiledb_storage::query::cache::QueryLimits {
                    timeout: std::time::Duration::from_secs(query_timeout_secs),
                    ..defaults.query_limits
                },
            };
            let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
            rt.block_on(async {
                let server = Server::bind(opts).await?;
                server.run(shutdown_signal()).await
            })
        }
    }
}
