//! Measures pprof decode throughput (samples/s on one core).
//!
//! `cargo run --release -p profiledb-ingest --example decode_throughput [FILE] [ITERS]`
//! FILE defaults to the shared `large.cpu` fixture. Three stages are timed: the whole
//! path from gzip bytes, protobuf decode + conversion from unpacked bytes, and the
//! conversion to a Batch alone.

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
    run("gzip + protobuf + convert", &|| {
        decode_pprof(&data, &opts)
            .map(|b| b.sample_count())
            .unwrap_or(0)
    });
    run("protobuf + convert (unpacked)", &|| {
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
    run("protobuf decode only", &|| {
        Profile::decode(shared.clone())
            .map(|p| p.sample.len() * 2)
            .unwrap_or(0)
    });
    run("convert only (decoded Profile)", &|| {
        profile_to_batch(&profile, &opts)
            .map(|b| b.sample_count())
            .unwrap_or(0)
    });
    Ok(())
}
