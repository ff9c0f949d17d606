//! The `lifecycle` suite (issue 6's figures): a generated fleet over `--days`
//! simulated days (1 h partitions, 10 s steps) written through the real write path
//! (`Store::write`: WAL with fsync, head) and flushed `--segments-per-partition`
//! times per hour, so each partition holds several level-0 segments; then the real,
//! durable compaction (`Store::compact_at`: decode, merge, tmp + fsync + rename,
//! catalog, atomic swap, deletion of the sources) and downsampling to 60 s and to
//! 1 h under the default rules, with simulated clocks. Each step runs in a child
//! process of its own (`bench lifecycle-step`), which opens the store (empty segment
//! cache, so every source is read and decoded), compacts and reports its own VmHWM as
//! the step's peak memory. Afterwards the store is reopened here and checked: files
//! on disk are exactly the live segments, and merge totals per profile type and per
//! stack equal those after the flush (the suite fails otherwise).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, ensure, Context};
use indicatif::{ProgressBar, ProgressStyle};
use profiledb_storage::SegmentMeta;
use profiledb_storage::{
    Batch, BlockPolicy, CompactReport, Function, GroupByQuery, GroupKey, Labels, Location, Mapping,
    Querier, QueryLimits, Sample, Selector, SeriesSamples, Store, StoreConfig, TenantId, TimeRange,
    NAME_LABEL, PROFILE_TYPE_LABEL,
};
use serde_json::{json, Value};

use crate::fleet::{Fleet, FleetConfig};
use crate::report::{self, human_bytes};
use crate::storage_suite::{dir_bytes, stored_bytes};

mod checks;
mod data;
#[cfg(test)]
mod tests;

use checks::*;
use data::*;

const STEP_MS: i64 = 10_000;
const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;
/// Start of the simulated week: a fixed hour boundary (2023-11-14 22:00 UTC), so the
/// data, and the bytes, do not depend on when the suite runs.
const T0_MS: i64 = 1_700_000_000_000 / HOUR * HOUR;

