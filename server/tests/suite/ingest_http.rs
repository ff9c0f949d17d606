//! Ingest over real HTTP on loopback: every accepted wire format, real fixture
//! profiles, bad input that must be refused without touching stored data, and
//! concurrent multi-tenant uploads.

use std::collections::BTreeMap;

use crate::common::*;
use base64::Engine;
use profiledb_ingest::proto::push::v1 as pushpb;
use profiledb_ingest::proto::types::v1 as typespb;
use prost::Message;

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn push_request(labels: &[(&str, &str)], profiles: Vec<Vec<u8>>) -> pushpb::PushRequest {
    pushpb::PushRequest {
        series: vec![pushpb::RawProfileSeries {
            labels: labels
                .iter()
                .map(|(k, v)| typespb::LabelPair {
                    name: k.to_string(),
                    value: v.to_string(),
                })
                .collect(),
            samples: profiles
                .into_iter()
                .map(|raw| pushpb::RawSample {
                    raw_profile: raw.into(),
                    id: "00000000-0000-0000-0000-000000000000".into(),
                })
                .collect(),
        }],
    }
}

fn push_binary(
    s: &TestServer,
    req: &pushpb::PushRequest,
    gzip_body: bool,
    tenant: Option<&str>,
) -> reqwest::blocking::Response {
    let mut body = req.encode_to_vec();
    let mut r = s
        .client
        .post(format!("{}/push.v1.PusherService/Push", s.url))
        .header("content-type", "application/proto")
        .header("connect-protocol-version", "1");
    if gzip_body {
        body = gzip(&body);
        r = r.header("content-encoding", "gzip");
    }
    if let Some(t) = tenant {
        r = r.header("X-Scope-OrgID", t);
    }
    r.body(body).send().unwrap()
}

#[test]
fn folded_upload_yields_exactly_the_stacks_sent() {
    let s = TestServer::start();
    let from = unix_now() - 60;
    let body = "main;serve;parse 12\nmain;serve 3\nmain;std::io::Read::read<T> 5\nsrc/lib.rs:10 - work fn;leaf, x 2\n\nmain;serve;parse 1\n";
    let r = s.post_ingest(
        &format!("name=myapp.cpu%7Benv%3Dprod%2Cregion%3Deu%7D&from={from}&until={from}"),
        body,
    );
    assert_eq!(r.status(), 200, "{}", r.text().unwrap());
    assert_eq!(r.text().unwrap(), "", "success has an empty body");
    // .cpu folded counts are samples at sampleRate 100: 1 sample = 10 ms = 1e7 ns.
    let got = s.merged(
        None,
        &format!("{CPU}{{service_name=\"myapp\",env=\"prod\",region=\"eu\"}}"),
    );
    let want: BTreeMap<String, i64> = [
        ("main;serve", 3),
        ("main;serve;parse", 13),
        ("main;std::io::Read::read<T>", 5),
        ("src/lib.rs:10 - work fn;leaf, x", 2),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v * 10_000_000))
    .collect();
    assert_eq!(got, want);

    // `lines`: one stack per line, count 1; a non-CPU suffix keeps raw counts.
    let r = s.post_ingest(
        &format!("name=other.alloc_objects&format=lines&from={from}"),
        "a;b\na;b\na;c\n",
    );
    assert_eq!(r.status(), 200);
    let types = s.json(
        "/api/v1/profile_types",
        &[("from", "0"), ("until", "now+1d")],
    );
    let types: Vec<String> = serde_json::from_value(types).unwrap();
    let alloc = types
        .iter()
        .find(|t| t.starts_with("memory:alloc_objects"))
        .expect("alloc type");
    assert_eq!(
        s.merged(None, &format!("{alloc}{{service_name=\"other\"}}")),
        BTreeMap::from([("a;b".into(), 2), ("a;c".into(), 1)])
    );
}

fn generated_profile(time_nanos: i64) -> pprof::Profile {
    build_pprof(
        &[("samples", "count"), ("cpu", "nanoseconds")],
        ("cpu", "nanoseconds", 10_000_000),
        &[
            (
                vec!["main".into(), "handler".into(), "json::encode".into()],
                vec![3, 30_000_000],
            ),
            (vec!["main".into(), "handler".into()], vec![1, 10_000_000]),
            (vec!["main".into(), "gc".into()], vec![2, 20_000_000]),
        ],
        &[("endpoint", "/api"), ("span_id", "abc")],
        time_nanos,
    )
}

