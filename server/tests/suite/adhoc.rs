//! Ad-hoc profiles over real HTTP on loopback: files uploaded to `/api/v1/adhoc`
//! are viewed (flame graph, top functions) and diffed with stored data and with
//! each other, equal to sums computed here from the files themselves, without
//! touching the tenant's series; the limits, the expiry and bad input answer as
//! docs/api.md says.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::*;
use crate::pprof_oracle as oracle;

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
const SAMPLES: &str = "process_cpu:samples:count:cpu:nanoseconds";
/// A folded count at the default 100 Hz, in nanoseconds (as `/ingest` stores it).
const PER_SAMPLE: i64 = 10_000_000;

/// `POST /api/v1/adhoc?<query>` with `body`.
fn post(s: &TestServer, query: &str, body: Vec<u8>) -> reqwest::blocking::Response {
    s.client
        .post(format!("{}/api/v1/adhoc?{query}", s.url))
        .body(body)
        .send()
        .unwrap()
}

/// Uploads `body` and answers the new profile's description, asserting 201.
fn upload(s: &TestServer, query: &str, body: Vec<u8>) -> Value {
    let r = post(s, query, body);
    let status = r.status();
    let v: Value = r.json().unwrap();
    assert_eq!(status, 201, "{v}");
    v
}

/// Folded text's stacks (root first), each count × `scale`: the oracle of a
/// folded upload.
fn folded_stacks(text: &str, scale: i64) -> oracle::Stacks {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').unwrap();
            let frames = stack.split(';').map(String::from).collect();
            (frames, n.parse::<i64>().unwrap() * scale)
        })
        .collect()
}

/// The flame graph and the function table of upload `id` equal the stacks'.
fn assert_views(s: &TestServer, id: &str, profile_type: &str, stacks: &oracle::Stacks) {
    let pt = [("profile_type", profile_type)];
    let fg = s.json(&format!("/api/v1/adhoc/{id}/flamegraph"), &pt);
    assert_eq!(
        fg["total"],
        json!(oracle::sum(stacks)),
        "{id} {profile_type}"
    );
    assert_eq!(fg["names"][0], "total");
    let fns = s.json(
        &format!("/api/v1/adhoc/{id}/functions"),
        &[("profile_type", profile_type), ("limit", "0")],
    );
    assert_eq!(fns["total"], json!(oracle::sum(stacks)));
    assert_eq!(
        oracle::answered_rows(&fns),
        oracle::ranked(stacks),
        "{id} {profile_type}"
    );
}

/// A deterministic pprof of two sample types: stacks over a few functions, some
/// recursive, with values from a fixed sequence.
fn generated_pprof() -> pprof::Profile {
    let funcs = ["main", "serve", "parse", "hash", "alloc", "gc", "write"];
    let mut x: u64 = 0x2545_f491;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let stacks: Vec<(Vec<String>, Vec<i64>)> = (0..300)
        .map(|_| {
            let depth = 1 + next(6) as usize;
            let mut frames = vec!["main".to_string()];
            frames.extend((0..depth).map(|_| funcs[1 + next(6) as usize].to_string()));
            let n = 1 + next(9) as i64;
            (frames, vec![n, n * PER_SAMPLE])
        })
        .collect();
    build_pprof(
        &[("samples", "count"), ("cpu", "nanoseconds")],
        ("cpu", "nanoseconds", PER_SAMPLE),
        &stacks,
        &[],
        0,
    )
}

/// What stored data the tenant has: series, label names and service names.
fn tenant_view(s: &TestServer) -> Vec<Value> {
    let range = [("from", "0"), ("until", "now+1d")];
    let with_label = [range[0], range[1], ("name", "service_name")];
    vec![
        s.json("/api/v1/series", &range),
        s.json("/api/v1/labels", &range),
        s.json("/api/v1/label_values", &with_label),
        s.json("/api/v1/profile_types", &range),
    ]
}

