//! The `storage` suite: a pprof profile (by default the fixture `large.cpu`)
//! replicated over `series × minutes` (one profile per series per minute), written
//! through the real write path (WAL with fsync, head, flush), then measured on disk.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use profiledb_ingest::{decode_pprof, PprofOptions};
use profiledb_proto::gzip::{gzip, is_gzip, Compression};
use profiledb_storage::{
    Batch, Querier, QueryLimits, Selector, Store, StoreConfig, TenantId, TimeRange,
};
use serde_json::json;

use crate::report::{self, human_bytes};
use crate::sections::Breakdown;

#[derive(clap::Args)]
pub struct Args {
    /// pprof file to replicate (gzip'd or plain).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/fixtures/pprof/large.cpu"))]
    profile: PathBuf,
    /// Distinct series (hosts) the profile is replicated over.
    #[arg(long, default_value_t = 100)]
    series: u32,
    /// Minutes of data: one profile per series per minute.
    #[arg(long, default_value_t = 60)]
    minutes: u32,
    /// Concurrent writers (group commit batches their fsyncs).
    #[arg(long, default_value_t = 4)]
    writers: u32,
    /// Small run for CI: 10 series × 6 minutes.
    #[arg(long)]
    quick: bool,
    /// Keep the data directory here instead of a temporary one.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Write every WAL record in full (stack interning off), as before records
    /// named stacks by id: to compare WAL bytes and replay time.
    #[arg(long)]
    full_wal_records: bool,
}

/// What a store's segments take on disk: the segment files under `dir` and the
/// symbol bases they were written on.
pub(crate) fn stored_bytes(dir: &std::path::Path) -> u64 {
    dir_bytes(dir, "seg") + dir_bytes(dir, "base")
}

/// Total size of the files under `dir` (recursively) whose extension is `ext`.
pub(crate) fn dir_bytes(dir: &std::path::Path, ext: &str) -> u64 {
    let mut total = 0;
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            total += dir_bytes(&p, ext);
        } else if p.extension().is_some_and(|x| x == ext) {
            total += e.metadata().map_or(0, |m| m.len());
        }
    }
    total
}

