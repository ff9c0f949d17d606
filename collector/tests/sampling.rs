//! End to end: sample a busy process with the agent against a real `profiledb serve`
//! on loopback and check the stored profile's hottest leaves.
//!
//! The busy process is this test binary re-executed in busy mode (the `busy_child`
//! test, which does nothing unless `PROFILEDB_AGENT_BUSY` is set). The server binary
//! is `target/<profile>/profiledb` next to the test executable; build it with
//! `cargo build -p profiledb`. The test skips (passing, with a message) when the
//! kernel refuses perf_event_open, or when that binary is missing (a failure
//! instead with `PROFILEDB_REQUIRE_EXTERNAL=1`).

mod common;

use std::collections::HashMap;
use std::hint::black_box;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{http_get, server_for_agent, Kill};

#[inline(never)]
fn busy_alpha(n: u64) -> u64 {
    let mut x = black_box(n) | 1;
    let mut i = 0;
    while i < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        i += 1;
    }
    black_box(x)
}

#[inline(never)]
fn busy_beta(n: u64) -> u64 {
    let mut x = black_box(n) | 3;
    let mut i = 0;
    while i < n {
        x ^= x << 5;
        x ^= x >> 9;
        x ^= x << 21;
        i += 1;
    }
    black_box(x)
}

#[inline(never)]
fn busy_driver(n: u64) -> u64 {
    busy_alpha(2 * n) ^ busy_beta(n)
}

/// Busy mode, run only by the sampling test as a child process (`--ignored`): spins
/// for `PROFILEDB_AGENT_BUSY` seconds. Ignored in normal runs, where it would test
/// nothing.
#[test]
#[ignore = "child process of samples_busy_process_into_real_server"]
fn busy_child() {
    let Some(secs) = std::env::var("PROFILEDB_AGENT_BUSY")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
    else {
        return;
    };
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut acc = 0;
    while Instant::now() < end {
        acc ^= busy_driver(300_000);
    }
    println!("{acc}");
}

#[test]
fn samples_busy_process_into_real_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((_server, addr)) = server_for_agent(dir.path()) else {
        return;
    };

    let busy = Kill(
        Command::new(std::env::current_exe().expect("exe"))
            .args([
                "--exact",
                "busy_child",
                "--ignored",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env("PROFILEDB_AGENT_BUSY", "30")
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn busy child"),
    );
    // let it reach the busy loop
    std::thread::sleep(Duration::from_millis(300));
    let service = format!("agent-it-{}", std::process::id());
    let out = Command::new(env!("CARGO_BIN_EXE_profiledb-agent"))
        .args(["--server", &format!("http://{addr}")])
        .args(["--pid", &busy.0.id().to_string()])
        .args([
            "--duration",
            "6s",
            "--push-interval",
            "2s",
            "--frequency",
            "99",
        ])
        .args([
            "--service",
            &service,
            "--tag",
            "suite=it",
            "--max-cpu-percent",
            "50",
        ])
        .output()
        .expect("run agent");
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}");
    assert!(out.status.success(), "agent failed: {stderr}");
    assert!(stderr.contains("0 dropped"), "{stderr}");
    drop(busy);

    let query = format!(
        "/api/v1/merge?query=process_cpu:cpu:nanoseconds:cpu:nanoseconds%7Bservice_name%3D%22{service}%22%7D&from=0&until=now%2B1d&format=folded"
    );
    let (status, body) = http_get(addr, &query).expect("query");
    assert_eq!(status, 200, "{body}");
    let mut leaves: HashMap<String, u64> = HashMap::new();
    let mut total = 0u64;
    for line in body.lines() {
        let Some((stack, v)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(v) = v.trim().parse::<u64>() else {
            continue;
        };
        let leaf = stack.rsplit(';').next().unwrap_or(stack).to_string();
        *leaves.entry(leaf).or_default() += v;
        total += v;
    }
    let mut top: Vec<_> = leaves.iter().collect();
    top.sort_by(|a, b| b.1.cmp(a.1));
    eprintln!(
        "total {total} ns; top leaves: {:?}",
        &top[..top.len().min(8)]
    );
    assert!(total > 0, "nothing stored for {service}: {body}");
    let share = |name: &str| {
        leaves
            .iter()
            .filter(|(k, _)| k.contains(name))
            .map(|(_, v)| *v)
            .sum::<u64>() as f64
            / total as f64
    };
    let (a, b) = (share("busy_alpha"), share("busy_beta"));
    assert!(
        top[0].0.contains("busy_alpha"),
        "hottest leaf is {:?}",
        top[0]
    );
    assert!(
        a + b > 0.8,
        "busy functions hold only {:.2} of the samples",
        a + b
    );
    // alpha does twice beta's work: expect about 2/3 of the busy time
    let ratio = a / (a + b);
    assert!((0.5..0.85).contains(&ratio), "alpha share {ratio:.2}");
    // ~6 s × 99 Hz on one busy thread, cpu:nanoseconds = count × 1e9/99
    let secs = total as f64 / 1e9;
    assert!((2.0..9.0).contains(&secs), "stored {secs:.2} CPU seconds");
}
