//! The real binary with `--log-format json`: every line it writes to stderr is a
//! JSON object, each request answered leaves one line with its tenant and the
//! request id the response carries (the client's when it sends one), and
//! `/metrics` counts the requests made per route template and status class.

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;

use crate::common::{free_port, metric_value, spawn_ready};

const BIN: &str = env!("CARGO_BIN_EXE_profiledb");

#[test]
fn json_logs_carry_tenant_and_request_id_and_metrics_count_each_route() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("stderr.log");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let mut cmd = Command::new(BIN);
    cmd.args(["--log-format", "json", "serve", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--fsync", "never", "--compaction-interval-minutes", "0"])
        .env("RUST_LOG", "info")
        .stderr(std::fs::File::create(&log_path).unwrap());
    let mut child = spawn_ready(cmd, &url);
    let client = reqwest::blocking::Client::new();

    // Three uploads of tenant acme, the first with the client's own request id.
    let mut ids = BTreeSet::new();
    for i in 0..3 {
        let mut req = client
            .post(format!("{url}/ingest?name=app.cpu&from=now-10s"))
            .header("X-Scope-OrgID", "acme")
            .body(format!("main;f{i} 1\n"));
        if i == 0 {
            req = req.header("X-Request-Id", "client-id-0");
        }
        let r = req.send().unwrap();
        assert_eq!(r.status(), 200);
        let id = r.headers()["x-request-id"].to_str().unwrap().to_string();
        if i == 0 {
            assert_eq!(id, "client-id-0", "the client's id is kept");
        } else {
            assert_eq!(id.len(), 32, "{id}");
        }
        ids.insert(id);
    }
    // Two label queries of the default tenant, one refused query, one unknown path.
    let get = |path: &str| client.get(format!("{url}{path}")).send().unwrap().status();
    for _ in 0..2 {
        assert_eq!(get("/api/v1/labels?query=%7B%7D"), 200);
    }
    assert_eq!(get("/api/v1/merge"), 400);
    assert_eq!(get("/no/such/route"), 404);

    let metrics = client
        .get(format!("{url}/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let count = |labels: &str| {
        metric_value(
            &metrics,
            &format!("profiledb_http_request_duration_seconds_count{{{labels}}}"),
        )
        .unwrap_or_else(|| panic!("no histogram for {labels}"))
    };
    assert_eq!(
        count(r#"route="/ingest",method="POST",status_class="2xx""#),
        3.0
    );
    assert_eq!(
        count(r#"route="/api/v1/labels",method="GET",status_class="2xx""#),
        2.0
    );
    assert_eq!(
        count(r#"route="/api/v1/merge",method="GET",status_class="4xx""#),
        1.0
    );
    assert_eq!(
        count(r#"route="unmatched",method="GET",status_class="4xx""#),
        1.0
    );
    let inf = metric_value(
        &metrics,
        r#"profiledb_http_request_duration_seconds_bucket{route="/ingest",method="POST",status_class="2xx",le="+Inf"}"#,
    );
    assert_eq!(inf, Some(3.0));
    // Raw paths never become labels.
    assert!(!metrics.contains("/no/such/route"));

    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(&log_path).unwrap();
    let lines: Vec<Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(lines
        .iter()
        .all(|l| l["timestamp"].is_string() && l["level"].is_string()));
    let requests: Vec<&Value> = lines.iter().filter(|l| l["message"] == "request").collect();
    let ingests: Vec<&&Value> = requests
        .iter()
        .filter(|l| l["route"] == "/ingest")
        .collect();
    assert_eq!(ingests.len(), 3, "{log}");
    let logged: BTreeSet<String> = ingests
        .iter()
        .map(|l| l["request_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(logged, ids, "the ids the responses carried");
    for l in &ingests {
        assert_eq!(l["tenant"], "acme");
        assert_eq!(l["status"], 200);
        assert_eq!(l["method"], "POST");
        assert!(l["duration_ms"].as_f64().is_some());
    }
    let labels: Vec<&&Value> = requests
        .iter()
        .filter(|l| l["route"] == "/api/v1/labels")
        .collect();
    assert_eq!(labels.len(), 2);
    assert!(labels.iter().all(|l| l["tenant"] == "anonymous"));
    let unmatched = requests.iter().find(|l| l["route"] == "unmatched").unwrap();
    assert_eq!(unmatched["path"], "/no/such/route");
    assert_eq!(unmatched["status"], 404);
    // Probes are logged at debug only.
    assert!(!requests.iter().any(|l| l["route"] == "/ready"));
}
