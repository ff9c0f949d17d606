//! `profiledb`: the continuous-profiling database server and its admin commands.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use profiledb::memory::{self, MemoryPlan};
use profiledb::time::{format_duration, format_max_age, human_value, parse_max_age, rfc3339};
use profiledb::{shutdown_signal, ServeOptions, Server};
use profiledb_storage::{FsyncPolicy, StorageError, Store, StoreConfig, TenantId, TimeRange};

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

// Parsed once at start-up and matched at once: the size of `Serve` costs nothing.
#[allow(clippy::large_enum_variant)]
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
        /// Memory budget in MiB shared by the head, caches, queries, ingest and the
        /// WAL writer (see docs/operations.md for the split). Default: half the
        /// machine's memory (the smaller of MemTotal and the cgroup limit).
        #[arg(long)]
        memory_mb: Option<u64>,
        /// Head memory budget in MiB before partitions are flushed early; it bounds
        /// the WAL on disk too. Default: 25% of --memory-mb.
        #[arg(long)]
        head_max_mb: Option<u64>,
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
        /// Query result cache size in MiB (0 disables it): a quarter for whole
        /// answers, the rest for merge and group-by parts. Default: 10% of
        /// --memory-mb.
        #[arg(long)]
        query_cache_mb: Option<u64>,
        /// Decoded segments kept in memory for queries, in MiB. A decoded segment
        /// takes about 9x its file size; queries over more than fit reload them.
        /// Default: 25% of --memory-mb.
        #[arg(long)]
        segment_cache_mb: Option<u64>,
        /// Memory for running queries in MiB: a quarter bounds the shared frame
        /// tree, the rest is reserved by queries as they run (a merge reserves its
        /// tree budget; more wait, then get 503). Default: 20% of --memory-mb.
        #[arg(long)]
        query_memory_mb: Option<u64>,
        /// Memory for uploads being decoded in MiB (about 4x their bodies); past it
        /// uploads get 429. Default: 6% of --memory-mb.
        #[arg(long)]
        ingest_memory_mb: Option<u64>,
        /// Most a compaction merge holds in memory, in MiB (the merged output so
        /// far and the source being added); bigger merges are left as they are
        /// (reported with the reason). Default: 10% of --memory-mb.
        #[arg(long)]
        compaction_memory_mb: Option<u64>,
        /// Queries running longer than this many seconds fail with 503.
        #[arg(long, default_value_t = 60)]
        query_timeout_secs: u64,
        /// `/ready` answers 503 ("warming") until the segments holding the last
        /// day are decoded after a start, at most this many seconds; queries are
        /// answered meanwhile, the first ones over recent data slower. 0: ready
        /// as soon as the store is open.
        #[arg(long, default_value_t = 30)]
        ready_warm_up_secs: u64,
        /// Bearer token required by the /api/v1/admin endpoints (open when unset).
        #[arg(long)]
        admin_token: Option<String>,
        #[command(flatten)]
        debuginfo: profiledb::debuginfo::DebuginfoArgs,
        /// Minutes between background compaction, downsampling and retention runs
        /// (0 disables them).
        #[arg(long, default_value_t = 10)]
        compaction_interval_minutes: u64,
        /// Merge an open partition's segments once this many of one level have
        /// gathered (early flushes of a busy hour), right after the flush that
        /// completes them, so queries of the open hour read a few segments, not one
        /// per flush (below 2: off; off too with --compaction-interval-minutes 0).
        #[arg(long, default_value_t = 4)]
        open_merge_segments: usize,
        /// Largest estimated decoded size in MiB of one such merge (16 bytes a row
        /// plus the files' bytes); bigger tiers, from data that does not repeat,
        /// wait for the merge of the whole partition after the hour.
        #[arg(long, default_value_t = 64)]
        open_merge_max_mb: u64,
        /// Alert rules to store at start (YAML; replaces stored rules of the same
        /// name). An invalid file stops the server with the reason.
        #[arg(long, value_name = "FILE")]
        rules: Option<PathBuf>,
        /// Prometheus Alertmanager base URL; alerts go to <URL>/api/v2/alerts.
        #[arg(long, value_name = "URL")]
        alertmanager_url: Option<String>,
        /// URL receiving alert notifications as JSON (one POST per firing and per
        /// resolved alert).
        #[arg(long, value_name = "URL")]
        alert_webhook_url: Option<String>,
        /// Base URL of this server in the links alerts carry (default
        /// http://<listen address>).
        #[arg(long, value_name = "URL")]
        external_url: Option<String>,
        #[command(flatten)]
        tenancy: profiledb::tenancy::cli::TenancyArgs,
        #[command(flatten)]
        cluster: profiledb::cluster::ClusterArgs,
        /// Seed of the fleet controller's machine sampling: servers with the same
        /// seed choose the same machines in each period.
        #[arg(long, default_value_t = 0)]
        control_seed: u64,
        /// Agents (hosts) the fleet controller remembers; a new host past it gets 429
        /// until an agent has been silent for a day.
        #[arg(long, default_value_t = 100_000)]
        control_max_agents: usize,
    },
    /// Debug files for server-side symbolization.
    Debuginfo {
        #[command(subcommand)]
        command: profiledb::debuginfo::cli::DebuginfoCommand,
    },
    /// Manage the auth file: tenants and their tokens.
    Auth {
        #[command(subcommand)]
        command: profiledb::tenancy::cli::AuthCommand,
    },
    /// Print the functions whose share moved most between two time ranges, with the
    /// Manhattan distance, entropies and sample counts (asks a running server).
    ///
    /// Times are RFC 3339 (2026-01-02T15:04:05Z), unix seconds/ms, or relative to now
    /// (now-2h). Example:
    ///   profiledb diff --selector '{service_name="api"}' \
    ///     --base-from now-25h --base-until now-24h --compare-from now-1h
    #[command(verbatim_doc_comment)]
    Diff {
        /// The server to ask.
        #[arg(long, default_value = "http://127.0.0.1:4040")]
        server: String,
        /// Profile type id.
        #[arg(long, default_value = "process_cpu:cpu:nanoseconds:cpu:nanoseconds")]
        profile_type: String,
        /// Label selector, e.g. '{service_name="api"}'.
        #[arg(long, default_value = "")]
        selector: String,
        /// Start of the base range.
        #[arg(long)]
        base_from: String,
        /// End of the base range.
        #[arg(long)]
        base_until: String,
        /// Start of the compare range.
        #[arg(long)]
        compare_from: String,
        /// End of the compare range (default now).
        #[arg(long, default_value = "now")]
        compare_until: String,
        /// Rows (and the k of the Manhattan distance).
        #[arg(long, default_value_t = 10)]
        top: usize,
        /// Tenant (X-Scope-OrgID).
        #[arg(long)]
        tenant: Option<String>,
        /// Print the server's JSON answer instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Ask a running server for a fleet analysis: hottest shared code, CPI per
    /// (service, platform), the platform assignment, or variance hunting. Example:
    ///   profiledb fleet hottest --param 'query=process_cpu:cpu:nanoseconds:cpu:nanoseconds{}' \
    ///     --param from=now-1d --param price_per_core_hour=0.05
    #[command(verbatim_doc_comment)]
    Fleet(profiledb::fleet_cli::FleetArgs),
    /// Compact (and downsample) the segments of a data directory offline, merging
    /// UTC days over for two hours into day blocks, the 6-hour parts of a day not
    /// yet over into part blocks, and weeks over into wide blocks (for tenants
    /// kept 28 days or more). Refuses to run while a server uses the directory.
    Compact {
        /// Data directory of a stopped server.
        #[arg(long, default_value = "./data")]
        data_dir: PathBuf,
        /// Only this tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// Only partitions overlapping [start, end): start, in milliseconds since the
        /// epoch.
        #[arg(long)]
        start_ms: Option<i64>,
        /// Only partitions overlapping [start, end): end (exclusive), in milliseconds
        /// since the epoch.
        #[arg(long)]
        end_ms: Option<i64>,
        /// Time partition width the data was written with, in minutes.
        #[arg(long, default_value_t = 60)]
        partition_minutes: i64,
        /// Do not downsample old data (merge only).
        #[arg(long)]
        no_downsample: bool,
        /// Plan blocks and downsampling as if the clock read this (milliseconds
        /// since the epoch), e.g. to lay out a copy of a directory as a server
        /// would have at that time.
        #[arg(long)]
        as_of_ms: Option<i64>,
    },
    /// List the segments of a data directory offline (times in UTC).
    Segments {
        /// Data directory of a stopped server.
        #[arg(long, default_value = "./data")]
        data_dir: PathBuf,
        /// Only this tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// Time partition width the data was written with, in minutes.
        #[arg(long, default_value_t = 60)]
        partition_minutes: i64,
    },
    /// Set a tenant's maximum data age and delete what is older, offline.
    Retention {
        /// Data directory of a stopped server.
        #[arg(long, default_value = "./data")]
        data_dir: PathBuf,
        /// The tenant whose limit changes (`anonymous` when clients send no
        /// X-Scope-OrgID); a tenant with no data gets a warning.
        #[arg(long)]
        tenant: String,
        /// Maximum age, e.g. 30d, 12h, 90m; `forever` removes the limit.
        #[arg(long)]
        max_age: String,
        /// List the segments the age would delete, and change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Time partition width the data was written with, in minutes.
        #[arg(long, default_value_t = 60)]
        partition_minutes: i64,
    },
}

