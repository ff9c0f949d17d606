//! The cluster against the single node, on one machine: `profiledb serve` processes
//! over a real S3-protocol server (moto, from `target/moto-venv`, installed by
//! `.ci/run`), fed the same generated fleet.
//!
//! Measured: ingest rate through one and two writers (`--ack bucket`, so every
//! acknowledged push is in the bucket) against the single node; bucket requests and
//! bytes per ingested profile; a fresh querier's time to ready (its first index
//! sync and downloads) and its query latency, cold and warm, beside the single
//! node's; its first label values and time series (GETs and bytes: segment
//! summaries only, no body); bucket objects and bytes after compaction; and a
//! fresh querier's merge over whole past days, from hourly segments and from day
//! blocks (`blocks.rs`); index bytes written per segment byte uploaded, against
//! what rewriting the whole index on every change (the release before the log)
//! would have written for the same changes. With `--faults`, the fault table
//! instead (`faults.rs`). Skips with a message where moto is absent (fails instead
//! with `PROFILEDB_REQUIRE_EXTERNAL=1`).

#[path = "../../storage/tests/support/moto.rs"]
mod moto;
use crate::external;

mod blocks;
mod faults;
mod split;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::json;

use crate::fleet::{Fleet, FleetConfig};
use crate::report;
use crate::server::{push_patiently, wait_ready, workspace_binary};

const HOUR: i64 = 3_600_000;
const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";

#[derive(clap::Args)]
pub struct Args {
    /// A small fleet and few queries (CI: checks the suite runs).
    #[arg(long)]
    quick: bool,
    #[arg(long, default_value_t = 40)]
    hosts: usize,
    #[arg(long, default_value_t = 5)]
    services: usize,
    /// Pushes per host (one every 10 s, ending now).
    #[arg(long, default_value_t = 30)]
    rounds: usize,
    /// Concurrent clients against the single node.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Concurrent clients against the cluster's writers: with `--ack bucket` a
    /// push is answered about one upload interval later, so throughput needs
    /// more pushes in flight.
    #[arg(long, default_value_t = 64)]
    cluster_clients: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Whole past days pushed (one push per host every 30 min) to compare hourly
    /// segments with day blocks.
    #[arg(long, default_value_t = 7)]
    block_days: i64,
    /// Run the fault table instead: a writer and a compactor killed at every
    /// step, the store refusing, hanging, slowing, resetting and restarting.
    #[arg(long)]
    faults: bool,
    /// Cycles of each fault kind with --faults.
    #[arg(long, default_value_t = 3)]
    fault_cycles: usize,
    /// Run the query-split table instead: a fleet of --hosts hosts and
    /// --services services, one 10 s push per host per simulated hour over
    /// --split-hours hours, through two writers; then 1, 2 and 4 queriers answer
    /// the fleet flame graph, a group-by and a diff (`cluster_suite/split.rs`).
    #[arg(long)]
    split: bool,
    /// Simulated hours of the --split fleet.
    #[arg(long, default_value_t = 6)]
    split_hours: i64,
}

/// One `profiledb serve` process.
pub(crate) struct Node {
    child: Child,
    pub(crate) url: String,
}

impl Node {
    pub(crate) fn start(bin: &Path, dir: &Path, flags: &[String]) -> anyhow::Result<Node> {
        Self::start_env(bin, dir, flags, &[])
    }

