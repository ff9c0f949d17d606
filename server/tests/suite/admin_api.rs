//! Admin API (segments, compact, retention, bearer token) over HTTP, and the offline
//! CLI commands (`profiledb segments|compact|retention`), including the refusal to
//! run while another process holds the data directory.

use std::path::Path;
use std::process::Command;

use crate::common::TestServer;
use profiledb_storage::{
    Batch, Function, Labels, Location, Sample, SeriesSamples, Store, StoreConfig, TenantId,
    PROFILE_TYPE_LABEL,
};
use serde_json::{json, Value};

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
const HOUR: i64 = 3_600_000;
const BASE: i64 = 1_600_002_000_000 - 1_600_002_000_000 % HOUR;

fn batch(tenant: &TenantId, ts: &[i64], value: i64) -> Batch {
    let mut b = Batch::new(tenant.clone());
    for (i, name) in ["main", "work"].iter().enumerate() {
        b.symbols.functions.push(Function {
            name: (*name).into(),
            file: Default::default(),
        });
        b.symbols.locations.push(Location {
            function: Some(i as u32),
            mapping: None,
            address: 0,
            line: 0,
        });
    }
    let stack = b.stacks.push(&[0, 1]);
    b.series.push(SeriesSamples {
        labels: Labels::new([(PROFILE_TYPE_LABEL, CPU), ("service_name", "api")]),
        samples: ts
            .iter()
            .map(|&t| Sample {
                timestamp_ms: t,
                stack,
                value,
            })
            .collect(),
    });
    b
}

/// Three flushes over four hourly partitions (two segments in each of the first
/// three) for tenant `acme`, plus one recent segment. Returns the value total.
fn populate(dir: &Path) -> i64 {
    let cfg = StoreConfig {
        background_flush: false,
        ..StoreConfig::default()
    };
    let store = Store::open(dir, cfg).unwrap();
    let t = TenantId::new("acme").unwrap();
    let mut total = 0;
    for round in 0..2 {
        let ts: Vec<i64> = (0..3).map(|h| BASE + h * HOUR + round * 60_000).collect();
        store.write(batch(&t, &ts, 10)).unwrap();
        total += 30;
        store.flush().unwrap();
    }
    let recent = profiledb_storage::now_ms() - HOUR;
    store.write(batch(&t, &[recent], 5)).unwrap();
    total += 5;
    store.flush().unwrap();
    store.shutdown().unwrap();
    total
}

fn segments(s: &TestServer, token: Option<&str>) -> reqwest::blocking::Response {
    let mut r = s.client.get(format!("{}/api/v1/admin/segments", s.url));
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    r.send().unwrap()
}

