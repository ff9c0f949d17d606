//! Fleet analyses over real HTTP: the hottest shared code with its cost, and the
//! sampling-noise verdict of the native diff (one diff within noise, one outside).

use crate::common::TestServer;
use serde_json::{json, Value};

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
/// `.cpu` folded counts are scaled by 1e9 / sampleRate(100).
const SCALE: i64 = 10_000_000;
/// 2023-01-01T00:00:00Z in seconds.
const T0: i64 = 1_672_531_200;

fn get(s: &TestServer, path: &str, params: &[(&str, &str)]) -> (u16, Value) {
    let r = s
        .client
        .get(format!("{}{path}", s.url))
        .query(params)
        .send()
        .unwrap();
    (r.status().as_u16(), r.json().unwrap())
}

fn close(a: &Value, b: f64) -> bool {
    a.as_f64()
        .is_some_and(|a| (a - b).abs() < 1e-9 * b.abs().max(1.0))
}

#[test]
fn hottest_shared_function_with_cost() {
    let s = TestServer::start();
    s.ingest("", "api.cpu{host=h1}", T0, "main;zlib 30\nmain;api 40\n");
    s.ingest("", "db.cpu{host=h2}", T0, "main;zlib 20\nmain;db 10\n");
    s.ingest("", "web.cpu{host=h3}", T0, "main;zlib 10\nmain;web 90\n");
    let window = [
        ("from", "2023-01-01T00:00:00Z"),
        ("until", "2023-01-01T00:01:00Z"),
    ];
    let q = format!("{CPU}{{}}");
    let mut params = vec![("query", q.as_str()), ("price_per_core_hour", "0.1")];
    params.extend(window);
    let (st, v) = get(&s, "/api/v1/fleet/hottest", &params);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["total"], json!(200 * SCALE));
    assert_eq!(v["services"], json!(3));
    assert_eq!(v["window_ms"], json!(60_000));
    let rows: Vec<(String, i64, usize)> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let n = e["name"].as_str().unwrap().to_string();
            (
                n,
                e["value"].as_i64().unwrap(),
                e["services"].as_u64().unwrap() as usize,
            )
        })
        .collect();
    let want = [
        ("web", 90, 1),
        ("zlib", 60, 3),
        ("api", 40, 1),
        ("db", 10, 1),
    ];
    let want: Vec<(String, i64, usize)> = want
        .iter()
        .map(|&(n, v, c)| (n.to_string(), v * SCALE, c))
        .collect();
    assert_eq!(rows, want);
    let zlib = &v["entries"][1];
    assert!(close(&zlib["share"], 0.3), "{zlib}");
    // 0.6 core-seconds in a minute: 864 core-seconds a day; 0.24 core-hours a day
    // at 0.1 → 8.76 a year.
    assert!(
        close(&zlib["cost"]["core_seconds_per_day"], 864.0),
        "{zlib}"
    );
    assert!(close(&zlib["cost"]["per_year"], 8.76), "{zlib}");
    assert!(close(&v["cost"]["core_seconds_per_day"], 2880.0), "{v}");

    let mut p = params.clone();
    p.push(("limit", "1"));
    p.push(("by", "function_total"));
    let (st, v) = get(&s, "/api/v1/fleet/hottest", &p);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["entries"].as_array().unwrap().len(), 1);
    assert_eq!(v["entries"][0]["name"], json!("main"));
    assert_eq!(v["entries"][0]["services"], json!(3));

    let mut bad = params.clone();
    bad.push(("by", "nope"));
    let (st, v) = get(&s, "/api/v1/fleet/hottest", &bad);
    assert_eq!(st, 400, "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("function_total"),
        "{v}"
    );
    let (st, _) = get(
        &s,
        "/api/v1/fleet/hottest",
        &[("query", q.as_str()), ("price_per_core_hour", "-1")],
    );
    assert_eq!(st, 400);
    let (st, _) = get(&s, "/api/v1/fleet/hottest", &[("query", "{}")]);
    assert_eq!(st, 400, "a query without a profile type is refused");
    // Not CPU time: no cost.
    s.ingest("", "api.alloc_objects{host=h1}", T0, "main;zlib 3\n");
    let mem = "memory:alloc_objects:count:space:bytes{}";
    let mut p = vec![("query", mem)];
    p.extend(window);
    let (st, v) = get(&s, "/api/v1/fleet/hottest", &p);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["cost"], Value::Null, "{v}");
}