    /// [`Node::start`] with environment variables (a fault point armed). The
    /// log is appended to, across restarts on the same directory.
    pub(crate) fn start_env(
        bin: &Path,
        dir: &Path,
        flags: &[String],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Node> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.with_extension("log"))?;
        let child = Command::new(bin)
            .args(["serve", "--data-dir"])
            .arg(dir)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(flags)
            .env("AWS_ACCESS_KEY_ID", "bench")
            .env("AWS_SECRET_ACCESS_KEY", "bench")
            .env("AWS_REGION", "us-east-1")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting profiledb")?;
        let url = format!("http://127.0.0.1:{port}");
        wait_ready(&url, Instant::now(), Duration::from_secs(120))?;
        Ok(Node { child, url })
    }

    /// Whether the process has exited (an armed fault aborted it).
    pub(crate) fn exited(&mut self) -> bool {
        self.child.try_wait().is_ok_and(|s| s.is_some())
    }

    pub(crate) fn metric(&self, name: &str) -> anyhow::Result<f64> {
        let client = reqwest::blocking::Client::new();
        Ok(crate::server::metric(&client, &self.url, name)?.unwrap_or(0.0))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Pushes every (host, round) through `urls` round-robin with `clients`
/// threads; returns (seconds, values pushed).
fn ingest(
    fleet: &Arc<Fleet>,
    args: &Args,
    t_end: i64,
    urls: &[String],
    clients: usize,
) -> anyhow::Result<(f64, u64)> {
    let jobs: Vec<(usize, i64)> = (0..args.rounds)
        .flat_map(|r| (0..args.hosts).map(move |h| (h, t_end - (args.rounds - r) as i64 * 10_000)))
        .collect();
    ingest_jobs(fleet, &jobs, urls, clients)
}

/// Pushes the profile of each (host, time) in `jobs` through `urls` round-robin
/// with `clients` threads, waiting out 429s (the default tenant rate is 1,000
/// profiles/s, which many clients outrun); returns (seconds, values pushed).
pub(crate) fn ingest_jobs(
    fleet: &Arc<Fleet>,
    jobs: &[(usize, i64)],
    urls: &[String],
    clients: usize,
) -> anyhow::Result<(f64, u64)> {
    let bodies: Vec<_> = jobs
        .iter()
        .map(|&(h, t)| fleet.host_push(h, t, false, None))
        .collect();
    let values: u64 = bodies.iter().map(|(_, v)| v).sum();
    let bodies = Arc::new(bodies);
    let next = Arc::new(AtomicUsize::new(0));
    let t = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let (bodies, next, urls) = (bodies.clone(), next.clone(), urls.to_vec());
            std::thread::spawn(move || -> anyhow::Result<()> {
                let client = reqwest::blocking::Client::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((req, _)) = bodies.get(i) else {
                        return Ok(());
                    };
                    push_patiently(&client, &urls[(i + c) % urls.len()], req)?;
                }
            })
        })
        .collect();
    for th in threads {
        th.join()
            .map_err(|_| anyhow::anyhow!("client panicked"))??;
    }
    Ok((t.elapsed().as_secs_f64(), values))
}

/// One cold summary query on a fresh querier: its time, and the bucket GETs
/// (whole or ranged) and bytes it cost. Label values and time series read only
/// each segment's summary sections, never a body.
fn cold_summary_query(
    node: &Node,
    path: &str,
    params: &[(&str, String)],
) -> anyhow::Result<(f64, f64, f64)> {
    // Whole and ranged GETs.
    let requests = |n: &Node| n.metric("profiledb_bucket_get_requests_total");
    let (gets, bytes) = (
        requests(node)?,
        node.metric("profiledb_bucket_read_bytes_total")?,
    );
    let t = Instant::now();
    let r = reqwest::blocking::Client::new()
        .get(format!("{}{path}", node.url))
        .query(params)
        .send()?;
    if !r.status().is_success() {
        bail!("{path} at {}: {}", node.url, r.status());
    }
    r.bytes()?;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    Ok((
        ms,
        requests(node)? - gets,
        node.metric("profiledb_bucket_read_bytes_total")? - bytes,
    ))
}

/// p50 in ms of `n` runs of a merge over the last hour, and the total it answers.
fn merge_p50(url: &str, t_end: i64, n: usize) -> anyhow::Result<(f64, f64, i64)> {
    merge_range_p50(url, t_end - HOUR, t_end + 60_000, n)
}

