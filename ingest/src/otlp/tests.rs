use profiledb_model::{Batch, TenantId, NAME_LABEL, PROFILE_TYPE_LABEL};
use prost::Message;

use super::*;
use crate::profile_type::CPU_NANOSECONDS;
use crate::proto::opentelemetry::proto::common::v1::{
    any_value, AnyValue, InstrumentationScope, KeyValue,
};
use crate::proto::opentelemetry::proto::resource::v1::Resource;
use crate::proto::otlp::{
    Function, KeyValueAndUnit, Line, Location, Mapping, Profile, ProfilesDictionary,
    ResourceProfiles, Sample as OtlpSample, ScopeProfiles, Stack, ValueType,
};

/// 2023-11-14T22:13:20Z.
const T0_NS: u64 = 1_700_000_000_000_000_000;
const T0_MS: i64 = 1_700_000_000_000;
const PERIOD: i64 = 50_000_000;

/// A dictionary built by name, with the spec's zero entry first in every table.
struct Dict(ProfilesDictionary);

impl Dict {
    fn new() -> Self {
        Dict(ProfilesDictionary {
            string_table: vec![String::new()],
            mapping_table: vec![Mapping::default()],
            location_table: vec![Location::default()],
            function_table: vec![Function::default()],
            attribute_table: vec![KeyValueAndUnit::default()],
            stack_table: vec![Stack::default()],
            link_table: vec![Default::default()],
        })
    }

    fn s(&mut self, s: &str) -> i32 {
        let t = &mut self.0.string_table;
        let i = t.iter().position(|x| x == s).unwrap_or_else(|| {
            t.push(s.to_string());
            t.len() - 1
        });
        i as i32
    }

    fn vt(&mut self, ty: &str, unit: &str) -> Option<ValueType> {
        Some(ValueType {
            type_strindex: self.s(ty),
            unit_strindex: self.s(unit),
        })
    }

    fn attr(&mut self, key: &str, value: &str) -> i32 {
        let key_strindex = self.s(key);
        self.0.attribute_table.push(KeyValueAndUnit {
            key_strindex,
            value: Some(string_value(value)),
            unit_strindex: 0,
        });
        self.0.attribute_table.len() as i32 - 1
    }

    fn function(&mut self, name: &str) -> i32 {
        let name_strindex = self.s(name);
        let filename_strindex = self.s("app.go");
        self.0.function_table.push(Function {
            name_strindex,
            filename_strindex,
            ..Default::default()
        });
        self.0.function_table.len() as i32 - 1
    }

    /// A location with one line per function, innermost first.
    fn location(&mut self, functions: &[&str], mapping_index: i32, address: u64) -> i32 {
        let lines = functions
            .iter()
            .enumerate()
            .map(|(i, f)| Line {
                function_index: self.function(f),
                line: 10 + i as i64,
                column: 0,
            })
            .collect();
        self.0.location_table.push(Location {
            mapping_index,
            address,
            lines,
            attribute_indices: vec![],
        });
        self.0.location_table.len() as i32 - 1
    }

    fn stack(&mut self, leaf_first: &[i32]) -> i32 {
        self.0.stack_table.push(Stack {
            location_indices: leaf_first.to_vec(),
        });
        self.0.stack_table.len() as i32 - 1
    }
}

fn string_value(s: &str) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::StringValue(s.to_string())),
    }
}

fn kv(key: &str, value: AnyValue) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(value),
        key_strindex: 0,
    }
}