pub fn run(mut args: Args) -> anyhow::Result<()> {
    if args.quick {
        args.series = 10;
        args.minutes = 6;
    }
    let raw = crate::fleet::profile_or_generated(&args.profile)?;
    let gz_len = if is_gzip(&raw) {
        raw.len() as u64
    } else {
        gzip(&raw, Compression::default())?.len() as u64
    };
    let t0_ms: i64 = 1_700_000_000_000 / 3_600_000 * 3_600_000;
    let template = decode_pprof(
        &raw,
        &PprofOptions {
            tenant: TenantId::default(),
            fallback_time_ms: t0_ms,
            ..Default::default()
        },
    )
    .map_err(|e| anyhow::anyhow!("decoding {}: {e}", args.profile.display()))?;
    let values_per_profile = template.sample_count() as u64;
    let pprof_samples = template
        .series
        .iter()
        .map(|s| s.samples.len())
        .max()
        .unwrap_or(0) as u64;

    let tmp;
    let dir = match &args.data_dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let cfg = StoreConfig {
        stack_interner_bytes: if args.full_wal_records {
            0
        } else {
            StoreConfig::default().stack_interner_bytes
        },
        ..StoreConfig::default()
    };
    let store = Arc::new(Store::open(&dir, cfg.clone())?);
    let total_profiles = u64::from(args.series) * u64::from(args.minutes);
    let pb = ProgressBar::new(total_profiles).with_style(
        ProgressStyle::with_template(
            "{msg} [{bar:40}] {pos}/{len} profiles, {per_sec}, eta {eta}",
        )?
        .progress_chars("=> "),
    );
    pb.set_message("ingest");
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..args.writers)
        .map(|_| {
            let (store, next, template, pb) =
                (store.clone(), next.clone(), template.clone(), pb.clone());
            let (series, minutes) = (args.series as u64, args.minutes as u64);
            std::thread::spawn(move || -> anyhow::Result<()> {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= series * minutes {
                        return Ok(());
                    }
                    let (host, minute) = (i % series, i / series);
                    let mut b: Batch = template.clone();
                    let ts = t0_ms + minute as i64 * 60_000;
                    for s in &mut b.series {
                        s.labels.set("host", format!("host-{host:03}"));
                        for x in &mut s.samples {
                            x.timestamp_ms = ts;
                        }
                    }
                    store.write(b)?;
                    pb.inc(1);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| anyhow::anyhow!("writer panicked"))??;
    }
    let ingest_secs = start.elapsed().as_secs_f64();
    // A crash now: the head is lost and the WAL replayed at the next open.
    let wal_bytes = store.stats().wal_bytes_written.load(Ordering::Relaxed);
    Arc::into_inner(store)
        .context("a writer still holds the store")?
        .close_without_flush();
    let replay_start = Instant::now();
    let store = Store::open(&dir, cfg)?;
    let replay_secs = replay_start.elapsed().as_secs_f64();
    let replayed = store.stats().wal_replayed_records.load(Ordering::Relaxed);
    pb.set_message("flush");
    let flush_start = Instant::now();
    store.flush()?;
    let flush_secs = flush_start.elapsed().as_secs_f64();
    pb.finish_with_message("done");

    let seg_bytes = stored_bytes(&dir.join("segments"));
    let breakdown = Breakdown::of_dir(&dir.join("segments"))?;
    let segments = store.segments().len();
    let values = values_per_profile * total_profiles;
    let pprof_total = gz_len * total_profiles;

    let q = Instant::now();
    let sel = Selector::parse("process_cpu:cpu:nanoseconds:cpu:nanoseconds{}")?;
    let tree = Querier::new(&store, 0, QueryLimits::default()).merge_tree(
        &TenantId::default(),
        &sel,
        TimeRange::all(),
    )?;
    let cold_ms = q.elapsed().as_secs_f64() * 1e3;
    let q = Instant::now();
    let _ = Querier::new(&store, 0, QueryLimits::default()).merge_tree(
        &TenantId::default(),
        &sel,
        TimeRange::all(),
    )?;
    let warm_ms = q.elapsed().as_secs_f64() * 1e3;

    let figures = json!({
        "profile": args.profile.display().to_string(),
        "series": args.series,
        "minutes": args.minutes,
        "writers": args.writers,
        "profiles": total_profiles,
        "pprof_samples_per_profile": pprof_samples,
        "values_per_profile": values_per_profile,
        "values_total": values,
        "pprof_gz_bytes_total": pprof_total,
        "segment_bytes": seg_bytes,
        "segments": segments,
        "bytes_per_value": seg_bytes as f64 / values as f64,
        "pprof_gz_bytes_per_value": pprof_total as f64 / values as f64,
        "ratio_pprof_gz_to_segments": pprof_total as f64 / seg_bytes.max(1) as f64,
        "ingest_seconds": ingest_secs,
        "ingest_values_per_second": values as f64 / ingest_secs,
        "ingest_pprof_gz_mb_per_second": pprof_total as f64 / 1e6 / ingest_secs,
        "flush_seconds": flush_secs,
        "full_wal_records": args.full_wal_records,
        "wal_bytes": wal_bytes,
        "wal_bytes_per_value": wal_bytes as f64 / values as f64,
        "wal_replay_seconds": replay_secs,
        "wal_replayed_records": replayed,
        "merge_all_cold_ms": cold_ms,
        "merge_all_warm_ms": warm_ms,
        "merged_total": tree.total(),
        "sections": breakdown.to_json(),
    });
    println!();
    println!(
        "storage suite: {} × {} minutes of {}",
        args.series,
        args.minutes,
        args.profile.display()
    );
    println!("  values stored          {values} ({values_per_profile} per profile, {total_profiles} profiles)");
    println!(
        "  segments on disk       {} in {segments} segments",
        human_bytes(seg_bytes as f64)
    );
    breakdown.print("    ", Some((values, "value")));
    println!(
        "  same data as pprof.gz  {}",
        human_bytes(pprof_total as f64)
    );
    println!(
        "  bytes per value        {:.3} (pprof.gz: {:.3})",
        seg_bytes as f64 / values as f64,
        pprof_total as f64 / values as f64
    );
    println!(
        "  pprof.gz / segments    {:.1}x",
        pprof_total as f64 / seg_bytes.max(1) as f64
    );
    println!("  ingest                 {:.0} values/s, {:.1} MB/s of pprof.gz ({ingest_secs:.1} s, {} writers, fsync always)", values as f64 / ingest_secs, pprof_total as f64 / 1e6 / ingest_secs, args.writers);
    println!(
        "  WAL ({} records)      {} = {:.1} B/value; reopen after a crash: {replayed} records replayed in {replay_secs:.2} s",
        if args.full_wal_records { "full" } else { "id" },
        human_bytes(wal_bytes as f64),
        wal_bytes as f64 / values as f64
    );
    println!("  final flush            {flush_secs:.2} s");
    println!("  merge all cpu (cold)   {cold_ms:.1} ms, warm {warm_ms:.1} ms");
    let path = report::write("storage", figures)?;
    println!("  results                {}", path.display());
    Ok(())
}