fn value_total(v: &Value) -> i64 {
    v["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["value_total"].as_i64().unwrap())
        .sum()
}

#[test]
fn admin_api_compacts_lists_and_applies_retention() {
    let dir = tempfile::tempdir().unwrap();
    let total = populate(dir.path());
    let s = TestServer::start_in(dir, |o| o.admin_token = Some("s3cret".into()));

    // Token checks.
    assert_eq!(segments(&s, None).status(), 401);
    assert_eq!(segments(&s, Some("wrong")).status(), 401);
    let r = s
        .client
        .post(format!("{}/api/v1/admin/compact", s.url))
        .send()
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = segments(&s, Some("s3cret"));
    assert_eq!(r.status(), 200);
    let before: Value = r.json().unwrap();
    assert_eq!(before["count"], 7);
    assert_eq!(value_total(&before), total);
    let seg0 = &before["segments"][0];
    for k in [
        "tenant",
        "min_time_ms",
        "max_time_ms",
        "level",
        "size_bytes",
        "series",
        "samples",
    ] {
        assert!(!seg0[k].is_null(), "segment info lacks {k}: {seg0}");
    }

    // Compact one tenant's old range: its three hours lie in one UTC day long
    // over, so they become one day block.
    let r = s
        .client
        .post(format!("{}/api/v1/admin/compact", s.url))
        .bearer_auth("s3cret")
        .json(&json!({"tenant": "acme", "start_ms": BASE, "end_ms": BASE + 3 * HOUR}))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let rep: Value = r.json().unwrap();
    assert_eq!(rep["compacted"].as_array().unwrap().len(), 1, "{rep}");
    assert_eq!(rep["segments_before"], 7);
    assert_eq!(rep["segments_after"], 2);
    let after: Value = segments(&s, Some("s3cret")).json().unwrap();
    assert_eq!(after["count"], 2);
    assert_eq!(value_total(&after), total);
    let lvl1 = s
        .client
        .get(format!(
            "{}/api/v1/admin/segments?level=1&tenant=acme",
            s.url
        ))
        .bearer_auth("s3cret")
        .send()
        .unwrap()
        .json::<Value>()
        .unwrap();
    assert_eq!(lvl1["count"], 1);

    // Retention: a day keeps only the recent segment.
    let r = s
        .client
        .put(format!("{}/api/v1/admin/retention", s.url))
        .bearer_auth("s3cret")
        .json(&json!({"tenant": "acme", "max_age": "1d"}))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let rep: Value = r.json().unwrap();
    assert_eq!(rep["max_age_ms"], 86_400_000);
    assert_eq!(
        rep["applied"]["deleted"].as_array().unwrap().len(),
        1,
        "{rep}"
    );
    let left: Value = segments(&s, Some("s3cret")).json().unwrap();
    assert_eq!(left["count"], 1);
    assert_eq!(value_total(&left), 5);

    // Both runs are visible in /metrics (6 sources → 1 block; the block expired).
    let metrics = s.get("/metrics").text().unwrap();
    for line in [
        "profiledb_storage_partitions_compacted_total 1",
        "profiledb_storage_segments_compacted_away_total 6",
        "profiledb_storage_retention_segments_deleted_total 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "missing {line:?} in /metrics"
        );
    }

    // Bad input.
    let r = s
        .client
        .put(format!("{}/api/v1/admin/retention", s.url))
        .bearer_auth("s3cret")
        .json(&json!({"tenant": "acme", "max_age": "soon"}))
        .send()
        .unwrap();
    assert_eq!(r.status(), 400);
}

#[test]
fn admin_api_is_open_without_a_token() {
    let s = TestServer::start();
    assert_eq!(segments(&s, None).status(), 200);
    let r = s
        .client
        .post(format!("{}/api/v1/admin/compact", s.url))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let rep: Value = r.json().unwrap();
    assert_eq!(rep["compacted"].as_array().unwrap().len(), 0);
}

fn cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_profiledb"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn offline_cli_commands() {
    let dir = tempfile::tempdir().unwrap();
    let total = populate(dir.path());
    let d = dir.path().to_str().unwrap();

    let out = cli(&["segments", "--data-dir", d]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("7 segments"), "{text}");
    // Times as UTC dates, steps and sizes for people, and no log line in the table.
    let first = profiledb::time::rfc3339(BASE);
    assert!(
        text.contains(&format!("{} {}", &first[..10], &first[11..19])),
        "{text}"
    );
    assert!(text.contains(" 10s "), "{text}");
    assert!(!text.contains("INFO") && !text.contains('\u{1b}'), "{text}");

    let out = cli(&["compact", "--data-dir", d, "--no-downsample"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}");
    // Six hour segments of one long-past day become one day block.
    assert!(text.contains("segments: 7 -> 2"), "{text}");
    assert!(text.contains("bytes:"), "{text}");

    // A dry run lists what would go and changes nothing; a tenant with no data is
    // warned about.
    let retention = |extra: &[&str]| {
        let mut args = vec!["retention", "--data-dir", d, "--max-age", "30d"];
        args.extend_from_slice(extra);
        cli(&args)
    };
    let out = retention(&["--tenant", "acme", "--dry-run"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("would delete 1 segments"), "{text}");
    assert!(text.contains("nothing changed"), "{text}");
    let out = retention(&["--tenant", "nosuchtenant", "--dry-run"]);
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tenant \"nosuchtenant\" has no data"), "{err}");
    assert!(err.contains("tenants with data: acme"), "{err}");

    let out = retention(&["--tenant", "acme"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("deleted 1 segments"), "{text}");
    assert!(text.contains("max age 30d"), "{text}");

    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    let left: i64 = store.segments().iter().map(|m| m.value_total).sum();
    assert_eq!(left, 5);
    assert!(total > left);

    // While a process holds the directory, offline commands refuse clearly.
    for args in [
        vec!["compact", "--data-dir", d],
        vec!["segments", "--data-dir", d],
    ] {
        let out = cli(&args);
        assert_eq!(out.status.code(), Some(3), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("in use by another process"), "{err}");
    }
    drop(store);
}
