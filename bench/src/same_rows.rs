//! profiledb's bytes on exactly the rows the baselines hold.
//!
//! The query suite's server stores every profile type it is sent (CPU samples and
//! nanoseconds, heap, replayed fixtures); the baselines' tables hold only the
//! CPU-nanosecond rows. To compare bytes fairly, this writes a second store from
//! the same fleet with only those rows: each host push is re-made with a CPU
//! profile whose one sample type is `cpu/nanoseconds`, decoded by the same push
//! decoder the server uses and written through the real write path (WAL, head,
//! flush to segments). It then checks that the store holds as many rows and the
//! same total as the baselines' CSV, measures its hour segments, compacts the
//! past days into day blocks and measures again, then lets the default policy
//! merge the weeks that are over into wide blocks (and runs of four weeks that are
//! over into wider blocks) and measures a third time (the
//! total must not change): the last is what the baselines' bytes are compared
//! with.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use profiledb_ingest::{decode_push, push_to_batch, Limits, PushEncoding};
use profiledb_proto::push::v1::{PushRequest, RawProfileSeries, RawSample};
use profiledb_storage::{BlockPolicy, Store, StoreConfig, TenantId};
use prost::Message;
use serde_json::{json, Value};

use crate::fleet::Fleet;
use crate::report::human_bytes;
use crate::sections::Breakdown;

/// CPU time per sample (100 Hz): the baselines' `value` is `count × this`.
const CPU_PERIOD_NS: i64 = 10_000_000;

/// The push of `host` at `ts_ms` with one CPU-nanosecond profile per service, the
/// same draws as [`Fleet::host_push`]; returns it with its (rows, value total).
fn cpu_only_push(fleet: &Fleet, host: usize, ts_ms: i64) -> (PushRequest, u64, i64) {
    let (mut rows, mut total) = (0u64, 0i64);
    let series = (0..fleet.cfg.services)
        .map(|s| {
            let d = fleet.draw(s, host, ts_ms, fleet.cfg.draws_per_profile);
            rows += d.counts.len() as u64;
            total += d
                .counts
                .iter()
                .map(|&(_, c)| c * CPU_PERIOD_NS)
                .sum::<i64>();
            let cpu = fleet.pprof(
                s,
                &d,
                ts_ms,
                ("cpu", "nanoseconds", CPU_PERIOD_NS),
                &[("cpu", "nanoseconds", CPU_PERIOD_NS)],
            );
            RawProfileSeries {
                labels: fleet.labels("process_cpu", s, host, ts_ms),
                samples: vec![RawSample {
                    raw_profile: cpu.to_vec().into(),
                    id: String::new(),
                }],
            }
        })
        .collect();
    (PushRequest { series }, rows, total)
}