fn diff(s: &TestServer, compare_start_s: i64, noise: Value) -> (u16, Value) {
    let r = s
        .client
        .post(format!("{}/api/v1/diff", s.url))
        .json(
            &json!({"profile_type": CPU, "selector": "{service_name=\"app\"}",
            "base": {"start": T0 * 1000, "end": T0 * 1000 + 60_000},
            "compare": {"start": compare_start_s * 1000, "end": compare_start_s * 1000 + 60_000},
            "top": 10, "noise": noise}),
        )
        .send()
        .unwrap();
    (r.status().as_u16(), r.json().unwrap())
}

#[test]
fn diff_within_and_outside_noise() {
    let s = TestServer::start();
    // Base: two hosts, 100 samples each, 60/40 and 40/60. Every split is {h1}|{h2}:
    // M = 0.4 at N = 100·SCALE a side, so C = 0.4·√(100·SCALE); for two sides of
    // 200·SCALE the expected distance is C/√(200·SCALE) = 0.4/√2 ≈ 0.283.
    s.ingest("", "app.cpu{host=h1}", T0, "main;a 60\nmain;b 40\n");
    s.ingest("", "app.cpu{host=h2}", T0, "main;a 40\nmain;b 60\n");
    let (near, far) = (T0 + 600, T0 + 1200);
    // 105/95: M = 0.05, within 2 × 0.283.
    s.ingest("", "app.cpu{host=h1}", near, "main;a 55\nmain;b 45\n");
    s.ingest("", "app.cpu{host=h2}", near, "main;a 50\nmain;b 50\n");
    // 190/10: M = 0.9, above 2 × 0.283.
    s.ingest("", "app.cpu{host=h1}", far, "main;a 95\nmain;b 5\n");
    s.ingest("", "app.cpu{host=h2}", far, "main;a 95\nmain;b 5\n");
    let expected = 0.4 / 2f64.sqrt();
    let c = 0.4 * ((100 * SCALE) as f64).sqrt();

    let (st, v) = diff(&s, near, json!({}));
    assert_eq!(st, 200, "{v}");
    assert!(close(&v["stats"]["manhattan"], 0.05), "{v}");
    let n = &v["noise"];
    assert_eq!(n["verdict"], json!("within_noise"), "{v}");
    assert!(close(&n["expected"], expected), "{n}");
    assert!(close(&n["c"], c), "{n}");
    assert_eq!(
        (n["hosts"].clone(), n["margin"].clone()),
        (json!(2), json!(2.0))
    );

    let (st, v) = diff(&s, far, json!({"host_label": "host", "margin": 2.0}));
    assert_eq!(st, 200, "{v}");
    assert!(close(&v["stats"]["manhattan"], 0.9), "{v}");
    assert_eq!(v["noise"]["verdict"], json!("significant"), "{v}");
    // With a margin above 0.9 / 0.283 ≈ 3.18 the same change is within noise.
    let (_, v) = diff(&s, far, json!({"margin": 3.5}));
    assert_eq!(v["noise"]["verdict"], json!("within_noise"), "{v}");

    let (_, v) = diff(&s, far, json!({"host_label": "zone"}));
    assert_eq!(v["noise"]["verdict"], json!("unknown"), "{v}");
    let (st, v) = diff(&s, far, json!({"margin": -1}));
    assert_eq!(st, 400, "{v}");
    let (st, v) = diff(&s, far, json!({"bogus": 1}));
    assert_eq!(st, 400, "{v}");
    // Without the option the answer has no noise field.
    let (_, v) = diff(&s, far, Value::Null);
    assert!(v.get("noise").is_none(), "{v}");
}

/// One hardware-event pprof upload at `T0`: `leaf → value` under `main`.
fn ingest_events(s: &TestServer, event: &str, svc: &str, platform: &str, stacks: &[(&str, i64)]) {
    crate::common::ingest_hw_event(s, event, svc, platform, stacks, T0);
}

