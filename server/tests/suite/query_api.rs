//! Query API over real HTTP: Connect (binary and JSON), flame graph levels, native
//! group-by (against a brute-force reference), diff statistics, pprof export, SVG
//! and the legacy Pyroscope render endpoints.

use std::collections::BTreeMap;
use std::io::Read;

use crate::common::TestServer;
use profiledb_storage::tree_from_bytes;
use proptest::prelude::*;
use prost::Message;
use serde_json::{json, Value};

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
/// `.cpu` folded counts are scaled by 1e9 / sampleRate(100).
const SCALE: i64 = 10_000_000;
/// A fixed time well in the past (seconds): 2023-01-01T00:00:00Z.
const T0: i64 = 1_672_531_200;

fn connect_json(s: &TestServer, tenant: &str, method: &str, body: Value) -> (u16, Value) {
    let r = s
        .client
        .post(format!("{}/querier.v1.QuerierService/{method}", s.url))
        .header("content-type", "application/json")
        .header("X-Scope-OrgID", tenant)
        .body(body.to_string())
        .send()
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().unwrap())
}

fn post_json(s: &TestServer, tenant: &str, path: &str, body: Value) -> (u16, Value) {
    let r = s
        .client
        .post(format!("{}{path}", s.url))
        .header("content-type", "application/json")
        .header("X-Scope-OrgID", tenant)
        .body(body.to_string())
        .send()
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().unwrap())
}

fn ints(v: &Value) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| match x {
            Value::String(s) => s.parse().unwrap(),
            other => other.as_i64().unwrap(),
        })
        .collect()
}