#[derive(clap::Args)]
pub struct Args {
    /// Seed of the data generator (same seed, same data).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Simulated days of data (one 1 h partition per hour).
    #[arg(long, default_value_t = 7)]
    days: i64,
    /// Simulated hosts.
    #[arg(long, default_value_t = 6)]
    hosts: usize,
    /// Simulated services on every host.
    #[arg(long, default_value_t = 4)]
    services: usize,
    /// Distinct stacks per service.
    #[arg(long, default_value_t = 1000)]
    stacks: usize,
    /// CPU samples drawn per 10 s profile (±30 % host jitter); heap profiles draw a
    /// quarter of that once a minute.
    #[arg(long, default_value_t = 100)]
    draws: usize,
    /// Flushes per hour of data, i.e. level-0 segments per partition (divides 360).
    #[arg(long, default_value_t = 3)]
    segments_per_partition: i64,
    /// Threads generating and writing batches (one batch per host per flush interval).
    #[arg(long, default_value_t = 2)]
    writers: usize,
    /// Small run for CI: 7 days of 1 host × 1 service, 100 stacks, 20 draws, 2 segments
    /// per partition.
    #[arg(long)]
    quick: bool,
    /// Keep the data directory here (must be empty or absent) instead of a temporary one.
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

fn config(blocks: bool) -> StoreConfig {
    StoreConfig {
        // The suite decides when to flush (to get several segments per partition)
        // and compacts by hand; no background flusher or compactor. Everything else
        // — fsync always, 1 h partitions, 10 s steps, zstd 3, the 1 GiB compaction
        // budget, the default downsampling rules and day blocks — is the server's
        // default; the first compaction pass turns blocks off to measure hours.
        // Week blocks stay off: the passes measure days downsampled one by one
        // (the query suite's same-rows store measures weeks).
        background_flush: false,
        // The passes measure compaction's memory: no background warm-up filling
        // the segment cache beside it.
        warm_segment_cache: false,
        blocks: if blocks {
            BlockPolicy {
                wide_width_ms: 0,
                ..BlockPolicy::default()
            }
        } else {
            BlockPolicy::OFF
        },
        ..StoreConfig::default()
    }
}

struct Step {
    name: &'static str,
    report: CompactReport,
    seconds: f64,
    rss_before: Option<u64>,
    peak_rss: Option<u64>,
    check_seconds: f64,
    disk: Disk,
}

impl Step {
    fn input_mb_per_s(&self) -> f64 {
        self.report.bytes_before as f64 / 1e6 / self.seconds
    }
    fn json(&self) -> Value {
        let c = &self.report.compacted;
        json!({
            "partitions_rewritten": c.len(),
            "source_segments": c.iter().map(|p| p.sources.len()).sum::<usize>(),
            "rows_before": c.iter().map(|p| p.rows_before).sum::<u64>(),
            "rows_after": c.iter().map(|p| p.rows_after).sum::<u64>(),
            "segments_before": self.report.segments_before,
            "segments_after": self.report.segments_after,
            "bytes_before": self.report.bytes_before,
            "bytes_after": self.report.bytes_after,
            "seconds": self.seconds,
            "input_mb_per_second": self.input_mb_per_s(),
            "input_rows_per_second": c.iter().map(|p| p.rows_before).sum::<u64>() as f64 / self.seconds,
            "rss_before_bytes": self.rss_before,
            "peak_rss_bytes": self.peak_rss,
            "after": disk_json(&self.disk),
            "check_seconds": self.check_seconds,
            "answers_unchanged": true,
        })
    }
}

/// Arguments of the hidden `lifecycle-step` subcommand: one compaction pass in a
/// process of its own, so its VmHWM is the peak memory of that pass alone.
#[derive(clap::Args)]
pub struct StepArgs {
    /// Data directory to compact.
    #[arg(long)]
    data_dir: PathBuf,
    /// The simulated clock for downsampling decisions (ms since the epoch).
    #[arg(long, allow_hyphen_values = true)]
    now_ms: i64,
    /// Name of the pass in the report.
    #[arg(long)]
    name: String,
    /// Merge past days into day blocks (the default policy) during the pass.
    #[arg(long)]
    blocks: bool,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct StepOutcome {
    report: CompactReport,
    seconds: f64,
    rss_before: Option<u64>,
    peak_rss: Option<u64>,
}

/// The child side: open the store (empty segment cache, so every source is read and
/// decoded), compact at `now_ms` with a progress bar on stderr, close it (flushing
/// the catalog) and print the outcome as JSON on stdout.
pub fn run_step(args: StepArgs) -> anyhow::Result<()> {
    let store = Store::open(&args.data_dir, config(args.blocks))?;
    let pb = ProgressBar::new(1).with_style(
        ProgressStyle::with_template(
            "{msg} [{bar:40}] {binary_bytes}/{binary_total_bytes} of segments, {binary_bytes_per_sec}, eta {eta}",
        )?
        .progress_chars("=> "),
    );
    pb.set_message(args.name);
    let rss_before = report::own_status_bytes("VmRSS:");
    let started = Instant::now();
    let report = store.compact_at(None, None, args.now_ms, &|p| {
        pb.set_length(p.bytes_total.max(1));
        pb.set_position(p.bytes_done);
    })?;
    let seconds = started.elapsed().as_secs_f64();
    pb.finish_and_clear();
    store.shutdown()?;
    drop(store);
    let out = StepOutcome {
        report,
        seconds,
        rss_before,
        peak_rss: report::own_status_bytes("VmHWM:"),
    };
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}

/// Runs one compaction pass at the simulated clock `now` in a child process, then
/// reopens the store here and checks files and answers against `before`.
fn step(
    dir: &Path,
    name: &'static str,
    now: i64,
    before: &Answers,
    expect_steps: &[i64],
    blocks: bool,
) -> anyhow::Result<Step> {
    let exe = std::env::current_exe().context("locating the bench binary")?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("lifecycle-step");
    if blocks {
        cmd.arg("--blocks");
    }
    let out = cmd
        .arg("--data-dir")
        .arg(dir)
        .arg("--now-ms")
        .arg(now.to_string())
        .arg("--name")
        .arg(name)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running the lifecycle-step child")?;
    ensure!(
        out.status.success(),
        "{name}: child process failed: {}",
        out.status
    );
    let o: StepOutcome = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("{name}: reading the child's outcome"))?;
    let report = o.report;
    ensure!(
        report.skipped.is_empty(),
        "{name}: partitions skipped: {:?}",
        report.skipped
    );
    let (store, _) = reopen_checked(dir)?;
    let d = disk(&store.segments());
    ensure!(
        d.max_per_partition == 1,
        "{name}: a partition still has {} segments",
        d.max_per_partition
    );
    ensure!(
        d.steps.keys().all(|s| expect_steps.contains(s)),
        "{name}: segment steps {:?}, expected {expect_steps:?} ms",
        d.steps
    );
    let c = Instant::now();
    let after = answers(&store)?;
    same_answers(name, before, &after)?;
    let check_seconds = c.elapsed().as_secs_f64();
    store.shutdown()?;
    Ok(Step {
        name,
        report,
        seconds: o.seconds,
        rss_before: o.rss_before,
        peak_rss: o.peak_rss,
        check_seconds,
        disk: d,
    })
}

fn opt_bytes(b: Option<u64>) -> String {
    b.map_or_else(|| "n/a".into(), |b| human_bytes(b as f64))
}

pub fn run(mut args: Args) -> anyhow::Result<()> {
    if args.quick {
        args.hosts = 1;
        args.services = 1;
        args.stacks = 100;
        args.draws = 20;
        args.segments_per_partition = 2;
    }
    ensure!(args.days > 0, "--days must be positive");
    ensure!(
        args.segments_per_partition > 0 && (HOUR / STEP_MS) % args.segments_per_partition == 0,
        "--segments-per-partition must divide 360"
    );
    ensure!(args.hosts > 0 && args.services > 0 && args.stacks > 0);
    let writers = args.writers.clamp(1, args.hosts);
    let t_end = T0_MS + args.days * DAY;
    let fleet = Fleet::new(FleetConfig {
        seed: args.seed,
        services: args.services,
        stacks_per_service: args.stacks,
        draws_per_profile: args.draws,
        zipf_s: 1.1,
        // Half-way through: v1 → v2 makes new series, as a deploy does.
        deploy_ms: T0_MS + args.days * DAY / 2,
    });

    let tmp;
    let dir = match &args.data_dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    if dir.join("segments").exists() {
        bail!(
            "{} already holds a store; give an empty directory",
            dir.display()
        );
    }

    // ---- write: one batch per host per flush interval, flushed after each interval.
    let store = Store::open(&dir, config(true))?;
    let chunk_ms = HOUR / args.segments_per_partition;
    let chunks = args.days * DAY / chunk_ms;
    let pb = ProgressBar::new(chunks as u64).with_style(
        ProgressStyle::with_template(
            "{msg} [{bar:40}] {pos}/{len} flush intervals ({per_sec}), eta {eta}",
        )?
        .progress_chars("=> "),
    );
    pb.set_message("write");
    let mut expected = [0i64; 4];
    let mut batches = 0u64;
    let mut samples = 0u64;
    let mut write_secs = 0.0;
    let mut flush_secs = 0.0;
    for c in 0..chunks {
        let from = T0_MS + c * chunk_ms;
        let w = Instant::now();
        let results: Vec<anyhow::Result<([i64; 4], u64, u64)>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..writers)
                .map(|i| {
                    let (fleet, store) = (&fleet, &store);
                    let (hosts, draws) = (args.hosts, args.draws);
                    scope.spawn(move || -> anyhow::Result<([i64; 4], u64, u64)> {
                        let mut totals = [0i64; 4];
                        let (mut n, mut v) = (0u64, 0u64);
                        for h in (i..hosts).step_by(writers) {
                            let (b, t) = host_batch(fleet, h, from, from + chunk_ms, draws);
                            v += b.sample_count() as u64;
                            store.write(b)?;
                            n += 1;
                            for (x, y) in totals.iter_mut().zip(t) {
                                *x += y;
                            }
                        }
                        Ok((totals, n, v))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| bail!("writer panicked")))
                .collect()
        });
        for r in results {
            let (t, n, v) = r?;
            for (x, y) in expected.iter_mut().zip(t) {
                *x += y;
            }
            batches += n;
            samples += v;
        }
        write_secs += w.elapsed().as_secs_f64();
        let f = Instant::now();
        store.flush()?;
        flush_secs += f.elapsed().as_secs_f64();
        pb.inc(1);
    }
    pb.finish_and_clear();
    let flushed = disk(&store.segments());
    let partitions = (args.days * 24) as usize;
    ensure!(
        flushed.min_per_partition == args.segments_per_partition as usize
            && flushed.max_per_partition == args.segments_per_partition as usize,
        "expected {} level-0 segments in each partition, found {}..={}",
        args.segments_per_partition,
        flushed.min_per_partition,
        flushed.max_per_partition
    );
    let before = answers(&store)?;
    for (ptype, want) in all_types().zip(expected) {
        let got = before.totals[ptype];
        ensure!(
            got == want,
            "after flush: merge total of {ptype} is {got}, {want} were written"
        );
    }
    store.shutdown()?;
    drop(store);
    let (store, flushed_disk) = reopen_checked(&dir)?;
    drop(store);

