//! What a person reads is right (issue 51), over real HTTP: numbers from the whole
//! merge rather than the truncated flame graph, `max_nodes` a hard bound, selectors
//! that combine, warnings instead of silent empty answers, a JSON body on every
//! error including hyper's own, and Python's CPU profiles in the CPU view. Each
//! number is checked against the fixture read with prost (`pprof_oracle`) or the
//! values the test uploaded.

use std::io::{Read, Write};

use serde_json::{json, Value};

use crate::common::*;
use crate::pprof_oracle as oracle;

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";

fn node_count(fg: &Value) -> usize {
    fg["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_array().unwrap().len() / 4)
        .sum()
}

/// `large.cpu`: Top functions, search and sandwich from the whole merge, equal to
/// the fixture's own sums; `max_nodes` bounds the nodes answered.
#[test]
fn functions_search_and_sandwich_come_from_the_whole_merge() {
    let Some(fx) = fixtures() else { return };
    let profile = oracle::decode(&std::fs::read(fx.join("pprof/large.cpu")).unwrap());
    let s = TestServer::start();
    let now = profiledb_storage::now_ms();
    s.upload(
        "name=goapp&format=pprof",
        oracle::retimed(&profile, now - 60_000),
    );
    let stacks = oracle::stacks(&profile, "cpu", 1);
    let range = [
        ("from", "now-10m".to_string()),
        ("until", "now".to_string()),
    ];
    let q = format!("{CPU}{{service_name=\"goapp\"}}");
    let get = |path: &str, extra: &[(&str, &str)]| -> Value {
        let mut p: Vec<(&str, &str)> = vec![("query", q.as_str())];
        p.extend(range.iter().map(|(k, v)| (*k, v.as_str())));
        p.extend_from_slice(extra);
        s.json(path, &p)
    };

    let fns = get("/api/v1/functions", &[("limit", "0")]);
    assert_eq!(fns["total"], json!(oracle::sum(&stacks)));
    let want = oracle::ranked(&stacks);
    let got: Vec<(String, i64, i64)> = fns["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["self"].as_i64().unwrap(),
                r["total"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got.len(), want.len());
    assert_eq!(got[..50], want[..50]);
    assert_eq!(got[0].0, "time.Now", "not the synthetic `other`");

    // The search's share: the group-by of the stacks with a matching frame.
    let exact_re = regex::Regex::new(r"^time\.Now$").unwrap();
    for (pattern, insensitive) in [(r"^time\.Now$", false), (r"(?i)^time\.Now$", true)] {
        let body = json!({"profile_type": CPU, "selector": "{service_name=\"goapp\"}",
            "start": "now-10m", "end": "now", "group_by": [], "function": pattern});
        let ans = s.post_json("/api/v1/query", &body, 200);
        let re = regex::Regex::new(pattern).unwrap();
        assert_eq!(
            ans["total"],
            json!(oracle::matching(&stacks, &re)),
            "{pattern}"
        );
        if insensitive {
            let exact = oracle::matching(&stacks, &exact_re);
            assert!(
                oracle::matching(&stacks, &re) > exact,
                "time.now is matched too"
            );
        }
    }

    // The sandwich of time.Now: callers and callees both sum to its total.
    let sw = get(
        "/api/v1/sandwich",
        &[("function", "time.Now"), ("max_nodes", "64")],
    );
    let total = oracle::total_by_function(&stacks)["time.Now"];
    assert_eq!(sw["value"], json!(total));
    for side in ["callers", "callees"] {
        assert_eq!(sw[side]["total"], json!(total), "{side}");
        assert!(node_count(&sw[side]) <= 64, "{side}");
    }

    // max_nodes bounds the nodes answered, `other` nodes included.
    for n in [1024usize, 8192] {
        let fg = get("/api/v1/flamegraph", &[("max_nodes", &n.to_string())]);
        assert!(
            node_count(&fg) <= n,
            "{} nodes for max_nodes={n}",
            node_count(&fg)
        );
        assert!(node_count(&fg) > n * 9 / 10, "the budget is used");
        assert_eq!(fg["total"], json!(oracle::sum(&stacks)));
    }
    let r = s
        .client
        .get(format!("{}/api/v1/flamegraph", s.url))
        .query(&[("query", q.as_str()), ("max_nodes", "-1")])
        .send()
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().unwrap();
    assert!(
        v["message"].as_str().unwrap().contains("max_nodes must be"),
        "{v}"
    );
}

/// A diff's own side selectors narrow its shared selector; they do not replace it.
#[test]
fn a_diffs_selectors_combine() {
    let s = TestServer::start();
    let now_s = profiledb_storage::now_ms() / 1000 - 60;
    for (service, version, body) in [
        ("javasvc", "v1", "main;a 10\nmain;b 10\n"),
        ("javasvc", "v2", "main;a 30\nmain;b 10\n"),
        ("other", "v1", "main;c 50\n"),
        ("other", "v2", "main;d 70\n"),
    ] {
        s.upload(
            &format!("name={service}.cpu%7Bversion%3D{version}%7D&from={now_s}"),
            body.as_bytes().to_vec(),
        );
    }
    let side = |v: &str| json!({"start": "now-10m", "end": "now", "selector": format!("{{version=\"{v}\"}}")});
    let d = s.post_json(
        "/api/v1/diff",
        &json!({"profile_type": CPU, "selector": "{service_name=\"javasvc\"}",
                "base": side("v1"), "compare": side("v2")}),
        200,
    );
    // Folded counts are stored × 1e7 ns.
    assert_eq!(d["stats"]["samples_base"], json!(20 * 10_000_000i64), "{d}");
    assert_eq!(
        d["stats"]["samples_compare"],
        json!(40 * 10_000_000i64),
        "{d}"
    );
    let movers: Vec<&str> = d["top"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["function"].as_str().unwrap())
        .collect();
    assert!(
        movers.contains(&"a") && !movers.contains(&"c"),
        "{movers:?}"
    );
}

/// Names the data does not have answer 200 with warnings naming the nearest known
/// ones; invalid values answer 400.
#[test]
fn unknown_names_warn_and_invalid_values_are_refused() {
    let s = TestServer::start();
    let now_s = profiledb_storage::now_ms() / 1000 - 60;
    s.upload(
        &format!("name=shop.cpu%7Benv%3Dprod%7D&from={now_s}"),
        b"main;work 5\n".to_vec(),
    );
    let warnings = |v: &Value| -> String {
        v["warnings"]
            .as_array()
            .map(|w| {
                w.iter()
                    .map(|x| x.as_str().unwrap_or(""))
                    .collect::<Vec<_>>()
                    .join(" | ")
            })
            .unwrap_or_default()
    };
    let fg = |query: &str, from: &str, until: &str| {
        s.json(
            "/api/v1/flamegraph",
            &[("query", query), ("from", from), ("until", until)],
        )
    };
    let v = fg(
        "process_cpu:cpu:nanoseconds:cpu:nanosecond{}",
        "now-1h",
        "now",
    );
    assert_eq!(v["total"], 0);
    assert!(
        warnings(&v).contains("did you mean \"process_cpu:cpu:nanoseconds:cpu:nanoseconds\""),
        "{v}"
    );
    let v = fg(&format!("{CPU}{{envv=\"prod\"}}"), "now-1h", "now");
    assert!(
        warnings(&v).contains("label \"envv\"") && warnings(&v).contains("\"env\""),
        "{v}"
    );
    let v = fg(&format!("{CPU}{{service_name=\"shp\"}}"), "now-1h", "now");
    assert!(warnings(&v).contains("did you mean \"shop\""), "{v}");
    let v = fg(&format!("{CPU}{{}}"), "now+1h", "now+2h");
    assert!(warnings(&v).contains("in the future"), "{v}");
    // A well-formed answer with data carries no warning.
    assert!(fg(&format!("{CPU}{{}}"), "now-1h", "now")
        .get("warnings")
        .is_none());

    let ans = s.post_json(
        "/api/v1/query",
        &json!({"profile_type": CPU, "start": "now-1h", "end": "now", "group_by": ["regoin"]}),
        200,
    );
    assert!(warnings(&ans).contains("\"regoin\""), "{ans}");
    let ts = s.json(
        "/api/v1/timeseries",
        &[("query", &format!("{CPU}{{}}")), ("group_by", "regoin")],
    );
    assert!(warnings(&ts).contains("\"regoin\""), "{ts}");

    for (path, params) in [
        (
            "/api/v1/flamegraph",
            vec![("query", format!("{CPU}{{}}")), ("max_nodes", "-1".into())],
        ),
        (
            "/api/v1/timeseries",
            vec![("query", format!("{CPU}{{}}")), ("step", "-5s".into())],
        ),
        (
            "/api/v1/functions",
            vec![("query", format!("{CPU}{{}}")), ("limit", "-1".into())],
        ),
        ("/api/v1/sandwich", vec![("query", format!("{CPU}{{}}"))]),
    ] {
        let r = s
            .client
            .get(format!("{}{path}", s.url))
            .query(&params)
            .send()
            .unwrap();
        assert_eq!(r.status(), 400, "{path} {params:?}");
        let v: Value = r.json().unwrap();
        assert_eq!(v["code"], "invalid_argument", "{path}: {v}");
    }
}

/// Sends raw bytes (what reqwest would refuse or encode) and reads the answer.
fn raw_request(s: &TestServer, request: &[u8]) -> (u16, Value) {
    let addr = s.url.trim_start_matches("http://");
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    conn.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = conn.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let v = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {head}\n{body:?}"));
    (status, v)
}

/// Every error has the JSON body, including those answered by the HTTP layer
/// before any endpoint runs.
#[test]
fn every_error_has_a_json_body() {
    let s = TestServer::start();
    let long = "x".repeat(100 << 10);
    let cases: Vec<(String, u16, &str)> = vec![
        ("GET /api/v1/nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".into(), 404, "not_found"),
        ("DELETE /api/v1/flamegraph HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".into(), 405, "method_not_allowed"),
        (format!("GET /api/v1/labels?query={{a=\"{long}\"}} HTTP/1.1\r\nHost: x\r\n\r\n"), 414, "uri_too_long"),
        ("GET /api/v1/labels?query={a=\"b\"} HTTP/1.1\r\nHost: x\r\n\r\n".into(), 400, "invalid_argument"),
        ("POST /api/v1/query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 3\r\nConnection: close\r\n\r\n{x}".into(), 400, "invalid_argument"),
    ];
    for (req, status, code) in cases {
        let (got, v) = raw_request(&s, req.as_bytes());
        let line = &req[..req.len().min(60)];
        assert_eq!(got, status, "{line}: {v}");
        assert_eq!(v["code"], code, "{line}: {v}");
        assert!(!v["message"].as_str().unwrap_or_default().is_empty(), "{v}");
    }
    // A body over the query endpoints' limit: axum's own 413.
    let r = s
        .client
        .post(format!("{}/api/v1/diff", s.url))
        .header("content-type", "application/json")
        .body(vec![b' '; 3 << 20])
        .send()
        .unwrap();
    assert_eq!(r.status(), 413);
    let v: Value = r.json().unwrap();
    assert_eq!(v["code"], "payload_too_large", "{v}");
    // The server still serves (on a new connection: the refused one is closed).
    let fresh = reqwest::blocking::Client::new();
    let r = fresh.get(format!("{}/ready", s.url)).send().unwrap();
    assert_eq!(r.status(), 200);
}

/// pyroscope-rs CPU profiles (Python, Ruby: `samples:count` with a period type of
/// `:milliseconds`) are in the CPU view and its fleet cost, each sample
/// 1 s / sampleRate.
#[test]
fn python_cpu_profiles_count_as_cpu_time() {
    let Some(fx) = fixtures() else { return };
    let bytes = std::fs::read(fx.join("pyroscope/profile_python")).unwrap();
    let profile = oracle::decode(&bytes);
    let s = TestServer::start();
    let now = profiledb_storage::now_ms();
    s.upload(
        "name=pyapp&format=pprof&sampleRate=100",
        oracle::retimed(&profile, now - 60_000),
    );
    let stacks = oracle::stacks(&profile, "samples", 10_000_000);
    let q = format!("{CPU}{{service_name=\"pyapp\"}}");
    assert_eq!(s.total(None, &q), oracle::sum(&stacks));
    let hot = s.json(
        "/api/v1/fleet/hottest",
        &[("query", &format!("{CPU}{{}}")), ("from", "now-10m")],
    );
    assert_eq!(hot["total"], json!(oracle::sum(&stacks)));
    assert!(
        hot["cost"]["core_seconds_per_day"].as_f64().unwrap() > 0.0,
        "{hot}"
    );
}

/// A group whose units all cost the same is not "explained".
#[test]
fn groups_without_spread_are_not_explained() {
    let s = TestServer::start();
    let now_s = profiledb_storage::now_ms() / 1000 - 60;
    for host in ["h1", "h2"] {
        s.upload(
            &format!("name=flat.cpu%7Bhost%3D{host}%7D&from={now_s}"),
            b"main;a 5\nmain;b 5\n".to_vec(),
        );
    }
    let v = s.json(
        "/api/v1/fleet/variance",
        &[("query", &format!("{CPU}{{}}")), ("from", "now-10m")],
    );
    let g = &v["groups"][0];
    assert_eq!(g["cov"], json!(0.0), "{v}");
    assert_eq!(g["explainers"], json!([]), "{v}");
    assert_eq!(g["correlated_labels"], json!([]), "{v}");
}
