//! The `symbolize` suite: server-side symbolization's cost, measured on a real
//! binary with DWARF line tables (this bench's own executable, tens of megabytes of
//! Rust with inlining everywhere), through the symbolizer the server uses.
//!
//! Addresses are the midpoints of the binary's function symbols, evenly spread
//! over its text. Reported, as CPU time of the measuring thread
//! (`CLOCK_THREAD_CPUTIME_ID`, so the other engineers' builds on the same cores do
//! not count):
//! - cold: the first lookup of each address in a freshly started symbolizer
//!   (reading the file, parsing its DWARF index, then addr2line building each
//!   unit's line table and inline tree as it is first touched), per frame, with
//!   the file's parse apart;
//! - warm: the same addresses again, per frame;
//! - bytes per build id: the symbolizer's own count (sections and symbols held)
//!   and the process's resident memory growth across the cold pass (which adds
//!   addr2line's lazily built tables);
//! - frames per address (inline depth) and the share of addresses named.
//!
//! The agent's CPU and RSS with `--symbolize host` against `--symbolize server`
//! come from the `agent` suite, which runs both modes at each frequency.

use std::time::Duration;

use anyhow::Context;
use object::{Object, ObjectSymbol, SymbolKind};
use profiledb_storage::symbolize::{Config, DebugStore, MappingRange, Symbolizer};
use serde_json::json;

use crate::report::{self, human_bytes};
use crate::thread_cpu::this_thread_secs;

#[derive(clap::Args)]
pub struct Args {
    /// Addresses looked up (function midpoints, evenly spread).
    #[arg(long, default_value_t = 20_000)]
    addresses: usize,
    /// Warm passes over the same addresses (the median pass is reported).
    #[arg(long, default_value_t = 5)]
    warm_passes: usize,
    /// Few addresses and passes, for CI.
    #[arg(long)]
    quick: bool,
}

fn rss_kib() -> u64 {
    crate::agent_suite::status_kib(std::process::id(), "VmRSS:").unwrap_or(0)
}

pub fn run(mut args: Args) -> anyhow::Result<()> {
    if args.quick {
        args.addresses = args.addresses.min(2_000);
        args.warm_passes = args.warm_passes.min(2);
    }
    let exe = std::env::current_exe()?;
    let bytes = std::fs::read(&exe).with_context(|| format!("reading {}", exe.display()))?;
    let file = object::File::parse(&*bytes).context("parsing the bench binary")?;
    let mut funcs: Vec<u64> = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0 && s.size() > 1)
        .map(|s| s.address() + s.size() / 2)
        .collect();
    funcs.sort_unstable();
    funcs.dedup();
    anyhow::ensure!(
        !funcs.is_empty(),
        "the bench binary has no function symbols"
    );
    let step = (funcs.len() / args.addresses.max(1)).max(1);
    let addrs: Vec<u64> = funcs
        .iter()
        .step_by(step)
        .take(args.addresses)
        .copied()
        .collect();
    let id = profiledb_storage::symbolize::elf::build_id(&bytes)
        .context("the bench binary has no build id")?;
    drop(file);

    let dir = tempfile::tempdir()?;
    let store = DebugStore::open(dir.path())?;
    store.write(&id, &bytes)?;
    let file_bytes = bytes.len() as u64;
    drop(bytes);
    let sym = Symbolizer::new(
        Config {
            cache_bytes: 4 << 30,
            ..Config::default()
        },
        store,
        Vec::new(),
        None,
    );
    let m = MappingRange::default();

    let rss0 = rss_kib();
    let t0 = this_thread_secs();
    let loaded = sym.file(&id).context("loading the debug file")?;
    let parse_s = this_thread_secs() - t0;
    let t1 = this_thread_secs();
    let (mut named, mut frames) = (0usize, 0usize);
    for &a in &addrs {
        if let Some(f) = sym.frames(&id, m, a) {
            named += 1;
            frames += f.len();
        }
    }
    let cold_s = this_thread_secs() - t1;
    let rss1 = rss_kib();
    let mut warm: Vec<f64> = (0..args.warm_passes.max(1))
        .map(|_| {
            let t = this_thread_secs();
            for &a in &addrs {
                std::hint::black_box(sym.frames(&id, m, a));
            }
            this_thread_secs() - t
        })
        .collect();
    warm.sort_by(|a, b| a.total_cmp(b));
    let warm_s = warm[warm.len() / 2];
    let held = sym.stats().cached_bytes;
    let grown = rss1.saturating_sub(rss0) * 1024;
    drop(loaded);
    sym.shutdown();
    std::thread::sleep(Duration::from_millis(10));

    let n = addrs.len() as f64;
    let us = |s: f64| s * 1e6;
    println!(
        "symbolize suite: {} ({}), {} addresses (function midpoints of {} symbols), build id {id}",
        exe.display(),
        human_bytes(file_bytes as f64),
        addrs.len(),
        funcs.len()
    );
    println!(
        "  parse (read + DWARF index):   {:>10.1} ms CPU",
        parse_s * 1e3
    );
    println!(
        "  cold lookup:                  {:>10.2} µs CPU per address ({:.2} per frame)",
        us(cold_s) / n,
        us(cold_s) / frames.max(1) as f64
    );
    println!(
        "  warm lookup (median of {}):    {:>10.2} µs CPU per address ({:.2} per frame); cold/warm {:.1}x",
        warm.len(),
        us(warm_s) / n,
        us(warm_s) / frames.max(1) as f64,
        cold_s / warm_s.max(1e-12)
    );
    println!(
        "  named {:.1}% of addresses, {:.2} frames per address (inlined calls expanded)",
        100.0 * named as f64 / n,
        frames as f64 / named.max(1) as f64
    );
    println!(
        "  bytes per build id: {} held by the cache's count, {} resident growth over the cold pass",
        human_bytes(held as f64),
        human_bytes(grown as f64)
    );
    let path = report::write(
        "symbolize",
        json!({
            "binary": exe.display().to_string(),
            "binary_bytes": file_bytes,
            "addresses": addrs.len(),
            "parse_cpu_seconds": parse_s,
            "cold_cpu_us_per_address": us(cold_s) / n,
            "cold_cpu_us_per_frame": us(cold_s) / frames.max(1) as f64,
            "warm_cpu_us_per_address": us(warm_s) / n,
            "warm_cpu_us_per_frame": us(warm_s) / frames.max(1) as f64,
            "named_share": named as f64 / n,
            "frames_per_named_address": frames as f64 / named.max(1) as f64,
            "cache_bytes_counted": held,
            "resident_growth_bytes": grown,
            "quick": args.quick,
        }),
    )?;
    println!("  results {}", path.display());
    Ok(())
}
