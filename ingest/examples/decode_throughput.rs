//! Measures pprof decode throughput (samples/s on one core).
//!
//! `cargo run --release -p profiledb-ingest --example decode_throughput [FILE] [ITERS] [STAGE]`
//! FILE defaults to the shared `large.cpu` fixture. Stages timed: the whole path from
//! gzip bytes (`decode_pprof`), the same from unpacked bytes (streaming protobuf reader
//! and conversion), gunzip alone, and for reference the prost-based path
//! (`Profile::decode` and `profile_to_batch`). STAGE, if given, runs only the stages
//! whose label contains it (handy under `perf record`).

use std::time::Instant;

use profiledb_ingest::gzip::decompress_bounded;
use profiledb_ingest::pprof::profile_to_batch;
use profiledb_ingest::proto::pprof::Profile;
use profiledb_ingest::{decode_pprof, PprofOptions};
use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_else(|| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/fixtures/pprof/large.cpu"
        )
        .to_string()
    });
    let iters: u32 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(20);
    let only = args.next();
    let data = std::fs::read(&path)?;
    let opts = PprofOptions::default();
    let unpacked = decompress_bounded(&data, usize::MAX, "max_decompressed_bytes")?.into_owned();
    let profile = Profile::decode(unpacked.as_slice())?;
    let samples = profile.sample.len() as f64;
    println!(
        "{path}: {} bytes gzip, {} bytes unpacked, {} samples, {iters} iterations",
        data.len(),
        unpacked.len(),
        profile.sample.len()
    );

    let run = |label: &str, f: &dyn Fn() -> usize| {
        if only.as_deref().is_some_and(|o| !label.contains(o)) {
            return;
        }
        let _ = f();
        let start = Instant::now();
        let mut total = 0;
        for _ in 0..iters {
            total += f();
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{label:<34} {:>8.2} ms/profile {:>12.0} samples/s (batch samples {})",
            secs * 1e3 / f64::from(iters),
            samples * f64::from(iters) / secs,
            total / iters as usize
        );
    };
    run("decode_pprof, gzip input", &|| {
        decode_pprof(&data, &opts)
            .map(|b| b.sample_count())
            .unwrap_or(0)
    });
    run("decode_pprof, unpacked input", &|| {
        decode_pprof(&unpacked, &opts)
            .map(|b| b.sample_count())
            .unwrap_or(0)
    });
    run("gunzip only", &|| {
        decompress_bounded(&data, usize::MAX, "max_decompressed_bytes")
            .map(|b| b.len() / unpacked.len() * profile.sample.len() * 2)
            .unwrap_or(0)
    });
    let shared = bytes::Bytes::from(unpacked.clone());
    run("prost: Profile::decode only", &|| {
        Profile::decode(shared.clone())
            .map(|p| p.sample.len() * 2)
            .unwrap_or(0)
    });
    run("prost: decode + profile_to_batch", &|| {
        Profile::decode(shared.clone())
            .ok()
            .and_then(|p| profile_to_batch(&p, &opts).ok())
            .map(|b| b.sample_count())
            .unwrap_or(0)
    });
    run("prost: profile_to_batch only", &|| {
        profile_to_batch(&profile, &opts)
            .map(|b| b.sample_count())
            .unwrap_or(0)
    });
    Ok(())
}