#[test]
fn uploads_show_their_files_sums_and_leave_the_series_alone() {
    let s = TestServer::start();
    s.upload("name=stored&from=now", b"main;work 5\n".to_vec());
    let before = tenant_view(&s);

    // A generated pprof, gzip'd: both sample types, each equal to the file's sums.
    let p = generated_pprof();
    let meta = upload(&s, "name=gen.pb.gz", gzip(&encode(&p)));
    let id = meta["id"].as_str().unwrap();
    assert_eq!(meta["name"], "gen.pb.gz");
    assert_eq!(meta["file_bytes"], json!(gzip(&encode(&p)).len()));
    let types: BTreeMap<String, i64> = meta["profile_types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["profile_type"].as_str().unwrap().into(),
                t["total"].as_i64().unwrap(),
            )
        })
        .collect();
    let (cpu, samples) = (
        oracle::stacks(&p, "cpu", 1),
        oracle::stacks(&p, "samples", 1),
    );
    assert_eq!(
        types,
        BTreeMap::from([
            (CPU.into(), oracle::sum(&cpu)),
            (SAMPLES.into(), oracle::sum(&samples))
        ])
    );
    assert_views(&s, id, CPU, &cpu);
    assert_views(&s, id, SAMPLES, &samples);
    // Without a type, the CPU one.
    let fg = s.json(&format!("/api/v1/adhoc/{id}/flamegraph"), &[]);
    assert_eq!(fg["total"], json!(oracle::sum(&cpu)));

    // Folded text: counts of samples at 100 Hz, as /ingest takes them.
    let text = "main;serve;parse 7\nmain;serve;hash 11\nmain;idle 3\nmain;serve;parse;hash 2\n";
    let meta = upload(&s, "name=app.folded", text.as_bytes().to_vec());
    let folded_id = meta["id"].as_str().unwrap();
    assert_views(&s, folded_id, CPU, &folded_stacks(text, PER_SAMPLE));

    // A real profile, when the shared fixtures are there.
    if let Some(fx) = fixtures() {
        let bytes = std::fs::read(fx.join("pprof/large.cpu")).unwrap();
        let meta = upload(&s, "name=large.cpu", bytes.clone());
        let large = oracle::stacks(&oracle::decode(&bytes), "cpu", 1);
        assert_views(&s, meta["id"].as_str().unwrap(), CPU, &large);
        // A JFR recording: Pyroscope's golden CPU total of the same file.
        let jfr = std::fs::read(fx.join("pyroscope/dump2.jfr.gz")).unwrap();
        let meta = upload(&s, "name=dump2.jfr.gz", jfr);
        let fg = s.json(
            &format!("/api/v1/adhoc/{}/flamegraph", meta["id"].as_str().unwrap()),
            &[("profile_type", CPU)],
        );
        assert_eq!(fg["total"], json!(33_580_000_000i64));
    }

    let listed = s.json("/api/v1/adhoc", &[]);
    assert!(listed["profiles"].as_array().unwrap().len() >= 2);
    assert_eq!(tenant_view(&s), before, "uploads are not stored");
    assert_eq!(s.total(None, &format!("{CPU}{{}}")), 5 * PER_SAMPLE);

    // Another tenant sees none of them.
    let other = s
        .client
        .get(format!("{}/api/v1/adhoc/{id}", s.url))
        .header("X-Scope-OrgID", "other")
        .send()
        .unwrap();
    assert_eq!(other.status(), 404);

    // Deleted: gone, and a second delete is a 404.
    let del = |id: &str| {
        s.client
            .delete(format!("{}/api/v1/adhoc/{id}", s.url))
            .send()
            .unwrap()
            .status()
    };
    assert_eq!(del(id), 204);
    assert_eq!(del(id), 404);
    assert_eq!(
        s.get(&format!("/api/v1/adhoc/{id}/flamegraph")).status(),
        404
    );
}

/// Self shares of each function in `stacks`.
fn shares(stacks: &oracle::Stacks) -> BTreeMap<String, f64> {
    let total = oracle::sum(stacks) as f64;
    oracle::self_by_function(stacks)
        .into_iter()
        .map(|(f, v)| (f, v as f64 / total))
        .collect()
}

/// The diff's movers equal the change of each function's self share.
fn assert_movers(diff: &Value, base: &oracle::Stacks, compare: &oracle::Stacks) {
    let (b, c) = (shares(base), shares(compare));
    let top = diff["top"].as_array().unwrap();
    assert!(!top.is_empty());
    for m in top {
        let f = m["function"].as_str().unwrap();
        let want = c.get(f).unwrap_or(&0.0) - b.get(f).unwrap_or(&0.0);
        let got = m["delta"].as_f64().unwrap();
        assert!((got - want).abs() < 1e-9, "{f}: {got} vs {want}");
    }
    let biggest = top[0]["delta"].as_f64().unwrap().abs();
    let most = b
        .keys()
        .chain(c.keys())
        .map(|f| (c.get(f).unwrap_or(&0.0) - b.get(f).unwrap_or(&0.0)).abs())
        .fold(0.0, f64::max);
    assert!((biggest - most).abs() < 1e-9);
    assert_eq!(diff["stats"]["samples_base"], json!(oracle::sum(base)));
    assert_eq!(
        diff["stats"]["samples_compare"],
        json!(oracle::sum(compare))
    );
}

