//! Result cache: a repeated query hits; a new write to the same range shows up at
//! once (the head part is always live) and a flush invalidates the cached part. In
//! its own test binary because the cache counters in /metrics are process-wide.

use std::time::{Duration, Instant};

use crate::common::TestServer;
use serde_json::{json, Value};

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
const SCALE: i64 = 10_000_000;

fn wait_segments(s: &TestServer, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while s.metric("profiledb_segments") < n {
        assert!(Instant::now() < deadline, "no flush within 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
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
    s.ingest("", "app.cpu", t, "main;a 3\n");
    wait_segments(&s, 1);

    let (h0, m0) = (
        s.metric("profiledb_query_cache_hits_total"),
        s.metric("profiledb_query_cache_misses_total"),
    );
    assert_eq!(total(&s, t), 3 * SCALE);
    assert_eq!(s.metric("profiledb_query_cache_misses_total"), m0 + 1);
    // A part keyed by the exact range is kept from its second ask on.
    assert_eq!(total(&s, t), 3 * SCALE);
    assert_eq!(s.metric("profiledb_query_cache_misses_total"), m0 + 2);
    assert_eq!(total(&s, t), 3 * SCALE);
    assert_eq!(s.metric("profiledb_query_cache_hits_total"), h0 + 1);

    // A late write to the same range lands in the head: visible at once.
    s.ingest("", "app.cpu", t, "main;b 2\n");
    assert_eq!(total(&s, t), 5 * SCALE);
    // Once it is flushed the segment set changed: the cached part is not reused.
    wait_segments(&s, 2);
    let m1 = s.metric("profiledb_query_cache_misses_total");
    assert_eq!(total(&s, t), 5 * SCALE);
    assert_eq!(s.metric("profiledb_query_cache_misses_total"), m1 + 1);
    assert_eq!(total(&s, t), 5 * SCALE);
}

/// `GET /api/v1/flamegraph` over `from..until` (unix seconds or ms, as sent):
/// the parsed answer and its exact body.
fn flamegraph_between(s: &TestServer, from: i64, until: i64) -> (Value, String) {
    let r = s
        .client
        .get(format!("{}/api/v1/flamegraph", s.url))
        .query(&[
            ("query", format!("{CPU}{{}}")),
            ("from", from.to_string()),
            ("until", until.to_string()),
        ])
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().unwrap();
    (serde_json::from_str(&text).unwrap(), text)
}

/// Whole answers over ranges wholly in segments are served from the cache, byte for
/// byte; a late write into the range is never answered from it, and after its flush
/// the answer is recomputed and cached again.
#[test]
fn answers_are_cached_only_while_segments_alone_answer() {
    let s = TestServer::start_with(|o| {
        o.store.flush_grace = Duration::from_millis(200);
    });
    let t = (profiledb_storage::now_ms() / 1000 - 3 * 3600) / 60 * 60;
    s.ingest("", "app.cpu", t, "main;a 3\nmain;b 1\n");
    wait_segments(&s, 1);
    let hits = || s.metric("profiledb_query_response_cache_hits_total");
    let misses = || s.metric("profiledb_query_response_cache_misses_total");

    let (h0, m0) = (hits(), misses());
    let (v1, body1) = flamegraph_between(&s, t, t + 59);
    assert_eq!(v1["total"], 4 * SCALE);
    assert_eq!((hits(), misses()), (h0, m0 + 1));
    // A range asked once (a sliding window's) is not kept; asked again, it is.
    let (_, body2) = flamegraph_between(&s, t, t + 59);
    assert_eq!(body2, body1);
    assert_eq!(
        (hits(), misses()),
        (h0, m0 + 2),
        "not kept from its first ask"
    );
    let (_, body3) = flamegraph_between(&s, t, t + 59);
    assert_eq!(
        body3, body1,
        "a cached answer is the computed one, byte for byte"
    );
    assert_eq!((hits(), misses()), (h0 + 1, m0 + 2));

    // A late write puts a head partition over the range: computed live, not cached.
    s.ingest("", "app.cpu", t, "main;c 2\n");
    let (v3, _) = flamegraph_between(&s, t, t + 59);
    assert_eq!(v3["total"], 6 * SCALE);
    assert_eq!(
        hits(),
        h0 + 1,
        "no answer-cache lookup while the head overlaps"
    );

    // Flushed: a new segment version, so fresh computations (two, for the new
    // key to be kept), then hits again.
    wait_segments(&s, 2);
    let (v4, body4) = flamegraph_between(&s, t, t + 59);
    assert_eq!(v4["total"], 6 * SCALE);
    let (_, body5) = flamegraph_between(&s, t, t + 59);
    let (_, body6) = flamegraph_between(&s, t, t + 59);
    assert_eq!(body5, body4);
    assert_eq!(body6, body4);
    assert_eq!(hits(), h0 + 2);
}

fn group_rows(s: &TestServer, start_ms: i64, end_ms: i64) -> Value {
    let r = s
        .client
        .post(format!("{}/api/v1/query", s.url))
        .json(
            &json!({"profile_type": CPU, "start": start_ms, "end": end_ms,
                      "group_by": ["function"], "function": "^(a|b)$"}),
        )
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().unwrap()
}

const HOUR: i64 = 3_600_000;

/// A server that flushes a partition 200 ms after its last write, and the start
/// of the hour four hours ago (partitions there are past, so they flush).
fn flushing_server() -> (TestServer, i64) {
    let s = TestServer::start_with(|o| {
        o.store.flush_grace = Duration::from_millis(200);
    });
    (s, (profiledb_storage::now_ms() / HOUR - 4) * HOUR)
}

/// A window that moves but still covers a flushed partition reuses that segment's
/// part (merge and group-by) and answers exactly as computing it afresh.
#[test]
fn moving_windows_reuse_segment_parts() {
    // Two writes into the partition, flushed as one segment: the first minute,
    // and 50 minutes in (a leaf the group-by's filter leaves out).
    let s = TestServer::start_with(|o| o.store.flush_grace = Duration::from_secs(2));
    let t = (profiledb_storage::now_ms() / HOUR - 4) * HOUR;
    let hour = HOUR;
    s.ingest(
        "",
        "app.cpu",
        t / 1000 + 60,
        "main;a 3\nmain;b 1\nmain;c 5\n",
    );
    s.ingest("", "app.cpu", t / 1000 + 50 * 60, "main;d 2\n");
    wait_segments(&s, 1);
    assert_eq!(s.metric("profiledb_segments"), 1);
    let hits = || s.metric("profiledb_query_segment_part_hits_total");
    let misses = || s.metric("profiledb_query_segment_part_misses_total");

    let (h0, m0) = (hits(), misses());
    let first = group_rows(&s, t - 10, t + hour + 10);
    assert_eq!(first["total"], 4 * SCALE);
    // A function filter asked for the first time: the partition's unfiltered sums
    // are computed and kept, the filtered part is not.
    assert_eq!((hits(), misses()), (h0, m0 + 1));
    // Moved by a few ms: a new answer key, the same partition. The filter's second
    // run reads the kept sums and keeps its own part...
    let second = group_rows(&s, t - 20, t + hour + 20);
    assert_eq!(second, first);
    assert_eq!((hits(), misses()), (h0 + 1, m0 + 2));
    // ...which the third finds.
    let third = group_rows(&s, t - 30, t + hour + 30);
    assert_eq!(third, first);
    assert_eq!((hits(), misses()), (h0 + 2, m0 + 2));

    // Merges likewise.
    let (v1, _) = flamegraph_between(&s, t - 10, t + hour + 10);
    let (v2, _) = flamegraph_between(&s, t - 30, t + hour + 30);
    assert_eq!(v1, v2);
    assert_eq!(v1["total"], 11 * SCALE);
    assert_eq!((hits(), misses()), (h0 + 3, m0 + 3));
    // A window cutting into the partition on the ten-minute grid: three chunks,
    // computed once and kept...
    let (v3, _) = flamegraph_between(&s, t, t + 30 * 60_000);
    assert_eq!(
        v3["total"],
        9 * SCALE,
        "the samples are in the first minute"
    );
    assert_eq!((hits(), misses()), (h0 + 3, m0 + 6));
    // ...then found when asked again (moved by a ms, so the answer cache misses).
    let (v4, _) = flamegraph_between(&s, t - 1, t + 30 * 60_000);
    assert_eq!(v4, v3);
    assert_eq!((hits(), misses()), (h0 + 6, m0 + 6));
    // Off the grid, only the ragged ends are read from rows: [30 s, 25 min) is the
    // kept chunk [10, 20) min plus two ends, which are not kept.
    let (v5, _) = flamegraph_between(&s, t + 30_000, t + 25 * 60_000);
    assert_eq!(v5, v3);
    assert_eq!((hits(), misses()), (h0 + 7, m0 + 6));
    // A window holding none of the partition's data does not read it.
    let (v6, _) = flamegraph_between(&s, t + 55 * 60_000, t + hour);
    assert_eq!(v6["total"], 0);
    assert_eq!((hits(), misses()), (h0 + 7, m0 + 6));
    // One holding all of it, though not the whole hour, asks what the whole
    // partition does: its kept part.
    let (v7, _) = flamegraph_between(&s, t + 30_000, t + 55 * 60_000);
    assert_eq!(v7, v1);
    assert_eq!((hits(), misses()), (h0 + 8, m0 + 6));
}

/// A window over two flushed partitions sums their parts; moved by milliseconds
/// it asks the same parts, whose sum is kept from the second ask and read by the
/// third, as `/metrics` counts, with the same answer every time.
#[test]
fn a_moving_window_reads_the_kept_sum_of_its_parts() {
    let (s, t) = flushing_server();
    let hour = HOUR;
    s.ingest("", "app.cpu", t / 1000 + 60, "main;a 3\nmain;b 1\n");
    s.ingest(
        "",
        "app.cpu",
        (t + hour) / 1000 + 60,
        "main;a 2\nmain;c 5\n",
    );
    wait_segments(&s, 2);
    let hits = || s.metric("profiledb_query_share_sum_hits_total");
    let misses = || s.metric("profiledb_query_share_sum_misses_total");
    let (h0, m0) = (hits(), misses());
    for (i, want) in [(0, 1), (0, 2), (1, 2)].into_iter().enumerate() {
        let shift = 10 * (i as i64 + 1);
        let (v, _) = flamegraph_between(&s, t - shift, t + 2 * hour + shift);
        assert_eq!(v["total"], 11 * SCALE, "{i}");
        assert_eq!((hits() - h0, misses() - m0), want, "{i}");
    }
}