/// GWP's NumCrunch / MemBench example through pprof uploads of `cycles` and
/// `instructions`: today's even spread costs 500 cycles, the suggestion 400.
#[test]
fn cpi_and_assignment_over_http() {
    let s = TestServer::start();
    for p in ["p1", "p2"] {
        ingest_events(&s, "cycles", "numcrunch", p, &[("crunch", 100)]);
        ingest_events(&s, "instructions", "numcrunch", p, &[("crunch", 100)]);
        ingest_events(
            &s,
            "instructions",
            "membench",
            p,
            &[("memcpy", 50), ("compute", 50)],
        );
    }
    ingest_events(
        &s,
        "cycles",
        "membench",
        "p1",
        &[("memcpy", 50), ("compute", 50)],
    );
    ingest_events(
        &s,
        "cycles",
        "membench",
        "p2",
        &[("memcpy", 150), ("compute", 50)],
    );
    let window = [
        ("from", "2023-01-01T00:00:00Z"),
        ("until", "2023-01-01T00:01:00Z"),
    ];
    let (st, v) = get(&s, "/api/v1/fleet/cpi", &window);
    assert_eq!(st, 200, "{v}");
    let rows: Vec<(String, i64, i64, f64)> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let k = format!(
                "{}/{}",
                r["key"][0].as_str().unwrap(),
                r["key"][1].as_str().unwrap()
            );
            let n = |f: &str| r[f].as_i64().unwrap();
            (
                k,
                n("cycles"),
                n("instructions"),
                r["cpi"].as_f64().unwrap(),
            )
        })
        .collect();
    let want = [
        ("membench/p1", 100, 100, 1.0),
        ("membench/p2", 200, 100, 2.0),
        ("numcrunch/p1", 100, 100, 1.0),
        ("numcrunch/p2", 100, 100, 1.0),
    ];
    let want: Vec<(String, i64, i64, f64)> = want
        .iter()
        .map(|&(k, c, i, x)| (k.to_string(), c, i, x))
        .collect();
    assert_eq!(rows, want);

    let mut p = window.to_vec();
    p.push(("by_function", "true"));
    let (st, v) = get(&s, "/api/v1/fleet/cpi", &p);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["keys"], json!(["service_name", "platform", "function"]));
    let memcpy_p2 = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == json!(["membench", "p2", "memcpy"]))
        .unwrap();
    assert_eq!(memcpy_p2["cpi"], json!(3.0));

    let (st, v) = get(&s, "/api/v1/fleet/assignment", &window);
    assert_eq!(st, 200, "{v}");
    assert!(close(&v["cycles_today"], 500.0), "{v}");
    assert!(close(&v["cycles_suggested"], 400.0), "{v}");
    assert!(close(&v["cycles_saved"], 100.0), "{v}");
    assert_eq!(v["capacity_cycles"], json!([200.0, 300.0]));
    let suggested: Vec<(String, String, i64)> = v["placement"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["instructions_suggested"].as_f64().unwrap() > 0.5)
        .map(|m| {
            let s = |f: &str| m[f].as_str().unwrap().to_string();
            let n = m["instructions_suggested"].as_f64().unwrap().round() as i64;
            (s("service"), s("platform"), n)
        })
        .collect();
    let want = vec![
        ("membench".to_string(), "p1".to_string(), 200),
        ("numcrunch".to_string(), "p2".to_string(), 200),
    ];
    assert_eq!(suggested, want);

    let mut bad = window.to_vec();
    bad.push(("by_function", "true"));
    let (st, v) = get(&s, "/api/v1/fleet/assignment", &bad);
    assert_eq!(st, 400, "{v}");
    let (st, v) = get(&s, "/api/v1/fleet/cpi", &[("cycles_type", "nope")]);
    assert_eq!(st, 400, "{v}");
}

