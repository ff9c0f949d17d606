//! Every number the UI shows, read from a real headless Chromium and compared with
//! the raw profiles, never with the server's other answers: a Go CPU profile
//! (`large.cpu`) and Go heap profiles read with prost (`pprof_oracle`), a Python
//! profile likewise, and a recording made by the JDK's own Flight Recorder read
//! with `jfr print --json` (`jdk`). Views: Explore (top functions, search share both
//! ways, sandwich, the rate timeline), Labels, Compare (movers, with selectors
//! that combine), Group by, Fleet (hottest code, a group without spread) and
//! Alerts (the state's reason). Screenshots of each go to
//! `target/ui-screenshots/oracle-*.png`.
//! Skips without chromium, the JDK or the fixtures, unless
//! `PROFILEDB_REQUIRE_EXTERNAL=1`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{json, Value};

use crate::browser::Browser;
use crate::common::{fixtures, wait_for, TestServer};
use crate::pprof_oracle::{self as oracle, Stacks};

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
const INUSE: &str = "memory:inuse_space:bytes:space:bytes";
const MIN: i64 = 60_000;

fn screenshots() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/ui-screenshots")
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-12)
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// A table's body rows: each cell's `data-value` (numbers) or text.
fn rows(b: &Browser, table: &str) -> Vec<Vec<String>> {
    let v = b.js(
        "return [...document.querySelectorAll(arguments[0] + ' tbody tr')].map((r) =>
           [...r.cells].map((c) => c.dataset.value !== undefined ? c.dataset.value : c.textContent));",
        json!([table]),
    );
    serde_json::from_value(v).expect("rows of cells")
}

fn int(s: &str) -> i64 {
    s.parse().unwrap_or_else(|_| panic!("not an integer: {s}"))
}

fn goto(b: &Browser, url: &str) {
    b.goto(url);
    b.wait_idle(90);
    assert_eq!(b.error_text(), "", "{url}");
}

/// The uploads: one range of an hour holding every fixture, retimed into it.
struct Data {
    go: Stacks,
    py: Stacks,
    /// Java CPU ns per leaf function, from `jfr print`.
    java: BTreeMap<String, i64>,
    py_samples: i64,
    heap: [Stacks; 2],
    from: i64,
    until: i64,
}

fn load(s: &TestServer) -> Option<Data> {
    let fx = fixtures()?;
    let rec = crate::jdk::recording()?;
    let read = |p: &str| oracle::decode(&std::fs::read(fx.join(p)).expect("fixture"));
    let now = profiledb_storage::now_ms();
    let go = read("pprof/large.cpu");
    s.upload(
        "name=goapp&format=pprof",
        oracle::retimed(&go, now - 40 * MIN),
    );
    let py = read("pyroscope/profile_python");
    // Twice, on two hosts: a fleet group without spread, and an alert's two sides.
    for (host, at) in [("h1", 45), ("h2", 15)] {
        s.upload(
            &format!("name=pyapp%7Bhost%3D{host}%7D&format=pprof&sampleRate=100"),
            oracle::retimed(&py, now - at * MIN),
        );
    }
    s.upload("name=javaapp", rec.bytes());
    // Heap: heapapp grows from v1 to v2; a decoy service does the opposite in the
    // same ranges, so a diff that lost its shared selector shows other movers.
    let heap = [
        read("pprof/1644509272337470000.pb.gz"),
        read("pprof/1644509299337903000.pb.gz"),
    ];
    for (service, first, second) in [("heapapp", 0, 1), ("decoy", 1, 0)] {
        for (version, which, at) in [("v1", first, 50), ("v2", second, 20)] {
            s.upload(
                &format!("name={service}%7Bversion%3D{version}%7D&format=pprof"),
                oracle::retimed(&heap[which], now - at * MIN),
            );
        }
    }
    let py_stacks = oracle::stacks(&py, "samples", 1);
    Some(Data {
        go: oracle::stacks(&go, "cpu", 1),
        py_samples: oracle::sum(&py_stacks),
        py: oracle::stacks(&py, "samples", 10_000_000),
        java: rec.self_ns(),
        heap: [
            oracle::stacks(&heap[0], "inuse_space", 1),
            oracle::stacks(&heap[1], "inuse_space", 1),
        ],
        from: now - 60 * MIN,
        until: now + MIN,
    })
}