#[test]
fn an_upload_diffs_with_stored_data_and_with_another_upload() {
    let s = TestServer::start();
    let stored = "main;work;hash 30\nmain;work;parse 20\nmain;idle 50\n";
    let newer = "main;work;hash 70\nmain;work;parse 20\nmain;idle 10\n";
    let third = "main;work;parse 5\nmain;gc 5\n";
    s.upload("name=app&from=now-1m", stored.as_bytes().to_vec());
    let a = upload(&s, "name=newer", newer.as_bytes().to_vec());
    let b = upload(&s, "name=third", third.as_bytes().to_vec());
    let (a, b) = (a["id"].as_str().unwrap(), b["id"].as_str().unwrap());
    let (stored, newer, third) = (
        folded_stacks(stored, PER_SAMPLE),
        folded_stacks(newer, PER_SAMPLE),
        folded_stacks(third, PER_SAMPLE),
    );

    let query = format!("{CPU}{{service_name=\"app\"}}");
    let body = json!({
        "base": {"query": query, "start": "now-1h", "end": "now+1m"},
        "compare": {"id": a},
        "top": 10,
    });
    let d = s.post_json("/api/v1/adhoc/diff", &body, 200);
    assert_movers(&d, &stored, &newer);
    assert_eq!(d["flamegraph"]["leftTicks"], json!(oracle::sum(&stored)));
    assert_eq!(d["flamegraph"]["rightTicks"], json!(oracle::sum(&newer)));
    assert!(d.get("warnings").is_none(), "{d}");

    let d = s.post_json(
        "/api/v1/adhoc/diff",
        &json!({"base": {"id": a}, "compare": {"id": b}}),
        200,
    );
    assert_movers(&d, &newer, &third);

    // A pprof of two types: the stored side's type is compared unless another is
    // named, and sides of two types say so.
    let p = generated_pprof();
    let both = upload(&s, "name=gen", encode(&p));
    let both = both["id"].as_str().unwrap();
    let body = json!({
        "base": {"query": query, "start": "now-1h", "end": "now+1m"},
        "compare": {"id": both},
    });
    let d = s.post_json("/api/v1/adhoc/diff", &body, 200);
    assert_movers(&d, &stored, &oracle::stacks(&p, "cpu", 1));
    assert!(d.get("warnings").is_none(), "{d}");
    let body = json!({"base": {"id": a}, "compare": {"id": both, "profile_type": SAMPLES}});
    let d = s.post_json("/api/v1/adhoc/diff", &body, 200);
    assert_movers(&d, &newer, &oracle::stacks(&p, "samples", 1));
    let w = d["warnings"][0].as_str().unwrap();
    assert!(w.contains("different profile types"), "{w}");

    // A stored side with no data: the notice, not a failure.
    let body = json!({
        "base": {"query": format!("{CPU}{{service_name=\"nothing\"}}"), "start": "now-1h", "end": "now"},
        "compare": {"id": a},
    });
    let d = s.post_json("/api/v1/adhoc/diff", &body, 200);
    assert_eq!(d["notice"], "base range has no samples");
}

/// `/metrics`' ad-hoc gauges.
fn gauges(s: &TestServer) -> (f64, f64) {
    let text = s.get("/metrics").text().unwrap();
    (
        metric_value(&text, "profiledb_adhoc_profiles").unwrap(),
        metric_value(&text, "profiledb_adhoc_bytes").unwrap(),
    )
}

/// Folded text of `n` one-frame stacks, each a distinct name of `len` bytes.
fn distinct_names(n: usize, len: usize, tag: char) -> String {
    (0..n)
        .map(|i| format!("{tag}{i:0>width$} 1\n", width = len - 1))
        .collect()
}