/// Exit code when the data directory is held by another process.
const EXIT_LOCKED: i32 = 3;

/// Opens a store for an offline command (no background threads beyond the writer
/// and flusher); exits with a clear message if a server holds the directory.
fn open_offline(dir: &Path, partition_minutes: i64, downsample: bool) -> anyhow::Result<Store> {
    let cfg = StoreConfig {
        partition_ms: partition_minutes.saturating_mul(60_000),
        background_flush: false,
        background_compaction: false,
        downsample: if downsample {
            profiledb_storage::DownsampleRule::defaults()
        } else {
            Vec::new()
        },
        ..StoreConfig::default()
    };
    cfg.validate().context("invalid options")?;
    if !dir.is_dir() {
        anyhow::bail!("{} is not a data directory", dir.display());
    }
    match Store::open(dir, cfg) {
        Ok(s) => Ok(s),
        Err(StorageError::Locked(d)) => {
            eprintln!(
                "error: {} is in use by another process (a running profiledb server holds its LOCK file).\n\
                 Stop the server or use its admin API (/api/v1/admin/...) instead.",
                d.display()
            );
            std::process::exit(EXIT_LOCKED);
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!("cannot open {}", dir.display()))),
    }
}

fn tenant_arg(t: Option<&str>) -> anyhow::Result<Option<TenantId>> {
    t.map(|t| TenantId::new(t).map_err(|e| anyhow::anyhow!("invalid tenant: {e}")))
        .transpose()
}