/// The same generated pprof through raw `/ingest`, multipart `/ingest`, binary Push
/// (gzip'd and not) and JSON Push: every path stores exactly the profile's values.
#[test]
fn generated_pprof_through_every_path() {
    let s = TestServer::start();
    let now_ns = unix_now() * 1_000_000_000;
    let bytes = encode(&generated_profile(now_ns - 5_000_000_000));
    let want_cpu = BTreeMap::from([
        ("main;gc".to_string(), 20_000_000),
        ("main;handler".to_string(), 10_000_000),
        ("main;handler;json::encode".to_string(), 30_000_000),
    ]);

    let r = s.post_ingest("name=raw&format=pprof", gzip(&bytes));
    assert_eq!(r.status(), 200, "{}", r.text().unwrap());
    let form = reqwest::blocking::multipart::Form::new().part(
        "profile",
        reqwest::blocking::multipart::Part::bytes(bytes.clone()).file_name("profile.pprof"),
    );
    let r = s
        .client
        .post(format!("{}/ingest?name=multi", s.url))
        .multipart(form)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().unwrap());
    let r = push_binary(
        &s,
        &push_request(
            &[("__name__", "process_cpu"), ("service_name", "pushbin")],
            vec![bytes.clone()],
        ),
        false,
        None,
    );
    assert_eq!(r.status(), 200, "{}", r.text().unwrap());
    assert_eq!(r.headers()["content-type"], "application/proto");
    let r = push_binary(
        &s,
        &push_request(&[("service_name", "pushgz")], vec![gzip(&bytes)]),
        true,
        None,
    );
    assert_eq!(r.status(), 200, "{}", r.text().unwrap());
    let json = serde_json::json!({"series": [{
        "labels": [{"name": "service_name", "value": "pushjson"}, {"name": "__name__", "value": "process_cpu"}],
        "samples": [{"rawProfile": base64::engine::general_purpose::STANDARD.encode(&bytes), "ID": "x", "unknownField": 1}],
    }]});
    let r = s
        .client
        .post(format!("{}/push.v1.PusherService/Push", s.url))
        .header("content-type", "application/json")
        .body(json.to_string())
        .send()
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().unwrap());
    assert_eq!(r.text().unwrap(), "{}");

    for svc in ["raw", "multi", "pushbin", "pushgz", "pushjson"] {
        let got = s.merged(None, &format!("{CPU}{{service_name=\"{svc}\"}}"));
        assert_eq!(got, want_cpu, "service {svc}");
        // The string sample label became a series label; span_id did not.
        let sel = format!("{{service_name=\"{svc}\"}}");
        let names: Vec<String> = serde_json::from_value(s.json(
            "/api/v1/labels",
            &[("query", &sel), ("from", "0"), ("until", "now+1d")],
        ))
        .unwrap();
        assert!(names.contains(&"endpoint".to_string()), "{svc}: {names:?}");
        assert!(!names.contains(&"span_id".to_string()), "{svc}: {names:?}");
        let counts = s.total(
            None,
            &format!("process_cpu:samples:count:cpu:nanoseconds{{service_name=\"{svc}\"}}"),
        );
        assert_eq!(counts, 6, "{svc}");
    }
}

/// Sums of each sample type, computed straight from the decoded protobuf; samples
/// with a negative value are left out, as Pyroscope (and our decoder) drop them.
fn pprof_sums(p: &pprof::Profile) -> Vec<(String, String, i64)> {
    let s = |i: i64| String::from_utf8_lossy(&p.string_table[i as usize]).into_owned();
    p.sample_type
        .iter()
        .enumerate()
        .map(|(i, t)| {
            (
                s(t.r#type),
                s(t.unit),
                p.sample
                    .iter()
                    .filter(|x| x.value.iter().all(|&v| v >= 0))
                    .map(|x| x.value.get(i).copied().unwrap_or(0))
                    .sum(),
            )
        })
        .collect()
}

fn decode_fixture(bytes: &[u8]) -> pprof::Profile {
    use std::io::Read;
    let raw = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .read_to_end(&mut out)
            .unwrap();
        out
    } else {
        bytes.to_vec()
    };
    pprof::Profile::decode(&*raw).unwrap()
}

