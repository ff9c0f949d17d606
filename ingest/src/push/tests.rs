use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
use profiledb_model::{PROFILE_TYPE_LABEL, SERVICE_NAME_LABEL};

use super::*;
use crate::proto::pprof::{Function, Line, Location, Profile, Sample, ValueType};
use crate::proto::push::v1::{RawProfileSeries, RawSample};
use crate::proto::types::v1::LabelPair;

/// What the Rust SDK sends: uncompressed pprof, cpu:nanoseconds with a period, a
/// dynamic tag as a sample label.
fn sdk_profile() -> Vec<u8> {
    let st = |s: &'static str| bytes::Bytes::from_static(s.as_bytes());
    Profile {
        string_table: vec![
            st(""),
            st("cpu"),
            st("nanoseconds"),
            st("main"),
            st("work"),
            st("route"),
            st("/x"),
        ],
        sample_type: vec![ValueType { r#type: 1, unit: 2 }],
        period_type: Some(ValueType { r#type: 1, unit: 2 }),
        period: 10_000_000,
        time_nanos: 1_700_000_000_000_000_000,
        function: vec![
            Function {
                id: 1,
                name: 3,
                ..Default::default()
            },
            Function {
                id: 2,
                name: 4,
                ..Default::default()
            },
        ],
        location: vec![
            Location {
                id: 1,
                line: vec![Line {
                    function_id: 1,
                    line: 1,
                    column: 0,
                }],
                ..Default::default()
            },
            Location {
                id: 2,
                line: vec![Line {
                    function_id: 2,
                    line: 2,
                    column: 0,
                }],
                ..Default::default()
            },
        ],
        sample: vec![
            Sample {
                location_id: vec![2, 1],
                value: vec![30_000_000],
                label: vec![crate::proto::pprof::Label {
                    key: 5,
                    str: 6,
                    ..Default::default()
                }],
            },
            Sample {
                location_id: vec![1],
                value: vec![10_000_000],
                label: vec![],
            },
        ],
        ..Default::default()
    }
    .encode_to_vec()
}

fn labels(pairs: &[(&str, &str)]) -> Vec<LabelPair> {
    pairs
        .iter()
        .map(|(n, v)| LabelPair {
            name: n.to_string(),
            value: v.to_string(),
        })
        .collect()
}

fn request() -> PushRequest {
    PushRequest {
        series: vec![RawProfileSeries {
            labels: labels(&[
                ("__name__", "process_cpu"),
                ("service_name", "rust-app"),
                ("otel.scope.name", "pyroscope"),
                ("__session_id__", "abc"),
            ]),
            samples: vec![RawSample {
                raw_profile: sdk_profile().into(),
                id: "6f1c".into(),
            }],
        }],
    }
}

/// A request body as the server holds it.
fn body(data: impl AsRef<[u8]>) -> Bytes {
    Bytes::copy_from_slice(data.as_ref())
}

fn gz(data: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn check_series(series: &[PushSeries]) {
    assert_eq!(series.len(), 1);
    let s = &series[0];
    assert_eq!(s.name.as_deref(), Some("process_cpu"));
    assert_eq!(
        s.labels.iter().collect::<Vec<_>>(),
        vec![
            ("otel.scope.name", "pyroscope"),
            ("service_name", "rust-app")
        ]
    );
    assert_eq!(s.profiles.len(), 1);
    assert_eq!(s.profiles[0].id, "6f1c");
    assert_eq!(s.profiles[0].raw, sdk_profile());
}

#[test]
fn binary_gzipped_request() {
    let gzipped = gz(&request().encode_to_vec());
    let series = decode_push(&body(&gzipped), PushEncoding::Proto, &Limits::default()).unwrap();
    check_series(&series);

    let batch = push_to_batch(&series, TenantId::default(), 5, &Limits::default()).unwrap();
    assert_eq!(batch.validate(), Ok(()));
    let mut got: Vec<(String, Option<String>, i64, i64)> = batch
        .series
        .iter()
        .flat_map(|s| {
            s.samples.iter().map(|x| {
                (
                    s.labels.get(PROFILE_TYPE_LABEL).unwrap().to_string(),
                    s.labels.get("route").map(str::to_string),
                    x.value,
                    x.timestamp_ms,
                )
            })
        })
        .collect();
    got.sort();
    let pt = "process_cpu:cpu:nanoseconds:cpu:nanoseconds".to_string();
    assert_eq!(
        got,
        vec![
            (pt.clone(), None, 10_000_000, 1_700_000_000_000),
            (pt, Some("/x".into()), 30_000_000, 1_700_000_000_000),
        ]
    );
    for s in &batch.series {
        assert_eq!(s.labels.get(SERVICE_NAME_LABEL), Some("rust-app"));
        assert_eq!(s.labels.get(NAME_LABEL), Some("process_cpu"));
        assert_eq!(s.labels.get("__session_id__"), None);
    }
}

#[test]
fn protojson_request_in_both_name_styles() {
    let b64 = base64::engine::general_purpose::STANDARD.encode(sdk_profile());
    let camel = format!(
        r#"{{"series":[{{"labels":[{{"name":"__name__","value":"process_cpu"}},
            {{"name":"service_name","value":"rust-app"}},{{"name":"otel.scope.name","value":"pyroscope"}}],
            "samples":[{{"rawProfile":"{b64}","ID":"6f1c","unknownField":{{"x":1}}}}]}}],"extra":null}}"#
    );
    check_series(
        &decode_push(
            &body(camel.as_bytes()),
            PushEncoding::Json,
            &Limits::default(),
        )
        .unwrap(),
    );

    let url_unpadded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sdk_profile());
    let snake = format!(
        r#"{{"series":[{{"labels":[{{"name":"__name__","value":"process_cpu"}},
            {{"name":"service_name","value":"rust-app"}},{{"name":"otel.scope.name","value":"pyroscope"}}],
            "samples":[{{"raw_profile":"{url_unpadded}","ID":"6f1c"}}]}}]}}"#
    );
    check_series(
        &decode_push(
            &body(gz(snake.as_bytes())),
            PushEncoding::Json,
            &Limits::default(),
        )
        .unwrap(),
    );

    let empty = decode_push(&body(b"{}"), PushEncoding::Json, &Limits::default()).unwrap();
    assert!(empty.is_empty());
}

