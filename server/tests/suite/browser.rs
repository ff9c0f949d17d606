//! Headless Chromium driven over the W3C WebDriver protocol, with plain HTTP calls
//! through `reqwest` (already a test dependency): the few commands the UI tests use
//! (navigate, run a script, find, click, type, pointer actions, screenshot) do not
//! need a WebDriver crate and its async runtime.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

// `storage/tests/support/external.rs`, which each includer declares once beside
// this module.
use super::external;

pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// W3C's key for an element reference in JSON.
pub const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

pub struct Browser {
    driver: Child,
    base: String,
    client: reqwest::blocking::Client,
    _profile: tempfile::TempDir,
}

/// An element reference the driver handed out.
#[derive(Clone, Debug)]
pub struct Element(String);

impl Element {
    /// The driver's id, for passing the element into a script as `{ELEMENT: id}`.
    pub fn id(&self) -> &str {
        &self.0
    }
}

impl Browser {
    /// Starts chromedriver and a 1280x800 headless Chromium session, or answers `None`
    /// (after saying why) where they are not installed; with
    /// `PROFILEDB_REQUIRE_EXTERNAL=1`, panics instead.
    pub fn start() -> Option<Browser> {
        for bin in [CHROMIUM, CHROMEDRIVER] {
            if !Path::new(bin).exists() {
                external::missing(
                    bin,
                    "install Debian's chromium and chromium-driver (.ci/run does) to run the browser tests",
                );
                return None;
            }
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .expect("http client");
        let profile = tempfile::tempdir().expect("profile dir");
        let mut b = Browser {
            driver,
            base: format!("http://127.0.0.1:{port}"),
            client,
            _profile: profile,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while b.client.get(format!("{}/status", b.base)).send().is_err() {
            assert!(Instant::now() < deadline, "chromedriver never answered");
            std::thread::sleep(Duration::from_millis(50));
        }
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1280,800",
            &format!("--user-data-dir={}", b._profile.path().display()),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        }}});
        let session = b.call("POST", "/session", caps);
        let id = session["sessionId"]
            .as_str()
            .expect("a session id")
            .to_string();
        b.base = format!("{}/session/{id}", b.base);
        Some(b)
    }

    fn call(&self, method: &str, path: &str, body: Value) -> Value {
        let url = format!("{}{path}", self.base);
        let req = match method {
            "GET" => self.client.get(&url),
            "DELETE" => self.client.delete(&url),
            _ => self.client.post(&url).json(&body),
        };
        let resp = req
            .send()
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = resp.status();
        let v: Value = resp.json().expect("WebDriver answers JSON");
        assert!(status.is_success(), "{method} {path} {body}: {status} {v}");
        v["value"].clone()
    }

    pub fn goto(&self, url: &str) {
        self.call("POST", "/url", json!({ "url": url }));
    }

    pub fn url(&self) -> String {
        self.call("GET", "/url", Value::Null)
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Runs `body` (a function body: use `return`) with `args` in the page.
    pub fn js(&self, body: &str, args: Value) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            json!({ "script": body, "args": args }),
        )
    }

    /// Runs `body` awaiting the promise it returns (`return someAsync()`).
    pub fn js_async(&self, body: &str) -> Value {
        let script = format!(
            "const done = arguments[arguments.length - 1]; Promise.resolve((async () => {{ {body} }})()).then(done, (e) => done({{error: String(e)}}));"
        );
        self.call(
            "POST",
            "/execute/async",
            json!({ "script": script, "args": [] }),
        )
    }

    /// Waits until the UI has rendered its view and no API call is running; panics with
    /// the page's error text after `secs`.
    pub fn wait_idle(&self, secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let v = self.js(
                "return !!(window.profiledbUI && window.profiledbUI.idle());",
                json!([]),
            );
            if v == Value::Bool(true) {
                // One more frame: a view may schedule a draw after its last request.
                self.js_async(
                    "await new Promise((r) => requestAnimationFrame(() => r())); return 1;",
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the page never became idle; error box: {}",
                self.error_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The text of the page's error box ('' when hidden).
    pub fn error_text(&self) -> String {
        self.js(
            "const e = document.getElementById('error'); return e && !e.hidden ? e.textContent : '';",
            json!([]),
        )
        .as_str()
        .unwrap_or_default()
        .to_string()
    }

    pub fn find(&self, css: &str) -> Element {
        let v = self.call(
            "POST",
            "/element",
            json!({"using": "css selector", "value": css}),
        );
        Element(
            v[ELEMENT]
                .as_str()
                .unwrap_or_else(|| panic!("no element {css}: {v}"))
                .to_string(),
        )
    }

    pub fn find_all(&self, css: &str) -> Vec<Element> {
        let v = self.call(
            "POST",
            "/elements",
            json!({"using": "css selector", "value": css}),
        );
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| e[ELEMENT].as_str().map(|s| Element(s.to_string())))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn text(&self, e: &Element) -> String {
        self.call("GET", &format!("/element/{}/text", e.0), Value::Null)
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    pub fn click(&self, e: &Element) {
        self.call("POST", &format!("/element/{}/click", e.0), json!({}));
    }

    pub fn clear(&self, e: &Element) {
        self.call("POST", &format!("/element/{}/clear", e.0), json!({}));
    }

    pub fn type_text(&self, e: &Element, text: &str) {
        self.call(
            "POST",
            &format!("/element/{}/value", e.0),
            json!({ "text": text }),
        );
    }

    /// Selects the `<option>` with `value` in a `<select>` the way a person does.
    pub fn select(&self, select_css: &str, value: &str) {
        let opt = self.find(&format!("{select_css} option[value=\"{value}\"]"));
        self.click(&opt);
    }

    /// A real pointer click at CSS pixel (x, y) from the element's top-left corner.
    pub fn click_at(&self, e: &Element, x: f64, y: f64) {
        let rect = self.call("GET", &format!("/element/{}/rect", e.0), Value::Null);
        let w = rect["width"].as_f64().unwrap_or(0.0);
        let h = rect["height"].as_f64().unwrap_or(0.0);
        // Pointer offsets are from the element's centre.
        let (dx, dy) = ((x - w / 2.0).round(), (y - h / 2.0).round());
        let actions = json!({"actions": [{
            "type": "pointer", "id": "mouse", "parameters": {"pointerType": "mouse"},
            "actions": [
                {"type": "pointerMove", "duration": 0,
                 "origin": {ELEMENT: e.0}, "x": dx as i64, "y": dy as i64},
                {"type": "pointerDown", "button": 0},
                {"type": "pointerUp", "button": 0},
            ],
        }]});
        self.call("POST", "/actions", actions);
        self.call("DELETE", "/actions", Value::Null);
    }

    /// Saves a PNG of the window to `dir/name.png`.
    pub fn screenshot(&self, dir: &Path, name: &str) -> PathBuf {
        let v = self.call("GET", "/screenshot", Value::Null);
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or_default())
            .expect("a base64 PNG");
        std::fs::create_dir_all(dir).expect("screenshot dir");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write screenshot");
        path
    }

    /// Emulates the system colour scheme (`dark` or `light`) through Chromium's
    /// DevTools protocol, as chromedriver exposes it.
    pub fn color_scheme(&self, scheme: &str) {
        self.call(
            "POST",
            "/goog/cdp/execute",
            json!({"cmd": "Emulation.setEmulatedMedia", "params": {
                "features": [{"name": "prefers-color-scheme", "value": scheme}]}}),
        );
    }

    /// Resizes the window (the page's viewport follows).
    pub fn window_size(&self, width: u32, height: u32) {
        self.call(
            "POST",
            "/window/rect",
            json!({"width": width, "height": height}),
        );
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.client.delete(&self.base).send();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
