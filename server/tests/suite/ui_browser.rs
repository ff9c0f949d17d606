//! The web UI in a real headless Chromium (WebDriver) against a real server fed with
//! generated profiles (and a real pprof fixture when present): Explore's flame graph
//! against the API, zoom by a real click and its deep link, search, sandwich, Compare's
//! top mover, a group-by row and its link to Explore, an alert's link to Compare,
//! tenants and admin, and the Fleet view's tables (and its boost) against the fleet
//! API. Assertions read DOM text and the page's own JS API
//! (`window.profiledbUI`), never pixels. Screenshots go to `target/ui-screenshots/`.
//! Skips (passing, with a message) where chromium or chromedriver is absent; fails
//! instead with `PROFILEDB_REQUIRE_EXTERNAL=1`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::browser::Browser;
use crate::common::{wait_for, TestServer};
use serde_json::{json, Value};

mod fleet;

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
/// `.cpu` folded counts are stored × 1e9 / sampleRate (100).
const SCALE: i64 = 10_000_000;
const HOUR_MS: i64 = 3_600_000;
/// Upload spacing of the generated data.
const STEP_S: i64 = 300;
/// WebDriver's code for the Escape key.
const ESCAPE: &str = "\u{E00C}";

fn screenshots() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/ui-screenshots")
}

/// Folded stacks of one upload: `zlib::deflate` is 4x hotter in the second hour, so
/// the diff of the two hours has a known top mover.
fn stacks(service: &str, weight: i64, late: bool) -> String {
    let deflate = if late { 24 } else { 6 };
    format!(
        "main;http::serve;{service}::handle;json::encode {}\n\
         main;http::serve;{service}::handle;db::query {}\n\
         main;http::serve;{service}::handle;zlib::deflate {}\n\
         main;runtime::gc {}\n",
        30 * weight,
        17 * weight,
        deflate * weight,
        9 * weight
    )
}

fn ingest(
    s: &TestServer,
    tenant: Option<&str>,
    name: &str,
    from_s: i64,
    body: Vec<u8>,
    format: &str,
) {
    let mut req = s.client.post(format!("{}/ingest", s.url)).query(&[
        ("name", name),
        ("from", &from_s.to_string()),
        ("format", format),
    ]);
    if let Some(t) = tenant {
        req = req.header("X-Scope-OrgID", t);
    }
    let r = req.body(body).send().unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().unwrap_or_default());
}

/// Two hours of uploads for two services in two regions, ending at `end_s`.
fn feed(s: &TestServer, end_s: i64) {
    for k in 0..24 {
        let t = end_s - 2 * 3600 + k * STEP_S + 1;
        let late = k >= 12;
        for (service, weight) in [("checkout", 2), ("search", 1)] {
            for (region, w) in [("eu", 1), ("us", 2)] {
                let name = format!("{service}.cpu{{env=prod,region={region}}}");
                ingest(
                    s,
                    None,
                    &name,
                    t,
                    stacks(service, weight * w, late).into_bytes(),
                    "folded",
                );
            }
        }
    }
}

fn merged(s: &TestServer, query: &str, from: i64, until: i64) -> BTreeMap<String, i64> {
    let r = s
        .client
        .get(format!("{}/api/v1/merge", s.url))
        .query(&[
            ("query", query),
            ("from", &from.to_string()),
            ("until", &until.to_string()),
        ])
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    r.text()
        .unwrap()
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect()
}

