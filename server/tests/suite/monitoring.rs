//! The self-monitoring files in deploy/: the alerting rules pass `promtool check
//! rules` and their unit tests (`promtool test rules`), every dashboard query is
//! PromQL that promtool parses, and every metric the dashboard and the rules name
//! is in the `/metrics` of real processes: a single node and, with moto, a
//! writer, a querier and a compactor over a real bucket. That last check is the
//! oracle against drift: a metric renamed in the code fails it.

use crate::moto;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::{free_port, on_path, repo_root, skip_or_fail, spawn_ready, TestServer};

const BIN: &str = env!("CARGO_BIN_EXE_profiledb");
const RULES: &str = "deploy/prometheus/profiledb-alerts.yaml";
const DASHBOARD: &str = "deploy/grafana/dashboards/profiledb.json";

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap()
}

fn promtool() -> Option<PathBuf> {
    let p = on_path("promtool");
    if p.is_none() {
        skip_or_fail("promtool is not installed (Debian prometheus)");
    }
    p
}

fn promtool_ok(promtool: &Path, args: &[&str], dir: &Path) {
    let out = Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every panel's query, as the dashboard has it.
fn dashboard_queries() -> Vec<(String, String)> {
    let d: Value = serde_json::from_str(&read(DASHBOARD)).unwrap();
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            let title = p["title"].as_str().unwrap().to_string();
            out.push((title, t["expr"].as_str().unwrap().to_string()));
        }
    }
    out
}

/// The rules' expressions.
fn rule_queries() -> Vec<(String, String)> {
    let rules: serde_norway::Value = serde_norway::from_str(&read(RULES)).unwrap();
    let mut out = Vec::new();
    for g in rules["groups"].as_sequence().unwrap() {
        for r in g["rules"].as_sequence().unwrap() {
            let name = r["alert"].as_str().unwrap().to_string();
            out.push((name, r["expr"].as_str().unwrap().to_string()));
        }
    }
    out
}

/// `profiledb_…` names in a query.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let re = regex::Regex::new(r"\bprofiledb_[a-z0-9_]+").unwrap();
    re.find_iter(expr).map(|m| m.as_str().to_string()).collect()
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    let Some(promtool) = promtool() else { return };
    let dir = repo_root().join("deploy/prometheus");
    promtool_ok(
        &promtool,
        &["check", "rules", "profiledb-alerts.yaml"],
        &dir,
    );
    promtool_ok(
        &promtool,
        &["test", "rules", "profiledb-alerts.test.yaml"],
        &dir,
    );
    // Every alert has a unit test that expects it to fire.
    let tests = std::fs::read_to_string(dir.join("profiledb-alerts.test.yaml")).unwrap();
    for (alert, _) in rule_queries() {
        assert!(
            tests.contains(&format!("alertname: {alert}")),
            "a test of {alert}"
        );
    }
}