/// The first run's and the median run's ms of `n` merges over `[from, until)`,
/// and the total they answer. Each run ends a second later than the one before
/// (a range the result cache has not seen).
pub(crate) fn merge_range_p50(
    url: &str,
    from: i64,
    until: i64,
    n: usize,
) -> anyhow::Result<(f64, f64, i64)> {
    let client = reqwest::blocking::Client::new();
    let mut times = Vec::new();
    let mut total = 0;
    for i in 0..n {
        let t = Instant::now();
        let r = client
            .get(format!("{url}/api/v1/merge"))
            .query(&[
                ("query", format!("{CPU}{{}}")),
                ("from", from.to_string()),
                ("until", (until + i as i64 * 1000).to_string()),
                ("format", "folded".into()),
            ])
            .send()?;
        if !r.status().is_success() {
            bail!("merge at {url}: {}", r.status());
        }
        total = r
            .text()?
            .lines()
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<i64>().ok())
            .sum();
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let first = times[0];
    times.sort_by(f64::total_cmp);
    Ok((first, times[times.len() / 2], total))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let args = if args.quick {
        Args {
            hosts: 8,
            services: 3,
            rounds: 6,
            clients: 4,
            cluster_clients: 16,
            block_days: 2,
            ..args
        }
    } else {
        args
    };
    if args.faults {
        return faults::run(if args.quick { 1 } else { args.fault_cycles }, args.quick);
    }
    let Some(s3) = moto::MotoServer::start() else {
        println!("cluster suite skipped: no S3-protocol server (moto) to run against");
        return Ok(());
    };
    if args.split {
        return run_split(&args, &s3);
    }
    let bin = workspace_binary("profiledb", "profiledb")?;
    let tmp = tempfile::tempdir()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    let t_end = now / 10_000 * 10_000;
    let fleet = Arc::new(Fleet::new(FleetConfig {
        seed: args.seed,
        services: args.services,
        stacks_per_service: 200,
        draws_per_profile: 200,
        zipf_s: 1.1,
        deploy_ms: t_end - HOUR,
    }));
    let profiles = (args.hosts * args.rounds * args.services) as f64;
    let endpoint = s3.endpoint();
    let cluster = |prefix: &str, role: &str| role_flags(&s3.config(prefix).url, &endpoint, role);
    let mem = vec!["--memory-mb".to_string(), "512".to_string()];

    // Single node.
    let single = Node::start(&bin, &tmp.path().join("single"), &mem)?;
    let (single_s, values) = ingest(
        &fleet,
        &args,
        t_end,
        std::slice::from_ref(&single.url),
        args.clients,
    )?;
    let (single_cold, single_p50, single_total) = merge_p50(&single.url, t_end, 9)?;
    drop(single);

    let mut rows = Vec::new();
    let mut summary_rows = Vec::new();
    let mut index_rows = Vec::new();
    let mut figures = json!({
        "hosts": args.hosts, "services": args.services, "rounds": args.rounds,
        "clients": args.clients, "cluster_clients": args.cluster_clients, "profiles": profiles, "values": values,
        "single": {"ingest_s": single_s, "values_per_s": values as f64 / single_s,
                   "merge_first_ms": single_cold, "merge_p50_ms": single_p50},
    });
    // (writers, --ack): bucket is the default; local shows what the wait for
    // the upload costs against what the writer itself can take.
    for (writers, ack) in [(1usize, "bucket"), (2, "bucket"), (1, "local")] {
        let prefix = format!("w{writers}-{ack}");
        let mut flags = cluster(&prefix, "writer");
        flags.extend(["--ack".to_string(), ack.to_string()]);
        let ws: Vec<Node> = (0..writers)
            .map(|i| {
                Node::start(
                    &bin,
                    &tmp.path().join(format!("{prefix}-writer{i}")),
                    &flags,
                )
            })
            .collect::<anyhow::Result<_>>()?;
        let urls: Vec<String> = ws.iter().map(|w| w.url.clone()).collect();
        let (secs, _) = ingest(&fleet, &args, t_end, &urls, args.cluster_clients)?;
        if ack == "local" {
            // Acknowledged before the upload: a few upload intervals for the bucket
            // to catch up (the totals below are checked against the single node).
            std::thread::sleep(Duration::from_secs(3));
        }
        let mut puts = 0.0;
        let mut up_bytes = 0.0;
        let mut index_bytes = 0.0;
        for w in &ws {
            puts += w.metric("profiledb_bucket_put_requests_total")?;
            up_bytes += w.metric("profiledb_upload_bytes_total")?;
            index_bytes += w.metric("profiledb_bucket_index_written_bytes_total")?;
        }
        let whole = whole_index_bytes(&s3.config(&prefix))?;
        // A fresh querier: ready once its first sync downloaded the bucket.
        let t = Instant::now();
        let q = Node::start(
            &bin,
            &tmp.path().join(format!("{prefix}-querier")),
            &cluster(&prefix, "querier"),
        )?;
        let ready_ms = t.elapsed().as_secs_f64() * 1000.0;
        let ready_gets = q.metric("profiledb_bucket_get_requests_total")?;
        let ready_bytes = q.metric("profiledb_bucket_read_bytes_total")?;
        // Before any merge, so nothing is cached: summaries only.
        let window = [
            ("from", (t_end - 24 * HOUR).to_string()),
            ("until", (t_end + 60_000).to_string()),
        ];
        let (labels_ms, labels_gets, labels_bytes) = cold_summary_query(
            &q,
            "/api/v1/label_values",
            &[&window[..], &[("name", "service_name".to_string())]].concat(),
        )?;
        let (series_ms, series_gets, series_bytes) = cold_summary_query(
            &q,
            "/api/v1/timeseries",
            &[
                &window[..],
                &[
                    ("query", format!("{CPU}{{}}")),
                    ("group_by", "service_name".to_string()),
                ],
            ]
            .concat(),
        )?;
        summary_rows.push(format!(
            "| {writers} writer(s), --ack {ack} | {labels_ms:.1} ms, {labels_gets:.0} GETs, {} | {series_ms:.1} ms, {series_gets:.0} GETs, {} |",
            report::human_bytes(labels_bytes),
            report::human_bytes(series_bytes),
        ));
        let merge_gets = q.metric("profiledb_bucket_get_requests_total")?;
        let merge_bytes = q.metric("profiledb_bucket_read_bytes_total")?;
        let (cold, p50, total) = merge_p50(&q.url, t_end, 9)?;
        if total != single_total {
            bail!("the cluster with {writers} writer(s) answers {total}, the single node {single_total}");
        }
        // What the first (cold) query fetched: the bodies of the segments it read.
        let gets = q.metric("profiledb_bucket_get_requests_total")? - merge_gets;
        let down = q.metric("profiledb_bucket_read_bytes_total")? - merge_bytes;
        let segments = q.metric("profiledb_mirror_live_segments")?;
        index_rows.push(format!(
            "| {writers} writer(s), --ack {ack} | {} | {} | {:.3} | {:.3} |",
            report::human_bytes(up_bytes),
            report::human_bytes(index_bytes),
            index_bytes / up_bytes.max(1.0),
            whole / up_bytes.max(1.0),
        ));
        rows.push(format!(
            "| {writers} writer(s), --ack {ack} | {:.0} | {:.0} ms ({ready_gets:.0} GETs, {}) | {:.1} ms / {:.1} ms | {:.2} | {} | {gets:.0} GETs, {} ({segments:.0} segments) |",
            values as f64 / secs,
            ready_ms,
            report::human_bytes(ready_bytes),
            cold,
            p50,
            puts / profiles,
            report::human_bytes(up_bytes / profiles),
            report::human_bytes(down),
        ));
        figures[format!("writers_{writers}_ack_{ack}")] = json!({
            "ingest_s": secs, "values_per_s": values as f64 / secs,
            "put_requests_per_profile": puts / profiles, "uploaded_bytes_per_profile": up_bytes / profiles,
            "querier_ready_ms": ready_ms, "merge_first_ms": cold, "merge_p50_ms": p50,
            "querier_ready_get_requests": ready_gets, "querier_ready_bytes": ready_bytes,
            "first_query_get_requests": gets, "first_query_bytes": down, "live_segments": segments,
            "cold_label_values_ms": labels_ms, "cold_label_values_get_requests": labels_gets,
            "cold_label_values_bytes": labels_bytes, "cold_timeseries_ms": series_ms,
            "cold_timeseries_get_requests": series_gets, "cold_timeseries_bytes": series_bytes,
            "segment_bytes_uploaded": up_bytes, "index_bytes_written": index_bytes,
            "index_bytes_per_segment_byte": index_bytes / up_bytes.max(1.0),
            "whole_index_bytes_per_segment_byte": whole / up_bytes.max(1.0),
        });
    }
    println!(
        "cluster suite: {} hosts × {} services × {} pushes, {values} values; {} clients to the single node, {} to the writers (--ack bucket); moto on loopback",
        args.hosts, args.services, args.rounds, args.clients, args.cluster_clients
    );
    println!(
        "| setup | values/s ingested | fresh querier ready | merge 1 h first / p50 | PUTs per profile | bytes up per profile | first query fetched |"
    );
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| single node | {:.0} | | {:.1} ms / {:.1} ms | | | |",
        values as f64 / single_s,
        single_cold,
        single_p50
    );
    for r in rows {
        println!("{r}");
    }
    println!("\nIndex bytes the writers wrote (log entries) per segment byte uploaded, and what rewriting the whole index on every change (the release before the log) would have written for the same changes:");
    println!("| setup | segment bytes | index bytes | index / segment | whole-index rewrites / segment |");
    println!("|---|---|---|---|---|");
    for r in index_rows {
        println!("{r}");
    }
    println!("\nA fresh querier's first label values and time series (a day, by service; segment summaries read with ranged GETs):");
    println!("| setup | label values | time series |");
    println!("|---|---|---|");
    for r in summary_rows {
        println!("{r}");
    }
    let (block_rows, block_figures) = blocks::run(
        &bin,
        tmp.path(),
        &fleet,
        args.hosts,
        args.block_days,
        args.cluster_clients,
        cluster,
    )?;
    println!(
        "\nA fresh querier's merge over {} whole past days, one push per host every 30 min, compacted with and without day blocks:",
        args.block_days
    );
    println!("| layout | live segments | fresh querier ready | merge first / p50 | fetched: sync and 9 merges |");
    println!("|---|---|---|---|---|");
    for r in block_rows {
        println!("{r}");
    }
    figures["blocks"] = block_figures;
    let path = report::write("cluster", figures)?;
    println!("figures written to {}", path.display());
    Ok(())
}

