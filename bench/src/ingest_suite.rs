//! The `ingest` suite: pprof decoding alone (one core), then end to end over HTTP
//! with concurrent clients against an in-process server on loopback.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::server::Running;
use anyhow::bail;
use indicatif::{ProgressBar, ProgressStyle};
use profiledb_ingest::{decode_pprof, PprofOptions};
use profiledb_storage::TenantId;
use serde_json::json;

use crate::report::{self, human_bytes};

#[derive(clap::Args)]
pub struct Args {
    /// pprof file to upload (gzip'd or plain).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/fixtures/pprof/large.cpu"))]
    profile: PathBuf,
    /// Decoder-only iterations.
    #[arg(long, default_value_t = 100)]
    decode_iterations: u32,
    /// HTTP uploads in total.
    #[arg(long, default_value_t = 400)]
    requests: u32,
    /// Concurrent HTTP clients.
    #[arg(long, default_value_t = 4)]
    clients: u32,
    /// Full-density fleet pushes decoded and submitted on one thread, without HTTP
    /// (0: skip that phase).
    #[arg(long, default_value_t = 1000)]
    fleet_pushes: usize,
    /// Times the fleet pushes are decoded; the cheapest round is reported.
    #[arg(long, default_value_t = 3)]
    fleet_rounds: usize,
    /// Small run for CI.
    #[arg(long)]
    quick: bool,
}

pub fn run(mut args: Args) -> anyhow::Result<()> {
    if args.quick {
        args.decode_iterations = 10;
        args.requests = 20;
        args.fleet_pushes = args.fleet_pushes.min(20);
        args.fleet_rounds = 1;
    }
    let fleet = if args.fleet_pushes > 0 {
        let dir = tempfile::tempdir()?;
        let f = crate::ingest_fleet::measure(dir.path(), args.fleet_pushes, args.fleet_rounds)?;
        println!(
            "fleet pushes, decode and submit on one thread (its CPU time): {}",
            f.describe()
        );
        Some(f)
    } else {
        None
    };
    let raw = crate::fleet::profile_or_generated(&args.profile)?;
    let opts = PprofOptions {
        tenant: TenantId::default(),
        fallback_time_ms: 1,
        ..Default::default()
    };
    let first = decode_pprof(&raw, &opts).map_err(|e| anyhow::anyhow!("{e}"))?;
    let pprof_samples = first
        .series
        .iter()
        .map(|s| s.samples.len())
        .max()
        .unwrap_or(0) as u64;

    // Decoder only, one thread.
    let t = Instant::now();
    for _ in 0..args.decode_iterations {
        let b = decode_pprof(&raw, &opts).map_err(|e| anyhow::anyhow!("{e}"))?;
        std::hint::black_box(b);
    }
    let dsecs = t.elapsed().as_secs_f64();
    let dec_samples = pprof_samples * u64::from(args.decode_iterations);

    // End to end over HTTP.
    let dir = tempfile::tempdir()?;
    let server = Running::start(dir.path(), 0)?;
    let url = server.url.clone();
    let pb = ProgressBar::new(u64::from(args.requests)).with_style(
        ProgressStyle::with_template("http ingest [{bar:40}] {pos}/{len} uploads, {per_sec}")?
            .progress_chars("=> "),
    );
    let next = Arc::new(AtomicU64::new(0));
    let retries = Arc::new(AtomicU64::new(0));
    let raw = Arc::new(raw);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let t = Instant::now();
    let clients: Vec<_> = (0..args.clients)
        .map(|c| {
            let (next, retries, raw, url, pb) = (
                next.clone(),
                retries.clone(),
                raw.clone(),
                url.clone(),
                pb.clone(),
            );
            let total = u64::from(args.requests);
            std::thread::spawn(move || -> anyhow::Result<()> {
                let client = reqwest::blocking::Client::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        return Ok(());
                    }
                    loop {
                        let r = client
                            .post(format!(
                                "{url}/ingest?name=bench{{host=h{c}-{}}}&format=pprof&from={}",
                                i % 50,
                                now - 3600 + i
                            ))
                            .body(raw.to_vec())
                            .send()?;
                        if r.status() == 429 {
                            retries.fetch_add(1, Ordering::Relaxed);
                            std::thread::sleep(std::time::Duration::from_millis(5));
                            continue;
                        }
                        if r.status() != 200 {
                            bail!(
                                "upload failed: {} {}",
                                r.status(),
                                r.text().unwrap_or_default()
                            );
                        }
                        break;
                    }
                    pb.inc(1);
                }
            })
        })
        .collect();
    for c in clients {
        c.join().map_err(|_| anyhow::anyhow!("client panicked"))??;
    }
    let hsecs = t.elapsed().as_secs_f64();
    pb.finish();
    let rss_peak = crate::report::peak_rss_bytes();
    server.stop()?;

    let http_samples = pprof_samples * u64::from(args.requests);
    let http_bytes = raw.len() as u64 * u64::from(args.requests);
    let figures = json!({
        "profile": args.profile.display().to_string(),
        "pprof_bytes": raw.len(),
        "pprof_samples": pprof_samples,
        "decode_iterations": args.decode_iterations,
        "decode_ms_per_profile": dsecs * 1e3 / f64::from(args.decode_iterations),
        "decode_samples_per_second_one_core": dec_samples as f64 / dsecs,
        "decode_mb_per_second_one_core": (raw.len() as f64 * f64::from(args.decode_iterations)) / 1e6 / dsecs,
        "http_requests": args.requests,
        "http_clients": args.clients,
        "http_samples_per_second": http_samples as f64 / hsecs,
        "http_mb_per_second": http_bytes as f64 / 1e6 / hsecs,
        "http_retries_429": retries.load(Ordering::Relaxed),
        "process_peak_rss_bytes": rss_peak,
        "fleet": fleet.as_ref().map(crate::ingest_fleet::FleetDecode::to_json),
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
    });
    println!();
    println!(
        "ingest suite: {} ({} samples, {})",
        args.profile.display(),
        pprof_samples,
        human_bytes(raw.len() as f64)
    );
    println!(
        "  decoder only, 1 core   {:.1} ms/profile, {:.0} samples/s, {:.1} MB/s",
        dsecs * 1e3 / f64::from(args.decode_iterations),
        dec_samples as f64 / dsecs,
        (raw.len() as f64 * f64::from(args.decode_iterations)) / 1e6 / dsecs
    );
    println!("  HTTP end to end        {:.0} samples/s, {:.1} MB/s of pprof ({} uploads, {} clients, {} retries after 429)",
        http_samples as f64 / hsecs, http_bytes as f64 / 1e6 / hsecs, args.requests, args.clients, retries.load(Ordering::Relaxed));
    println!(
        "  peak RSS (server+clients) {}",
        human_bytes(rss_peak as f64)
    );
    let path = report::write("ingest", figures)?;
    println!("  results                {}", path.display());
    Ok(())
}
