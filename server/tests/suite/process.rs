//! The real `profiledb` binary: `--help`, SIGTERM flushes and exits 0, writes
//! acknowledged before a SIGKILL are there after a restart, and memory and the WAL
//! stay within their budgets (uploads past the ingest share get 429, merges past the
//! query share 422, the WAL is cut at the head budget).

use crate::common::{free_port, metric_at, spawn_ready};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_profiledb");
const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";

fn start(dir: &std::path::Path) -> (Child, String) {
    start_with(dir, &[])
}

fn start_with(dir: &std::path::Path, flags: &[&str]) -> (Child, String) {
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--data-dir"])
        .arg(dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(flags)
        .stderr(Stdio::null());
    (spawn_ready(cmd, &url), url)
}

fn ingest(url: &str, i: usize) {
    let from = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 30;
    let r = reqwest::blocking::Client::new()
        .post(format!("{url}/ingest?name=proc.cpu&from={from}"))
        .body(format!("main;f{i} {}\n", i + 1))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Posts folded `body` as service `proc`; returns the response.
fn post_folded(url: &str, body: String) -> reqwest::blocking::Response {
    reqwest::blocking::Client::new()
        .post(format!(
            "{url}/ingest?name=proc.cpu&from={}",
            now_secs() - 30
        ))
        .body(body)
        .send()
        .unwrap()
}

/// The value of an unlabelled `/metrics` line.
fn metric(url: &str, name: &str) -> u64 {
    metric_at(url, name).unwrap_or_else(|| panic!("no metric {name}")) as u64
}

fn wal_dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir.join("wal"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

fn total(url: &str) -> (usize, i64) {
    let text = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/merge"))
        .query(&[
            ("query", &format!("{CPU}{{}}")),
            ("from", &"0".to_string()),
            ("until", &"now+1d".to_string()),
        ])
        .send()
        .unwrap()
        .text()
        .unwrap();
    let lines: Vec<&str> = text.lines().collect();
    (
        lines.len(),
        lines
            .iter()
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<i64>().unwrap())
            .sum(),
    )
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "server did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn help_is_available() {
    for args in [vec!["--help"], vec!["serve", "--help"]] {
        let out = Command::new(BIN).args(&args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Usage"), "{text}");
    }
    let out = Command::new(BIN)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in ["--data-dir", "--listen", "--fsync", "--max-body-mb"] {
        assert!(text.contains(flag), "serve --help lacks {flag}");
    }
}

#[test]
fn sigterm_flushes_the_head_and_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, url) = start(dir.path());
    for i in 0..10 {
        ingest(&url, i);
    }
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = wait_exit(&mut child);
    assert!(exit.success(), "exit status {exit:?}");
    // Flushed: segments exist and the WAL holds nothing.
    let segs = std::fs::read_dir(dir.path().join("segments/anonymous"))
        .unwrap()
        .count();
    assert!(segs >= 1);
    let wal_bytes: u64 = std::fs::read_dir(dir.path().join("wal"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert_eq!(
        wal_bytes, 0,
        "the WAL still holds data after a clean shutdown"
    );
    let (mut child, url) = start(dir.path());
    assert_eq!(total(&url), (10, (1..=10).sum::<i64>() * 10_000_000));
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, url) = start(dir.path());
    for i in 0..40 {
        ingest(&url, i);
    }
    child.kill().unwrap(); // SIGKILL: no flush, no goodbye
    child.wait().unwrap();
    let (mut child, url) = start(dir.path());
    assert_eq!(total(&url), (40, (1..=40).sum::<i64>() * 10_000_000));
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Uploads repeating the same stacks grow the WAL, not the head: past the head budget
/// (1 MiB) the open partition is flushed, the WAL before it deleted, and a SIGKILL
/// then a replay restore exactly the acknowledged samples.
#[test]
fn wal_is_cut_at_the_head_budget_and_sigkill_replay_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--head-max-mb", "1", "--fsync", "never"];
    let (mut child, url) = start_with(dir.path(), &flags);
    let mut acked = 0i64;
    let mut uploads = 0;
    while metric(&url, "profiledb_storage_early_flushes_wal_total") < 2 {
        assert!(uploads < 5_000, "the WAL never triggered an early flush");
        let value = uploads % 9 + 1;
        let body: String = (0..200)
            .map(|j| format!("main;handler_with_a_long_name;work_{j} {value}\n"))
            .collect();
        assert_eq!(post_folded(&url, body).status(), 200);
        acked += 200 * value * 10_000_000;
        uploads += 1;
    }
    // Truncation follows the flush it waits for; wait for it (a hang fails here).
    let deadline = Instant::now() + Duration::from_secs(60);
    while metric(&url, "profiledb_storage_wal_removed_files_total") == 0 {
        assert!(Instant::now() < deadline, "no WAL file was deleted");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // The budget, the file being written when it was passed (a quarter of it), and
    // the uploads acknowledged while the flush ran.
    let wal = wal_dir_bytes(dir.path());
    assert!(
        wal <= (1 << 20) + (1 << 18) + (512 << 10),
        "WAL holds {wal} bytes"
    );
    let (mut child, url) = start_with(dir.path(), &flags);
    assert_eq!(total(&url).1, acked);
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Sixteen clients upload bodies each larger than a quarter of a 1 MiB ingest
/// share at once: uploads past the share get 429 with `Retry-After` and a JSON
/// reason, and every acknowledged upload is stored, exactly.
#[test]
fn uploads_past_the_ingest_share_get_429_and_acknowledged_ones_are_stored() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, url) = start_with(dir.path(), &["--ingest-memory-mb", "1"]);
    let mut acked = 0i64;
    let mut refused = 0;
    for round in 0..20 {
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(16));
        let clients: Vec<_> = (0..16)
            .map(|c| {
                let (url, barrier) = (url.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let value = (round * 16 + c) as i64 % 5 + 1;
                    let body: String = (0..3_000)
                        .map(|j| format!("main;client_{c}_round_{round};function_number_{j:06}_with_padding_to_make_the_body_larger {value}\n"))
                        .collect();
                    barrier.wait();
                    let r = post_folded(&url, body);
                    let status = r.status().as_u16();
                    let retry = r.headers().get("retry-after").is_some();
                    let json: serde_json::Value = if status == 200 {
                        serde_json::Value::Null
                    } else {
                        r.json().unwrap()
                    };
                    (status, retry, json, 3_000 * value * 10_000_000)
                })
            })
            .collect();
        for c in clients {
            let (status, retry, json, total) = c.join().unwrap();
            match status {
                200 => acked += total,
                429 => {
                    refused += 1;
                    assert!(retry, "429 without Retry-After");
                    assert_eq!(json["code"], "resource_exhausted");
                    let msg = json["message"].as_str().unwrap();
                    assert!(msg.contains("ingest budget"), "{msg}");
                }
                other => panic!("unexpected status {other}: {json}"),
            }
        }
        if refused > 0 {
            break;
        }
    }
    assert!(refused > 0, "no upload was refused");
    assert!(acked > 0, "no upload was stored");
    assert_eq!(total(&url).1, acked);
    assert_eq!(
        metric(&url, "profiledb_ingest_rejected_memory_total"),
        refused
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A merge whose tree would pass its share of a 1 MiB query budget (3/4 of it over
/// 4 queries, 64 bytes a node: 3,072 nodes) fails with 422 naming the budget, and
/// `/metrics` shows each part's limit.
#[test]
fn a_merge_past_the_query_budget_fails_with_422() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, url) = start_with(dir.path(), &["--query-memory-mb", "1"]);
    let body: String = (0..4_000).map(|j| format!("main;f{j} 1\n")).collect();
    assert_eq!(post_folded(&url, body).status(), 200);
    let r = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/merge"))
        .query(&[("query", &format!("{CPU}{{}}")), ("from", &"0".to_string())])
        .send()
        .unwrap();
    assert_eq!(r.status(), 422);
    let json: serde_json::Value = r.json().unwrap();
    assert_eq!(json["code"], "query_too_large");
    let msg = json["message"].as_str().unwrap();
    assert!(msg.contains("exceeds 3072 nodes"), "{msg}");
    let text = reqwest::blocking::get(format!("{url}/metrics"))
        .unwrap()
        .text()
        .unwrap();
    for part in [
        "head",
        "segment_cache",
        "frame_tree",
        "wal_buffer",
        "result_cache",
        "query",
        "ingest",
    ] {
        assert!(
            text.contains(&format!("profiledb_memory_limit_bytes{{part=\"{part}\"}}")),
            "no limit gauge for {part}"
        );
    }
    assert!(text.contains("profiledb_memory_limit_bytes{part=\"query\"} 786432"));
    // Sizing figures: one series, 4,000 distinct stacks under `main`.
    assert_eq!(metric(&url, "profiledb_head_series"), 1);
    assert!(metric(&url, "profiledb_head_stack_nodes") >= 4_001);
    assert!(metric(&url, "profiledb_head_index_bytes_per_series") > 0);
    assert!(metric(&url, "profiledb_head_dictionary_bytes_per_stack_node") > 0);
    child.kill().unwrap();
    child.wait().unwrap();
}
