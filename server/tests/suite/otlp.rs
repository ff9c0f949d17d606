//! OTLP profiles export against a real server on loopback: a tonic gRPC client, plain
//! HTTP in both encodings, and the Python `opentelemetry-proto` package's own
//! messages sent with grpcio and urllib (`.ci/run` installs them into
//! `target/otlp-venv`; elsewhere point `PROFILEDB_OTLP_PYTHON` at a Python that has
//! them, or that test skips; with `PROFILEDB_REQUIRE_EXTERNAL=1` it fails).

use std::path::PathBuf;
use std::process::Command;

use crate::common::TestServer;
use profiledb_proto::opentelemetry::proto::common::v1::{any_value, AnyValue, KeyValue};
use profiledb_proto::opentelemetry::proto::resource::v1::Resource;
use profiledb_proto::otlp::{
    Function, Line, Location, Profile, ProfilesDictionary, ResourceProfiles, Sample, ScopeProfiles,
    Stack, ValueType,
};
use profiledb_proto::otlp_collector::{
    ExportProfilesServiceRequest, ExportProfilesServiceResponse,
};
use prost::Message;

const METHOD: &str = "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export";
const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
const PERIOD: i64 = 10_000_000;

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// `main` → `work`, two samples timed by event and one of value 3: 5 × 10 ms of CPU.
fn cpu_request(service: &str, stack_index: i32) -> ExportProfilesServiceRequest {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let now = now_ns();
    let dictionary = ProfilesDictionary {
        string_table: s(&["", "samples", "count", "cpu", "nanoseconds", "main", "work"]),
        function_table: vec![
            Function::default(),
            Function {
                name_strindex: 5,
                ..Default::default()
            },
            Function {
                name_strindex: 6,
                ..Default::default()
            },
        ],
        location_table: (0..3)
            .map(|f| Location {
                lines: (f > 0)
                    .then(|| Line {
                        function_index: f,
                        ..Default::default()
                    })
                    .into_iter()
                    .collect(),
                ..Default::default()
            })
            .collect(),
        stack_table: vec![
            Stack::default(),
            Stack {
                location_indices: vec![2, 1],
            },
        ],
        ..Default::default()
    };
    let profile = Profile {
        sample_type: Some(ValueType {
            type_strindex: 1,
            unit_strindex: 2,
        }),
        period_type: Some(ValueType {
            type_strindex: 3,
            unit_strindex: 4,
        }),
        period: PERIOD,
        time_unix_nano: now - 3_000_000_000,
        samples: vec![
            Sample {
                stack_index,
                timestamps_unix_nano: vec![now - 2_000_000_000, now - 1_000_000_000],
                ..Default::default()
            },
            Sample {
                stack_index,
                values: vec![3],
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let attr = |k: &str, v: &str| KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        key_strindex: 0,
    };
    ExportProfilesServiceRequest {
        resource_profiles: vec![ResourceProfiles {
            resource: Some(Resource {
                attributes: vec![
                    attr("service.name", service),
                    attr("deployment.environment", "ci"),
                ],
                ..Default::default()
            }),
            scope_profiles: vec![ScopeProfiles {
                profiles: vec![profile],
                ..Default::default()
            }],
            ..Default::default()
        }],
        dictionary: Some(dictionary),
    }
}

fn cpu_query(service: &str) -> String {
    format!("{CPU}{{service_name=\"{service}\"}}")
}

async fn grpc_export(
    url: &str,
    req: ExportProfilesServiceRequest,
) -> Result<ExportProfilesServiceResponse, tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_string())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = tonic::client::Grpc::new(channel);
    client.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<
        ExportProfilesServiceRequest,
        ExportProfilesServiceResponse,
    >::default();
    client
        .unary(
            tonic::Request::new(req),
            axum::http::uri::PathAndQuery::from_static(METHOD),
            codec,
        )
        .await
        .map(tonic::Response::into_inner)
}

#[test]
fn tonic_client_exports_over_grpc_and_the_totals_are_stored() {
    let s = TestServer::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let resp = rt
        .block_on(grpc_export(&s.url, cpu_request("grpc-app", 1)))
        .unwrap();
    assert_eq!(resp, ExportProfilesServiceResponse::default());
    let stacks = s.merged(None, &cpu_query("grpc-app"));
    assert_eq!(
        stacks.into_iter().collect::<Vec<_>>(),
        [("main;work".to_string(), 5 * PERIOD)]
    );
    let series = s.json(
        "/api/v1/series",
        &[
            ("query", "{service_name=\"grpc-app\"}"),
            ("from", "now-1h"),
            ("until", "now+1m"),
        ],
    );
    assert_eq!(series[0]["deployment_environment"], "ci");
    assert_eq!(series[0]["__name__"], "process_cpu");

    let status = rt
        .block_on(grpc_export(&s.url, cpu_request("grpc-bad", 9)))
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().contains("stack_table[9]"),
        "{}",
        status.message()
    );
    assert_eq!(
        s.total(None, &cpu_query("grpc-bad")),
        0,
        "nothing of it stored"
    );
}

