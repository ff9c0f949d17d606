//! What fresh memory costs on this machine: the time to fault in and zero pages a
//! process has never touched, with and without transparent huge pages, right
//! after another mapping freed its pages and after memory rested.
//!
//! The first queries after a restart decode segments into fresh memory, and on
//! the VMs this project runs on their time moved by up to a factor of four from
//! one restart to the next with no change in the work. A VM whose balloon driver
//! reports free memory to its host (free page reporting, which reports free
//! blocks of 2 MiB and up) gets those blocks taken away; the next fault on one
//! waits for the host to provide it again. A page freed a moment ago is not
//! reported yet and comes back at the speed of a zeroing. This suite measures
//! the three cases, so that a first-query figure can be read against them.
//!
//! It also times one more machine cost found by profiling ingest: libc's
//! `memcmp` of zero bytes at the dangling address an empty Rust slice has, which
//! the storage engine's hot comparisons avoid (see `storage/src/byte_eq.rs`).

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use memmap2::{Advice, MmapMut};
use serde_json::json;

use crate::report;

#[derive(Parser, Debug)]
pub struct Args {
    /// MiB mapped and touched per measurement.
    #[arg(long, default_value_t = 256)]
    mb: usize,
    /// How long memory rests (freed) before the "after rest" measurements; free
    /// page reporting acts within seconds.
    #[arg(long, default_value_t = 5000)]
    rest_ms: u64,
    /// CI: 16 MiB and no rest; the figures mean nothing.
    #[arg(long)]
    quick: bool,
}

/// One measurement: a mapping of `bytes`, huge pages asked or refused, each page
/// written once. Returns the milliseconds it took.
fn touch(bytes: usize, huge: bool) -> anyhow::Result<f64> {
    let mut map = MmapMut::map_anon(bytes).context("mapping anonymous memory")?;
    // Advice only: a kernel without transparent huge pages ignores it.
    let _ = map.advise(if huge {
        Advice::HugePage
    } else {
        Advice::NoHugePage
    });
    let t = Instant::now();
    for page in map.chunks_mut(4096) {
        page[0] = 1;
    }
    let ms = t.elapsed().as_secs_f64() * 1e3;
    std::hint::black_box(&map);
    Ok(ms)
}

/// Nanoseconds per `a == b` of two byte slices, the way Rust compares them: one
/// `memcmp` call of their length (zero included).
fn compare_ns(a: &[u8], b: &[u8], calls: u32) -> f64 {
    let t = Instant::now();
    let mut equal = 0u32;
    for _ in 0..calls {
        equal += u32::from(std::hint::black_box(a) == std::hint::black_box(b));
    }
    std::hint::black_box(equal);
    t.elapsed().as_secs_f64() * 1e9 / f64::from(calls)
}

/// Zero-length comparisons at a dangling address (an empty `String`'s) and at a
/// valid one, beside a 31-byte one.
fn zero_length_memcmp(calls: u32) -> Vec<serde_json::Value> {
    let name = b"svc-03/pkg3.(*Conn).ReadBuffer_".to_vec();
    let other = name.clone();
    let (empty_a, empty_b) = (String::new(), String::new());
    let cases: [(&str, &[u8], &[u8]); 3] = [
        (
            "0 bytes, empty strings (dangling pointers)",
            empty_a.as_bytes(),
            empty_b.as_bytes(),
        ),
        ("0 bytes, valid pointers", &name[..0], &other[..0]),
        ("31 equal bytes", &name, &other),
    ];
    cases
        .iter()
        .map(|&(case, a, b)| {
            let ns = compare_ns(a, b, calls);
            println!("memcmp: {case:<44} {ns:>8.1} ns per comparison");
            json!({"case": case, "bytes": a.len(), "ns_per_comparison": ns})
        })
        .collect()
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let (mb, rest) = if args.quick {
        (16, Duration::ZERO)
    } else {
        (args.mb.max(1), Duration::from_millis(args.rest_ms))
    };
    let bytes = mb << 20;
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let mut rows = Vec::new();
    let mut measure = |case: &str, huge: bool, rest_first: bool| -> anyhow::Result<()> {
        if rest_first {
            std::thread::sleep(rest);
        }
        let ms = touch(bytes, huge)?;
        let gbps = mb as f64 / 1024.0 / (ms / 1e3);
        println!(
            "{case:<44} {mb:>5} MiB in {ms:>8.1} ms = {gbps:>6.2} GB/s, {:>6.3} ms per MiB",
            ms / mb as f64
        );
        rows.push(json!({"case": case, "huge_pages": huge, "rested_ms": if rest_first { rest.as_millis() as u64 } else { 0 },
                         "mib": mb, "ms": ms, "gb_per_s": gbps, "ms_per_mib": ms / mb as f64}));
        Ok(())
    };
    println!(
        "transparent huge pages: {thp}; rest before the rested cases: {} ms",
        rest.as_millis()
    );
    measure("huge pages, after rest", true, true)?;
    measure("huge pages, right after the previous freed", true, false)?;
    measure("4 KiB pages, after rest", false, true)?;
    measure("4 KiB pages, right after the previous freed", false, false)?;
    let compares = zero_length_memcmp(if args.quick { 10_000 } else { 2_000_000 });
    let path = report::write(
        "memtouch",
        json!({"quick": args.quick, "transparent_hugepage": thp, "rows": rows,
               "zero_length_memcmp": compares}),
    )?;
    println!("wrote {}", path.display());
    Ok(())
}
