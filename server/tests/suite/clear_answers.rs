//! Correct answers or clear errors: a query without a profile type, a misspelt type
//! or selector, an upload that lands in the past, an empty diff, admin times, and time
//! series steps each give what a person would expect, never a silent wrong figure.

use crate::common::{build_pprof, encode, gzip, TestServer};
use reqwest::blocking::Response;
use serde_json::{json, Value};

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
const NOW_MINUS_5M: &str = "now-5m";

fn upload(s: &TestServer, name: &str, from: &str, body: &'static str) -> Response {
    let r = s
        .client
        .post(format!("{}/ingest", s.url))
        .query(&[("name", name), ("from", from)])
        .body(body)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    r
}

/// A 400 with a JSON body whose message contains `needle`.
fn refused(r: Response, needle: &str) {
    let status = r.status();
    let text = r.text().unwrap();
    assert_eq!(status, 400, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
    assert_eq!(v["code"], "invalid_argument", "{v}");
    let msg = v["message"].as_str().unwrap();
    assert!(msg.contains(needle), "{msg:?} lacks {needle:?}");
}

fn get(s: &TestServer, path: &str, params: &[(&str, &str)]) -> Response {
    s.client
        .get(format!("{}{path}", s.url))
        .query(params)
        .send()
        .unwrap()
}

fn post(s: &TestServer, path: &str, body: Value) -> Response {
    s.client
        .post(format!("{}{path}", s.url))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .unwrap()
}

/// CPU samples of `shop` and heap bytes of `shop`: summing them would be nonsense.
fn two_types() -> TestServer {
    let s = TestServer::start();
    upload(&s, "shop.cpu", NOW_MINUS_5M, "main;work 7\n");
    upload(&s, "shop.inuse_space", NOW_MINUS_5M, "main;alloc 1000\n");
    s
}

#[test]
fn every_query_kind_needs_exactly_one_profile_type() {
    let s = two_types();
    let sel = "{service_name=\"shop\"}";
    let none = "names no profile type";
    for path in [
        "/api/v1/flamegraph",
        "/api/v1/render.svg",
        "/api/v1/pprof",
        "/api/v1/merge",
        "/api/v1/timeseries",
        "/pyroscope/render",
    ] {
        refused(get(&s, path, &[("query", sel)]), none);
        refused(get(&s, path, &[]), none);
    }
    refused(
        get(
            &s,
            "/pyroscope/render-diff",
            &[("leftQuery", sel), ("rightQuery", sel)],
        ),
        none,
    );
    refused(
        post(
            &s,
            "/api/v1/query",
            json!({"selector": sel, "group_by": ["function"]}),
        ),
        none,
    );
    refused(
        post(
            &s,
            "/api/v1/diff",
            json!({"selector": sel, "base": {"start": "now-2h", "end": "now-1h"}, "compare": {}}),
        ),
        none,
    );
    refused(
        get(
            &s,
            "/api/v1/diff.svg",
            &[
                ("query", sel),
                ("base_from", "now-2h"),
                ("base_until", "now-1h"),
                ("compare_from", "now-1h"),
                ("compare_until", "now"),
            ],
        ),
        none,
    );
    // Two different types named at once.
    refused(
        post(
            &s,
            "/api/v1/query",
            json!({"profile_type": CPU, "selector": "memory:inuse_space:bytes:space:bytes{}", "group_by": ["function"]}),
        ),
        "two profile types",
    );
    // With a type, the CPU total is the CPU samples alone: 7 × 10 ms.
    let fg: Value = get(
        &s,
        "/api/v1/flamegraph",
        &[("query", &format!("{CPU}{sel}")), ("from", "now-1h")],
    )
    .json()
    .unwrap();
    assert_eq!(fg["total"], 70_000_000);
    // The same through a `__profile_type__` matcher.
    let by_matcher = format!("{{__profile_type__=\"{CPU}\", service_name=\"shop\"}}");
    let fg: Value = get(&s, "/api/v1/flamegraph", &[("query", &by_matcher)])
        .json()
        .unwrap();
    assert_eq!(fg["total"], 70_000_000);
}

#[test]
fn misspelt_types_and_selectors_answer_what_the_form_is() {
    let s = two_types();
    let form = "expected name:sample_type:sample_unit:period_type:period_unit";
    refused(
        get(
            &s,
            "/api/v1/merge",
            &[("query", "cpu{service_name=\"shop\"}")],
        ),
        "unknown profile type \"cpu\"",
    );
    refused(get(&s, "/api/v1/pprof", &[("query", "nonsense")]), form);
    refused(
        get(
            &s,
            "/api/v1/flamegraph",
            &[("query", "service_name=\"shop\"")],
        ),
        "inside braces",
    );
    refused(
        get(
            &s,
            "/api/v1/flamegraph",
            &[("query", &format!("{CPU}{{service_name=}}"))],
        ),
        "invalid selector",
    );
    // Connect, in JSON: a bad type is invalid_argument, not an empty flame graph.
    let r = post(
        &s,
        "/querier.v1.QuerierService/SelectMergeStacktraces",
        json!({"profileTypeID": "cpu", "labelSelector": "{}", "start": 0, "end": 0}),
    );
    refused(r, "unknown profile type \"cpu\"");
    // Well-formed, matching nothing: an empty answer, not an error.
    let fg: Value = get(
        &s,
        "/api/v1/flamegraph",
        &[("query", &format!("{CPU}{{service_name=\"nobody\"}}"))],
    )
    .json()
    .unwrap();
    assert_eq!(fg["total"], 0);
}

#[test]
fn profile_types_are_filtered_by_the_selector() {
    let s = two_types();
    upload(&s, "other.wall", NOW_MINUS_5M, "main 1\n");
    let types = |q: Option<&str>| -> Vec<String> {
        let params: Vec<(&str, &str)> = q.map(|q| vec![("query", q)]).unwrap_or_default();
        get(&s, "/api/v1/profile_types", &params).json().unwrap()
    };
    assert_eq!(types(None).len(), 3);
    assert_eq!(
        types(Some("{service_name=\"shop\"}")),
        vec![
            "memory:inuse_space:bytes:space:bytes".to_string(),
            CPU.to_string()
        ]
    );
    assert!(types(Some("{service_name=\"nonexistent\"}")).is_empty());
}

#[test]
fn a_gzipped_pprof_without_format_is_read_as_pprof() {
    let s = TestServer::start();
    let p = build_pprof(
        &[("samples", "count"), ("cpu", "nanoseconds")],
        ("cpu", "nanoseconds", 10_000_000),
        &[(vec!["main".into(), "work".into()], vec![3, 30_000_000])],
        &[],
        0,
    );
    for (name, body) in [("gz", gzip(&encode(&p))), ("plain", encode(&p))] {
        let r = s
            .client
            .post(format!("{}/ingest", s.url))
            .query(&[("name", name), ("from", "now-1m")])
            .header("content-type", "application/octet-stream")
            .body(body)
            .send()
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().unwrap());
        let q = format!("{CPU}{{service_name=\"{name}\"}}");
        assert_eq!(s.total(None, &q), 30_000_000, "{name}");
    }
}

