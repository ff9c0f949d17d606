//! The embedded web UI over real HTTP: every file under `server/ui/` is served with
//! its content type, deep links answer the page, `ETag` revalidation answers 304,
//! gzip round-trips, and unknown assets are a JSON 404.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::common::TestServer;

fn ui_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("ui")
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("svg") => "image/svg+xml",
        other => panic!("an asset type the test does not know: {other:?}"),
    }
}

#[test]
fn every_ui_file_is_served_byte_for_byte_with_its_type() {
    let s = TestServer::start();
    let mut all = Vec::new();
    files(&ui_dir(), &mut all);
    assert!(all.len() >= 10, "{all:?}");
    for f in all {
        let rel = f
            .strip_prefix(ui_dir())
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let r = s.get(&format!("/ui/assets/{rel}"));
        assert_eq!(r.status(), 200, "{rel}");
        assert_eq!(r.headers()["content-type"], content_type(&rel), "{rel}");
        assert_eq!(r.headers()["cache-control"], "no-cache");
        assert!(r.headers().contains_key("etag"), "{rel}");
        assert_eq!(
            r.bytes().unwrap().as_ref(),
            std::fs::read(&f).unwrap(),
            "{rel}"
        );
    }
}

#[test]
fn root_and_deep_links_answer_the_page() {
    let s = TestServer::start();
    let page = std::fs::read_to_string(ui_dir().join("index.html")).unwrap();
    for path in [
        "/",
        "/ui",
        "/ui/",
        "/ui/explore?service=a&m=env%3D%22prod%22",
        "/ui/compare/x",
    ] {
        let r = s.get(path);
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(r.headers()["content-type"], "text/html; charset=utf-8");
        assert_eq!(r.text().unwrap(), page, "{path}");
    }
    // The API keeps its own 404s.
    let r = s.get("/api/v1/nope");
    assert_eq!(r.status(), 404);
}

fn get_with(s: &TestServer, path: &str, header: &str, value: &str) -> reqwest::blocking::Response {
    s.client
        .get(format!("{}{path}", s.url))
        .header(header, value)
        .send()
        .unwrap()
}

#[test]
fn etag_revalidates_and_gzip_round_trips() {
    let s = TestServer::start();
    let path = "/ui/assets/js/flame.js";
    let plain = s.get(path);
    let etag = plain.headers()["etag"].clone();
    let body = plain.bytes().unwrap();

    let r = get_with(&s, path, "If-None-Match", etag.to_str().unwrap());
    assert_eq!(r.status(), 304);
    assert_eq!(r.headers()["etag"], etag);
    assert!(r.bytes().unwrap().is_empty());

    let r = get_with(&s, path, "If-None-Match", "\"something-else\"");
    assert_eq!(r.status(), 200);

    let r = get_with(&s, path, "Accept-Encoding", "br, gzip");
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-encoding"], "gzip");
    let z = r.bytes().unwrap();
    assert!(z.len() < body.len() / 2, "{} of {}", z.len(), body.len());
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(z.as_ref())
        .read_to_end(&mut out)
        .unwrap();
    assert_eq!(out, body.as_ref());

    // `gzip;q=0` refuses it.
    let r = get_with(&s, path, "Accept-Encoding", "gzip;q=0");
    assert!(r.headers().get("content-encoding").is_none());
}

#[test]
fn unknown_assets_are_a_json_404() {
    let s = TestServer::start();
    for path in [
        "/ui/assets/nope.js",
        "/ui/assets/js/..%2Fapp.css",
        "/ui/assets/js",
    ] {
        let r = s.get(path);
        assert_eq!(r.status(), 404, "{path}");
        let v: serde_json::Value = r.json().unwrap();
        assert_eq!(v["code"], "not_found", "{path}");
    }
}