fn mib(b: u64) -> String {
    format!("{:.2} MiB", b as f64 / (1 << 20) as f64)
}

fn cmd_compact(
    dir: &Path,
    tenant: Option<&str>,
    range: Option<TimeRange>,
    partition_minutes: i64,
    downsample: bool,
    as_of_ms: Option<i64>,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let tenant = tenant_arg(tenant)?;
    let store = open_offline(dir, partition_minutes, downsample)?;
    // Data still in the WAL becomes segments first, so it is compacted too.
    store.flush().context("flushing the WAL")?;
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} compacting [{bar:40}] {pos}/{len} partitions {msg} ({elapsed})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    let now = as_of_ms.unwrap_or_else(profiledb_storage::now_ms);
    let report = store.compact_at(tenant.as_ref(), range, now, &|p| {
        bar.set_length(p.partitions_total as u64);
        bar.set_position(p.partitions_done as u64);
        bar.set_message(format!("{} / {}", mib(p.bytes_done), mib(p.bytes_total)));
    })?;
    bar.finish_and_clear();
    store.shutdown()?;
    println!(
        "compacted {} partitions in {:.2} s",
        report.compacted.len(),
        started.elapsed().as_secs_f64()
    );
    println!(
        "segments: {} -> {}",
        report.segments_before, report.segments_after
    );
    println!(
        "bytes:    {} ({}) -> {} ({})",
        report.bytes_before,
        mib(report.bytes_before),
        report.bytes_after,
        mib(report.bytes_after)
    );
    let downsampled = report
        .compacted
        .iter()
        .filter(|c| c.step_ms_after != c.step_ms_before)
        .count();
    if downsampled > 0 {
        println!("downsampled partitions: {downsampled}");
    }
    for s in &report.skipped {
        println!(
            "skipped {} partition {}: {}",
            s.tenant, s.partition_start_ms, s.reason
        );
    }
    Ok(())
}

