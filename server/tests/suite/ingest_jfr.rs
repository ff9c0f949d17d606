//! JFR over real HTTP on loopback, as the Pyroscope Java agent sends it: a
//! multipart body with the `jfr` and `labels` parts (each gzip'd), and a raw body.
//! Totals read back through the query API must equal Pyroscope's own for the same
//! recording (its golden profiles for `dump2.jfr.gz`); a corrupt recording is a
//! 400 with a JSON message that leaves stored data alone.

use crate::common::*;

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
const WALL: &str = "wall:wall:nanoseconds:wall:nanoseconds";
const TLAB_BYTES: &str = "memory:alloc_in_new_tlab_bytes:bytes:space:bytes";

fn read(fx: &std::path::Path, name: &str) -> Vec<u8> {
    std::fs::read(fx.join("pyroscope").join(name)).unwrap()
}

/// `POST /ingest?<query>` with a raw body.
fn ingest(
    s: &TestServer,
    query: &str,
    body: impl Into<reqwest::blocking::Body>,
) -> reqwest::blocking::Response {
    s.client
        .post(format!("{}/ingest?{query}", s.url))
        .body(body)
        .send()
        .unwrap()
}

/// `POST /ingest?<query>` with a multipart body.
fn ingest_form(
    s: &TestServer,
    query: &str,
    form: reqwest::blocking::multipart::Form,
) -> reqwest::blocking::Response {
    s.client
        .post(format!("{}/ingest?{query}", s.url))
        .multipart(form)
        .send()
        .unwrap()
}

#[test]
fn java_agent_multipart_upload_matches_pyroscope_totals() {
    let Some(fx) = fixtures() else { return };
    let (jfr, labels) = (read(&fx, "dump2.jfr.gz"), read(&fx, "dump2.labels.pb.gz"));
    let s = TestServer::start();
    let form = reqwest::blocking::multipart::Form::new()
        .part(
            "jfr",
            reqwest::blocking::multipart::Part::bytes(jfr).file_name("jfr"),
        )
        .part(
            "labels",
            reqwest::blocking::multipart::Part::bytes(labels).file_name("labels"),
        );
    let query = "name=javaapp%7Benv%3Dprod%7D&format=jfr&spyName=javaspy&from=now";
    let resp = ingest_form(&s, query, form);
    assert_eq!(resp.status(), 200, "{:?}", resp.text());

    let sel = "{service_name=\"javaapp\",env=\"prod\"}";
    assert_eq!(s.total(None, &format!("{CPU}{sel}")), 33_580_000_000);
    assert_eq!(s.total(None, &format!("{WALL}{sel}")), 147_230_000_000);
    assert_eq!(s.total(None, &format!("{TLAB_BYTES}{sel}")), 2_097_148);
    let thread = "{service_name=\"javaapp\",thread_name=\"pool-2-thread-6\"}";
    assert_eq!(s.total(None, &format!("{CPU}{thread}")), 3_050_000_000);
    let merged = s.merged(None, &format!("{CPU}{sel}"));
    assert!(
        merged
            .keys()
            .any(|stack| stack.starts_with("java/lang/Thread.run;")),
        "{:?}",
        merged.keys().take(3).collect::<Vec<_>>()
    );
}

#[test]
fn raw_gzipped_recording_without_format_is_jfr() {
    let Some(fx) = fixtures() else { return };
    let s = TestServer::start();
    let resp = ingest(&s, "name=rawapp&from=now", read(&fx, "dump2.jfr.gz"));
    assert_eq!(resp.status(), 200, "{:?}", resp.text());
    assert_eq!(
        s.total(None, &format!("{CPU}{{service_name=\"rawapp\"}}")),
        33_580_000_000
    );
}

#[test]
fn corrupt_recording_is_refused_and_stored_data_stays() {
    let s = TestServer::start();
    let ok = ingest(&s, "name=keep&from=now", "main;work 7\n");
    assert_eq!(ok.status(), 200);
    let mut recording = b"FLR\0\0\x02\0\0".to_vec();
    recording.extend([0xff; 80]);
    for body in [recording, gzip(b"FLR\0 truncated")] {
        let resp = ingest(&s, "name=bad&format=jfr", body);
        assert_eq!(resp.status(), 400);
        let json: serde_json::Value = resp.json().unwrap();
        assert_eq!(json["code"], "invalid_argument", "{json}");
        let msg = json["message"].as_str().unwrap_or_default();
        assert!(msg.starts_with("invalid JFR recording: "), "{msg}");
    }
    let form = reqwest::blocking::multipart::Form::new().part(
        "labels",
        reqwest::blocking::multipart::Part::bytes(vec![1, 2]),
    );
    let resp = ingest_form(&s, "name=bad&format=jfr", form);
    assert_eq!(resp.status(), 400);
    assert_eq!(
        s.total(None, &format!("{CPU}{{service_name=\"keep\"}}")),
        70_000_000
    );
}