/// Writes the store into `dir` (which must not hold one yet) for every host at
/// every tick, and returns its figures. Fails when the stored rows or total differ
/// from the generated ones.
pub fn build(fleet: &Arc<Fleet>, ticks: &[i64], hosts: usize, dir: &Path) -> anyhow::Result<Value> {
    let store = Arc::new(Store::open(dir, StoreConfig::default())?);
    let jobs = (ticks.len() * hosts) as u64;
    let pb = ProgressBar::new(jobs).with_style(
        ProgressStyle::with_template("same rows [{bar:40}] {pos}/{len} host pushes, eta {eta}")?
            .progress_chars("=> "),
    );
    let next = AtomicU64::new(0);
    let (rows, total) = (AtomicU64::new(0), AtomicU64::new(0));
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| -> anyhow::Result<()> {
                    let limits = Limits::default();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= jobs {
                            return Ok(());
                        }
                        let (tick, host) = ((i as usize) / hosts, (i as usize) % hosts);
                        let Some(&ts) = ticks.get(tick) else {
                            return Ok(());
                        };
                        let (req, r, t) = cpu_only_push(fleet, host, ts);
                        let series =
                            decode_push(&req.encode_to_vec().into(), PushEncoding::Proto, &limits)?;
                        let batch = push_to_batch(&series, TenantId::default(), ts, &limits)?;
                        store.write(batch)?;
                        rows.fetch_add(r, Ordering::Relaxed);
                        total.fetch_add(t as u64, Ordering::Relaxed);
                        pb.inc(1);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join()
                .map_err(|_| anyhow::anyhow!("same-rows writer panicked"))??;
        }
        Ok(())
    })?;
    store.flush()?;
    pb.finish_and_clear();
    let segments = store.segments();
    let stored_rows: u64 = segments.iter().map(|m| m.rows).sum();
    let stored_total: i64 = segments.iter().map(|m| m.value_total).sum();
    let (rows, total) = (rows.into_inner(), total.into_inner() as i64);
    if stored_rows != rows || stored_total != total {
        bail!(
            "the same-rows store holds {stored_rows} rows totalling {stored_total}, but {rows} rows totalling {total} were written"
        );
    }
    let hours = measure(&store, dir, rows, "as flushed (hour segments)")?;
    drop(store);
    // Then as the store keeps them once the days are over: compaction at a clock
    // two hours past the last UTC day the rows touch merges each day into a block
    // (no downsampling rule applies yet), first with wide blocks off (day blocks
    // only), then with the default policy, which merges each week that is over
    // (and each four weeks followed by a week that are over).
    const DAY: i64 = 86_400_000;
    let last = ticks.iter().copied().max().unwrap_or(0);
    let now = last.div_euclid(DAY) * DAY + DAY + 2 * 3_600_000;
    let days_only = BlockPolicy {
        wide_width_ms: 0,
        ..BlockPolicy::default()
    };
    let days = compact_and_measure(dir, days_only, now, rows, total, "day blocks")?;
    let blocks = compact_and_measure(
        dir,
        BlockPolicy::default(),
        now,
        rows,
        total,
        "day, week and 4-week blocks (the default)",
    )?;
    Ok(json!({
        "rows": rows,
        "value_total": total,
        // The figure compared with the baselines: the store as it keeps past days.
        "bytes": blocks.breakdown.file_bytes,
        "bytes_per_row": blocks.breakdown.file_bytes as f64 / rows.max(1) as f64,
        "sections": blocks.breakdown.to_json(),
        "days_left_in_hours": blocks.skipped,
        "day_blocks": {
            "bytes": days.breakdown.file_bytes,
            "bytes_per_row": days.breakdown.file_bytes as f64 / rows.max(1) as f64,
            "sections": days.breakdown.to_json(),
        },
        "hours": {
            "bytes": hours.file_bytes,
            "bytes_per_row": hours.file_bytes as f64 / rows.max(1) as f64,
            "sections": hours.to_json(),
        },
    }))
}

/// The store compacted under one block policy.
struct Compacted {
    breakdown: Breakdown,
    /// Partitions left out for the compaction budget, as "start ms: reason".
    skipped: Vec<String>,
}

/// Reopens the store in `dir` with `blocks`, compacts it at `now` and measures
/// it; fails when the total changed.
fn compact_and_measure(
    dir: &Path,
    blocks: BlockPolicy,
    now: i64,
    rows: u64,
    total: i64,
    layout: &str,
) -> anyhow::Result<Compacted> {
    let store = Store::open(
        dir,
        // Only this compaction, at this clock: the background one would plan by
        // the real clock (and downsample the older days).
        StoreConfig {
            blocks,
            background_flush: false,
            background_compaction: false,
            ..StoreConfig::default()
        },
    )?;
    let report = store.compact_at(None, None, now, &|_| {})?;
    // A partition whose decoded rows exceed the compaction budget stays apart:
    // the engine's memory bound, so a figure to report (the full-density fleet's
    // last day is one), not a failed run.
    let skipped: Vec<String> = report
        .skipped
        .iter()
        .map(|s| format!("{} ms: {}", s.partition_start_ms, s.reason))
        .collect();
    for s in &skipped {
        println!("same rows ({layout}): a partition left apart, starting at {s}");
    }
    let stored: i64 = store.segments().iter().map(|m| m.value_total).sum();
    if stored != total {
        bail!("the same-rows store totals {stored} after compaction into {layout}, {total} before");
    }
    let layout = if skipped.is_empty() {
        format!("compacted into {layout}")
    } else {
        format!(
            "compacted into {layout} ({} partition(s) left apart)",
            skipped.len()
        )
    };
    let breakdown = measure(&store, dir, rows, &layout)?;
    Ok(Compacted { breakdown, skipped })
}

/// Prints and returns the breakdown of the store's live segments (files a
/// compaction replaced may wait on disk for their deletion).
fn measure(store: &Store, dir: &Path, rows: u64, layout: &str) -> anyhow::Result<Breakdown> {
    let paths: Vec<std::path::PathBuf> =
        store.segments().iter().map(|m| dir.join(&m.file)).collect();
    let b = Breakdown::of_files(paths.iter().map(|p| p.as_path()))
        .context("reading the same-rows segments")?;
    println!(
        "same rows, {layout}: {rows} CPU-nanosecond rows in {} segments, {} ({:.2} B/row)",
        b.files,
        human_bytes(b.file_bytes as f64),
        b.file_bytes as f64 / rows.max(1) as f64
    );
    b.print("    ", Some((rows, "row")));
    Ok(b)
}