#[test]
fn every_number_shown_matches_the_raw_profiles() {
    let Some(b) = Browser::start() else { return };
    let s = TestServer::start();
    let Some(d) = load(&s) else { return };
    let t = profiledb::time::rfc3339;
    let range = format!("from={}&until={}", t(d.from), t(d.until));
    let base = format!("{}/ui", s.url);
    b.window_size(1400, 1000);

    explore_go(&b, &base, &range, &d);
    explore_java(&b, &base, &range, &d);
    labels(&b, &base, &range, &d);
    compare(&b, &base, &d);
    group_by(&b, &base, &range, &d);
    fleet(&b, &base, &range, &d);
    alerts(&b, &base, &s, &d);
}

fn explore_go(b: &Browser, base: &str, range: &str, d: &Data) {
    goto(
        b,
        &format!("{base}/explore?type={CPU}&service=goapp&{range}"),
    );
    let flame = |call: &str| {
        b.js(
            &format!("return window.profiledbUI.flame.{call};"),
            json!([]),
        )
    };
    assert_eq!(num(&flame("rootTotal()")) as i64, oracle::sum(&d.go));
    assert!(num(&flame("nodeCount()")) <= 8192.0);
    // Top functions: every shown row's self and total, in order.
    let want = oracle::ranked(&d.go);
    let shown = rows(b, "section[aria-label='Top functions'] table");
    assert_eq!(shown.len(), want.len().min(500));
    for (row, (name, selfv, total)) in shown.iter().zip(&want).take(100) {
        assert_eq!(row[0], middle_at(name, 44));
        assert_eq!((int(&row[1]), int(&row[3])), (*selfv, *total), "{name}");
    }
    assert_eq!(shown[0][0], "time.Now");
    let count = b.text(&b.find("section[aria-label='Top functions'] .flame-bar .muted"));
    assert!(
        count.starts_with(&format!("{} rows", want.len())),
        "{count}"
    );
    b.screenshot(&screenshots(), "oracle-explore");

    // Search: case-sensitive, then ignoring case; the share of the whole merge.
    let search = b.find("input[aria-label='Search functions']");
    b.type_text(&search, r"^time\.Now$");
    let share = |b: &Browser| {
        wait_for(20, "the search share", || {
            let v = b.js("return window.profiledbUI.search;", json!([]));
            (!v.is_null()).then(|| num(&v["share"]))
        })
    };
    let all = oracle::sum(&d.go) as f64;
    let exact = oracle::matching(&d.go, &regex::Regex::new(r"^time\.Now$").unwrap()) as f64 / all;
    wait_for(20, "the case-sensitive share", || {
        close(share(b), exact).then_some(())
    });
    b.click(&b.find("button[aria-label='Match case']"));
    let loose =
        oracle::matching(&d.go, &regex::Regex::new(r"(?i)^time\.Now$").unwrap()) as f64 / all;
    assert!(loose > exact);
    wait_for(20, "the case-insensitive share", || {
        close(share(b), loose).then_some(())
    });
    assert!(b.url().contains("ic=1"), "{}", b.url());
    b.screenshot(&screenshots(), "oracle-explore-search");

    // The sandwich of a table row's function, over every stack.
    b.click(&b.find("section[aria-label='Top functions'] tbody tr:first-child"));
    b.wait_idle(60);
    let total = oracle::total_by_function(&d.go)["time.Now"];
    let sw = |side: &str| {
        wait_for(20, "the sandwich", || {
            let v = b.js(
                &format!(
                    "const f = window.profiledbUI.flames.{side}; return f ? f.rootTotal() : null;"
                ),
                json!([]),
            );
            (!v.is_null()).then(|| num(&v) as i64)
        })
    };
    assert_eq!((sw("callers"), sw("callees")), (total, total));
    b.screenshot(&screenshots(), "oracle-explore-sandwich");
}