// Hand-written prost messages with the public querier.v1 field numbers, so the test
// checks the wire format independently of the server's generated code.
#[derive(Clone, PartialEq, prost::Message)]
struct SelectMergeStacktracesRequest {
    #[prost(string, tag = "1")]
    profile_type_id: String,
    #[prost(string, tag = "2")]
    label_selector: String,
    #[prost(int64, tag = "3")]
    start: i64,
    #[prost(int64, tag = "4")]
    end: i64,
    #[prost(int64, optional, tag = "5")]
    max_nodes: Option<i64>,
    /// `ProfileFormat`: 0 unspecified, 1 flame graph, 2 tree.
    #[prost(int32, tag = "6")]
    format: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Level {
    #[prost(int64, repeated, tag = "1")]
    values: Vec<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct FlameGraph {
    #[prost(string, repeated, tag = "1")]
    names: Vec<String>,
    #[prost(message, repeated, tag = "2")]
    levels: Vec<Level>,
    #[prost(int64, tag = "3")]
    total: i64,
    #[prost(int64, tag = "4")]
    max_self: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct SelectMergeStacktracesResponse {
    #[prost(message, optional, tag = "1")]
    flamegraph: Option<FlameGraph>,
    #[prost(bytes = "vec", tag = "2")]
    tree: Vec<u8>,
}

/// `SelectMergeStacktraces` in binary protobuf for tenant `t`.
fn post_proto(
    s: &TestServer,
    t: &str,
    req: &SelectMergeStacktracesRequest,
) -> reqwest::blocking::Response {
    s.client
        .post(format!(
            "{}/querier.v1.QuerierService/SelectMergeStacktraces",
            s.url
        ))
        .header("content-type", "application/proto")
        .header("X-Scope-OrgID", t)
        .body(req.encode_to_vec())
        .send()
        .unwrap()
}

/// main;b 3, main;a 2, main 1, idle 4 (×SCALE) in tenant `t`.
fn small_tree(s: &TestServer, t: &str) {
    s.ingest(
        t,
        "app.cpu{env=prod}",
        T0,
        "main;b 3\nmain;a 2\nmain 1\nidle 4\n",
    );
}

fn expected_levels() -> Vec<Vec<i64>> {
    let k = SCALE;
    vec![
        vec![0, 10 * k, 0, 0],
        vec![0, 4 * k, 4 * k, 1, 0, 6 * k, k, 2],
        vec![5 * k, 2 * k, 2 * k, 3, 0, 3 * k, 3 * k, 4],
    ]
}

#[test]
fn connect_flamegraph_both_encodings() {
    let s = TestServer::start();
    small_tree(&s, "fg");
    let (start, end) = (T0 * 1000, T0 * 1000 + 60_000);
    // protojson: lowerCamel and proto names accepted, unknown fields ignored.
    let (st, v) = connect_json(
        &s,
        "fg",
        "SelectMergeStacktraces",
        json!({"profileTypeID": CPU, "label_selector": "{service_name=\"app\"}",
               "start": start.to_string(), "end": end, "maxNodes": "100", "somethingNew": 1}),
    );
    assert_eq!(st, 200, "{v}");
    let fg = &v["flamegraph"];
    assert_eq!(fg["names"], json!(["total", "idle", "main", "a", "b"]));
    // int64 as strings on output.
    assert_eq!(fg["total"], json!((10 * SCALE).to_string()));
    assert_eq!(fg["maxSelf"], json!((4 * SCALE).to_string()));
    let levels: Vec<Vec<i64>> = fg["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| ints(&l["values"]))
        .collect();
    assert_eq!(levels, expected_levels());

    // Binary protobuf.
    let req = SelectMergeStacktracesRequest {
        profile_type_id: CPU.into(),
        label_selector: "{env=\"prod\"}".into(),
        start,
        end,
        max_nodes: Some(100),
        format: 0,
    };
    let r = post_proto(&s, "fg", &req);
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-type"].to_str().unwrap(),
        "application/proto"
    );
    let resp = SelectMergeStacktracesResponse::decode(r.bytes().unwrap()).unwrap();
    let fg = resp.flamegraph.unwrap();
    assert_eq!(fg.total, 10 * SCALE);
    assert_eq!(
        fg.levels.into_iter().map(|l| l.values).collect::<Vec<_>>(),
        expected_levels()
    );

    // PROFILE_FORMAT_TREE: the serialized tree instead of the flame graph.
    let tree_req = SelectMergeStacktracesRequest {
        format: 2,
        ..req.clone()
    };
    let r = post_proto(&s, "fg", &tree_req);
    assert_eq!(r.status(), 200);
    let resp = SelectMergeStacktracesResponse::decode(r.bytes().unwrap()).unwrap();
    assert!(resp.flamegraph.is_none());
    let k = SCALE;
    let tree = tree_from_bytes(&resp.tree).expect("a well-formed serialized tree");
    assert_eq!(
        tree.folded(),
        BTreeMap::from([
            ("idle".to_string(), 4 * k),
            ("main".to_string(), k),
            ("main;a".to_string(), 2 * k),
            ("main;b".to_string(), 3 * k),
        ])
    );

    // max_nodes truncation: 5 nodes hold the whole tree; 4 (a hard bound, `other`
    // counted) keep total, main and idle, with a and b in main's `other`.
    for (n, names) in [
        (5, json!(["total", "idle", "main", "a", "b"])),
        (4, json!(["total", "idle", "main", "other"])),
    ] {
        let (_, v) = connect_json(
            &s,
            "fg",
            "SelectMergeStacktraces",
            json!({"profile_typeID": CPU, "labelSelector": "{}", "start": start, "end": end, "max_nodes": n}),
        );
        assert_eq!(v["flamegraph"]["names"], names, "max_nodes {n}");
    }

    // Legacy render: same layout in flamebearer JSON.
    let v = s.json(
        "/pyroscope/render",
        &[
            ("query", &format!("{CPU}{{env=\"prod\"}}")),
            ("from", &T0.to_string()),
            ("until", &(T0 + 60).to_string()),
            ("format", "json"),
        ],
    );
    // (helper sends no tenant header: the default tenant has no data)
    assert_eq!(v["flamebearer"]["numTicks"], json!(0));
}

#[test]
fn connect_discovery_and_errors() {
    let s = TestServer::start();
    small_tree(&s, "d");
    s.ingest("d", "api.cpu{env=stage,host=h1}", T0, "x;y 1\n");
    let (start, end) = (T0 * 1000, T0 * 1000 + 60_000);
    let (st, v) = connect_json(&s, "d", "ProfileTypes", json!({"start": start, "end": end}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["profileTypes"][0]["ID"], json!(CPU));
    assert_eq!(v["profileTypes"][0]["sampleType"], json!("cpu"));
    let (_, v) = connect_json(&s, "d", "LabelNames", json!({"start": start, "end": end}));
    let names = v["names"].as_array().unwrap();
    assert!(names.contains(&json!("host")) && names.contains(&json!("service_name")));
    let (_, v) = connect_json(
        &s,
        "d",
        "LabelValues",
        json!({"name": "service_name", "matchers": ["{env=~\"prod|stage\"}"], "start": start, "end": end}),
    );
    assert_eq!(v["names"], json!(["api", "app"]));
    let (_, v) = connect_json(
        &s,
        "d",
        "Series",
        json!({"matchers": ["{service_name=\"api\"}"], "labelNames": ["host"], "start": start, "end": end}),
    );
    assert_eq!(
        v["labelsSet"],
        json!([{"labels": [{"name": "host", "value": "h1"}]}])
    );
    let (_, v) = connect_json(
        &s,
        "d",
        "SelectSeries",
        json!({"profileTypeID": CPU, "labelSelector": "{}", "start": start, "end": end,
               "step": 60.0, "groupBy": ["service_name"]}),
    );
    let series = v["series"].as_array().unwrap();
    assert_eq!(series.len(), 2);
    assert_eq!(series[0]["labels"][0]["value"], json!("app"));
    assert_eq!(series[0]["points"][0]["value"], json!((10 * SCALE) as f64));
    assert_eq!(
        series[0]["points"][0]["timestamp"],
        json!(start.to_string())
    );
    let (_, v) = connect_json(&s, "d", "GetProfileStats", json!({}));
    assert_eq!(v["dataIngested"], json!(true));
    assert_eq!(v["oldestProfileTime"], json!(start.to_string()));

    // Diff via Connect: left = app, right = api.
    let side = |svc: &str| json!({"profileTypeID": CPU, "labelSelector": format!("{{service_name=\"{svc}\"}}"), "start": start, "end": end});
    let (st, v) = connect_json(
        &s,
        "d",
        "Diff",
        json!({"left": side("app"), "right": side("api")}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["flamegraph"]["leftTicks"],
        json!((10 * SCALE).to_string())
    );
    assert_eq!(v["flamegraph"]["rightTicks"], json!(SCALE.to_string()));
    assert_eq!(ints(&v["flamegraph"]["levels"][0]["values"]).len(), 7);

    // SelectMergeProfile returns a pprof whose values sum to the total.
    let (st, v) = connect_json(
        &s,
        "d",
        "SelectMergeProfile",
        json!({"profileTypeID": CPU, "labelSelector": "{service_name=\"app\"}", "start": start, "end": end}),
    );
    assert_eq!(st, 200, "{v}");
    let sum: i64 = v["sample"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| ints(&x["value"])[0])
        .sum();
    assert_eq!(sum, 10 * SCALE);

    // Connect errors: code + message with the matching status.
    let (st, v) = connect_json(
        &s,
        "d",
        "SelectMergeStacktraces",
        json!({"profileTypeID": CPU, "labelSelector": "{oops", "start": start, "end": end}),
    );
    assert_eq!(st, 400);
    assert_eq!(v["code"], json!("invalid_argument"));
    assert!(v["message"].as_str().unwrap().len() > 3);
    let (st, v) = connect_json(&s, "d", "NoSuchMethod", json!({}));
    // A method we do not serve is the client's mistake: 404, Connect code unimplemented.
    assert_eq!((st, v["code"].clone()), (404, json!("unimplemented")));
    let r = s
        .client
        .post(format!("{}/querier.v1.QuerierService/LabelNames", s.url))
        .header("content-type", "application/proto")
        .body(vec![0xff, 0xff, 0xff])
        .send()
        .unwrap();
    assert_eq!(r.status(), 400);
}

#[test]
fn pprof_export_matches_flamegraph_total_and_svg_renders() {
    let s = TestServer::start();
    s.ingest(
        "anonymous",
        "app.cpu{env=prod}",
        T0,
        "main;work;hash 7\nmain;work 2\nmain;idle 5\nstd::vec::Vec<T>::push 1\n",
    );
    let q = format!("{CPU}{{service_name=\"app\"}}");
    let params = [
        ("query", q.as_str()),
        ("from", &T0.to_string()),
        ("until", &(T0 + 60).to_string()),
    ];
    let r = s
        .client
        .get(format!("{}/api/v1/pprof", s.url))
        .query(&params)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let gz = r.bytes().unwrap();
    assert_eq!(&gz[..2], &[0x1f, 0x8b]);
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut raw)
        .unwrap();
    let prof = profiledb_ingest::proto::pprof::Profile::decode(raw.as_slice()).unwrap();
    assert_eq!(&prof.string_table[0][..], b"");
    let total: i64 = prof.sample.iter().map(|s| s.value[0]).sum();
    let fg = s.json("/api/v1/flamegraph", &params);
    assert_eq!(fg["total"], json!(total));
    assert_eq!(total, 15 * SCALE);
    // Leaf first: the `hash` sample's first location is hash.
    let name_of_loc = |id: u64| {
        let loc = prof.location.iter().find(|l| l.id == id).unwrap();
        let f = prof
            .function
            .iter()
            .find(|f| f.id == loc.line[0].function_id)
            .unwrap();
        String::from_utf8(prof.string_table[f.name as usize].to_vec()).unwrap()
    };
    let hash = prof
        .sample
        .iter()
        .find(|s| s.value[0] == 7 * SCALE)
        .unwrap();
    let names: Vec<String> = hash.location_id.iter().map(|&l| name_of_loc(l)).collect();
    assert_eq!(names, vec!["hash", "work", "main"]);

    let r = s
        .client
        .get(format!("{}/api/v1/render.svg", s.url))
        .query(&params)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "image/svg+xml");
    let svg = r.text().unwrap();
    assert!(svg.contains("<svg") && svg.contains("hash"));
    // An empty range draws a plain notice, not inferno's error image.
    let r = s
        .client
        .get(format!("{}/api/v1/render.svg", s.url))
        .query(&[("query", q.as_str()), ("from", "1"), ("until", "2")])
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let svg = r.text().unwrap();
    assert!(svg.contains("no samples in this time range"), "{svg}");
    assert!(!svg.contains("ERROR"), "{svg}");

    let v = s.json(
        "/pyroscope/render",
        &[
            ("query", q.as_str()),
            ("from", &T0.to_string()),
            ("until", &(T0 + 60).to_string()),
            ("format", "json"),
        ],
    );
    assert_eq!(v["flamebearer"]["numTicks"], json!(15 * SCALE));
    assert_eq!(v["metadata"]["format"], json!("single"));
    let lv = s.json(
        "/pyroscope/label-values",
        &[("label", "env"), ("from", "0"), ("until", "now")],
    );
    assert_eq!(lv, json!(["prod"]));
}

#[test]
fn diff_statistics_by_hand() {
    let s = TestServer::start();
    // Base minute: a 50, b 50. Compare minute: a 25, b 25, c 50.
    s.ingest("df", "app.cpu", T0, "main;a 50\nmain;b 50\n");
    s.ingest("df", "app.cpu", T0 + 60, "main;a 25\nmain;b 25\nx;c 50\n");
    let (b0, c0) = (T0 * 1000, (T0 + 60) * 1000);
    let (st, v) = post_json(
        &s,
        "df",
        "/api/v1/diff",
        json!({"profile_type": CPU, "selector": "{service_name=\"app\"}",
               "base": {"start": b0, "end": b0 + 60_000},
               "compare": {"start": c0, "end": c0 + 60_000}, "top": 2}),
    );
    assert_eq!(st, 200, "{v}");
    let stats = &v["stats"];
    let f = |k: &str| stats[k].as_f64().unwrap();
    assert!((f("manhattan") - 0.5).abs() < 1e-9);
    assert!((f("entropy_base") - 1.0).abs() < 1e-9);
    assert!((f("entropy_compare") - 1.5).abs() < 1e-9);
    assert_eq!(stats["samples_base"], json!(100 * SCALE));
    assert_eq!(stats["samples_compare"], json!(100 * SCALE));
    assert_eq!(v["top"][0]["function"], json!("c"));
    assert!((v["top"][0]["delta"].as_f64().unwrap() - 0.5).abs() < 1e-9);
    assert_eq!(v["flamegraph"]["leftTicks"], json!(100 * SCALE));
    let (st, v) = post_json(&s, "df", "/api/v1/diff", json!({"base": {}, "nope": 1}));
    assert_eq!(st, 400, "{v}");
}

// ---- group-by against a brute-force reference ------------------------------------

const FUNCS: [&str; 5] = ["main", "work", "hash", "io", "idle"];

#[derive(Clone, Debug)]
struct Row {
    service: usize,
    env: usize,
    stack: Vec<usize>,
    value: i64,
}

fn rows() -> impl Strategy<Value = Vec<Row>> {
    prop::collection::vec(
        (
            0..2usize,
            0..2usize,
            prop::collection::vec(0..5usize, 1..4),
            1..20i64,
        )
            .prop_map(|(service, env, stack, value)| Row {
                service,
                env,
                stack,
                value,
            }),
        1..12,
    )
}

fn reference(rows: &[Row], keys: &[&str], include: Option<&str>) -> BTreeMap<Vec<String>, i64> {
    let mut out = BTreeMap::new();
    for r in rows {
        let names: Vec<&str> = r.stack.iter().map(|&i| FUNCS[i]).collect();
        if include.is_some_and(|f| !names.contains(&f)) {
            continue;
        }
        let mut choices: Vec<Vec<String>> = Vec::new();
        for k in keys {
            choices.push(match *k {
                "service_name" => vec![format!("svc{}", r.service)],
                "env" => vec![format!("e{}", r.env)],
                "function" => vec![names[names.len() - 1].to_string()],
                "function_total" => {
                    let mut u: Vec<String> = Vec::new();
                    for n in &names {
                        if !u.iter().any(|x| x == n) {
                            u.push(n.to_string());
                        }
                    }
                    u
                }
                _ => unreachable!(),
            });
        }
        let mut keys_out: Vec<Vec<String>> = vec![vec![]];
        for c in &choices {
            keys_out = keys_out
                .into_iter()
                .flat_map(|p| {
                    c.iter().map(move |v| {
                        let mut p = p.clone();
                        p.push(v.clone());
                        p
                    })
                })
                .collect();
        }
        for k in keys_out {
            *out.entry(k).or_insert(0) += r.value * SCALE;
        }
    }
    out
}

static SERVER: std::sync::OnceLock<TestServer> = std::sync::OnceLock::new();
static CASE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    #[test]
    fn group_by_matches_brute_force(rows in rows(), nkeys in 1..4usize, filter in prop::option::of(0..5usize)) {
        let s = SERVER.get_or_init(TestServer::start);
        let tenant = format!("gb{}", CASE.fetch_add(1, std::sync::atomic::Ordering::SeqCst));
        for r in &rows {
            let stack: Vec<&str> = r.stack.iter().map(|&i| FUNCS[i]).collect();
            s.ingest(&tenant, &format!("svc{}.cpu{{env=e{}}}", r.service, r.env), T0,
                   &format!("{} {}\n", stack.join(";"), r.value));
        }
        let all_keys = [["service_name", "function", "env"], ["function_total", "env", "service_name"]];
        for keys in all_keys {
            let keys = &keys[..nkeys];
            let include = filter.map(|i| FUNCS[i]);
            let mut body = json!({"profile_type": CPU, "selector": "{}", "start": T0 * 1000,
                                  "end": T0 * 1000 + 60_000, "group_by": keys});
            if let Some(f) = include {
                body["function"] = json!(format!("^{f}$"));
            }
            let (st, v) = post_json(s, &tenant, "/api/v1/query", body);
            prop_assert_eq!(st, 200, "{}", v);
            let got: BTreeMap<Vec<String>, i64> = v["rows"].as_array().unwrap().iter().map(|r| {
                (r["key"].as_array().unwrap().iter().map(|k| k.as_str().unwrap().to_string()).collect(),
                 r["value"].as_i64().unwrap())
            }).collect();
            prop_assert_eq!(&got, &reference(&rows, keys, include));
            // Sorted by value, descending.
            let vals: Vec<i64> = v["rows"].as_array().unwrap().iter().map(|r| r["value"].as_i64().unwrap()).collect();
            prop_assert!(vals.windows(2).all(|w| w[0] >= w[1]));
        }
    }
}

#[test]
fn group_by_binary_limit_and_exclude() {
    let s = TestServer::start();
    s.ingest(
        "anonymous",
        "app.cpu",
        T0,
        "main;work 3\nmain;idle 1\nmain;work;hash 2\n",
    );
    let base = json!({"profile_type": CPU, "start": T0 * 1000, "end": T0 * 1000 + 60_000});
    let mut q = base.clone();
    q["group_by"] = json!(["function"]);
    q["exclude_function"] = json!("idle");
    q["limit"] = json!(1);
    let (st, v) = post_json(&s, "anonymous", "/api/v1/query", q);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["rows"], json!([{"key": ["work"], "value": 3 * SCALE}]));
    assert_eq!(v["total"], json!(5 * SCALE));
    let mut q = base.clone();
    q["group_by"] = json!(["binary"]);
    let (_, v) = post_json(&s, "anonymous", "/api/v1/query", q);
    assert_eq!(v["rows"], json!([{"key": [""], "value": 6 * SCALE}]));
    let mut q = base;
    q["function"] = json!("(unclosed");
    let (st, v) = post_json(&s, "anonymous", "/api/v1/query", q);
    assert_eq!((st, v["code"].clone()), (400, json!("invalid_argument")));
    let ts = s.json(
        "/api/v1/timeseries",
        &[
            ("query", CPU),
            ("from", &T0.to_string()),
            ("until", &(T0 + 60).to_string()),
            ("step", "1m"),
        ],
    );
    assert_eq!(ts["series"][0]["total"], json!(6 * SCALE));
}