#[test]
fn http_export_in_both_encodings_and_bad_input_gets_400() {
    let s = TestServer::start();
    let post = |body: Vec<u8>, ct: &str| {
        s.client
            .post(format!("{}/v1development/profiles", s.url))
            .header("Content-Type", ct)
            .body(body)
            .send()
            .unwrap()
    };
    let resp = post(
        crate::common::gzip(&cpu_request("http-proto", 1).encode_to_vec()),
        "application/x-protobuf",
    );
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/x-protobuf");
    assert_eq!(resp.headers()["x-profiledb-samples"], "3");
    assert_eq!(s.total(None, &cpu_query("http-proto")), 5 * PERIOD);

    // OTLP JSON: camelCase, 64-bit integers as strings, a hex profile id.
    let now = now_ns();
    let json = serde_json::json!({
        "resourceProfiles": [{
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "http-json"}}]},
            "scopeProfiles": [{"profiles": [{
                "sampleType": {"typeStrindex": 1, "unitStrindex": 2},
                "periodType": {"typeStrindex": 3, "unitStrindex": 4},
                "period": PERIOD.to_string(),
                "profileId": "0102030405060708090a0b0c0d0e0f10",
                "samples": [{"stackIndex": 1, "timestampsUnixNano": [(now - 1_000_000_000).to_string()]}]
            }]}]
        }],
        "dictionary": {
            "stringTable": ["", "samples", "count", "cpu", "nanoseconds", "leaf"],
            "functionTable": [{}, {"nameStrindex": 5}],
            "locationTable": [{}, {"lines": [{"functionIndex": 1}]}],
            "stackTable": [{}, {"locationIndices": [1]}]
        }
    });
    let resp = post(serde_json::to_vec(&json).unwrap(), "application/json");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    assert_eq!(resp.text().unwrap(), "{}");
    assert_eq!(
        s.merged(None, &cpu_query("http-json"))
            .into_iter()
            .collect::<Vec<_>>(),
        [("leaf".to_string(), PERIOD)]
    );

    let bad = |resp: reqwest::blocking::Response, status: u16, needle: &str| {
        assert_eq!(resp.status(), status);
        let body: serde_json::Value = resp.json().unwrap();
        let msg = body["message"].as_str().unwrap();
        assert!(msg.contains(needle), "{msg}");
    };
    bad(
        post(b"\x0a\xff".to_vec(), "application/x-protobuf"),
        400,
        "ExportProfilesServiceRequest",
    );
    bad(
        post(b"{\"resourceProfiles\":7}".to_vec(), "application/json"),
        400,
        "JSON",
    );
    let mut no_dict = cpu_request("http-bad", 1);
    no_dict.dictionary = None;
    bad(
        post(no_dict.encode_to_vec(), "application/x-protobuf"),
        400,
        "no dictionary",
    );
    bad(post(vec![], "text/plain"), 415, "application/x-protobuf");
    // A plain POST to the gRPC path is told what it is.
    let resp = s
        .client
        .post(format!("{}{METHOD}", s.url))
        .body("x")
        .send()
        .unwrap();
    bad(resp, 415, "application/grpc");
    assert_eq!(s.get("/ready").status(), 200, "still serving");
}

fn python() -> Option<PathBuf> {
    let p = std::env::var_os("PROFILEDB_OTLP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/otlp-venv/bin/python")
        });
    let ok = Command::new(&p)
        .args([
            "-c",
            "import grpc, opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        crate::external::missing(
            "the OTLP Python client",
            format!(
                "no Python with opentelemetry-proto (profiles v1development) and grpcio at {} \
                 (set PROFILEDB_OTLP_PYTHON or run .ci/run)",
                p.display()
            ),
        );
        return None;
    }
    Some(p)
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/otlp/export.py")
}

/// Our `.proto` copies against the published package: every field of every message
/// it defines must have the same number, type and cardinality here.
#[test]
fn field_numbers_match_the_opentelemetry_proto_package() {
    let Some(py) = python() else { return };
    let out = Command::new(py)
        .arg(script())
        .arg("fields")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let pool = prost_reflect::DescriptorPool::decode(profiledb_proto::DESCRIPTORS).unwrap();
    let mut checked = 0;
    for (message, fields) in theirs.as_object().unwrap() {
        let ours = pool
            .get_message_by_name(message)
            .unwrap_or_else(|| panic!("no {message} in our schemas"));
        for (name, spec) in fields.as_object().unwrap() {
            let f = ours
                .get_field_by_name(name)
                .unwrap_or_else(|| panic!("no {message}.{name} in our schemas"));
            let proto = f.field_descriptor_proto();
            let mine = serde_json::json!([f.number(), proto.r#type() as i32, f.is_list()]);
            assert_eq!(&mine, spec, "{message}.{name}");
            checked += 1;
        }
    }
    assert!(checked > 50, "only {checked} fields compared");
}

#[test]
fn python_opentelemetry_proto_exports_over_grpc_and_http() {
    let Some(py) = python() else { return };
    let s = TestServer::start();
    let out = Command::new(py)
        .arg(script())
        .arg("send")
        .arg(&s.url)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "export.py failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "grpc ok",
            "grpc invalid_argument ok",
            "http protobuf ok",
            "http json ok"
        ]
    );
    for service in ["py-grpc", "py-http-proto", "py-http-json"] {
        let stacks = s.merged(None, &cpu_query(service));
        assert_eq!(
            stacks.into_iter().collect::<Vec<_>>(),
            [("main;work".to_string(), 5 * PERIOD)],
            "{service}"
        );
    }
    let series = s.json(
        "/api/v1/series",
        &[
            ("query", "{service_name=\"py-grpc\"}"),
            ("from", "now-1h"),
            ("until", "now+1m"),
        ],
    );
    let series = series.as_array().unwrap();
    assert_eq!(
        series.len(),
        2,
        "with and without the thread attribute: {series:?}"
    );
    assert!(series
        .iter()
        .all(|l| l["host_name"] == "pyhost" && l.get("process_pid").is_none()));
    assert!(series.iter().any(|l| l["thread_name"] == "worker"));
    assert_eq!(s.total(None, &cpu_query("py-bad")), 0);
}
