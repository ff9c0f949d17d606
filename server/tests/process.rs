//! The real `profiledb` binary: `--help`, SIGTERM flushes and exits 0, and writes
//! acknowledged before a SIGKILL are there after a restart.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_profiledb");
const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start(dir: &std::path::Path) -> (Child, String) {
    let port = free_port();
    let child = Command::new(BIN)
        .args(["serve", "--data-dir"])
        .arg(dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let client = reqwest::blocking::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !client
        .get(format!("{url}/ready"))
        .send()
        .is_ok_and(|r| r.status() == 200)
    {
        assert!(Instant::now() < deadline, "server did not become ready");
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, url)
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
