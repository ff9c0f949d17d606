//! The Ad-hoc view in a real headless Chromium: a folded file picked in its file
//! input is uploaded, listed, drawn and tabled with the sums of the file itself,
//! then compared with stored data (top mover and both sides' totals from the two
//! files), and none of it joins the tenant's series. Screenshots go to
//! `target/ui-screenshots/`. Skips where chromium or chromedriver is absent (fails
//! with `PROFILEDB_REQUIRE_EXTERNAL=1`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{json, Value};

use crate::browser::Browser;
use crate::common::TestServer;

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
/// A folded count at the default 100 Hz, in nanoseconds.
const SCALE: i64 = 10_000_000;

const STORED: &str =
    "main;http::serve;db::query 40\nmain;http::serve;json::encode 30\nmain;runtime::gc 50\n";
const FILE: &str = "main;http::serve;db::query 10\nmain;http::serve;json::encode 30\nmain;runtime::gc 10\nmain;http::serve;zlib::deflate 50\n";

/// Self value per leaf function of folded text, × SCALE.
fn selfs(text: &str) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for l in text.lines() {
        let (stack, n) = l.rsplit_once(' ').unwrap();
        let leaf = stack.rsplit(';').next().unwrap().to_string();
        *out.entry(leaf).or_insert(0) += n.parse::<i64>().unwrap() * SCALE;
    }
    out
}

fn num(v: &Value) -> i64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}")) as i64
}

/// `[name, data-value of each numeric cell]` of the rows of table `label`.
fn rows(b: &Browser, label: &str) -> Vec<Vec<String>> {
    let v = b.js(
        "return [...document.querySelectorAll(`table[aria-label='${arguments[0]}'] tbody tr`)].map((tr) =>
           [...tr.querySelectorAll('td')].map((td) => td.dataset.value ?? td.textContent));",
        json!([label]),
    );
    serde_json::from_value(v).unwrap()
}

#[test]
fn adhoc_view_uploads_a_file_shows_it_and_compares_it_with_stored_data() {
    let Some(b) = Browser::start() else { return };
    let s = TestServer::start();
    s.upload("name=app&from=now-5m", STORED.as_bytes().to_vec());
    let series_before = s.json("/api/v1/series", &[("from", "0"), ("until", "now+1d")]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("app.folded");
    std::fs::write(&file, FILE).unwrap();

    b.goto(&format!("{}/ui/adhoc", s.url));
    b.wait_idle(30);
    let input = b.find("input[type=file]");
    b.type_text(&input, file.to_str().unwrap());
    crate::common::wait_for(30, "the upload to be listed", || {
        let n = b.js("return (window.profiledbUI.flames.adhoc && document.querySelectorAll(\"table[aria-label='uploads'] tbody tr\").length) || 0;", json!([]));
        (num(&n) == 1).then_some(())
    });
    b.wait_idle(30);
    assert_eq!(b.error_text(), "");

    let want = selfs(FILE);
    let total: i64 = want.values().sum();
    let drawn = b.js(
        "return window.profiledbUI.flames.adhoc.rootTotal();",
        json!([]),
    );
    assert_eq!(num(&drawn), total);
    let uploads = rows(&b, "uploads");
    assert_eq!(uploads[0][1], "app.folded");
    // Top functions by self: the file's leaves, largest first.
    let top = rows(&b, "functions");
    let (name, value) = want.iter().max_by_key(|(_, v)| **v).unwrap();
    assert_eq!((&top[0][0], &top[0][1]), (name, &value.to_string()));
    let screens = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/ui-screenshots");
    b.screenshot(&screens, "adhoc-view");

    // Compare with the stored data: the movers are the change of each self share.
    b.select("select[aria-label='Compare with']", "stored");
    let q = b.find("input[aria-label='Stored query']");
    b.clear(&q);
    b.type_text(&q, &format!("{CPU}{{service_name=\"app\"}}"));
    b.click(&b.find("form[aria-label='Compare'] button[type=submit]"));
    crate::common::wait_for(30, "the diff", || {
        let v = b.js("return !!window.profiledbUI.flames.diff;", json!([]));
        (v == Value::Bool(true)).then_some(())
    });
    b.wait_idle(30);
    assert_eq!(b.error_text(), "");
    let base = selfs(STORED);
    let base_total: i64 = base.values().sum();
    let delta = |f: &str| {
        want.get(f).copied().unwrap_or(0) as f64 / total as f64
            - base.get(f).copied().unwrap_or(0) as f64 / base_total as f64
    };
    let movers = rows(&b, "movers");
    let biggest = want
        .keys()
        .chain(base.keys())
        .max_by(|a, b| delta(a).abs().total_cmp(&delta(b).abs()))
        .unwrap();
    assert_eq!(&movers[0][0], biggest);
    let stat = |k: &str| {
        b.js(
            "return document.querySelector(`[data-stat='${arguments[0]}'] .num`).textContent;",
            json!([k]),
        )
    };
    assert_ne!(stat("samples_base"), stat("samples_compare"));
    let diff = b.js(
        "return [window.profiledbUI.flames.diff.m.leftTicks, window.profiledbUI.flames.diff.m.rightTicks];",
        json!([]),
    );
    assert_eq!((num(&diff[0]), num(&diff[1])), (base_total, total));
    b.window_size(1280, 1500);
    b.screenshot(&screens, "adhoc-compare");

    assert_eq!(
        s.json("/api/v1/series", &[("from", "0"), ("until", "now+1d")]),
        series_before
    );
}