#[test]
fn bad_bodies_are_errors() {
    let l = Limits::default();
    let err = decode_push(
        &body(b"{\"series\":[{\"samples\":[{\"rawProfile\":\"!!\"}]}]}"),
        PushEncoding::Json,
        &l,
    )
    .unwrap_err();
    assert!(
        err.to_string().starts_with(
            "invalid push.v1.PushRequest JSON: series[0].samples[0].rawProfile is not base64"
        ),
        "{err}"
    );
    let err = decode_push(&body(b"["), PushEncoding::Json, &l).unwrap_err();
    assert_eq!(err.code(), "invalid_argument");
    let err = decode_push(&body(b"\x0a\x05\x0a"), PushEncoding::Proto, &l).unwrap_err();
    assert!(matches!(
        err,
        IngestError::Protobuf {
            what: "push.v1.PushRequest",
            ..
        }
    ));

    let mut req = request();
    req.series[0].labels = labels(&[("bad-name", "x")]);
    let err = decode_push(&body(req.encode_to_vec()), PushEncoding::Proto, &l).unwrap_err();
    assert!(matches!(err, IngestError::InvalidLabel { .. }));

    // A bad profile inside fails the whole request.
    let mut req = request();
    req.series[0].samples.push(RawSample {
        raw_profile: Bytes::from_static(b"\x0a\xff"),
        id: String::new(),
    });
    let series = decode_push(&body(req.encode_to_vec()), PushEncoding::Proto, &l).unwrap();
    assert!(push_to_batch(&series, TenantId::default(), 0, &l).is_err());
}

#[test]
fn content_types() {
    assert_eq!(
        PushEncoding::from_content_type("application/json; charset=utf-8"),
        Some(PushEncoding::Json)
    );
    assert_eq!(
        PushEncoding::from_content_type("application/proto"),
        Some(PushEncoding::Proto)
    );
    assert_eq!(PushEncoding::from_content_type("text/plain"), None);
}

/// Every sample of `batch` as (labels, function names root first, value, time).
fn flat(batch: &profiledb_model::Batch) -> Vec<(String, Vec<String>, i64, i64)> {
    let mut out: Vec<_> = batch
        .series
        .iter()
        .flat_map(|s| {
            s.samples.iter().map(|x| {
                let names = batch.frame_names(x.stack).unwrap();
                (format!("{:?}", s.labels), names, x.value, x.timestamp_ms)
            })
        })
        .collect();
    out.sort();
    out
}

#[test]
fn profiles_of_a_request_share_one_batch_with_their_own_symbols() {
    // A second profile whose function ids and string indices overlap the first's
    // but name other functions: read with the first's offsets, it would name them.
    let mut other = Profile::decode(&sdk_profile()[..]).unwrap();
    other.string_table[3] = "other_main".into();
    other.string_table[4] = "other_work".into();
    other.sample.truncate(1);
    other.sample[0].label.clear();
    other.sample[0].value = vec![70_000_000];
    let other = other.encode_to_vec();
    let service = |name: &str, profiles: Vec<Vec<u8>>| RawProfileSeries {
        labels: labels(&[("__name__", "process_cpu"), ("service_name", name)]),
        samples: profiles
            .into_iter()
            .map(|p| RawSample {
                raw_profile: p.into(),
                id: String::new(),
            })
            .collect(),
    };
    let req = PushRequest {
        series: vec![
            service("a", vec![sdk_profile()]),
            service("a", vec![other.clone()]),
            service("b", vec![sdk_profile(), other]),
        ],
    };
    let l = Limits::default();
    let series = decode_push(&body(req.encode_to_vec()), PushEncoding::Proto, &l).unwrap();
    let batch = push_to_batch(&series, TenantId::default(), 5, &l).unwrap();
    assert_eq!(batch.validate(), Ok(()));
    // Per service: the unlabeled samples of both profiles in one series, and the
    // `route=/x` one in another.
    assert_eq!(batch.series.len(), 4);

    // The same samples as each profile decoded into a batch of its own.
    let mut alone = Vec::new();
    for s in &series {
        let opts = PprofOptions {
            base_labels: s.labels.clone(),
            name: s.name.clone(),
            fallback_time_ms: 5,
            limits: l.clone(),
            ..Default::default()
        };
        for p in &s.profiles {
            alone.extend(flat(&crate::pprof::decode_pprof(&p.raw, &opts).unwrap()));
        }
    }
    alone.sort();
    let got = flat(&batch);
    assert_eq!(got, alone);
    let names: Vec<&[String]> = got.iter().map(|x| x.1.as_slice()).collect();
    assert!(names.contains(&["other_main".to_string(), "other_work".to_string()].as_slice()));
}
