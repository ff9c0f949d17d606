//! Bad input gets a clear 4xx with a JSON `{code, message}` body, the server keeps
//! serving, and previously stored data is unchanged.

use crate::common::*;
use prost::Message;

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";

struct Case {
    what: &'static str,
    method: &'static str,
    path: String,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    status: u16,
    code: &'static str,
}

fn ingest_case(
    what: &'static str,
    query: &str,
    body: impl Into<Vec<u8>>,
    status: u16,
    code: &'static str,
) -> Case {
    Case {
        what,
        method: "POST",
        path: format!("/ingest?{query}"),
        headers: vec![],
        body: body.into(),
        status,
        code,
    }
}

fn push_case(
    what: &'static str,
    ct: &str,
    body: impl Into<Vec<u8>>,
    status: u16,
    code: &'static str,
) -> Case {
    Case {
        what,
        method: "POST",
        path: "/push.v1.PusherService/Push".into(),
        headers: vec![("content-type", ct.to_string())],
        body: body.into(),
        status,
        code,
    }
}

fn multipart(
    what: &'static str,
    boundary_header: &str,
    body: &str,
    status: u16,
    code: &'static str,
) -> Case {
    Case {
        what,
        method: "POST",
        path: "/ingest?name=mp".into(),
        headers: vec![("content-type", boundary_header.to_string())],
        body: body.as_bytes().to_vec(),
        status,
        code,
    }
}

fn deep_profile(depth: usize) -> Vec<u8> {
    let stack: Vec<String> = (0..depth).map(|i| format!("f{i}")).collect();
    encode(&build_pprof(
        &[("cpu", "nanoseconds")],
        ("cpu", "nanoseconds", 1),
        &[(stack, vec![1])],
        &[],
        0,
    ))
}