fn request(
    resource: Vec<KeyValue>,
    scope: Vec<KeyValue>,
    profiles: Vec<Profile>,
    dict: Dict,
) -> ExportProfilesServiceRequest {
    ExportProfilesServiceRequest {
        resource_profiles: vec![ResourceProfiles {
            resource: Some(Resource {
                attributes: resource,
                ..Default::default()
            }),
            scope_profiles: vec![ScopeProfiles {
                scope: Some(InstrumentationScope {
                    name: "ebpf".into(),
                    attributes: scope,
                    ..Default::default()
                }),
                profiles,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
        dictionary: Some(dict.0),
    }
}

/// The eBPF profiler's shape: on-CPU samples counted per event time, one with a
/// thread attribute, one with an aggregated value; `main` → `work` → `inner`
/// (inlined into `work`).
fn cpu_request() -> ExportProfilesServiceRequest {
    let mut d = Dict::new();
    let filename_strindex = d.s("/usr/bin/api");
    let build_id = d.attr("process.executable.build_id.gnu", "abc123");
    d.0.mapping_table.push(Mapping {
        filename_strindex,
        attribute_indices: vec![build_id],
        memory_start: 0x40_0000,
        memory_limit: 0x48_0000,
        file_offset: 0x1000,
    });
    let leaf = d.location(&["inner", "work"], 1, 0x1000);
    let root = d.location(&["main"], 1, 0x2000);
    let stack = d.stack(&[leaf, root]);
    let thread = d.attr("thread.name", "worker");
    let profile = Profile {
        sample_type: d.vt("samples", "count"),
        period_type: d.vt("cpu", "nanoseconds"),
        period: PERIOD,
        time_unix_nano: T0_NS,
        samples: vec![
            OtlpSample {
                stack_index: stack,
                attribute_indices: vec![thread],
                timestamps_unix_nano: vec![T0_NS + 1_000_000_000, T0_NS + 2_000_000_000],
                ..Default::default()
            },
            OtlpSample {
                stack_index: stack,
                values: vec![3],
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    request(
        vec![
            kv("service.name", string_value("api")),
            kv("host.name", string_value("h1")),
            kv(
                "process.pid",
                AnyValue {
                    value: Some(any_value::Value::IntValue(42)),
                },
            ),
        ],
        vec![kv("host.name", string_value("scope-loses"))],
        vec![profile],
        d,
    )
}

fn decode(req: &ExportProfilesServiceRequest) -> Result<Batch, IngestError> {
    otlp_to_batch(req, TenantId::default(), 7, &Limits::default())
}

fn labels(batch: &Batch, i: usize) -> Vec<(String, String)> {
    batch.series[i]
        .labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Function names of a stack, root first.
fn frames(batch: &Batch, stack: u32) -> Vec<String> {
    batch.frame_names(stack).unwrap()
}

#[test]
fn ebpf_cpu_profile_becomes_cpu_nanoseconds_per_event() {
    let batch = decode(&cpu_request()).unwrap();
    assert_eq!(batch.validate(), Ok(()));
    assert_eq!(batch.series.len(), 2);
    let common = [
        ("__name__", "process_cpu"),
        ("__profile_type__", CPU_NANOSECONDS),
        ("host_name", "h1"),
        ("service_name", "api"),
    ];
    let mut with_thread = common.to_vec();
    with_thread.push(("thread_name", "worker"));
    assert_eq!(labels(&batch, 0), pairs(&with_thread));
    assert_eq!(labels(&batch, 1), pairs(&common));

    let s = &batch.series[0].samples;
    assert_eq!(
        s.iter()
            .map(|x| (x.timestamp_ms, x.value))
            .collect::<Vec<_>>(),
        [(T0_MS + 1000, PERIOD), (T0_MS + 2000, PERIOD)]
    );
    let s = &batch.series[1].samples;
    assert_eq!(
        s.iter()
            .map(|x| (x.timestamp_ms, x.value))
            .collect::<Vec<_>>(),
        [(T0_MS, 3 * PERIOD)]
    );
    // One stack, shared by both samples; `inner` was inlined into `work`.
    assert_eq!(batch.stacks.len(), 1);
    assert_eq!(frames(&batch, 0), ["main", "work", "inner"]);
    assert_eq!(batch.symbols.mappings.len(), 1);
    assert_eq!(batch.symbols.mappings[0].file, "/usr/bin/api");
    assert_eq!(batch.symbols.mappings[0].build_id, "abc123");
    let m = &batch.symbols.mappings[0];
    assert_eq!((m.start, m.limit, m.offset), (0x40_0000, 0x48_0000, 0x1000));
    let inner = batch.symbols.locations[batch.stacks.get(0).unwrap()[2] as usize];
    assert_eq!((inner.address, inner.line), (0x1000, 10));
}

#[test]
fn off_cpu_values_pair_with_their_times_and_the_service_falls_back() {
    let mut d = Dict::new();
    let exe = d.attr("process.executable.name", "nginx");
    let loc = d.location(&[], 0, 0xbeef);
    let stack = d.stack(&[loc]);
    let profile = Profile {
        sample_type: d.vt("events", "nanoseconds"),
        time_unix_nano: T0_NS,
        samples: vec![OtlpSample {
            stack_index: stack,
            attribute_indices: vec![exe],
            values: vec![100, 0, 200],
            timestamps_unix_nano: vec![T0_NS + 5_000_000, T0_NS, T0_NS + 9_000_000],
            ..Default::default()
        }],
        ..Default::default()
    };
    let batch = decode(&request(vec![], vec![], vec![profile], d)).unwrap();
    assert_eq!(batch.validate(), Ok(()));
    assert_eq!(
        labels(&batch, 0),
        pairs(&[
            ("__name__", "off_cpu"),
            ("__profile_type__", OFF_CPU),
            ("process_executable_name", "nginx"),
            ("service_name", "unknown_service:nginx"),
        ])
    );
    let s = &batch.series[0].samples;
    assert_eq!(
        s.iter()
            .map(|x| (x.timestamp_ms, x.value))
            .collect::<Vec<_>>(),
        [(T0_MS + 5, 100), (T0_MS + 9, 200)]
    );
    // No lines: one unsymbolized frame with its address, no mapping.
    assert_eq!(frames(&batch, 0), ["0xbeef"]);
    assert_eq!(batch.symbols.locations[0].mapping, None);
}

#[test]
fn other_sample_types_keep_their_names_and_profile_time_falls_back() {
    let mut d = Dict::new();
    let loc = d.location(&["alloc"], 0, 0);
    let stack = d.stack(&[loc]);
    let profile = Profile {
        sample_type: d.vt("alloc_space", "bytes"),
        period_type: d.vt("space", "bytes"),
        period: 512 * 1024,
        samples: vec![OtlpSample {
            stack_index: stack,
            values: vec![4096],
            ..Default::default()
        }],
        ..Default::default()
    };
    let svc = vec![kv("service.name", string_value("api"))];
    let batch = decode(&request(svc, vec![], vec![profile], d)).unwrap();
    assert_eq!(
        batch.series[0].labels.get(PROFILE_TYPE_LABEL),
        Some("memory:alloc_space:bytes:space:bytes")
    );
    assert_eq!(batch.series[0].labels.get(NAME_LABEL), Some("memory"));
    // No profile time: the receive time given to the decoder (7 ms).
    assert_eq!(
        batch.series[0].samples,
        [profiledb_model::Sample {
            timestamp_ms: 7,
            stack: 0,
            value: 4096
        }]
    );
}

#[test]
fn binary_gzip_and_json_bodies_decode_alike() {
    let req = cpu_request();
    let expected = decode(&req).unwrap();
    let bin = req.encode_to_vec();
    let limits = Limits::default();
    let via = |body: &[u8], enc| decode_otlp(body, enc, TenantId::default(), 7, &limits).unwrap();
    assert_eq!(via(&bin, PushEncoding::Proto), expected);
    assert_eq!(via(&gzipped(&bin), PushEncoding::Proto), expected);
    let pool = prost_reflect::DescriptorPool::decode(profiledb_proto::DESCRIPTORS).unwrap();
    let desc = pool
        .get_message_by_name(
            "opentelemetry.proto.collector.profiles.v1development.ExportProfilesServiceRequest",
        )
        .unwrap();
    let dm = prost_reflect::DynamicMessage::decode(desc, bin.as_slice()).unwrap();
    let json = serde_json::to_vec(&dm).unwrap();
    assert!(
        String::from_utf8_lossy(&json).contains("\"timeUnixNano\":\"1700000000000000000\""),
        "64-bit integers as strings, camelCase names"
    );
    assert_eq!(via(&json, PushEncoding::Json), expected);
}

#[test]
fn a_request_without_profiles_is_empty_and_needs_no_dictionary() {
    let req = ExportProfilesServiceRequest::default();
    assert_eq!(decode(&req).unwrap().series.len(), 0);
    let body = decode_otlp(
        b"",
        PushEncoding::Proto,
        TenantId::default(),
        0,
        &Limits::default(),
    );
    assert_eq!(body.unwrap().sample_count(), 0);
}

fn otlp_err(req: &ExportProfilesServiceRequest) -> OtlpError {
    match decode(req) {
        Err(IngestError::Otlp(e)) => e,
        other => panic!("expected an OTLP error, got {other:?}"),
    }
}

#[test]
fn bad_indices_and_shapes_are_typed_errors() {
    let mut req = cpu_request();
    req.dictionary = None;
    assert_eq!(otlp_err(&req), OtlpError::MissingDictionary);

    let mut req = cpu_request();
    req.resource_profiles[0].scope_profiles[0].profiles[0].samples[1].stack_index = 9;
    let e = otlp_err(&req);
    assert_eq!(
        e,
        OtlpError::IndexOutOfRange {
            table: "stack_table",
            index: 9,
            len: 2,
            referrer: "resource_profiles[0].scope_profiles[0].profiles[0].samples[1].stack_index"
                .into(),
        }
    );
    assert_eq!(
        IngestError::Otlp(e).to_string(),
        "invalid OTLP profiles request: resource_profiles[0].scope_profiles[0].profiles[0]\
         .samples[1].stack_index refers to stack_table[9] but the table has 2 entries"
    );

    let mut req = cpu_request();
    req.dictionary.as_mut().unwrap().function_table[1].name_strindex = -1;
    assert!(matches!(
        otlp_err(&req),
        OtlpError::IndexOutOfRange {
            table: "string_table",
            index: -1,
            ..
        }
    ));

    let mut req = cpu_request();
    req.dictionary.as_mut().unwrap().location_table[1].mapping_index = 5;
    assert!(matches!(
        otlp_err(&req),
        OtlpError::IndexOutOfRange {
            table: "mapping_table",
            index: 5,
            ..
        }
    ));

    let mut req = cpu_request();
    let sample = &mut req.resource_profiles[0].scope_profiles[0].profiles[0].samples[0];
    sample.values = vec![1, 2, 3];
    assert!(matches!(
        otlp_err(&req),
        OtlpError::SampleShape {
            values: 3,
            timestamps: 2,
            ..
        }
    ));

    let mut req = cpu_request();
    req.resource_profiles[0].scope_profiles[0].profiles[0].samples[1].values = vec![i64::MAX];
    assert!(matches!(
        otlp_err(&req),
        OtlpError::ValueOverflow {
            value: i64::MAX,
            scale: PERIOD,
            ..
        }
    ));

    let mut req = cpu_request();
    req.resource_profiles[0].scope_profiles[0].profiles[0].sample_type = None;
    assert!(matches!(
        otlp_err(&req),
        OtlpError::MissingSampleType { .. }
    ));
}

#[test]
fn limits_bound_samples_and_stack_depth() {
    let req = cpu_request();
    let limits = Limits {
        max_samples_per_profile: 2,
        ..Limits::default()
    };
    let err = otlp_to_batch(&req, TenantId::default(), 0, &limits).unwrap_err();
    assert!(
        matches!(
            err,
            IngestError::TooLarge {
                limit: "max_samples_per_profile",
                ..
            }
        ),
        "{err}"
    );
    let limits = Limits {
        max_stack_depth: 2,
        ..Limits::default()
    };
    let err = otlp_to_batch(&req, TenantId::default(), 0, &limits).unwrap_err();
    assert!(
        matches!(
            err,
            IngestError::LimitExceeded {
                limit: "max_stack_depth",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn malformed_protobuf_is_a_protobuf_error() {
    let err = decode_otlp(
        &[0x0a, 0xff],
        PushEncoding::Proto,
        TenantId::default(),
        0,
        &Limits::default(),
    )
    .unwrap_err();
    assert!(matches!(err, IngestError::Protobuf { .. }), "{err}");
    assert_eq!(err.http_status(), 400);
}

fn gzipped(data: &[u8]) -> Vec<u8> {
    profiledb_proto::gzip::gzip(data, profiledb_proto::gzip::Compression::fast()).unwrap()
}
