//! Result files: machine facts, git commit and the suite's figures as JSON.

use std::path::PathBuf;

use serde_json::{json, Value};

fn git_commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

pub fn machine() -> Value {
    json!({
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "cpu_model": cpu_model(),
        "os": std::env::consts::OS,
        "arch": std::env::consts::ARCH,
    })
}

/// Writes `bench/results/<suite>-<unix time>.json` and returns its path.
pub fn write(suite: &str, figures: Value) -> anyhow::Result<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("results");
    std::fs::create_dir_all(&dir)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let path = dir.join(format!("{suite}-{now}.json"));
    let doc = json!({
        "suite": suite,
        "unix_time": now,
        "git_commit": git_commit(),
        "machine": machine(),
        "figures": figures,
    });
    std::fs::write(&path, serde_json::to_vec_pretty(&doc)?)?;
    Ok(path)
}

pub fn human_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.2} {}", UNITS[i])
}

/// A memory field of this process's `/proc/self/status` (`"VmRSS:"`,
/// `"VmHWM:"`) in bytes; `None` where `/proc` cannot say.
pub fn own_status_bytes(field: &str) -> Option<u64> {
    crate::agent_suite::status_kib(std::process::id(), field).map(|kib| kib * 1024)
}

/// Peak resident memory of this process (bytes) since it started or since the
/// last [`reset_peak_rss`]; 0 where `/proc` cannot say.
pub fn peak_rss_bytes() -> u64 {
    own_status_bytes("VmHWM:").unwrap_or(0)
}

/// Starts a new peak-RSS measurement (Linux `clear_refs` 5); false where the
/// kernel refuses, and then [`peak_rss_bytes`] is the peak since start.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}