fn cmd_segments(dir: &Path, tenant: Option<&str>, partition_minutes: i64) -> anyhow::Result<()> {
    let tenant = tenant_arg(tenant)?;
    let store = open_offline(dir, partition_minutes, false)?;
    let segs: Vec<_> = store
        .segments()
        .into_iter()
        .filter(|m| tenant.as_ref().is_none_or(|t| *t == m.tenant))
        .collect();
    println!(
        "{:>8} {:<16} {:<20} {:<20} {:>6} {:>5} {:>11} {:>8} {:>10}",
        "id", "tenant", "start (UTC)", "end (UTC)", "step", "level", "size", "series", "samples"
    );
    for m in &segs {
        println!(
            "{:>8} {:<16} {:<20} {:<20} {:>6} {:>5} {:>11} {:>8} {:>10}",
            m.id,
            m.tenant.as_str(),
            utc(m.min_time_ms),
            utc(m.max_time_ms + m.step_ms),
            format_duration(m.step_ms),
            m.level,
            human_value(m.size_bytes as f64, "bytes"),
            m.series,
            m.rows
        );
    }
    let bytes: u64 = segs.iter().map(|m| m.size_bytes).sum();
    println!(
        "{} segments, {} bytes ({})",
        segs.len(),
        bytes,
        human_value(bytes as f64, "bytes")
    );
    store.close_without_flush();
    Ok(())
}

/// `2026-11-23 16:05:00` (UTC, seconds).
fn utc(ms: i64) -> String {
    let t = rfc3339(ms);
    format!("{} {}", &t[..10], &t[11..19])
}