/// The value of the stacks containing frame `f`, over all of them.
fn share_of(stacks: &BTreeMap<String, i64>, f: &str) -> (i64, f64) {
    let total: i64 = stacks.values().sum();
    let with: i64 = stacks
        .iter()
        .filter(|(k, _)| k.split(';').any(|x| x == f))
        .map(|(_, v)| v)
        .sum();
    (with, with as f64 / total as f64)
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// `profiledbUI.flame.<call>` in the page.
fn flame(b: &Browser, call: &str) -> Value {
    b.js(
        &format!("return window.profiledbUI.flame.{call};"),
        json!([]),
    )
}

struct Setup {
    s: TestServer,
    b: Browser,
    /// `[from, until)` ms of the two generated hours.
    from: i64,
    until: i64,
}

fn setup() -> Option<Setup> {
    let b = Browser::start()?;
    let s = TestServer::start();
    let now_s = profiledb_storage::now_ms() / 1000;
    feed(&s, now_s);
    Some(Setup {
        s,
        b,
        // A minute early: stored times are aligned down to the store's step.
        from: (now_s - 2 * 3600 - 60) * 1000,
        until: now_s * 1000 + 1000,
    })
}

#[test]
fn explore_zoom_search_and_sandwich_match_the_api() {
    let Some(Setup { s, b, from, until }) = setup() else {
        return;
    };
    b.goto(&format!("{}/ui/explore?from={from}&until={until}", s.url));
    b.wait_idle(60);
    assert_eq!(b.error_text(), "");
    // The page chose the CPU type itself; pick a service as a person does.
    b.select("select[name=service]", "checkout");
    b.wait_idle(60);
    let url = b.url();
    assert!(url.contains("service=checkout"), "{url}");
    assert!(
        url.contains(&format!("type={}", CPU.replace(':', "%3A"))),
        "{url}"
    );

    let sel = "{service_name=\"checkout\"}";
    let q = format!("{CPU}{sel}");
    let api: Value = s.json(
        "/api/v1/flamegraph",
        &[
            ("query", &q),
            ("from", &from.to_string()),
            ("until", &until.to_string()),
            ("max_nodes", "8192"),
        ],
    );
    let stacks = merged(&s, &q, from, until);
    let total: i64 = stacks.values().sum();
    // 24 uploads × 2 regions (weights 1, 2) × service weight 2 × (30+17+9 + 6 or 24).
    assert_eq!(total, 12 * 6 * (56 + 6 + 56 + 24) * SCALE);
    assert_eq!(num(&api["total"]) as i64, total);
    assert_eq!(num(&flame(&b, "rootTotal()")) as i64, total);
    let root = flame(&b, "hitTest(400, 5)");
    assert_eq!(root["name"], "total");
    assert_eq!(num(&root["share"]), 1.0);

    let (deflate, deflate_share) = share_of(&stacks, "zlib::deflate");
    let at = flame(&b, "find('zlib::deflate')");
    let hit = b.js(
        "return window.profiledbUI.flame.hitTest(arguments[0], arguments[1]);",
        json!([at["x"], at["y"]]),
    );
    assert_eq!(hit["name"], "zlib::deflate");
    assert_eq!(num(&hit["total"]) as i64, deflate);
    assert!(
        close(num(&hit["share"]), deflate_share),
        "{hit} vs {deflate_share}"
    );
    // The top-functions table lists the same function.
    let table = b.text(&b.find("section[aria-label='Top functions'] table"));
    assert!(
        table.contains("zlib::deflate") && table.contains("json::encode"),
        "{table}"
    );
    b.screenshot(&screenshots(), "explore");

    // Zoom with a real click on `checkout::handle`: it then spans the whole width.
    let handle = flame(&b, "find('checkout::handle')");
    let canvas = b.find(".flame canvas");
    b.click_at(&canvas, num(&handle["x"]), num(&handle["y"]));
    // Zoomed: the frame spans the canvas (whose width may change as the sandwich
    // below it adds a scroll bar).
    let spans_all = |b: &Browser| {
        let w = num(&flame(b, "find('checkout::handle')")["w"]);
        w >= num(&flame(b, "width()")) - 1.0
    };
    wait_for(10, "the zoom animation", || spans_all(&b).then_some(()));
    let url = b.url();
    assert!(url.contains("zoom=checkout%3A%3Ahandle"), "{url}");
    // The sandwich of the clicked function: its callees sum to its total.
    let (handle_total, _) = share_of(&stacks, "checkout::handle");
    let callees = b.js(
        "return window.profiledbUI.flames.callees.rootTotal();",
        json!([]),
    );
    assert_eq!(num(&callees) as i64, handle_total);
    let callers = b.js(
        "return window.profiledbUI.flames.callers.hitTest(5, 5);",
        json!([]),
    );
    assert_eq!(
        callers["name"], "main",
        "the outermost caller, drawn on top when inverted"
    );
    b.screenshot(&screenshots(), "explore-zoomed-sandwich");

    // The link reloads to the same zoom.
    b.goto(&url);
    b.wait_idle(60);
    assert!(spans_all(&b), "zoom restored from the URL");
    assert_eq!(num(&flame(&b, "rootTotal()")) as i64, total);
    // Escape in the focused flame graph zooms back out to the root.
    let main_canvas = b.find("section[aria-label='Flame graph'] > .flame canvas");
    b.type_text(&main_canvas, ESCAPE);
    wait_for(10, "the zoom-out", || {
        (num(&flame(&b, "focus.d")) == 0.0 && !b.url().contains("zoom=")).then_some(())
    });

    // Search highlights the matches and shows their combined share.
    let search = b.find("input[aria-label='Search functions']");
    b.clear(&search);
    b.type_text(&search, "deflate|json");
    let (json_total, _) = share_of(&stacks, "json::encode");
    let want = (deflate + json_total) as f64 / total as f64;
    let got = num(&flame(&b, "searchShare()"));
    assert!(close(got, want), "{got} vs {want}");
    // The shown share is the server's, of the whole merge: it comes a moment later.
    wait_for(20, "the search share", || {
        let stat = b.text(&b.find(".flame-bar .stat[aria-live]"));
        stat.starts_with("matches: ").then_some(())
    });
    let server = num(&b.js("return window.profiledbUI.search.share;", json!([])));
    assert!(close(server, want), "{server} vs {want}");
    assert!(b.url().contains("search=deflate%7Cjson"), "{}", b.url());
    b.screenshot(&screenshots(), "explore-search");

    // The system's dark setting gives the dark theme.
    let background = "return getComputedStyle(document.body).backgroundColor;";
    assert_eq!(b.js(background, json!([])), "rgb(255, 255, 255)");
    b.color_scheme("dark");
    b.goto(&b.url());
    b.wait_idle(60);
    assert_eq!(b.js(background, json!([])), "rgb(20, 23, 28)");
    b.screenshot(&screenshots(), "explore-dark");
    b.color_scheme("light");

    // Label filters: names and values autocomplete from the label index, and a filter
    // narrows the flame graph to the API's answer for the same selector.
    let name = b.find("input[aria-label='Label name']");
    b.click(&name);
    let options = "return [...document.getElementById(arguments[0].getAttribute('list')).options].map((o) => o.value);";
    let names = wait_for(10, "label names", || {
        let v = b.js(options, json!([{crate::browser::ELEMENT: name.id()}]));
        v.as_array().is_some_and(|a| !a.is_empty()).then_some(v)
    });
    assert_eq!(names, json!(["env", "region"]));
    b.type_text(&name, "region");
    let value = b.find("input[aria-label='Label value']");
    b.click(&value);
    let values = wait_for(10, "label values", || {
        let v = b.js(options, json!([{crate::browser::ELEMENT: value.id()}]));
        v.as_array().is_some_and(|a| !a.is_empty()).then_some(v)
    });
    assert_eq!(values, json!(["eu", "us"]));
    b.type_text(&value, "eu");
    b.click(&b.find("form[aria-label='Label filters'] button[type=submit]"));
    b.wait_idle(60);
    assert!(b.url().contains("m=region%3D%22eu%22"), "{}", b.url());
    let eu: i64 = merged(
        &s,
        &format!("{CPU}{{service_name=\"checkout\",region=\"eu\"}}"),
        from,
        until,
    )
    .values()
    .sum();
    assert_eq!(eu * 3, total, "eu has weight 1 of 3");
    assert_eq!(num(&flame(&b, "rootTotal()")) as i64, eu);
    let chip = b.text(&b.find(".chip"));
    assert!(chip.starts_with("region=\"eu\""), "{chip}");
}

#[test]
fn compare_group_by_and_alert_links() {
    let Some(Setup { s, b, from, until }) = setup() else {
        return;
    };
    let mid = from + HOUR_MS;
    let sel = "{service_name=\"checkout\"}";
    b.goto(&format!(
        "{}/ui/compare?type={CPU}&service=checkout&bfrom={from}&buntil={mid}&cfrom={mid}&cuntil={until}",
        s.url
    ));
    b.wait_idle(60);
    assert_eq!(b.error_text(), "");
    let side = |a: i64, z: i64| json!({"start": a, "end": z, "selector": sel});
    let api = s.post_json(
        "/api/v1/diff",
        &json!({"profile_type": CPU, "selector": sel, "base": side(from, mid),
                      "compare": side(mid, until), "top": 20, "max_nodes": 8192}),
        200,
    );
    assert_eq!(api["top"][0]["function"], "zlib::deflate", "{api}");
    let first = b.find("section[aria-label='Top movers'] tbody tr td");
    assert_eq!(b.text(&first), "zlib::deflate");
    let manhattan = b.text(&b.find("[data-stat=manhattan] .num"));
    assert_eq!(manhattan, format!("{:.4}", num(&api["stats"]["manhattan"])));
    let diff_root = b.js(
        "return window.profiledbUI.flames.diff.hitTest(5, 5);",
        json!([]),
    );
    assert_eq!(
        num(&diff_root["baseTotal"]) + num(&diff_root["compareTotal"]),
        num(&api["stats"]["samples_base"]) + num(&api["stats"]["samples_compare"])
    );
    b.screenshot(&screenshots(), "compare");

    // Group by service and function: the first row is the API's.
    b.goto(&format!(
        "{}/ui/groupby?type={CPU}&from={from}&until={until}&keys=service_name,function",
        s.url
    ));
    b.wait_idle(60);
    assert_eq!(b.error_text(), "");
    let api = s.post_json(
        "/api/v1/query",
        &json!({"profile_type": CPU, "selector": "{}", "start": from, "end": until,
                      "group_by": ["service_name", "function"], "limit": 100}),
        200,
    );
    let row0 = &api["rows"][0];
    assert_eq!(row0["key"], json!(["checkout", "json::encode"]), "{api}");
    let cells: Vec<String> = b
        .find_all("table.data tbody tr:first-child td")
        .iter()
        .map(|c| b.text(c))
        .collect();
    assert_eq!(&cells[..2], ["checkout", "json::encode"], "{cells:?}");
    b.screenshot(&screenshots(), "groupby");
    // A row opens Explore filtered to it.
    b.click(&b.find("table.data tbody tr:first-child"));
    b.wait_idle(60);
    let url = b.url();
    assert!(
        url.contains("/ui/explore?") && url.contains("service=checkout"),
        "{url}"
    );
    let (json_total, json_share) = share_of(
        &merged(&s, &format!("{CPU}{sel}"), from, until),
        "json::encode",
    );
    assert!(json_total > 0);
    let got = num(&flame(&b, "searchShare()"));
    assert!(close(got, json_share), "{got} vs {json_share}");

    // An alert rule; once evaluated, its Compare link shows the two ranges it measured.
    let rule = json!({
        "name": "checkout-deflate", "profile_type": CPU, "selector": sel,
        "watch": {"function": "zlib::deflate"}, "window": "1h", "baseline": {"offset": "1h"},
        "condition": {"share_delta_pp": 5}, "for": "1s", "interval": "1s",
    });
    s.post_json("/api/v1/alerts/rules", &rule, 201);
    let links = wait_for(30, "a first evaluation", || {
        let v = s.json("/api/v1/alerts/rules/checkout-deflate", &[]);
        v["links"].is_object().then(|| v["links"].clone())
    });
    b.goto(&format!("{}/ui/alerts", s.url));
    b.wait_idle(60);
    let table = b.text(&b.find("table.data"));
    assert!(table.contains("checkout-deflate"), "{table}");
    b.screenshot(&screenshots(), "alerts");
    b.click(&b.find("a.compare-link"));
    b.wait_idle(60);
    assert_eq!(b.error_text(), "");
    let url = b.url();
    let body = &links["diff"]["body"];
    assert!(url.contains("/ui/compare?"), "{url}");
    // Readable times (RFC 3339), the very ranges the rule measured.
    let param = |k: &str| -> String {
        let q = url.split_once('?').map_or("", |(_, q)| q);
        q.split('&')
            .find_map(|p| p.strip_prefix(&format!("{k}=")))
            .map(|v| v.replace("%3A", ":"))
            .unwrap_or_default()
    };
    let rfc = |v: &Value| profiledb::time::rfc3339(v.as_i64().unwrap()).replace(".000Z", "Z");
    assert_eq!(param("bfrom"), rfc(&body["base"]["start"]), "{url} {body}");
    assert_eq!(
        param("cuntil"),
        rfc(&body["compare"]["end"]),
        "{url} {body}"
    );
    let api = s.post_json("/api/v1/diff", body, 200);
    let first = b.text(&b.find("section[aria-label='Top movers'] tbody tr td"));
    assert_eq!(
        first,
        api["top"][0]["function"].as_str().unwrap_or_default()
    );
    assert_eq!(first, "zlib::deflate");
}

#[test]
fn tenants_fixtures_and_admin() {
    let Some(Setup { s, b, from, until }) = setup() else {
        return;
    };
    // Another tenant sees only its own service.
    ingest(
        &s,
        Some("team-b"),
        "billing.cpu",
        until / 1000 - 60,
        b"main;bill 5\n".to_vec(),
        "folded",
    );
    b.goto(&format!(
        "{}/ui/explore?tenant=team-b&from={from}&until={until}",
        s.url
    ));
    b.wait_idle(60);
    let services = b.text(&b.find("select[name=service]"));
    assert!(
        services.contains("billing") && !services.contains("checkout"),
        "{services}"
    );
    assert_eq!(num(&flame(&b, "rootTotal()")) as i64, 5 * SCALE);
    // The tenant follows the navigation.
    let nav = b.find("header nav a[data-view=groupby]");
    b.click(&nav);
    b.wait_idle(60);
    assert!(b.url().contains("tenant=team-b"), "{}", b.url());

    let fixture =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/pyroscope/cpu.pb.gz");
    match std::fs::read(&fixture) {
        Err(e) => crate::external::missing(
            "the shared fixtures",
            format!("{} (the fixture part of this test): {e}", fixture.display()),
        ),
        Ok(bytes) => {
            // pprof samples keep their own time (years ago), so the page reads all time.
            ingest(
                &s,
                Some("fixtures"),
                "goapp",
                until / 1000 - 120,
                bytes,
                "pprof",
            );
            b.goto(&format!(
                "{}/ui/explore?tenant=fixtures&from=0&until={until}",
                s.url
            ));
            b.wait_idle(60);
            assert_eq!(b.error_text(), "");
            let ty = b.js(
                "return new URLSearchParams(location.search).get('type');",
                json!([]),
            );
            let ty = ty.as_str().unwrap_or_default().to_string();
            let r = s
                .client
                .get(format!("{}/api/v1/flamegraph", s.url))
                .header("X-Scope-OrgID", "fixtures")
                .query(&[
                    ("query", format!("{ty}{{}}")),
                    ("from", "0".to_string()),
                    ("until", until.to_string()),
                    ("max_nodes", "8192".into()),
                ])
                .send()
                .unwrap();
            let api: Value = r.json().unwrap();
            assert!(num(&api["total"]) > 0.0, "{ty}: {api}");
            assert_eq!(num(&flame(&b, "rootTotal()")), num(&api["total"]));
            let nodes = num(&flame(&b, "nodeCount()"));
            let levels: usize = api["levels"].as_array().map_or(0, |l| {
                l.iter().map(|r| r.as_array().map_or(0, Vec::len) / 4).sum()
            });
            assert_eq!(nodes as usize, levels);
            b.screenshot(&screenshots(), "explore-fixture");
        }
    }

    // A restart flushes the head: the admin view lists the segments it wrote.
    let s = TestServer::start_in(s.stop(), |_| {});
    b.goto(&format!("{}/ui/admin", s.url));
    b.wait_idle(60);
    let api = s.json("/api/v1/admin/segments", &[]);
    assert!(num(&api["count"]) > 0.0, "{api}");
    let text = b.text(&b.find("[aria-label='Segment totals']"));
    assert!(
        text.starts_with(&format!("{} segments", api["count"])),
        "{text} vs {api}"
    );
    let tenants = b.text(&b.find("table.data tbody"));
    assert!(
        tenants.contains("team-b") && tenants.contains("anonymous"),
        "{tenants}"
    );
    let retention = b.text(&b.find("section[aria-label='Retention'] table"));
    assert!(
        retention.contains("team-b") && retention.contains("forever"),
        "{retention}"
    );
    b.screenshot(&screenshots(), "admin");
}
