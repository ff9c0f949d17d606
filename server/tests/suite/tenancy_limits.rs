//! Per-tenant limits over real HTTP: each limit, set low for one tenant in the auth
//! file, refuses with its name and value (429 with `Retry-After` on ingest, 400 on
//! queries, the matching Connect code on Connect routes), is counted in `/metrics`,
//! leaves what was stored before it intact, and does not touch other tenants.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::common::{build_pprof, encode, TestServer};
use base64::Engine;
use profiledb::tenancy::authfile::{hash_token, AuthFile};
use reqwest::blocking::{RequestBuilder, Response};
use serde_json::{json, Value};

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";

/// Tenants, each with one limit set low (the rest are the defaults).
const TENANTS: &[(&str, &str)] = &[
    (
        "bytes",
        "{ingestion_rate_bytes: 1, ingestion_burst_bytes: 100}",
    ),
    (
        "profiles",
        "{ingestion_rate_profiles: 1, ingestion_burst_profiles: 2}",
    ),
    ("series", "{max_active_series: 2}"),
    ("labels", "{max_labels_per_series: 5}"),
    ("range", "{max_query_range_secs: 3600}"),
    ("nodes", "{max_nodes: 100}"),
    ("conc", "{max_concurrent_queries: 1}"),
    ("free", "{}"),
];

fn token(tenant: &str) -> String {
    format!("token-of-{tenant}-0123456789")
}

fn write_auth_file(path: &Path) {
    let mut f = AuthFile::default();
    for (t, _) in TENANTS {
        f.add_token(t, hash_token(&token(t)).unwrap()).unwrap();
    }
    let mut yaml: serde_json::Value = serde_json::to_value(&f).unwrap();
    for (t, limits) in TENANTS {
        yaml["tenants"][t]["limits"] = serde_norway::from_str(limits).unwrap();
    }
    std::fs::write(path, serde_norway::to_string(&yaml).unwrap()).unwrap();
}