#[test]
fn variance_names_the_slow_host_and_its_function() {
    let s = TestServer::start();
    for h in ["h1", "h2", "h3"] {
        s.ingest(
            "",
            &format!("api.cpu{{host={h}}}"),
            T0,
            "main;serve 100\nmain;gc 10\n",
        );
    }
    s.ingest(
        "",
        "api.cpu{host=h4}",
        T0,
        "main;serve 100\nmain;gc 10\nmain;lock 200\n",
    );
    s.ingest("", "db.cpu{host=h5}", T0, "main;query 90\n");
    s.ingest("", "db.cpu{host=h6}", T0, "main;query 110\n");
    let q = format!("{CPU}{{}}");
    let params = [
        ("query", q.as_str()),
        ("from", "2023-01-01T00:00:00Z"),
        ("until", "2023-01-01T00:01:00Z"),
        ("explain", "1"),
    ];
    let (st, v) = get(&s, "/api/v1/fleet/variance", &params);
    assert_eq!(st, 200, "{v}");
    let g = &v["groups"][0];
    assert_eq!(g["group"], json!({"service_name": "api"}));
    assert_eq!(g["units"], json!(4));
    assert!(close(&g["mean"], 160.0 * SCALE as f64), "{g}");
    assert!(close(&g["cov"], 7500f64.sqrt() / 160.0), "{g}");
    assert_eq!(g["max_unit"]["name"], json!("h4"));
    assert_eq!(g["explainers"][0]["function"], json!("lock"));
    assert!(
        close(&g["explainers"][0]["high_share"], 200.0 / 310.0),
        "{g}"
    );
    assert!(close(&v["groups"][1]["cov"], 0.1), "{v}");
    let mut bad = params.to_vec();
    bad.push(("unit", "service_name"));
    let (st, v) = get(&s, "/api/v1/fleet/variance", &bad);
    assert_eq!(st, 400, "{v}");
}

#[test]
fn variance_names_the_label_of_the_slow_hosts() {
    let s = TestServer::start();
    // Zone b's hosts cost exactly twice zone a's; the kernel is spread evenly.
    for (h, zone, kernel, n) in [
        ("h1", "a", "k1", 100),
        ("h2", "a", "k2", 100),
        ("h3", "b", "k1", 200),
        ("h4", "b", "k2", 200),
    ] {
        s.ingest(
            "",
            &format!("api.cpu{{host={h},zone={zone},kernel={kernel}}}"),
            T0,
            &format!("main;serve {n}\n"),
        );
    }
    let q = format!("{CPU}{{}}");
    let params = [
        ("query", q.as_str()),
        ("from", "2023-01-01T00:00:00Z"),
        ("until", "2023-01-01T00:01:00Z"),
    ];
    let (st, v) = get(&s, "/api/v1/fleet/variance", &params);
    assert_eq!(st, 200, "{v}");
    let g = &v["groups"][0];
    assert!(close(&g["mean"], 150.0 * SCALE as f64), "{g}");
    assert!(close(&g["stddev"], 50.0 * SCALE as f64), "{g}");
    // (200 − 100) / 50 = 2; kernel k1 (h1, h3) against k2: 150 against 150.
    assert_eq!(
        g["correlated_labels"],
        json!([
            {"label": "zone", "value": "b", "units": 2,
             "mean_with": 200.0 * SCALE as f64, "mean_without": 100.0 * SCALE as f64,
             "ratio": 2.0, "effect": 2.0},
            {"label": "kernel", "value": "k1", "units": 2,
             "mean_with": 150.0 * SCALE as f64, "mean_without": 150.0 * SCALE as f64,
             "ratio": 1.0, "effect": 0.0},
        ]),
        "{g}"
    );
    let mut one = params.to_vec();
    one.push(("correlate", "1"));
    let (_, v) = get(&s, "/api/v1/fleet/variance", &one);
    assert_eq!(v["groups"][0]["correlated_labels"][0]["value"], json!("b"));
    assert_eq!(
        v["groups"][0]["correlated_labels"].as_array().map(Vec::len),
        Some(1)
    );
    let mut none = params.to_vec();
    none.push(("correlate", "0"));
    let (_, v) = get(&s, "/api/v1/fleet/variance", &none);
    assert_eq!(v["groups"][0]["correlated_labels"], json!([]));
    let mut bad = params.to_vec();
    bad.push(("correlate", "33"));
    let (st, v) = get(&s, "/api/v1/fleet/variance", &bad);
    assert_eq!(st, 400, "{v}");
}