    // ---- compaction and downsampling, each on a freshly opened store. The clocks
    // are simulated: "now" is the end of the data (nothing old enough to downsample),
    // then 8 days later (past the 7-day rule: 60 s), then 31 days later (past the
    // 30-day rule: 1 h).
    //
    // The first pass keeps hours (blocks off); the second, two hours after the
    // last UTC day the data touches has ended, merges the hours into day blocks
    // (the default policy, kept for the downsampling passes). After each of the
    // first two, the week is queried on a freshly opened store.
    let utc_days = (t_end - 1).div_euclid(DAY) - T0_MS.div_euclid(DAY) + 1;
    let blocks_due = (t_end - 1).div_euclid(DAY) * DAY + DAY + 2 * HOUR;
    // By then the oldest day may be past the 7-day rule: its block is written at
    // 60 s.
    let steps: [(&str, i64, &[i64], bool, usize); 4] = [
        ("compaction", t_end, &[STEP_MS], false, partitions),
        (
            "day blocks",
            blocks_due,
            &[STEP_MS, 60_000],
            true,
            utc_days as usize,
        ),
        (
            "downsample 60 s",
            t_end + 8 * DAY,
            &[60_000],
            true,
            utc_days as usize,
        ),
        (
            "downsample 1 h",
            t_end + 31 * DAY,
            &[HOUR],
            true,
            utc_days as usize,
        ),
    ];
    let mut done: Vec<Step> = Vec::new();
    let mut week = serde_json::Map::new();
    for (name, now, steps_ms, blocks, outputs) in steps {
        let s = step(&dir, name, now, &before, steps_ms, blocks)?;
        ensure!(
            s.disk.segments == outputs && !s.report.compacted.is_empty(),
            "{name}: {} live segments ({} written), {outputs} expected",
            s.disk.segments,
            s.report.compacted.len()
        );
        if done.len() < 2 {
            let service = fleet.service_name(0).to_string();
            week.insert(name.into(), long_range(&dir, T0_MS, t_end, &service, 5)?);
        }
        done.push(s);
    }
    let compaction = &done[0];