#[test]
fn dashboard_queries_are_promql_and_panels_do_not_overlap() {
    let d: Value = serde_json::from_str(&read(DASHBOARD)).unwrap();
    let panels = d["panels"].as_array().unwrap();
    let mut ids = BTreeSet::new();
    let mut cells = BTreeSet::new();
    for p in panels {
        assert!(ids.insert(p["id"].as_u64().unwrap()), "unique panel ids");
        let g = &p["gridPos"];
        let [x, y, w, h] = ["x", "y", "w", "h"].map(|k| g[k].as_u64().unwrap());
        assert!(x + w <= 24, "{}: inside the 24-column grid", p["title"]);
        for cx in x..x + w {
            for cy in y..y + h {
                assert!(
                    cells.insert((cx, cy)),
                    "{} overlaps another panel",
                    p["title"]
                );
            }
        }
        if p["type"] != "row" {
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        }
    }
    let Some(promtool) = promtool() else { return };
    // Grafana's variables as Prometheus would see them once substituted.
    let rules: Vec<serde_json::Value> = dashboard_queries()
        .iter()
        .enumerate()
        .map(|(i, (_, e))| {
            let e = e
                .replace("$__rate_interval", "5m")
                .replace("$job", ".*")
                .replace("$instance", ".*");
            serde_json::json!({"record": format!("dashboard:panel_{i}"), "expr": e})
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = serde_json::json!({"groups": [{"name": "dashboard", "rules": rules}]});
    // JSON is YAML: promtool reads it as a rules file.
    std::fs::write(dir.path().join("dashboard.yaml"), file.to_string()).unwrap();
    promtool_ok(&promtool, &["check", "rules", "dashboard.yaml"], dir.path());
}

/// Metric names of the sample lines of a `/metrics` text.
fn exported(url: &str) -> BTreeSet<String> {
    let text = reqwest::blocking::get(format!("{url}/metrics"))
        .unwrap()
        .text()
        .unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap().to_string())
        .collect()
}

/// A single node after an upload, a refused upload and a query: every family it
/// has, including those that appear with their first sample.
fn single_node_metrics() -> BTreeSet<String> {
    let s = TestServer::start();
    let post = |labels: &str| {
        s.client
            .post(format!(
                "{}/ingest?name=app.cpu{{{labels}}}&from=now-10s",
                s.url
            ))
            .header("X-Scope-OrgID", "acme")
            .body("main;work 5\n")
            .send()
            .unwrap()
            .status()
    };
    assert_eq!(post("host=a"), 200);
    // Past the default 30 labels a series: a per-tenant refusal.
    let many: Vec<String> = (0..31).map(|i| format!("l{i}=v")).collect();
    assert_eq!(post(&many.join(",")), 400);
    let q = "process_cpu:cpu:nanoseconds:cpu:nanoseconds{service_name=\"app\"}";
    assert_eq!(s.total(Some("acme"), q), 50_000_000);
    exported(&s.url)
}

/// A writer, a querier and a compactor over moto; None when moto is missing.
fn cluster_metrics() -> Option<BTreeSet<String>> {
    let Some(moto) = moto::MotoServer::start() else {
        skip_or_fail("moto is not installed (target/moto-venv, as .ci/run makes it)");
        return None;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut names = BTreeSet::new();
    let mut children = Vec::new();
    for role in ["writer", "querier", "compactor"] {
        let port = free_port();
        let url = format!("http://127.0.0.1:{port}");
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "--role", role, "--memory-mb", "256"])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(dir.path().join(role))
            .args(["--storage", &format!("s3://{}/monitoring", moto::BUCKET)])
            .args(["--s3-endpoint", &moto.endpoint()])
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1")
            .stderr(Stdio::null());
        let child = spawn_ready(cmd, &url);
        if role == "writer" {
            let r = reqwest::blocking::Client::new()
                .post(format!("{url}/ingest?name=app.cpu&from=now-10s"))
                .body("main;work 5\n")
                .send()
                .unwrap();
            assert_eq!(r.status(), 200);
        }
        names.extend(exported(&url));
        children.push(child);
    }
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
    Some(names)
}

#[test]
fn dashboard_and_rules_name_only_metrics_real_processes_export() {
    let mut have = single_node_metrics();
    let cluster = cluster_metrics();
    let with_cluster = cluster.is_some();
    have.extend(cluster.into_iter().flatten());
    let mut missing = Vec::new();
    for (source, queries) in [
        ("dashboard", dashboard_queries()),
        ("rules", rule_queries()),
    ] {
        for (what, expr) in queries {
            for name in metric_names(&expr) {
                // Without moto only the single node's metrics can be checked.
                let cluster_only = [
                    "profiledb_bucket_",
                    "profiledb_upload_",
                    "profiledb_mirror_",
                ]
                .iter()
                .any(|p| name.starts_with(p));
                if !have.contains(&name) && (with_cluster || !cluster_only) {
                    missing.push(format!("{source} {what}: {name}"));
                }
            }
        }
    }
    assert!(missing.is_empty(), "not in any /metrics: {missing:#?}");
}