#[test]
fn uploads_are_bounded_in_count_bytes_and_file_size() {
    let s = TestServer::start_with(|o| {
        o.adhoc.max_profiles = 2;
        o.adhoc.max_bytes = 256 << 10;
        o.adhoc.max_file_bytes = 512 << 10;
    });
    let err = |r: reqwest::blocking::Response, status: u16| -> String {
        assert_eq!(r.status(), status);
        let v: Value = r.json().unwrap();
        v["message"].as_str().unwrap().to_string()
    };

    // A file over --adhoc-max-file-mb: 413, whatever it holds.
    let big = vec![b'x'; (512 << 10) + 1];
    let msg = err(post(&s, "name=big", big), 413);
    assert!(msg.contains("--adhoc-max-file-mb"), "{msg}");

    // Held bytes: the distinct names alone of this file (300 KiB) are more than
    // the tenant's 256 KiB, so it cannot fit whatever else is counted.
    let names = distinct_names(3000, 100, 'n');
    assert!(names.len() < 512 << 10);
    let msg = err(post(&s, "name=names", names.into_bytes()), 413);
    assert!(msg.contains("--adhoc-max-mb"), "{msg}");

    // Count: the third is refused until one is deleted.
    let one = upload(&s, "name=one", b"main;a 1\n".to_vec());
    upload(&s, "name=two", b"main;b 1\n".to_vec());
    let msg = err(post(&s, "name=three", b"main;c 1\n".to_vec()), 429);
    assert!(msg.contains("--adhoc-max-profiles"), "{msg}");
    let listed = s.json("/api/v1/adhoc", &[]);
    let held: Vec<Value> = listed["profiles"].as_array().unwrap().clone();
    assert_eq!(held.len(), 2);
    let bytes: i64 = held.iter().map(|m| m["bytes"].as_i64().unwrap()).sum();
    assert!(bytes > 0 && bytes <= 256 << 10);
    assert_eq!(gauges(&s), (2.0, bytes as f64));
    let del = s
        .client
        .delete(format!(
            "{}/api/v1/adhoc/{}",
            s.url,
            one["id"].as_str().unwrap()
        ))
        .send()
        .unwrap();
    assert_eq!(del.status(), 204);
    upload(&s, "name=three", b"main;c 1\n".to_vec());
}

#[test]
fn uploads_expire_after_their_time_to_live() {
    let s = TestServer::start_with(|o| o.adhoc.ttl = Duration::from_secs(1));
    let meta = upload(&s, "name=short", b"main;a 3\n".to_vec());
    let id = meta["id"].as_str().unwrap();
    assert_eq!(s.get(&format!("/api/v1/adhoc/{id}")).status(), 200);
    wait_for(30, "the upload to expire", || {
        (s.get(&format!("/api/v1/adhoc/{id}/flamegraph")).status() == 404).then_some(())
    });
    assert_eq!(s.json("/api/v1/adhoc", &[])["profiles"], json!([]));
    assert_eq!(gauges(&s), (0.0, 0.0));
}

#[test]
fn bad_uploads_and_requests_are_clear_4xx_and_the_server_keeps_serving() {
    let s = TestServer::start();
    let bad = |r: reqwest::blocking::Response, status: u16, says: &str| {
        assert_eq!(r.status(), status);
        let v: Value = r.json().unwrap();
        let msg = v["message"].as_str().unwrap();
        assert!(msg.contains(says), "{msg:?} does not say {says:?}");
    };
    let pprof = gzip(&encode(&generated_pprof()));
    bad(post(&s, "name=empty", Vec::new()), 400, "empty");
    bad(
        post(&s, "format=pprof", pprof[..pprof.len() / 2].to_vec()),
        400,
        "gzip",
    );
    bad(
        post(&s, "format=pprof", vec![0x0a, 0xff, 0xff, 0xff, 0x0f, 1]),
        400,
        "pprof",
    );
    bad(post(&s, "format=jfr", b"FLR\0garbage".to_vec()), 400, "JFR");
    bad(post(&s, "", b"main;a notanumber\n".to_vec()), 400, "line 1");
    bad(post(&s, "format=svg", b"x".to_vec()), 400, "format");
    bad(post(&s, "bogus=1", b"main 1\n".to_vec()), 400, "bogus");
    bad(
        s.get("/api/v1/adhoc/0123456789abcdef"),
        404,
        "0123456789abcdef",
    );
    let id = upload(&s, "name=ok", pprof)["id"]
        .as_str()
        .unwrap()
        .to_string();
    bad(
        s.get(&format!(
            "/api/v1/adhoc/{id}/flamegraph?profile_type=memory:x:bytes::"
        )),
        400,
        CPU,
    );
    for (body, says) in [
        (json!({"base": {"id": id}}), "compare"),
        (
            json!({"base": {"id": id, "query": CPU}, "compare": {"id": id}}),
            "either id",
        ),
        (
            json!({"base": {"id": id}, "compare": {"query": "nope{"}}),
            "profile type",
        ),
    ] {
        let r = s
            .client
            .post(format!("{}/api/v1/adhoc/diff", s.url))
            .json(&body)
            .send()
            .unwrap();
        bad(r, 400, says);
    }
    // Still serving: the good upload answers.
    let fg = s.json(&format!("/api/v1/adhoc/{id}/flamegraph"), &[]);
    assert_eq!(
        fg["total"],
        json!(oracle::sum(&oracle::stacks(&generated_pprof(), "cpu", 1)))
    );
}