/// The frequency of the first event of the plan `host`'s agent gets.
fn planned_hz(s: &TestServer, host: &str) -> String {
    let r = s
        .client
        .post(format!("{}/control.v1.ControlService/GetPlan", s.url))
        .json(&json!({"agentId": host, "host": host}))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().unwrap();
    v["plan"]["events"][0]["frequencyHz"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[test]
fn variance_boost_raises_the_top_groups_hosts_until_it_expires() {
    let s = TestServer::start();
    for (svc, h, n) in [
        ("api", "h1", 100),
        ("api", "h2", 100),
        ("api", "h3", 100),
        ("api", "h4", 300),
        ("db", "h5", 90),
        ("db", "h6", 110),
        ("web", "h7", 50),
    ] {
        s.ingest(
            "",
            &format!("{svc}.cpu{{host={h}}}"),
            T0,
            &format!("main;serve {n}\n"),
        );
    }
    let q = format!("{CPU}{{}}");
    let base = [
        ("query", q.as_str()),
        ("from", "2023-01-01T00:00:00Z"),
        ("until", "2023-01-01T00:01:00Z"),
    ];
    let boost = |extra: &[(&str, &str)]| {
        let mut params = base.to_vec();
        params.retain(|(k, _)| extra.iter().all(|(e, _)| e != k));
        params.extend_from_slice(extra);
        let r = s
            .client
            .post(format!("{}/api/v1/admin/fleet/variance/boost", s.url))
            .query(&params)
            .send()
            .unwrap();
        (r.status().as_u16(), r.json::<Value>().unwrap())
    };
    for bad in [
        ("top", "0"),
        ("max_hosts", "0"),
        ("duration", "48h"),
        ("duration", "soon"),
        ("frequency_hz", "0"),
        ("event", "nope"),
        ("unit", "service_name"),
        ("nope", "1"),
    ] {
        let (st, v) = boost(&[bad]);
        assert_eq!(st, 400, "{bad:?}: {v}");
    }
    assert_eq!(
        s.json("/api/v1/admin/agents/overrides", &[])["overrides"],
        json!([]),
        "bad requests create nothing"
    );
    assert_eq!(planned_hz(&s, "h1"), "19", "the default policy");

    // api (CoV √7500 / 150) then db (CoV 0.1); web has one host and no spread.
    // A budget of 5 hosts leaves db's h6 out.
    let (st, v) = boost(&[
        ("top", "2"),
        ("max_hosts", "5"),
        ("duration", "3s"),
        ("frequency_hz", "49"),
    ]);
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["frequency_hz"], json!(49));
    let groups: Vec<(Value, Value)> = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["group"].clone(), g["hosts"].clone()))
        .collect();
    assert_eq!(
        groups,
        [
            (
                json!({"service_name": "api"}),
                json!(["h1", "h2", "h3", "h4"])
            ),
            (json!({"service_name": "db"}), json!(["h5"])),
        ]
    );
    assert_eq!(v["over_budget"], json!(["h6"]));
    let listed = s.json("/api/v1/admin/agents/overrides", &[]);
    assert_eq!(
        listed["overrides"], v["overrides"],
        "what it answers is stored"
    );
    let api_reason = format!(
        "variance boost: service_name=api (CoV {:.3})",
        7500f64.sqrt() / 150.0
    );
    let overrides: Vec<(String, Value, Value, String, i64)> = listed["overrides"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["host"].as_str().unwrap_or("").to_string(),
                o["service"].clone(),
                o["frequency_hz"].clone(),
                o["reason"].as_str().unwrap_or("").to_string(),
                o["until_ms"].as_i64().unwrap() - o["created_ms"].as_i64().unwrap(),
            )
        })
        .collect();
    let want: Vec<(String, Value, Value, String, i64)> = ["h1", "h2", "h3", "h4", "h5"]
        .iter()
        .map(|h| {
            let reason = match *h {
                "h5" => "variance boost: service_name=db (CoV 0.100)".to_string(),
                _ => api_reason.clone(),
            };
            (h.to_string(), Value::Null, json!(49), reason, 3000)
        })
        .collect();
    assert_eq!(overrides, want);
    assert_eq!(planned_hz(&s, "h1"), "49");
    assert_eq!(planned_hz(&s, "h6"), "19", "over budget: not raised");

    // The overrides expire by themselves and the rate falls back.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while s.json("/api/v1/admin/agents/overrides", &[])["overrides"] != json!([]) {
        assert!(
            std::time::Instant::now() < deadline,
            "the boost never expired"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(planned_hz(&s, "h1"), "19");

    // Nothing varies in a window without data: nothing to raise.
    let (st, v) = boost(&[
        ("from", "2024-01-01T00:00:00Z"),
        ("until", "2024-01-01T00:01:00Z"),
    ]);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["overrides"], json!([]));
}