fn explore_java(b: &Browser, base: &str, range: &str, d: &Data) {
    goto(
        b,
        &format!("{base}/explore?type={CPU}&service=javaapp&{range}"),
    );
    let all: i64 = d.java.values().sum();
    // The timeline is a rate: cores × step seconds add up to the CPU seconds.
    let rates = b.js(
        "const c = window.profiledbUI.chart; return {rates: c.rates(), step: c.stepMs};",
        json!([]),
    );
    let step_s = num(&rates["step"]) / 1000.0;
    let cpu_s: f64 = rates["rates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| num(&p[1]) * step_s)
        .sum();
    assert!((cpu_s - all as f64 / 1e9).abs() < 1e-6, "{cpu_s} vs {all}");
    let shown = rows(b, "section[aria-label='Top functions'] table");
    let selfs: BTreeMap<String, i64> = shown
        .iter()
        .filter(|r| int(&r[1]) > 0)
        .map(|r| (r[0].clone(), int(&r[1])))
        .collect();
    let want: BTreeMap<String, i64> = d.java.iter().map(|(f, v)| (middle_at(f, 44), *v)).collect();
    assert_eq!(
        selfs, want,
        "self CPU per function, at the recording's 20 ms period"
    );
    b.screenshot(&screenshots(), "oracle-explore-java");
}

fn labels(b: &Browser, base: &str, range: &str, d: &Data) {
    goto(
        b,
        &format!("{base}/labels?type={CPU}&label=service_name&{range}"),
    );
    let cells = b.js("return window.profiledbUI.breakdown;", json!([]));
    let got: BTreeMap<String, i64> = cells
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["value"].as_str().unwrap().to_string(),
                num(&c["total"]) as i64,
            )
        })
        .collect();
    let want: BTreeMap<String, i64> = [
        ("goapp", oracle::sum(&d.go)),
        ("javaapp", d.java.values().sum()),
        ("pyapp", 2 * oracle::sum(&d.py)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(got, want);
    b.screenshot(&screenshots(), "oracle-labels");
}

/// Shares of each function's self value on both heap sides.
fn shares(stacks: &Stacks) -> BTreeMap<String, f64> {
    let all = oracle::sum(stacks) as f64;
    oracle::self_by_function(stacks)
        .into_iter()
        .map(|(k, v)| (k, v as f64 / all))
        .collect()
}

fn compare(b: &Browser, base: &str, d: &Data) {
    let t = profiledb::time::rfc3339;
    let now = d.until - MIN;
    let url = format!(
        "{base}/compare?type={INUSE}&service=heapapp&bsel=%7Bversion%3D%22v1%22%7D&csel=%7Bversion%3D%22v2%22%7D\
         &bfrom={}&buntil={}&cfrom={}&cuntil={}",
        t(now - 55 * MIN),
        t(now - 45 * MIN),
        t(now - 25 * MIN),
        t(now - 15 * MIN)
    );
    goto(b, &url);
    let (sb, sc) = (shares(&d.heap[0]), shares(&d.heap[1]));
    let shown = rows(b, "section[aria-label='Top movers'] table");
    assert!(!shown.is_empty());
    let names: std::collections::BTreeSet<&String> = sb.keys().chain(sc.keys()).collect();
    let mut deltas: Vec<f64> = names
        .iter()
        .map(|&f| sc.get(f).unwrap_or(&0.0) - sb.get(f).unwrap_or(&0.0))
        .map(f64::abs)
        .collect();
    deltas.sort_by(|a, b| b.total_cmp(a));
    for (k, row) in shown.iter().enumerate() {
        let name = row[0].as_str();
        let full = sb
            .keys()
            .chain(sc.keys())
            .find(|k| middle_at(k, 34) == name)
            .expect(name);
        let (x, y) = (
            sb.get(full).copied().unwrap_or(0.0),
            sc.get(full).copied().unwrap_or(0.0),
        );
        let (gx, gy): (f64, f64) = (row[1].parse().unwrap(), row[2].parse().unwrap());
        assert!(close(gx, x) && close(gy, y), "{full}: {gx} {gy} vs {x} {y}");
        // The movers are the largest changes, in order.
        assert!(
            close((y - x).abs(), deltas[k]),
            "{full}: {} vs {}",
            (y - x).abs(),
            deltas[k]
        );
    }
    b.screenshot(&screenshots(), "oracle-compare");
}

/// A table's text for a long name: the middle left out past `max` characters.
fn middle_at(name: &str, max: usize) -> String {
    let chars: Vec<char> = name.chars().collect();
    if chars.len() <= max {
        return name.to_string();
    }
    let tail = ((max - 1) as f64 * 0.55).ceil() as usize;
    let head: String = chars[..max - 1 - tail].iter().collect();
    let end: String = chars[chars.len() - tail..].iter().collect();
    format!("{head}…{end}")
}

fn group_by(b: &Browser, base: &str, range: &str, d: &Data) {
    goto(
        b,
        &format!("{base}/groupby?type={CPU}&keys=service_name,function&limit=40&{range}"),
    );
    let mut want: BTreeMap<(String, String), i64> = BTreeMap::new();
    for (service, stacks, times) in [("goapp", &d.go, 1), ("pyapp", &d.py, 2)] {
        for (f, v) in oracle::self_by_function(stacks) {
            want.insert((service.to_string(), f), v * times);
        }
    }
    for (f, v) in &d.java {
        want.insert(("javaapp".to_string(), f.clone()), *v);
    }
    let shown = rows(b, "table[aria-label=groups]");
    assert_eq!(shown.len(), 40);
    let mut values: Vec<i64> = want.values().copied().collect();
    values.sort_unstable_by(|a, b| b.cmp(a));
    for (k, row) in shown.iter().enumerate() {
        let key = (row[0].clone(), row[1].clone());
        let v = int(&row[2]);
        let full = want
            .iter()
            .find(|((s, f), _)| *s == key.0 && middle_at(f, 48) == key.1);
        assert_eq!(full.map(|(_, v)| *v), Some(v), "{key:?}");
        assert_eq!(v, values[k], "rows in order of value");
    }
    b.screenshot(&screenshots(), "oracle-groupby");
}

fn fleet(b: &Browser, base: &str, range: &str, d: &Data) {
    goto(b, &format!("{base}/fleet?type={CPU}&{range}"));
    // Hottest code: share of every service's samples, and in how many services.
    let mut by_fn: BTreeMap<String, (i64, usize)> = BTreeMap::new();
    let py_twice: BTreeMap<String, i64> = oracle::self_by_function(&d.py)
        .into_iter()
        .map(|(k, v)| (k, 2 * v))
        .collect();
    for selfs in [oracle::self_by_function(&d.go), py_twice, d.java.clone()] {
        for (f, v) in selfs {
            let e = by_fn.entry(f).or_insert((0, 0));
            e.0 += v;
            e.1 += 1;
        }
    }
    let all: i64 = by_fn.values().map(|e| e.0).sum();
    let shown = rows(b, "section[aria-label='Hottest shared code'] table");
    assert_eq!(shown.len(), 20);
    for row in &shown {
        let (f, (v, services)) = by_fn
            .iter()
            .find(|(f, _)| middle_at(f, 56) == row[0])
            .expect("a known function");
        assert_eq!(int(&row[1]) as usize, *services, "{f}");
        assert_eq!(int(&row[2]), *v, "{f}");
        assert!(
            close(row[4].parse().unwrap(), *v as f64 / all as f64),
            "{f}"
        );
    }
    // pyapp's two hosts cost the same: no costliest, nothing to explain.
    let groups = rows(b, "table[aria-label=variance]");
    let py = groups
        .iter()
        .find(|r| r[0] == "service_name=pyapp")
        .expect("pyapp's group");
    assert_eq!(int(&py[1]), 2);
    assert!(
        close(py[2].parse().unwrap(), oracle::sum(&d.py) as f64),
        "{py:?}"
    );
    assert!(py[4].starts_with("all equal"), "{py:?}");
    assert_eq!(py[6], "0");
    assert!(b
        .find_all("section[aria-label='Why service_name=pyapp varies']")
        .is_empty());
    b.screenshot(&screenshots(), "oracle-fleet");
}

fn alerts(b: &Browser, base: &str, s: &TestServer, d: &Data) {
    // pyapp's two uploads are 30 minutes apart: one on each side of the rule.
    let rule = json!({
        "name": "py-hot", "profile_type": CPU, "selector": "{service_name=\"pyapp\"}",
        "watch": {"function": ".*"}, "window": "30m", "baseline": {"offset": "30m"},
        "condition": {"share_delta_pp": 5}, "min_samples": 1_000_000, "for": "1s", "interval": "1s",
    });
    s.post_json("/api/v1/alerts/rules", &rule, 201);
    wait_for(30, "a first evaluation", || {
        let v = s.json("/api/v1/alerts/rules/py-hot", &[]);
        v["last_evaluation"].is_string().then_some(())
    });
    goto(b, &format!("{base}/alerts"));
    let state = b.text(&b.find("table[aria-label=rules] tbody td:nth-child(2)"));
    let count = thousands(d.py_samples);
    assert_eq!(
        state,
        format!(
            "inactive\ntoo few samples to judge: {count} on the smaller side, 1,000,000 required"
        )
    );
    b.screenshot(&screenshots(), "oracle-alerts");
}

fn thousands(v: i64) -> String {
    let s = v.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