fn server() -> (TestServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("auth.yaml");
    write_auth_file(&file);
    let s = TestServer::start_with(|o| o.tenancy.auth_file = Some(file));
    (s, dir)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn as_tenant(s: &TestServer, tenant: &str, method: reqwest::Method, path: &str) -> RequestBuilder {
    s.client
        .request(method, format!("{}{path}", s.url))
        .basic_auth(tenant, Some(token(tenant)))
}

fn ingest(s: &TestServer, tenant: &str, name: &str, body: &str) -> Response {
    let from = now_ms() / 1000 - 60;
    as_tenant(
        s,
        tenant,
        reqwest::Method::POST,
        &format!("/ingest?name={name}&from={from}"),
    )
    .body(body.to_string())
    .send()
    .unwrap()
}

fn ok(r: Response) {
    let status = r.status();
    assert_eq!(status, 200, "{}", r.text().unwrap());
}

/// Asserts a refusal by `limit = value` with `status`, and returns its JSON.
fn refused(r: Response, status: u16, limit: &str) -> Value {
    assert_eq!(r.status(), status);
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
    let v: Value = r.json().unwrap();
    let msg = v["message"].as_str().unwrap();
    assert!(msg.contains(limit), "{msg:?} should name {limit:?}");
    if status == 429 {
        assert_eq!(v["code"], "resource_exhausted");
        assert!(retry.is_some_and(|s| s >= 1), "429 without Retry-After");
    } else {
        assert_eq!(v["code"], "invalid_argument");
    }
    v
}

/// The tenant's CPU total of the last hour.
fn total(s: &TestServer, tenant: &str) -> i64 {
    let path = format!(
        "/api/v1/flamegraph?query={}&from=now-1h&until=now%2B1h",
        percent_encoding::utf8_percent_encode(
            &format!("{CPU}{{}}"),
            percent_encoding::NON_ALPHANUMERIC
        )
    );
    let r = as_tenant(s, tenant, reqwest::Method::GET, &path)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json::<Value>().unwrap()["total"].as_i64().unwrap()
}

fn refusals(s: &TestServer, tenant: &str, limit: &str) -> u64 {
    let text = s.get("/metrics").text().unwrap();
    let key = format!("profiledb_limit_refusals_total{{tenant=\"{tenant}\",limit=\"{limit}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&key))
        .map_or(0, |v| v.parse().unwrap())
}

#[test]
fn ingestion_limits_refuse_with_429_and_keep_earlier_data() {
    let (s, _dir) = server();
    let line = |i: usize| format!("main;work{i:02} 1\n");
    let body: String = (0..5).map(line).collect(); // 5 lines of 14 bytes.
    assert_eq!(body.len(), 70);

    // Bytes: a burst of 100 takes one 70-byte upload; the next waits ~40 s at 1 B/s.
    ok(ingest(&s, "bytes", "app.cpu", &body));
    let v = refused(
        ingest(&s, "bytes", "app.cpu", &body),
        429,
        "ingestion_rate_bytes = 1",
    );
    assert!(v["message"]
        .as_str()
        .unwrap()
        .starts_with("70 bytes arrive faster"));
    assert_eq!(total(&s, "bytes"), 50_000_000);
    assert_eq!(refusals(&s, "bytes", "ingestion_rate_bytes"), 1);
    // Another tenant is not slowed down by it.
    ok(ingest(&s, "free", "app.cpu", &body));
    ok(ingest(&s, "free", "app.cpu", &body));

    // Profiles: a Push of three raw profiles can never pass a burst of two, and
    // takes nothing from the bucket when refused.
    let pprof = encode(&build_pprof(
        &[("cpu", "nanoseconds")],
        ("cpu", "nanoseconds", 10_000_000),
        &[(vec!["main".into(), "pushed".into()], vec![10_000_000])],
        &[],
        (now_ms() - 60_000) * 1_000_000,
    ));
    let raw = json!({"rawProfile": base64::engine::general_purpose::STANDARD.encode(&pprof)});
    let push = json!({"series": [{
        "labels": [{"name": "__name__", "value": "process_cpu"}, {"name": "service_name", "value": "app"}],
        "samples": [raw, raw, raw],
    }]});
    let r = as_tenant(
        &s,
        "profiles",
        reqwest::Method::POST,
        "/push.v1.PusherService/Push",
    )
    .header("content-type", "application/json")
    .body(push.to_string())
    .send()
    .unwrap();
    let v = refused(r, 429, "ingestion_rate_profiles = 1");
    assert!(v["message"]
        .as_str()
        .unwrap()
        .contains("exceed the burst of 2"));
    ok(ingest(&s, "profiles", "app.cpu", "main;a 1\n"));
    ok(ingest(&s, "profiles", "app.cpu", "main;b 1\n"));
    assert_eq!(total(&s, "profiles"), 20_000_000);
    assert_eq!(refusals(&s, "profiles", "ingestion_rate_profiles"), 1);

    // Active series: two distinct series pass, a third is refused, known ones pass.
    ok(ingest(&s, "series", "app.cpu{pod=a}", "main;a 1\n"));
    ok(ingest(&s, "series", "app.cpu{pod=b}", "main;b 1\n"));
    let v = refused(
        ingest(&s, "series", "app.cpu{pod=c}", "main;c 1\n"),
        429,
        "max_active_series = 2",
    );
    assert!(v["message"]
        .as_str()
        .unwrap()
        .contains("would make 3 active series"));
    ok(ingest(&s, "series", "app.cpu{pod=a}", "main;a 1\n"));
    assert_eq!(total(&s, "series"), 30_000_000);
    assert_eq!(refusals(&s, "series", "max_active_series"), 1);
    let metrics = s.get("/metrics").text().unwrap();
    assert!(metrics
        .lines()
        .any(|l| l == "profiledb_active_series{tenant=\"series\"} 2"));

    // Labels per series: service_name, __name__ and __profile_type__ plus three tags
    // is six, over five; a 400 since sending it again cannot help.
    ok(ingest(&s, "labels", "app.cpu{a=1,b=2}", "main;a 1\n"));
    let v = refused(
        ingest(&s, "labels", "app.cpu{a=1,b=2,c=3}", "main;a 1\n"),
        400,
        "max_labels_per_series = 5",
    );
    assert!(v["message"]
        .as_str()
        .unwrap()
        .contains("a series has 6 labels"));
    assert_eq!(total(&s, "labels"), 10_000_000);
    assert_eq!(refusals(&s, "labels", "max_labels_per_series"), 1);
}

fn connect(s: &TestServer, tenant: &str, method: &str, body: Value) -> Response {
    as_tenant(
        s,
        tenant,
        reqwest::Method::POST,
        &format!("/querier.v1.QuerierService/{method}"),
    )
    .header("content-type", "application/json")
    .body(body.to_string())
    .send()
    .unwrap()
}

#[test]
fn query_limits_refuse_with_400_and_their_connect_code() {
    let (s, _dir) = server();
    let now = now_ms();
    let merge = |start: i64, max_nodes: Option<i64>| {
        let mut b =
            json!({"profile_typeID": CPU, "label_selector": "{}", "start": start, "end": now});
        if let Some(n) = max_nodes {
            b["max_nodes"] = json!(n);
        }
        b
    };

    // Range: an hour passes, two hours do not, through every API.
    ok(connect(
        &s,
        "range",
        "SelectMergeStacktraces",
        merge(now - 3_600_000, None),
    ));
    let v = refused(
        connect(
            &s,
            "range",
            "SelectMergeStacktraces",
            merge(now - 7_200_000, None),
        ),
        400,
        "max_query_range_secs = 3600",
    );
    assert!(v["message"]
        .as_str()
        .unwrap()
        .contains("the query window is 7200 s long"));
    let r = as_tenant(
        &s,
        "range",
        reqwest::Method::GET,
        "/api/v1/labels?from=now-2h",
    )
    .send()
    .unwrap();
    refused(r, 400, "max_query_range_secs = 3600");
    assert_eq!(refusals(&s, "range", "max_query_range_secs"), 2);
    // The same window is fine for a tenant without the limit.
    ok(connect(
        &s,
        "free",
        "SelectMergeStacktraces",
        merge(now - 7_200_000, None),
    ));

    // Nodes: up to 100 pass, the default is capped, more or unlimited is refused.
    ok(connect(
        &s,
        "nodes",
        "SelectMergeStacktraces",
        merge(now - 60_000, Some(100)),
    ));
    ok(connect(
        &s,
        "nodes",
        "SelectMergeStacktraces",
        merge(now - 60_000, None),
    ));
    refused(
        connect(
            &s,
            "nodes",
            "SelectMergeStacktraces",
            merge(now - 60_000, Some(101)),
        ),
        400,
        "max_nodes = 100",
    );
    // Pyroscope's "every node" (a negative max_nodes) is over any node limit.
    let v = refused(
        connect(
            &s,
            "nodes",
            "SelectMergeStacktraces",
            merge(now - 60_000, Some(-1)),
        ),
        400,
        "max_nodes = 100",
    );
    assert!(v["message"]
        .as_str()
        .unwrap()
        .contains("unlimited number of nodes"));
    assert_eq!(refusals(&s, "nodes", "max_nodes"), 2);
}

#[test]
fn a_tenant_runs_at_most_its_concurrent_queries() {
    let (s, _dir) = server();
    let addr = s.url.trim_start_matches("http://").to_string();
    let body = json!({"start": now_ms() - 60_000, "end": now_ms()}).to_string();
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("conc:{}", token("conc")));
    // A query whose body is still arriving holds the tenant's only slot.
    let mut held = TcpStream::connect(&addr).unwrap();
    write!(
        held,
        "POST /querier.v1.QuerierService/ProfileTypes HTTP/1.1\r\nHost: {addr}\r\n\
         Authorization: Basic {auth}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{}",
        body.len(),
        &body[..5]
    )
    .unwrap();
    held.flush().unwrap();
    let second = || connect(&s, "conc", "ProfileTypes", json!({}));
    // Until the held query is seen running, another one could race it for the slot.
    crate::common::wait_for(30, "the held query to be running", || {
        let m = s.get("/metrics").text().unwrap();
        m.lines()
            .any(|l| l == "profiledb_queries_running{tenant=\"conc\"} 1")
            .then_some(())
    });
    let r = second();
    let v = refused(r, 429, "max_concurrent_queries = 1");
    assert!(v["message"]
        .as_str()
        .unwrap()
        .contains("1 queries are already running"));
    // Other tenants are not held up.
    ok(connect(&s, "free", "ProfileTypes", json!({})));

    // The held query completes, and frees the slot.
    held.write_all(&body.as_bytes()[5..]).unwrap();
    let mut answer = String::new();
    held.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    ok(second());
    assert_eq!(refusals(&s, "conc", "max_concurrent_queries"), 1);
}
