//! Result cache: a repeated query hits; a new write to the same range shows up at
//! once (the head part is always live) and a flush invalidates the cached part. In
//! its own test binary because the cache counters in /metrics are process-wide.

mod common;

use std::time::{Duration, Instant};

use common::TestServer;
use serde_json::{json, Value};

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
const SCALE: i64 = 10_000_000;

fn metric(s: &TestServer, name: &str) -> u64 {
    let text = s.get("/metrics").text().unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn wait_segments(s: &TestServer, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(s, "profiledb_segments") < n {
        assert!(Instant::now() < deadline, "no flush within 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ingest(s: &TestServer, from_s: i64, body: &str) {
    let r = s
        .client
        .post(format!("{}/ingest", s.url))
        .query(&[("name", "app.cpu"), ("from", &from_s.to_string())])
        .body(body.to_string())
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
}

fn total(s: &TestServer, from_s: i64) -> i64 {
    let r = s
        .client
        .post(format!(
            "{}/querier.v1.QuerierService/SelectMergeStacktraces",
            s.url
        ))
        .header("content-type", "application/json")
        .body(
            json!({"profileTypeID": CPU, "labelSelector": "{}", "start": from_s * 1000,
                   "end": from_s * 1000 + 59_999})
            .to_string(),
        )
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().unwrap();
    v["flamegraph"]["total"]
        .as_str()
        .unwrap_or("0")
        .parse()
        .unwrap()
}

#[test]
fn cache_hit_then_invalidation() {
    let s = TestServer::start_with(|o| {
        o.store.flush_grace = Duration::from_millis(200);
    });
    // Two hours ago: the partition is over, so it flushes after the grace period.
    let t = (profiledb_storage::now_ms() / 1000 - 7200) / 60 * 60;
    ingest(&s, t, "main;a 3\n");
    wait_segments(&s, 1);

    let (h0, m0) = (
        metric(&s, "profiledb_query_cache_hits_total"),
        metric(&s, "profiledb_query_cache_misses_total"),
    );
    assert_eq!(total(&s, t), 3 * SCALE);
    assert_eq!(metric(&s, "profiledb_query_cache_misses_total"), m0 + 1);
    assert_eq!(total(&s, t), 3 * SCALE);
    assert_eq!(metric(&s, "profiledb_query_cache_hits_total"), h0 + 1);

    // A late write to the same range lands in the head: visible at once.
    ingest(&s, t, "main;b 2\n");
    assert_eq!(total(&s, t), 5 * SCALE);
    // Once it is flushed the segment set changed: the cached part is not reused.
    wait_segments(&s, 2);
    let m1 = metric(&s, "profiledb_query_cache_misses_total");
    assert_eq!(total(&s, t), 5 * SCALE);
    assert_eq!(metric(&s, "profiledb_query_cache_misses_total"), m1 + 1);
    assert_eq!(total(&s, t), 5 * SCALE);
}