fn cases() -> Vec<Case> {
    let good = encode(&build_pprof(
        &[("cpu", "nanoseconds")],
        ("cpu", "nanoseconds", 1),
        &[(vec!["a".into(), "b".into()], vec![5])],
        &[],
        0,
    ));
    let mut bad_string = build_pprof(
        &[("cpu", "nanoseconds")],
        ("cpu", "nanoseconds", 1),
        &[(vec!["a".into()], vec![5])],
        &[],
        0,
    );
    bad_string.function[0].name = 999;
    let mut dangling = build_pprof(
        &[("cpu", "nanoseconds")],
        ("cpu", "nanoseconds", 1),
        &[(vec!["a".into()], vec![5])],
        &[],
        0,
    );
    dangling.sample[0].location_id = vec![42];
    let mut wrong_values = build_pprof(
        &[("cpu", "nanoseconds")],
        ("cpu", "nanoseconds", 1),
        &[(vec!["a".into()], vec![5])],
        &[],
        0,
    );
    wrong_values.sample[0].value = vec![1, 2, 3];
    let gz = gzip(&good);
    let bomb = gzip(&vec![0u8; 300 << 20]);
    let many_tags: String = (0..70)
        .map(|i| format!("k{i}=v"))
        .collect::<Vec<_>>()
        .join(",");
    let long_value = "x".repeat(5000);
    let push_envelope = |raw: Vec<u8>| {
        profiledb_ingest::proto::push::v1::PushRequest {
            series: vec![profiledb_ingest::proto::push::v1::RawProfileSeries {
                labels: vec![profiledb_ingest::proto::types::v1::LabelPair {
                    name: "service_name".into(),
                    value: "p".into(),
                }],
                samples: vec![profiledb_ingest::proto::push::v1::RawSample {
                    raw_profile: raw.into(),
                    id: String::new(),
                }],
            }],
        }
        .encode_to_vec()
    };
    vec![
        ingest_case("missing name", "from=now", "a;b 1", 400, "invalid_argument"),
        ingest_case("empty name", "name=", "a;b 1", 400, "invalid_argument"),
        ingest_case("malformed tags in name", "name=app%7B%3Dx%7D", "a;b 1", 400, "invalid_argument"),
        ingest_case("unterminated tags", "name=app%7Benv%3Dprod", "a;b 1", 400, "invalid_argument"),
        ingest_case("bad from", "name=app&from=yesterday", "a;b 1", 400, "invalid_argument"),
        ingest_case("until before from", "name=app&from=2000&until=1000", "a;b 1", 400, "invalid_argument"),
        ingest_case("unknown format", "name=app&format=xml", "a;b 1", 400, "invalid_argument"),
        ingest_case("trie not supported", "name=app&format=trie", "x", 422, "unsupported_format"),
        ingest_case("corrupt jfr", "name=app&format=jfr", "FLR\0 not a chunk", 400, "invalid_argument"),
        ingest_case("sampleRate zero", "name=app&sampleRate=0", "a;b 1", 400, "invalid_argument"),
        ingest_case("sampleRate not a number", "name=app&sampleRate=fast", "a;b 1", 400, "invalid_argument"),
        ingest_case("empty body", "name=app", "", 400, "invalid_argument"),
        ingest_case("fractional folded count", "name=app", "a;b 1.5\n", 400, "invalid_argument"),
        ingest_case("folded line without count", "name=app", "a;b\n", 400, "invalid_argument"),
        ingest_case("negative folded count", "name=app", "a;b -3\n", 400, "invalid_argument"),
        ingest_case("invalid UTF-8 in folded", "name=app", vec![b'a', 0xff, 0xfe, b' ', b'1'], 400, "invalid_argument"),
        ingest_case("garbage pprof", "name=app&format=pprof", "this is not protobuf", 400, "invalid_argument"),
        ingest_case("truncated gzip pprof", "name=app&format=pprof", gz[..gz.len() / 2].to_vec(), 400, "invalid_argument"),
        ingest_case("pprof string index out of range", "name=app&format=pprof", encode(&bad_string), 400, "invalid_argument"),
        ingest_case("pprof dangling location", "name=app&format=pprof", encode(&dangling), 400, "invalid_argument"),
        ingest_case("pprof value count mismatch", "name=app&format=pprof", encode(&wrong_values), 400, "invalid_argument"),
        ingest_case("absurdly deep stack", "name=app&format=pprof", deep_profile(10_000), 400, "invalid_argument"),
        ingest_case("gzip bomb", "name=app&format=pprof", bomb, 413, "payload_too_large"),
        ingest_case("too many labels", &format!("name=app%7B{many_tags}%7D"), "a;b 1", 400, "invalid_argument"),
        ingest_case("label value too long", &format!("name=app%7Bk%3D{long_value}%7D"), "a;b 1", 400, "invalid_argument"),
        ingest_case("timestamp far in the future", "name=app&from=now%2B2h", "a;b 1", 400, "invalid_argument"),
        ingest_case("body over max_body_bytes", "name=app", vec![b'a'; 3 << 20], 413, "payload_too_large"),
        // A large body with a bad parameter still gets its 400 (not a broken pipe).
        ingest_case("missing name with a 1.5 MiB body", "from=now", vec![b'a'; 3 << 19], 400, "invalid_argument"),
        Case {
            what: "tenant with a path separator",
            method: "POST",
            path: "/ingest?name=app".into(),
            headers: vec![("X-Scope-OrgID", "../../etc".into())],
            body: b"a;b 1".to_vec(),
            status: 400,
            code: "invalid_argument",
        },
        Case {
            what: "tenant id too long",
            method: "POST",
            path: "/ingest?name=app".into(),
            headers: vec![("X-Scope-OrgID", "t".repeat(100))],
            body: b"a;b 1".to_vec(),
            status: 400,
            code: "invalid_argument",
        },
        multipart("multipart without boundary", "multipart/form-data", "--x\r\n", 400, "invalid_argument"),
        multipart(
            "multipart without a profile part",
            "multipart/form-data; boundary=XYZ",
            "--XYZ\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\nhello\r\n--XYZ--\r\n",
            400,
            "invalid_argument",
        ),
        multipart(
            "multipart with an empty profile",
            "multipart/form-data; boundary=XYZ",
            "--XYZ\r\nContent-Disposition: form-data; name=\"profile\"; filename=\"p\"\r\n\r\n\r\n--XYZ--\r\n",
            400,
            "invalid_argument",
        ),
        multipart("truncated multipart", "multipart/form-data; boundary=XYZ", "--XYZ\r\nContent-Disposition: form-da", 400, "invalid_argument"),
        multipart(
            "multipart with a garbage sample_type_config",
            "multipart/form-data; boundary=XYZ",
            "--XYZ\r\nContent-Disposition: form-data; name=\"profile\"; filename=\"p\"\r\n\r\nxx\r\n--XYZ\r\nContent-Disposition: form-data; name=\"sample_type_config\"\r\n\r\n{not json\r\n--XYZ--\r\n",
            400,
            "invalid_argument",
        ),
        push_case("push with a wrong content type", "text/plain", "hello", 415, "invalid_argument"),
        push_case("push garbage protobuf", "application/proto", vec![0xff, 0xff, 0xff, 0x01], 400, "invalid_argument"),
        push_case("push invalid JSON", "application/json", "{\"series\": [", 400, "invalid_argument"),
        push_case("push empty JSON body", "application/json", "", 400, "invalid_argument"),
        push_case("push JSON with bad base64", "application/json", r#"{"series":[{"labels":[],"samples":[{"rawProfile":"!!!"}]}]}"#, 400, "invalid_argument"),
        push_case("push with a garbage raw profile", "application/proto", push_envelope(b"garbage".to_vec()), 400, "invalid_argument"),
        push_case("push with a truncated gzip body", "application/proto", gzip(&push_envelope(good.clone()))[..20].to_vec(), 400, "invalid_argument"),
        Case {
            what: "GET on the ingest endpoint",
            method: "GET",
            path: "/ingest?name=app".into(),
            headers: vec![],
            body: vec![],
            status: 405,
            code: "method_not_allowed",
        },
        Case {
            what: "unknown endpoint",
            method: "POST",
            path: "/api/v1/nothing".into(),
            headers: vec![],
            body: vec![],
            status: 404,
            code: "not_found",
        },
        Case {
            what: "unknown query parameter on a native endpoint",
            method: "GET",
            path: "/api/v1/labels?bogus=1".into(),
            headers: vec![],
            body: vec![],
            status: 400,
            code: "invalid_argument",
        },
        Case {
            what: "invalid selector",
            method: "GET",
            path: "/api/v1/merge?query=%7Ba%3Db%7D".into(),
            headers: vec![],
            body: vec![],
            status: 400,
            code: "invalid_argument",
        },
    ]
}

#[test]
fn bad_input_is_refused_and_stored_data_is_untouched() {
    let s = TestServer::start_with(|o| o.max_body_bytes = 2 << 20);
    let from = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 60;
    s.upload(
        &format!("name=keep.cpu&from={from}"),
        b"main;work 7\nmain;idle 2\n".to_vec(),
    );
    let before = s.merged(None, &format!("{CPU}{{}}"));
    assert_eq!(before.len(), 2);
    let cases = cases();
    assert!(cases.len() >= 30, "the table must cover at least 30 inputs");
    for c in cases {
        let mut req = match c.method {
            "GET" => s.client.get(format!("{}{}", s.url, c.path)),
            _ => s
                .client
                .post(format!("{}{}", s.url, c.path))
                .body(c.body.clone()),
        };
        for (k, v) in &c.headers {
            req = req.header(*k, v);
        }
        let resp = req.send().unwrap_or_else(|e| panic!("{}: {e:?}", c.what));
        let status = resp.status().as_u16();
        let text = resp.text().unwrap();
        assert_eq!(status, c.status, "{}: {text}", c.what);
        let json: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{}: body is not JSON: {text:?}", c.what));
        assert_eq!(json["code"], c.code, "{}: {text}", c.what);
        let msg = json["message"].as_str().unwrap_or("");
        assert!(msg.len() > 5, "{}: message says nothing: {text}", c.what);
        assert_eq!(
            s.get("/ready").status(),
            200,
            "{}: server stopped serving",
            c.what
        );
        assert_eq!(
            s.merged(None, &format!("{CPU}{{}}")),
            before,
            "{}: stored data changed",
            c.what
        );
    }
}