#[test]
fn an_upload_says_where_its_samples_went() {
    let s = TestServer::start();
    let r = upload(&s, "old.cpu", "2020-01-01T00:00:00Z", "main 1\n");
    assert_eq!(r.headers()["x-profiledb-samples"], "1");
    assert_eq!(
        r.headers()["x-profiledb-stored-range"],
        "2020-01-01T00:00:00.000Z/2020-01-01T00:00:00.000Z"
    );
    let fresh = upload(&s, "new.cpu", "now-1m", "main 1\n");
    assert!(fresh.headers().contains_key("x-profiledb-stored-range"));
    let metrics = get(&s, "/metrics", &[]).text().unwrap();
    assert!(
        metrics.contains("\nprofiledb_ingest_backdated_profiles_total 1\n"),
        "the old upload is counted once, the fresh one not"
    );
}

#[test]
fn a_diff_with_an_empty_side_says_so() {
    let s = TestServer::start();
    upload(&s, "app.cpu", NOW_MINUS_5M, "main;a 3\nmain;b 1\n");
    let diff = |base: (&str, &str), compare: (&str, &str)| -> Value {
        let r = post(
            &s,
            "/api/v1/diff",
            json!({"profile_type": CPU, "selector": "{service_name=\"app\"}",
                   "base": {"start": base.0, "end": base.1},
                   "compare": {"start": compare.0, "end": compare.1}}),
        );
        assert_eq!(r.status(), 200);
        r.json().unwrap()
    };
    let v = diff(("now-3h", "now-2h"), ("now-1h", "now"));
    assert_eq!(v["notice"], "base range has no samples");
    assert_eq!(v["stats"]["samples_base"], 0);
    let v = diff(("now-3h", "now-2h"), ("now-5h", "now-4h"));
    assert_eq!(v["notice"], "neither range has samples");
    let text = v.to_string();
    assert!(!text.contains("-0.0"), "negative zero in {text}");
    let v = diff(("now-1h", "now"), ("now-1h", "now"));
    assert!(v.get("notice").is_none());
    assert_eq!(v["stats"]["manhattan"], 0.0);
}