/// What the release before the log would have written for the changes in the
/// bucket's logs: the whole index document (without what only the log keeps:
/// upload numbers and writers' marks) after every change.
fn whole_index_bytes(cfg: &profiledb_storage::BucketConfig) -> anyhow::Result<f64> {
    let bucket = profiledb_storage::Bucket::open(cfg)?;
    let mut total = 0u64;
    for tenant in bucket.tenants()? {
        bucket.fold_log(&tenant, |idx| {
            let mut doc = idx.clone();
            doc.writers.clear();
            for e in &mut doc.segments {
                e.seq = None;
            }
            total += serde_json::to_vec(&doc).map_or(0, |b| b.len() as u64);
        })?;
    }
    Ok(total as f64)
}

/// A role's flags in the cluster bench: passes every half second, compaction
/// every 2 s, a 5 s grace.
/// `--split`: the query-split table (`split.rs`).
fn run_split(args: &Args, s3: &moto::MotoServer) -> anyhow::Result<()> {
    let bin = workspace_binary("profiledb", "profiledb")?;
    let tmp = tempfile::tempdir()?;
    let hours = if args.quick { 3 } else { args.split_hours };
    let fleet = Arc::new(Fleet::new(FleetConfig {
        seed: args.seed,
        services: args.services,
        stacks_per_service: 1000,
        // 19 Hz for 10 s: one push of a host at GWP's sampling rate.
        draws_per_profile: 190,
        zipf_s: 1.1,
        deploy_ms: 0,
    }));
    let endpoint = s3.endpoint();
    let flags = |prefix: &str, role: &str| role_flags(&s3.config(prefix).url, &endpoint, role);
    let (rows, mut figures) = split::run(
        &bin,
        tmp.path(),
        &fleet,
        args.hosts,
        hours,
        args.cluster_clients,
        flags,
    )?;
    println!(
        "cluster --split: {} hosts × {} services, one 10 s push (19 Hz) per host per simulated hour, {hours} h, two writers, moto on loopback; queries asked of the first querier",
        args.hosts, args.services
    );
    println!("| queriers | query | ask | answer time | CPU, busiest querier | CPU, all queriers | per querier: bucket GETs, bytes read, CPU |");
    println!("|---|---|---|---|---|---|---|");
    for r in rows {
        println!("{r}");
    }
    figures["services"] = json!(args.services);
    let path = report::write("cluster-split", figures)?;
    println!("figures: {}", path.display());
    Ok(())
}

pub(crate) fn role_flags(url: &str, endpoint: &str, role: &str) -> Vec<String> {
    [
        "--storage",
        url,
        "--s3-endpoint",
        endpoint,
        "--role",
        role,
        "--upload-interval-ms",
        "500",
        "--sync-interval-ms",
        "500",
        "--bucket-compaction-interval-secs",
        "2",
        "--gc-grace-secs",
        "5",
        "--memory-mb",
        "512",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}