    // ---- report
    let figures = json!({
        "days": args.days,
        "hosts": args.hosts,
        "services": args.services,
        "stacks_per_service": args.stacks,
        "draws_per_profile": args.draws,
        "seed": args.seed,
        "step_ms": STEP_MS,
        "partition_ms": HOUR,
        "partitions": partitions,
        "segments_per_partition": args.segments_per_partition,
        "writers": writers,
        "quick": args.quick,
        "write": {
            "batches": batches,
            "samples": samples,
            "value_total_per_type": all_types().zip(expected).map(|(t, v)| (t.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
            "write_seconds": write_secs,
            "samples_per_second": samples as f64 / write_secs,
            "flush_seconds": flush_secs,
        },
        "flushed": disk_json(&flushed),
        "flushed_seg_file_bytes": flushed_disk,
        "compaction": compaction.json(),
        "day_blocks": done[1].json(),
        "downsample_60s": done[2].json(),
        "downsample_1h": done[3].json(),
        "bytes_compacted_over_flushed": compaction.disk.bytes as f64 / flushed.bytes as f64,
        "bytes_blocks_over_flushed": done[1].disk.bytes as f64 / flushed.bytes as f64,
        "bytes_60s_over_flushed": done[2].disk.bytes as f64 / flushed.bytes as f64,
        "bytes_1h_over_flushed": done[3].disk.bytes as f64 / flushed.bytes as f64,
        "week_queries": week,
        "answers_checked": "merge total and per-stack values of each of the 4 profile types, after a reopen, identical after every step",
    });
    println!();
    println!(
        "lifecycle suite: {} days × {} hosts × {} services ({} stacks, {} draws per 10 s CPU profile, heap every minute)",
        args.days, args.hosts, args.services, args.stacks, args.draws
    );
    println!(
        "  written                {samples} samples in {batches} batches, {:.0} samples/s (fsync always); flushes {flush_secs:.1} s",
        samples as f64 / write_secs
    );
    println!(
        "  flushed                {:>10} in {:>5} segments ({} per partition, {} rows)",
        human_bytes(flushed.bytes as f64),
        flushed.segments,
        args.segments_per_partition,
        flushed.rows
    );
    for s in &done {
        println!(
            "  {:<22} {:>10} in {:>5} segments ({:5.1} % of flushed, {} rows), {:.2} s, {:.2} MB/s of input, peak RSS {} (RSS before {})",
            format!("after {}", s.name),
            human_bytes(s.disk.bytes as f64),
            s.disk.segments,
            100.0 * s.disk.bytes as f64 / flushed.bytes as f64,
            s.disk.rows,
            s.seconds,
            s.input_mb_per_s(),
            opt_bytes(s.peak_rss),
            opt_bytes(s.rss_before),
        );
    }
    println!("  answers                merge totals and per-stack values of 4 profile types unchanged after every step (checked after reopen)");
    println!("  the whole week, fresh store, result-cache misses (first / p50 of 5):");
    for (layout, queries) in &week {
        for (q, f) in queries.as_object().into_iter().flatten() {
            let ms = |k: &str| f.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
            println!(
                "    {layout:<12} {q:<38} {:>9.1} / {:>7.1} ms",
                ms("first_ms"),
                ms("p50_ms")
            );
        }
    }
    let path = report::write("lifecycle", figures)?;
    println!("  results                {}", path.display());
    Ok(())
}