#[test]
fn time_series_sit_on_whole_steps_and_answer_every_step() {
    let s = TestServer::start();
    // 2023-01-01T00:00:30Z: inside the step starting at 00:00:00 (1 min steps).
    upload(&s, "app.cpu", "1672531230", "main 2\n");
    let v: Value = get(
        &s,
        "/api/v1/timeseries",
        &[
            ("query", &format!("{CPU}{{}}")),
            ("from", "1672531215"),
            ("until", "1672531380"),
            ("step", "1m"),
        ],
    )
    .json()
    .unwrap();
    assert_eq!(
        v["series"][0]["points"],
        json!([
            [1672531200000i64, 20000000],
            [1672531260000i64, 0],
            [1672531320000i64, 0]
        ])
    );
    // Connect's SelectSeries, the same grid.
    let r = post(
        &s,
        "/querier.v1.QuerierService/SelectSeries",
        json!({"profileTypeID": CPU, "labelSelector": "{}", "start": 1672531215000i64,
               "end": 1672531380000i64, "step": 60}),
    );
    let v: Value = r.json().unwrap();
    let stamps: Vec<&str> = v["series"][0]["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["timestamp"].as_str().unwrap())
        .collect();
    assert_eq!(stamps, ["1672531200000", "1672531260000", "1672531320000"]);
}

#[test]
fn admin_times_retention_reads_and_dry_runs() {
    let s = TestServer::start();
    upload(&s, "app.cpu", "2020-01-01T00:00:00Z", "main 1\n");
    let r = get(&s, "/api/v1/admin/segments", &[("start", "now-1h")]);
    assert_eq!(r.status(), 200, "{}", r.text().unwrap());
    let r = get(&s, "/api/v1/admin/segments", &[("start", "yesterday")]);
    refused(r, "start");
    let put = |body: Value| -> Value {
        let r = s
            .client
            .put(format!("{}/api/v1/admin/retention", s.url))
            .body(body.to_string())
            .send()
            .unwrap();
        assert_eq!(r.status(), 200);
        r.json().unwrap()
    };
    let v = put(json!({"tenant": "nosuchtenant", "max_age": "30d", "dry_run": true}));
    assert_eq!(v["dry_run"], true);
    assert!(v["warnings"][0]
        .as_str()
        .unwrap()
        .contains("\"nosuchtenant\" has no data"));
    let list: Value = get(&s, "/api/v1/admin/retention", &[]).json().unwrap();
    assert_eq!(
        list,
        json!([{"tenant": "anonymous", "max_age_ms": null, "max_age": "forever", "has_data": true}])
    );
    // A dry run changes nothing.
    let v = put(json!({"tenant": "anonymous", "max_age": "1d", "dry_run": true}));
    assert!(v["warnings"].as_array().unwrap().is_empty());
    let list: Value = get(&s, "/api/v1/admin/retention", &[("tenant", "anonymous")])
        .json()
        .unwrap();
    assert_eq!(list[0]["max_age"], "forever");
    let q = format!("{CPU}{{}}");
    assert_eq!(s.total(None, &q), 10_000_000);
    // The real run stores the age.
    let v = put(json!({"tenant": "anonymous", "max_age": "1d"}));
    assert_eq!(v["max_age"], "1d");
    let list: Value = get(&s, "/api/v1/admin/retention", &[]).json().unwrap();
    assert_eq!(list[0]["max_age_ms"], 86_400_000);
}

#[test]
fn an_unknown_connect_method_is_a_client_error() {
    let s = TestServer::start();
    let server_errors = || -> String {
        let m = get(&s, "/metrics", &[]).text().unwrap();
        m.lines()
            .find(|l| l.starts_with("profiledb_http_server_errors_total "))
            .unwrap()
            .to_string()
    };
    let before = server_errors();
    let r = post(&s, "/querier.v1.QuerierService/NoSuchMethod", json!({}));
    assert_eq!(r.status(), 404);
    let v: Value = r.json().unwrap();
    assert_eq!(v["code"], "unimplemented");
    assert_eq!(
        server_errors(),
        before,
        "a client's mistake is not a server error"
    );
}

#[test]
fn errors_are_json_on_every_query_endpoint() {
    let s = TestServer::start();
    for (path, params) in [
        ("/pyroscope/render", vec![("max-nodes", "many")]),
        ("/pyroscope/render", vec![("format", "svg")]),
        ("/api/v1/flamegraph", vec![("max_nodes", "x")]),
        ("/api/v1/timeseries", vec![("step", "soon")]),
        ("/api/v1/labels", vec![("from", "tomorrow-ish")]),
    ] {
        let r = get(&s, path, &params);
        assert_eq!(r.status(), 400, "{path} {params:?}");
        let v: Value = r.json().unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(
            v["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{path}"
        );
    }
}