fn cmd_retention(
    dir: &Path,
    tenant: &str,
    max_age: &str,
    dry_run: bool,
    partition_minutes: i64,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let tenant = TenantId::new(tenant).map_err(|e| anyhow::anyhow!("invalid tenant: {e}"))?;
    let age = parse_max_age("--max-age", max_age)?;
    let store = open_offline(dir, partition_minutes, false)?;
    let preview = profiledb::retention::preview(&store, &tenant, age, profiledb_storage::now_ms());
    if let Some(w) = &preview.warning {
        eprintln!("warning: {w} in {}", dir.display());
    }
    let doomed = &preview.expired;
    let age_text = format_max_age(age);
    if dry_run {
        store.close_without_flush();
        println!(
            "dry run: tenant {tenant} with max age {age_text} would delete {} segments ({}); nothing changed",
            doomed.len(),
            human_value(preview.bytes() as f64, "bytes")
        );
        for m in doomed {
            println!(
                "  segment {:>8}  {} .. {}  {}",
                m.id,
                utc(m.min_time_ms),
                utc(m.max_time_ms + m.step_ms),
                human_value(m.size_bytes as f64, "bytes")
            );
        }
        return Ok(());
    }
    let s = store.set_retention(
        &tenant,
        age.map(|ms| Duration::from_millis(ms.unsigned_abs())),
    )?;
    let spinner = ProgressBar::new_spinner();
    spinner.set_message("deleting expired segments");
    spinner.enable_steady_tick(Duration::from_millis(100));
    let r = store.apply_retention()?;
    spinner.finish_and_clear();
    store.shutdown()?;
    match s.max_age_ms {
        Some(ms) => println!("tenant {tenant}: max age {}", format_duration(ms)),
        None => println!("tenant {tenant}: data kept forever"),
    }
    println!(
        "deleted {} segments ({}) in {:.2} s",
        r.deleted.len(),
        human_value(r.bytes_deleted as f64, "bytes"),
        started.elapsed().as_secs_f64()
    );
    println!("segments: {} -> {}", r.segments_before, r.segments_after);
    Ok(())
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        // object_store logs each retried request at info; the failure that
        // matters is logged once by the role that saw it.
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,object_store=warn"));
    // Logs go to stderr, so command output on stdout (tables, JSON) stays clean, and
    // carry colour codes only when a person watches a terminal.
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
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
            memory_mb,
            head_max_mb,
            partition_minutes,
            max_body_mb,
            ingest_queue,
            max_future_skew_secs,
            ingestion_window_secs,
            query_cache_mb,
            segment_cache_mb,
            query_memory_mb,
            ingest_memory_mb,
            compaction_memory_mb,
            query_timeout_secs,
            ready_warm_up_secs,
            admin_token,
            debuginfo,
            compaction_interval_minutes,
            open_merge_segments,
            open_merge_max_mb,
            rules,
            alertmanager_url,
            alert_webhook_url,
            external_url,
            tenancy,
            cluster,
            control_seed,
            control_max_agents,
        } => {
            let blocks = cluster.block_policy()?;
            let cluster = cluster.resolve()?;
            let rules = match &rules {
                None => Vec::new(),
                Some(path) => {
                    let text = std::fs::read_to_string(path)
                        .with_context(|| format!("cannot read rules file {}", path.display()))?;
                    profiledb::alerts::rule::parse_rules_file(&text).map_err(|e| {
                        anyhow::anyhow!("invalid rules file {}: {e}", path.display())
                    })?
                }
            };
            let nonempty = |s: Option<String>| s.filter(|s| !s.trim().is_empty());
            let mut plan =
                MemoryPlan::split(memory_mb.map_or_else(memory::default_total, |m| m << 20));
            // A part's own flag wins over its share.
            let mib = |flag: Option<u64>, share: u64| flag.map_or(share, |m| m << 20);
            plan.head = mib(head_max_mb, plan.head);
            plan.query = mib(query_memory_mb, plan.query);
            plan.segment_cache = mib(segment_cache_mb, plan.segment_cache);
            plan.compaction = mib(compaction_memory_mb, plan.compaction);
            plan.ingest = mib(ingest_memory_mb, plan.ingest);
            plan.result_cache = mib(query_cache_mb, plan.result_cache);
            tracing::info!(
                total_mb = plan.total >> 20,
                head_mb = plan.head >> 20,
                query_memory_mb = plan.query >> 20,
                "memory budget"
            );
            let store = StoreConfig {
                fsync: match fsync {
                    Fsync::Always => FsyncPolicy::Always,
                    Fsync::Interval => FsyncPolicy::Interval { ms: 100 },
                    Fsync::Never => FsyncPolicy::Never,
                },
                partition_ms: partition_minutes * 60_000,
                background_compaction: compaction_interval_minutes > 0,
                compaction_interval: Duration::from_secs(
                    compaction_interval_minutes.saturating_mul(60),
                ),
                open_merge_segments,
                open_merge_max_bytes: open_merge_max_mb.saturating_mul(1 << 20),
                blocks,
                ..StoreConfig::default()
            };
            let defaults = ServeOptions::default();
            let mut opts = ServeOptions {
                listen,
                data_dir,
                store,
                ingest: profiledb::pipeline::PipelineConfig {
                    queue: ingest_queue,
                    max_future_skew_ms: max_future_skew_secs.saturating_mul(1000),
                    max_age_ms: ingestion_window_secs.map(|s| s.saturating_mul(1000)),
                    ..defaults.ingest
                },
                max_body_bytes: max_body_mb << 20,
                // Sized with the rest of the budget below.
                query_cache_bytes: 0,
                query_memory_bytes: 0,
                query_limits: profiledb_storage::QueryLimits {
                    timeout: std::time::Duration::from_secs(query_timeout_secs),
                    ..defaults.query_limits
                },
                query_queue_wait: defaults.query_queue_wait,
                admin_token: admin_token.filter(|t| !t.is_empty()),
                alerts: profiledb::alerts::AlertOptions {
                    alertmanager_url: nonempty(alertmanager_url),
                    webhook_url: nonempty(alert_webhook_url),
                    external_url: nonempty(external_url),
                    rules,
                    resend_delay: None,
                },
                tenancy: tenancy.options()?,
                cluster,
                control: profiledb::control::ControlOptions {
                    seed: control_seed,
                    max_agents: control_max_agents.max(1),
                },
                ready_warm_up: Duration::from_secs(ready_warm_up_secs),
                debuginfo: debuginfo.options(),
            };
            plan.apply(&mut opts);
            opts.store.validate().context("invalid storage options")?;
            let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
            rt.block_on(async {
                let server = Server::bind(opts).await?;
                server.run(shutdown_signal()).await
            })
        }
        Command::Auth { command } => command.run(),
        Command::Debuginfo { command } => command.run(),
        Command::Compact {
            data_dir,
            tenant,
            start_ms,
            end_ms,
            partition_minutes,
            no_downsample,
            as_of_ms,
        } => {
            let range = (start_ms.is_some() || end_ms.is_some())
                .then(|| TimeRange::new(start_ms.unwrap_or(i64::MIN), end_ms.unwrap_or(i64::MAX)));
            cmd_compact(
                &data_dir,
                tenant.as_deref(),
                range,
                partition_minutes,
                !no_downsample,
                as_of_ms,
            )
        }
        Command::Segments {
            data_dir,
            tenant,
            partition_minutes,
        } => cmd_segments(&data_dir, tenant.as_deref(), partition_minutes),
        Command::Retention {
            data_dir,
            tenant,
            max_age,
            dry_run,
            partition_minutes,
        } => cmd_retention(&data_dir, &tenant, &max_age, dry_run, partition_minutes),
        Command::Fleet(args) => {
            let answer = profiledb::fleet_cli::ask(&args)?;
            match profiledb::fleet_cli::table(args.analysis, &answer) {
                Some(t) if !args.json => print!("{t}"),
                _ => println!("{answer:#}"),
            }
            Ok(())
        }
        Command::Diff {
            server,
            profile_type,
            selector,
            base_from,
            base_until,
            compare_from,
            compare_until,
            top,
            tenant,
            json,
        } => {
            let now = profiledb_storage::now_ms();
            let t = |what: &'static str, v: &str| {
                profiledb::time::parse_instant(what, v, now).map_err(anyhow::Error::msg)
            };
            let req = profiledb::cli::DiffArgs {
                server,
                profile_type,
                selector,
                base: (
                    t("--base-from", &base_from)?,
                    t("--base-until", &base_until)?,
                ),
                compare: (
                    t("--compare-from", &compare_from)?,
                    t("--compare-until", &compare_until)?,
                ),
                top,
                tenant,
            };
            let answer = profiledb::cli::diff(&req)?;
            if json {
                println!("{answer:#}");
            } else {
                print!("{}", profiledb::cli::diff_table(&req, &answer));
            }
            Ok(())
        }
    }
}