/// Every pprof fixture, through raw `/ingest`, multipart `/ingest` and Push: the
/// stored total of each profile type equals the sum of the matching sample type.
#[test]
fn every_fixture_through_every_path() {
    let Some(fx) = fixtures() else { return };
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(fx.join("pprof"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.ends_with("SOURCES.md"))
        .collect();
    for f in [
        "cpu.pb.gz",
        "go.cpu.labels.pprof",
        "heap.pb.gz",
        "profile_java",
        "profile_python",
        "profile_ruby",
        "profile_nodejs",
        "profile_rust",
        "single_group_with_optional_span_id.pb.gz",
    ] {
        files.push(fx.join("pyroscope").join(f));
    }
    files.sort();
    let s = TestServer::start();
    let from = unix_now() - 3600;
    for (i, path) in files.iter().enumerate() {
        let bytes = std::fs::read(path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        for mode in ["raw", "multipart", "push"] {
            let svc = format!("fx{i}-{mode}");
            let r = match mode {
                "raw" => s.post_ingest(
                    &format!("name={svc}&format=pprof&from={from}"),
                    bytes.clone(),
                ),
                "multipart" => {
                    let form = reqwest::blocking::multipart::Form::new().part(
                        "profile",
                        reqwest::blocking::multipart::Part::bytes(bytes.clone())
                            .file_name("profile.pprof"),
                    );
                    s.client
                        .post(format!("{}/ingest?name={svc}&from={from}", s.url))
                        .multipart(form)
                        .send()
                        .unwrap()
                }
                _ => push_binary(
                    &s,
                    &push_request(&[("service_name", &svc)], vec![bytes.clone()]),
                    true,
                    None,
                ),
            };
            assert_eq!(r.status(), 200, "{name} via {mode}: {}", r.text().unwrap());
        }
        let profile = decode_fixture(&bytes);
        let sums = pprof_sums(&profile);
        for mode in ["raw", "multipart", "push"] {
            let svc = format!("fx{i}-{mode}");
            let sel = format!("{{service_name=\"{svc}\"}}");
            let types: Vec<String> = serde_json::from_value(s.json(
                "/api/v1/label_values",
                &[
                    ("name", "__profile_type__"),
                    ("query", &sel),
                    ("from", "0"),
                    ("until", "now+1d"),
                ],
            ))
            .unwrap();
            for (ty, unit, sum) in &sums {
                let found: Vec<&String> = types
                    .iter()
                    .filter(|t| {
                        let parts: Vec<&str> = t.split(':').collect();
                        parts.get(1) == Some(&ty.as_str()) && parts.get(2) == Some(&unit.as_str())
                    })
                    .collect();
                if *sum == 0 {
                    continue;
                }
                assert_eq!(
                    found.len(),
                    1,
                    "{name} via {mode}: sample type {ty}:{unit} → {types:?}"
                );
                let got = s.total(None, &format!("{}{sel}", found[0]));
                assert_eq!(got, *sum, "{name} via {mode}: {}", found[0]);
            }
        }
        if name == "heap.pb.gz" {
            let sel = "{service_name=\"fx".to_string() + &i.to_string() + "-raw\"}";
            let types: Vec<String> = serde_json::from_value(s.json(
                "/api/v1/label_values",
                &[
                    ("name", "__profile_type__"),
                    ("query", &sel),
                    ("from", "0"),
                    ("until", "now+1d"),
                ],
            ))
            .unwrap();
            assert_eq!(types.len(), 4, "{types:?}");
            assert!(types.iter().all(|t| t.starts_with("memory:")), "{types:?}");
        }
    }
}

/// Uploads from many threads, interleaving tenants: every stack lands in its own
/// tenant exactly once.
#[test]
fn concurrent_uploads_keep_tenants_apart() {
    let s = TestServer::start();
    let from = unix_now() - 30;
    let url = s.url.clone();
    std::thread::scope(|scope| {
        for t in 0..8 {
            let url = url.clone();
            scope.spawn(move || {
                let client = reqwest::blocking::Client::new();
                for j in 0..20 {
                    let tenant = format!("tenant-{}", (t + j) % 4);
                    let body = format!("root;t{t};r{j} {}\n", t * 100 + j + 1);
                    let mut attempts = 0;
                    loop {
                        let r = client
                            .post(format!("{url}/ingest?name=app.samples&from={from}"))
                            .header("X-Scope-OrgID", &tenant)
                            .body(body.clone())
                            .send()
                            .unwrap();
                        if r.status() == 429 && attempts < 50 {
                            attempts += 1;
                            std::thread::sleep(std::time::Duration::from_millis(20));
                            continue;
                        }
                        assert_eq!(r.status(), 200);
                        break;
                    }
                }
            });
        }
    });
    let types: Vec<String> = serde_json::from_value(s.json(
        "/api/v1/profile_types",
        &[("from", "0"), ("until", "now+1d")],
    ))
    .unwrap();
    assert!(types.is_empty(), "the default tenant got data: {types:?}");
    for k in 0..4 {
        let tenant = format!("tenant-{k}");
        let mut want = BTreeMap::new();
        for t in 0..8 {
            for j in 0..20 {
                if (t + j) % 4 == k {
                    // An unknown suffix is part of the app name: CPU samples at 100 Hz.
                    want.insert(
                        format!("root;t{t};r{j}"),
                        (t * 100 + j + 1) as i64 * 10_000_000,
                    );
                }
            }
        }
        let resp = s
            .client
            .get(format!(
                "{}/api/v1/profile_types?from=0&until=now%2B1d",
                s.url
            ))
            .header("X-Scope-OrgID", &tenant)
            .send()
            .unwrap();
        let types: Vec<String> = resp.json().unwrap();
        assert_eq!(types.len(), 1, "{tenant}: {types:?}");
        assert_eq!(
            s.merged(Some(&tenant), &format!("{}{{}}", types[0])),
            want,
            "{tenant}"
        );
    }
}

/// An acknowledged upload survives a restart of the server on the same directory.
#[test]
fn acknowledged_uploads_survive_restart() {
    let s = TestServer::start();
    let from = unix_now() - 60;
    for i in 0..5 {
        assert_eq!(
            s.post_ingest(
                &format!("name=dur.cpu&from={from}"),
                format!("a;b{i} {}\n", i + 1)
            )
            .status(),
            200
        );
    }
    let before = s.merged(None, &format!("{CPU}{{}}"));
    let dir = s.stop();
    let s = TestServer::start_in(dir, |_| {});
    assert_eq!(s.merged(None, &format!("{CPU}{{}}")), before);
    assert_eq!(before.len(), 5);
}
