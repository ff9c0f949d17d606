//! The agent under the server's control plane, end to end: a real `profiledb serve` on
//! loopback sets the plan, the real agent binary follows it.
//!
//! Skips (passing, with a message) when the kernel refuses perf_event_open or the
//! server binary is not built next to the test (a failure instead with
//! `PROFILEDB_REQUIRE_EXTERNAL=1`). This VM has no PMU: plans asking for hardware
//! events get cpu-clock, through the same code path.

mod common;

use std::net::SocketAddr;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{http, http_get, server_for_agent, Kill};
use serde_json::Value;

/// The server, or why the test cannot run here.
fn setup() -> Option<(tempfile::TempDir, Kill, SocketAddr)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, addr) = server_for_agent(dir.path())?;
    Some((dir, server, addr))
}

fn put_policy(addr: SocketAddr, policy: &str) {
    let (status, body) =
        http(addr, "PUT", "/api/v1/admin/agents/policy", policy).expect("put policy");
    assert_eq!(status, 200, "{body}");
}

/// Starts the agent with `--control` for `secs` seconds as `host`.
fn spawn_agent(addr: SocketAddr, host: &str, secs: u32, extra: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_profiledb-agent"))
        .args(["--server", &format!("http://{addr}"), "--control"])
        .args(["--host", host, "--service", host])
        .args(["--duration", &format!("{secs}s"), "--push-interval", "1s"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn agent")
}

fn finish(child: std::process::Child) -> (Output, String) {
    let out = child.wait_with_output().expect("agent runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    eprintln!("{stderr}");
    assert!(out.status.success(), "agent failed: {stderr}");
    (out, stderr)
}

/// The agent `host` as `GET /api/v1/agents` shows it, once `ready` holds.
fn wait_agent(addr: SocketAddr, host: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let t = Instant::now();
    loop {
        let (status, body) = http_get(addr, "/api/v1/agents").expect("agents");
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).expect("json");
        if let Some(a) = v["agents"]
            .as_array()
            .and_then(|a| a.iter().find(|a| a["host"] == host))
        {
            if ready(a) {
                return a.clone();
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "agent {host} never reached the expected state: {body}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn sampled_at(stderr: &str, hz: u64) -> usize {
    stderr
        .lines()
        .filter(|l| l.contains(&format!("cpu-clock@{hz}Hz")))
        .count()
}

#[test]
fn agent_follows_a_plan_switch_and_reports() {
    let Some((_dir, _server, addr)) = setup() else {
        return;
    };
    put_policy(
        addr,
        r#"{"period_secs": 2, "window_secs": 2, "max_cpu_percent": 50,
            "events": [{"event": "cpu-clock", "frequency_hz": 19},
                       {"event": "cycles", "frequency_hz": 19}],
            "counting": {"events": ["cpu-clock"], "interval_secs": 1, "max_fds": 64}}"#,
    );
    // Something to sample, so the report has samples to count.
    let _busy = Kill(
        Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .expect("spawn a busy shell"),
    );
    let host = format!("switch-{}", std::process::id());
    let agent = spawn_agent(addr, &host, 9, &[]);
    let first = wait_agent(addr, &host, |a| {
        a["plan"]["events"][0]["frequency_hz"] == 19
    });
    assert_eq!(first["status"], "ok");
    // An engineer turns the host up: the next check-in carries it.
    let (status, body) = http(
        addr,
        "POST",
        "/api/v1/admin/agents/overrides",
        &format!(r#"{{"host": "{host}", "frequency_hz": 97, "until": "10m", "reason": "test"}}"#),
    )
    .expect("override");
    assert_eq!(status, 201, "{body}");
    let switched = wait_agent(addr, &host, |a| {
        a["plan"]["events"][0]["frequency_hz"] == 97
    });
    assert!(
        switched["plan"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("override 1")),
        "{switched}"
    );
    let (_, stderr) = finish(agent);
    assert!(sampled_at(&stderr, 19) >= 1, "sampled at 19 Hz first");
    assert!(
        sampled_at(&stderr, 97) >= 1,
        "then at 97 Hz, without a restart"
    );
    assert_eq!(stderr.matches("following the server's plans").count(), 1);

    let a = wait_agent(addr, &host, |a| a["counting_rounds"].as_u64() > Some(0));
    assert!(a["rss_bytes"].as_u64() > Some(0), "{a}");
    assert!(a["samples_sent"].as_u64() > Some(0), "{a}");
    assert!(
        a["platform"].as_str().is_some_and(|p| p.contains('/')),
        "{a}"
    );
    let avail = a["available_events"].as_array().expect("events");
    assert!(avail.iter().any(|e| e == "cpu-clock"), "{a}");
    if !avail.iter().any(|e| e == "cycles") {
        assert!(
            a["plan"]["reason"]
                .as_str()
                .is_some_and(|r| r.contains("not available on this host: cycles")),
            "{a}"
        );
    }
    // Counting rounds are stored as per-cgroup time series.
    let (_, types) = http_get(addr, "/api/v1/profile_types").expect("types");
    assert!(types.contains("cgroup:cpu-clock:nanoseconds"), "{types}");
}

#[test]
fn agent_keeps_its_plan_when_the_server_goes_away() {
    let Some((_dir, server, addr)) = setup() else {
        return;
    };
    put_policy(
        addr,
        r#"{"period_secs": 2, "window_secs": 1, "max_cpu_percent": 50,
            "events": [{"event": "cpu-clock", "frequency_hz": 23}]}"#,
    );
    let host = format!("orphan-{}", std::process::id());
    let agent = spawn_agent(addr, &host, 9, &["--frequency", "11"]);
    wait_agent(addr, &host, |a| a["plan"]["version"].as_u64() > Some(0));
    drop(server); // kill -9
    let (_, stderr) = finish(agent);
    let windows_at_23 = sampled_at(&stderr, 23);
    assert!(
        windows_at_23 >= 3,
        "windows keep opening each period with the last plan: {windows_at_23}"
    );
    assert_eq!(
        sampled_at(&stderr, 11),
        0,
        "never fell back to the command line"
    );
    assert!(
        stderr.contains("failed)") && !stderr.contains("(0 failed)"),
        "{stderr}"
    );
}

#[test]
fn a_window_over_its_cpu_budget_is_cut_then_stopped() {
    let Some((_dir, _server, addr)) = setup() else {
        return;
    };
    // A budget no process can keep: the guard must act (period 8 s: 2 s guard windows).
    put_policy(
        addr,
        r#"{"period_secs": 8, "window_secs": 8, "max_cpu_percent": 0.0001,
            "events": [{"event": "cpu-clock", "frequency_hz": 40}]}"#,
    );
    // Something to sample, so the agent has work to do.
    let _busy = Kill(
        Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .expect("spawn a busy shell"),
    );
    let host = format!("budget-{}", std::process::id());
    let agent = spawn_agent(addr, &host, 7, &[]);
    let (_, stderr) = finish(agent);
    // The final report, sent as the agent stops, carries the guard's last action.
    let a = wait_agent(addr, &host, |a| {
        a["guard"].as_str().is_some_and(|g| !g.is_empty())
    });
    assert!(
        a["guard"]
            .as_str()
            .is_some_and(|g| g.starts_with("stopped the window") && g.contains("budget 0.0001%")),
        "{a}"
    );
    let halved = stderr.find("halved the frequencies").expect("halved first");
    let stopped = stderr.find("stopped the window").expect("then stopped");
    assert!(halved < stopped, "{stderr}");
    assert!(sampled_at(&stderr, 20) >= 1, "reopened at half frequency");
}
