//! SelectMergeProfile with `stack_trace_selector.go_pgo` over real HTTP, in both
//! Connect encodings: stacks cut to their leaf-most `keep_locations` locations,
//! equal cut stacks summed, and the call site ignored as Pyroscope does.

use crate::common::TestServer;
use profiledb_proto::pprof::Profile;
use profiledb_proto::querier::v1::SelectMergeProfileRequest;
use profiledb_proto::types::v1::{GoPgo, Location, StackTraceSelector};
use prost::Message;
use serde_json::{json, Value};

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
/// `.cpu` folded counts are scaled by 1e9 / sampleRate(100).
const SCALE: i64 = 10_000_000;
const T0: i64 = 1_672_531_200;
const URL: &str = "/querier.v1.QuerierService/SelectMergeProfile";

fn setup() -> TestServer {
    let s = TestServer::start();
    let r = s
        .client
        .post(format!("{}/ingest", s.url))
        .query(&[("name", "pgo.cpu"), ("from", &T0.to_string())])
        .body("main;a;b;c 5\nmain;z;b;c 7\nmain;x;c 1\nmain 2\n")
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    s
}

/// (leaf-first function names, value) per sample, sorted.
fn stacks(p: &Profile) -> Vec<(Vec<String>, i64)> {
    let name = |loc: u64| {
        let l = p.location.iter().find(|l| l.id == loc).unwrap();
        let f = p
            .function
            .iter()
            .find(|f| f.id == l.line[0].function_id)
            .unwrap();
        String::from_utf8(p.string_table[f.name as usize].to_vec()).unwrap()
    };
    let mut out: Vec<(Vec<String>, i64)> = p
        .sample
        .iter()
        .map(|s| (s.location_id.iter().map(|&l| name(l)).collect(), s.value[0]))
        .collect();
    out.sort();
    out
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn request(pgo: Option<GoPgo>) -> SelectMergeProfileRequest {
    SelectMergeProfileRequest {
        profile_type_id: CPU.to_string(),
        label_selector: "{service_name=\"pgo\"}".to_string(),
        start: (T0 - 60) * 1000,
        end: (T0 + 60) * 1000,
        stack_trace_selector: Some(StackTraceSelector {
            // Ignored when go_pgo is set.
            call_site: vec![
                Location {
                    name: "main".into(),
                },
                Location { name: "x".into() },
            ],
            go_pgo: pgo,
        }),
        ..Default::default()
    }
}

/// Calls SelectMergeProfile with a body in the given Connect encoding.
fn call(s: &TestServer, content_type: &str, body: Vec<u8>) -> reqwest::blocking::Response {
    let r = s
        .client
        .post(format!("{}{URL}", s.url))
        .header("content-type", content_type)
        .body(body)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    r
}

fn binary(s: &TestServer, req: &SelectMergeProfileRequest) -> Profile {
    let r = call(s, "application/proto", req.encode_to_vec());
    Profile::decode(r.bytes().unwrap()).unwrap()
}

#[test]
fn keep_locations_cuts_and_sums_stacks_in_binary() {
    let s = setup();
    let pgo = GoPgo {
        keep_locations: 2,
        aggregate_callees: true,
    };
    let p = binary(&s, &request(Some(pgo)));
    assert_eq!(
        stacks(&p),
        vec![
            (names(&["c", "b"]), 12 * SCALE),
            (names(&["c", "x"]), SCALE),
            (names(&["main"]), 2 * SCALE),
        ]
    );
    // Functions a and z are gone with the locations that were cut.
    assert_eq!(p.function.len(), 4);

    // Without go_pgo the call site applies and stacks stay whole.
    let p = binary(&s, &request(None));
    assert_eq!(stacks(&p), vec![(names(&["c", "x", "main"]), SCALE)]);
}

#[test]
fn go_pgo_in_json() {
    let s = setup();
    let body = json!({
        "profileTypeID": CPU,
        "labelSelector": "{service_name=\"pgo\"}",
        "start": (T0 - 60) * 1000,
        "end": (T0 + 60) * 1000,
        "stackTraceSelector": {"goPgo": {"keepLocations": 1, "aggregateCallees": false}},
    });
    let v: Value = call(&s, "application/json", body.to_string().into_bytes())
        .json()
        .unwrap();
    let strings: Vec<&str> = v["stringTable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    let name_of_location = |id: &Value| -> String {
        let loc = v["location"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["id"] == *id)
            .unwrap();
        let fid = &loc["line"][0]["functionId"];
        let f = v["function"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == *fid)
            .unwrap();
        let idx: usize = f["name"].as_str().unwrap().parse().unwrap();
        strings[idx].to_string()
    };
    let mut got: Vec<(String, i64)> = v["sample"]
        .as_array()
        .unwrap()
        .iter()
        .map(|smp| {
            let locs = smp["locationId"].as_array().unwrap();
            assert_eq!(locs.len(), 1);
            let value: i64 = smp["value"][0].as_str().unwrap().parse().unwrap();
            (name_of_location(&locs[0]), value)
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("c".to_string(), 13 * SCALE),
            ("main".to_string(), 2 * SCALE)
        ]
    );
}
