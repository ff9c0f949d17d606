use std::collections::BTreeMap;
use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
use profiledb_model::SERVICE_NAME_LABEL;
use proptest::prelude::*;

use super::*;
use crate::proto::pprof::{Function as PFunction, Label, Line, Location as PLocation};
use crate::proto::pprof::{Mapping as PMapping, Sample as PSample, ValueType};

/// Builds profiles with a string table managed for the test.
#[derive(Default)]
struct Builder {
    p: Profile,
}

impl Builder {
    fn new() -> Self {
        let mut b = Builder::default();
        b.p.string_table.push(Bytes::new());
        b
    }
    fn s(&mut self, s: &str) -> i64 {
        if let Some(i) = self.p.string_table.iter().position(|x| x == s.as_bytes()) {
            return i as i64;
        }
        self.p.string_table.push(Bytes::from(s.to_string()));
        (self.p.string_table.len() - 1) as i64
    }
    fn sample_type(mut self, t: &str, u: &str) -> Self {
        let vt = ValueType {
            r#type: self.s(t),
            unit: self.s(u),
        };
        self.p.sample_type.push(vt);
        self
    }
    fn period(mut self, t: &str, u: &str, period: i64) -> Self {
        self.p.period_type = Some(ValueType {
            r#type: self.s(t),
            unit: self.s(u),
        });
        self.p.period = period;
        self
    }
    fn function(mut self, id: u64, name: &str, file: &str) -> Self {
        let f = PFunction {
            id,
            name: self.s(name),
            system_name: 0,
            filename: self.s(file),
            start_line: 0,
        };
        self.p.function.push(f);
        self
    }
    fn mapping(mut self, id: u64, file: &str, build_id: &str) -> Self {
        let m = PMapping {
            id,
            filename: self.s(file),
            build_id: self.s(build_id),
            memory_start: 0x40_0000 * id,
            memory_limit: 0x48_0000 * id,
            file_offset: 0x1000,
            ..Default::default()
        };
        self.p.mapping.push(m);
        self
    }
    /// `lines`: (function id, line), innermost first.
    fn location(mut self, id: u64, mapping_id: u64, address: u64, lines: &[(u64, i64)]) -> Self {
        self.p.location.push(PLocation {
            id,
            mapping_id,
            address,
            line: lines
                .iter()
                .map(|&(function_id, line)| Line {
                    function_id,
                    line,
                    column: 0,
                })
                .collect(),
            is_folded: false,
        });
        self
    }
    fn sample(self, leaf_first: &[u64], values: &[i64]) -> Self {
        self.labeled_sample(leaf_first, values, &[])
    }
    fn labeled_sample(
        mut self,
        leaf_first: &[u64],
        values: &[i64],
        labels: &[(&str, &str)],
    ) -> Self {
        let label = labels
            .iter()
            .map(|(k, v)| Label {
                key: self.s(k),
                str: self.s(v),
                num: 0,
                num_unit: 0,
            })
            .collect();
        self.p.sample.push(PSample {
            location_id: leaf_first.to_vec(),
            value: values.to_vec(),
            label,
        });
        self
    }
    /// Adds a numeric label to sample `i` (Go heap profiles' `bytes`).
    fn num_label(mut self, i: usize, key: &str, num: i64) -> Self {
        let key = self.s(key);
        self.p.sample[i].label.push(Label {
            key,
            str: 0,
            num,
            num_unit: 0,
        });
        self
    }
    fn time_nanos(mut self, t: i64) -> Self {
        self.p.time_nanos = t;
        self
    }
    fn bytes(&self) -> Vec<u8> {
        self.p.encode_to_vec()
    }
}

const T0_NANOS: i64 = 1_700_000_000_123_456_789;
const T0_MS: i64 = 1_700_000_000_123;
const FALLBACK_MS: i64 = 1_600_000_000_000;

fn opts() -> PprofOptions {
    PprofOptions {
        base_labels: Labels::new([(SERVICE_NAME_LABEL, "svc"), ("env", "prod")]),
        fallback_time_ms: FALLBACK_MS,
        ..PprofOptions::default()
    }
}

fn decode(b: &Builder) -> Result<Batch, IngestError> {
    decode_pprof(&b.bytes(), &opts())
}

/// A Go-CPU-like profile: main → foo → bar where bar is inlined into foo.
fn go_cpu() -> Builder {
    Builder::new()
        .sample_type("samples", "count")
        .sample_type("cpu", "nanoseconds")
        .period("cpu", "nanoseconds", 10_000_000)
        .time_nanos(T0_NANOS)
        .mapping(1, "/bin/app", "abc123")
        .function(1, "main", "main.go")
        .function(2, "foo", "foo.go")
        .function(3, "bar", "bar.go")
        .location(1, 1, 0x1000, &[(1, 10)])
        .location(2, 1, 0x2000, &[(3, 5), (2, 20)])
        .sample(&[2, 1], &[2, 20_000_000])
        .sample(&[1], &[0, 0])
        .sample(&[1], &[1, 0])
}

/// Frame names of a stack, root first.
fn names(b: &Batch, stack: u32) -> Vec<String> {
    b.frame_names(stack).unwrap()
}

/// profile type id → [(root-first frames, value, timestamp)].
fn by_type(b: &Batch) -> BTreeMap<String, Vec<(Vec<String>, i64, i64)>> {
    assert_eq!(b.validate(), Ok(()));
    let mut out: BTreeMap<String, Vec<_>> = BTreeMap::new();
    for s in &b.series {
        let pt = s.labels.profile_type().unwrap().to_string();
        for x in &s.samples {
            out.entry(pt.clone())
                .or_default()
                .push((names(b, x.stack), x.value, x.timestamp_ms));
        }
    }
    out
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn go_cpu_profile_with_inlined_lines() {
    let b = decode(&go_cpu()).unwrap();
    let got = by_type(&b);
    assert_eq!(
        got,
        BTreeMap::from([
            (
                "process_cpu:cpu:nanoseconds:cpu:nanoseconds".to_string(),
                vec![(strs(&["main", "foo", "bar"]), 20_000_000, T0_MS)]
            ),
            (
                "process_cpu:samples:count:cpu:nanoseconds".to_string(),
                vec![
                    (strs(&["main", "foo", "bar"]), 2, T0_MS),
                    (strs(&["main"]), 1, T0_MS)
                ]
            ),
        ])
    );
    // The all-zero sample added no stack.
    assert_eq!(b.stacks.len(), 2);
    // Location 2 expanded into two frames sharing address and mapping, innermost
    // (bar) at the leaf.
    let stack = b.stacks.get(0).unwrap();
    let frames: Vec<_> = stack
        .iter()
        .map(|&l| b.symbols.locations[l as usize])
        .collect();
    assert_eq!(
        frames
            .iter()
            .map(|l| (l.address, l.line, l.mapping))
            .collect::<Vec<_>>(),
        vec![
            (0x1000, 10, Some(0)),
            (0x2000, 20, Some(0)),
            (0x2000, 5, Some(0))
        ]
    );
    assert_eq!(b.symbols.functions[2].file, "bar.go");
    assert_eq!(
        b.symbols.mappings,
        vec![Mapping {
            file: "/bin/app".into(),
            build_id: "abc123".into(),
            start: 0x40_0000,
            limit: 0x48_0000,
            offset: 0x1000,
        }]
    );
    for s in &b.series {
        assert_eq!(s.labels.get(SERVICE_NAME_LABEL), Some("svc"));
        assert_eq!(s.labels.get("env"), Some("prod"));
        assert_eq!(s.labels.get(NAME_LABEL), Some("process_cpu"));
        assert_eq!(s.labels.len(), 4);
    }
}

#[test]
fn function_names_share_the_profile_bytes_and_let_go_of_them_with_the_batch() {
    let body = Bytes::from(go_cpu().bytes());
    let mut out = BatchBuilder::new(TenantId::default());
    decode_pprof_into(&body, &opts(), &mut out).unwrap();
    let batch = out.finish();
    let inside = body.as_ptr() as usize..body.as_ptr() as usize + body.len();
    let names: Vec<&Name> = batch
        .symbols
        .functions
        .iter()
        .flat_map(|f| [&f.name, &f.file])
        .collect();
    assert_eq!(
        names.iter().map(|n| &***n).collect::<Vec<_>>(),
        ["main", "main.go", "foo", "foo.go", "bar", "bar.go"]
    );
    for n in &names {
        assert!(inside.contains(&(n.as_ptr() as usize)), "{n:?} was copied");
    }
    assert!(!body.is_unique());
    drop(batch);
    assert!(body.is_unique(), "something kept a slice of the profile");
}

#[test]
fn a_gzip_framed_profiles_names_are_their_own_and_right() {
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&go_cpu().bytes()).unwrap();
    let body = Bytes::from(gz.finish().unwrap());
    let mut out = BatchBuilder::new(TenantId::default());
    decode_pprof_into(&body, &opts(), &mut out).unwrap();
    let batch = out.finish();
    assert!(
        body.is_unique(),
        "names point into the inflated profile, not the body"
    );
    let names: Vec<&str> = batch.symbols.functions.iter().map(|f| &*f.name).collect();
    assert_eq!(names, ["main", "foo", "bar"]);
}

#[test]
fn tables_kept_from_a_larger_profile_leave_nothing_in_the_next() {
    // A decoder thread keeps its last profile's tables, emptied (`wire::Spare`):
    // a small profile decoded after a large one must come out as on its own.
    let mut large = Builder::new()
        .sample_type("samples", "count")
        .period("cpu", "nanoseconds", 10_000_000)
        .mapping(1, "/bin/big", "");
    for i in 1..=300u64 {
        large = large.function(i, &format!("f{i}"), "big.go").location(
            i,
            1,
            0x1000 * i,
            &[(i, i as i64)],
        );
    }
    for i in 1..=300u64 {
        large = large.sample(&[i, (i % 7) + 1], &[i as i64]);
    }
    let small = go_cpu();
    let alone = profile_to_batch(&Profile::decode(&*small.bytes()).unwrap(), &opts()).unwrap();
    decode(&large).unwrap();
    assert_eq!(decode(&small).unwrap(), alone);
}

#[test]
fn gzip_framed_profile_decodes_the_same() {
    let plain = go_cpu().bytes();
    let mut e = GzEncoder::new(Vec::new(), Compression::default());
    e.write_all(&plain).unwrap();
    let gz = e.finish().unwrap();
    assert_eq!(
        decode_pprof(&gz, &opts()).unwrap(),
        decode_pprof(&plain, &opts()).unwrap()
    );
}

#[test]
fn unsymbolized_frames_keep_address_and_mapping() {
    let p = Builder::new()
        .sample_type("cpu", "nanoseconds")
        .period("cpu", "nanoseconds", 1)
        .mapping(7, "/lib/libc.so.6", "deadbeef")
        .mapping(9, "[vdso]", "")
        .function(1, "main", "")
        .location(3, 9, 0xaaa, &[])
        .location(4, 7, 0xbbb, &[])
        .location(5, 0, 0xccc, &[(1, 0)])
        .sample(&[3, 4, 5], &[7]);
    let b = decode(&p).unwrap();
    let got = by_type(&b);
    assert_eq!(
        got["process_cpu:cpu:nanoseconds:cpu:nanoseconds"],
        vec![(strs(&["main", "0xbbb", "0xaaa"]), 7, FALLBACK_MS)]
    );
    let locs = &b.symbols.locations;
    assert_eq!(
        locs[0],
        Location {
            function: None,
            mapping: Some(1),
            address: 0xaaa,
            line: 0
        }
    );
    assert_eq!(
        b.symbols.mappings[locs[1].mapping.unwrap() as usize].build_id,
        "deadbeef"
    );
    assert_eq!(locs[2].mapping, None);
    assert_eq!(locs[2].function, Some(0));
}

#[test]
fn string_sample_labels_become_series_labels() {
    let p = Builder::new()
        .sample_type("cpu", "nanoseconds")
        .function(1, "f", "")
        .location(1, 0, 0, &[(1, 0)])
        .labeled_sample(&[1], &[1], &[("handler", "/a"), ("span_id", "123")])
        .labeled_sample(
            &[1],
            &[2],
            &[("handler", "/b"), ("trace_id", "x"), ("profile_id", "y")],
        )
        .labeled_sample(&[1], &[4], &[("handler", "/a"), ("env", "dev")])
        .labeled_sample(
            &[1],
            &[8],
            &[("__name__", "evil"), ("__profile_type__", "a:b:c:d:e")],
        )
        .sample(&[1], &[16])
        // A numeric label on the last sample is ignored.
        .num_label(4, "bytes", 512);
    let b = decode(&p).unwrap();
    assert_eq!(b.validate(), Ok(()));
    let mut got: Vec<(String, Vec<i64>)> = b
        .series
        .iter()
        .map(|s| {
            (
                s.labels.to_string(),
                s.samples.iter().map(|x| x.value).collect(),
            )
        })
        .collect();
    got.sort();
    let pt = "process_cpu:cpu:nanoseconds::";
    assert_eq!(
        got,
        vec![
            (
                format!(
                    r#"{{__name__="process_cpu", __profile_type__="{pt}", env="dev", handler="/a", service_name="svc"}}"#
                ),
                vec![4]
            ),
            (
                format!(
                    r#"{{__name__="process_cpu", __profile_type__="{pt}", env="prod", handler="/a", service_name="svc"}}"#
                ),
                vec![1]
            ),
            (
                format!(
                    r#"{{__name__="process_cpu", __profile_type__="{pt}", env="prod", handler="/b", service_name="svc"}}"#
                ),
                vec![2]
            ),
            (
                format!(
                    r#"{{__name__="process_cpu", __profile_type__="{pt}", env="prod", service_name="svc"}}"#
                ),
                // Dropped labels do not keep equal stacks apart.
                vec![24]
            ),
        ]
    );
}

#[test]
fn duplicate_strings_in_the_table_still_give_one_series() {
    let mut p = Builder::new()
        .sample_type("cpu", "nanoseconds")
        .function(1, "f", "")
        .location(1, 0, 0, &[(1, 0)])
        .labeled_sample(&[1], &[1], &[("k", "v")]);
    // A second copy of "v" at a different index.
    p.p.string_table.push(Bytes::from_static(b"v"));
    let dup = (p.p.string_table.len() - 1) as i64;
    let k = p.s("k");
    p.p.sample.push(PSample {
        location_id: vec![1],
        value: vec![2],
        label: vec![Label {
            key: k,
            str: dup,
            num: 0,
            num_unit: 0,
        }],
    });
    let b = decode(&p).unwrap();
    assert_eq!(b.series.len(), 1);
    assert_eq!(b.series[0].samples.len(), 2);
}

#[test]
fn invalid_sample_label_name_is_an_error() {
    let p = Builder::new()
        .sample_type("cpu", "nanoseconds")
        .function(1, "f", "")
        .location(1, 0, 0, &[(1, 0)])
        .labeled_sample(&[1], &[1], &[("thread name", "x")]);
    let err = decode(&p).unwrap_err();
    assert!(matches!(&err, IngestError::InvalidLabel { name, .. } if name == "thread name"));
}

#[test]
fn samples_count_with_a_cpu_period_also_yields_cpu_nanoseconds() {
    let p = Builder::new()
        .sample_type("samples", "count")
        .period("cpu", "nanoseconds", 10_000_000)
        .function(1, "f", "")
        .location(1, 0, 0, &[(1, 0)])
        .sample(&[1], &[3]);
    let got = by_type(&decode(&p).unwrap());
    assert_eq!(
        got.into_iter()
            .map(|(k, v)| (k, v[0].1))
            .collect::<Vec<_>>(),
        vec![
            (
                "process_cpu:cpu:nanoseconds:cpu:nanoseconds".to_string(),
                30_000_000
            ),
            ("process_cpu:samples:count:cpu:nanoseconds".to_string(), 3),
        ]
    );

    // pyroscope-rs style (Python, Ruby): empty period type, a period of 1e9 that is
    // no period; each sample weighs 1 s / sampleRate (100 Hz unless the upload
    // says), so it shows in the CPU view too.
    let p = Builder::new()
        .sample_type("samples", "count")
        .period("", "milliseconds", 1_000_000_000)
        .function(1, "f", "")
        .location(1, 0, 0, &[(1, 0)])
        .sample(&[1], &[3]);
    let got = by_type(&decode(&p).unwrap());
    assert_eq!(
        got.into_iter()
            .map(|(k, v)| (k, v[0].1))
            .collect::<Vec<_>>(),
        vec![
            (
                "process_cpu:cpu:nanoseconds:cpu:nanoseconds".to_string(),
                30_000_000
            ),
            ("process_cpu:samples:count::milliseconds".to_string(), 3)
        ]
    );
    let mut at_50hz = opts();
    at_50hz.sample_rate = Some(50);
    let got = by_type(&decode_pprof(&p.bytes(), &at_50hz).unwrap());
    assert_eq!(
        got["process_cpu:cpu:nanoseconds:cpu:nanoseconds"][0].1,
        60_000_000
    );

    // A `cpu` period in milliseconds is converted to nanoseconds.
    let p = Builder::new()
        .sample_type("samples", "count")
        .period("cpu", "milliseconds", 10)
        .function(1, "f", "")
        .location(1, 0, 0, &[(1, 0)])
        .sample(&[1], &[3]);
    let got = by_type(&decode(&p).unwrap());
    assert_eq!(
        got["process_cpu:cpu:nanoseconds:cpu:nanoseconds"][0].1,
        30_000_000
    );

    // Overflow is an error, not a silently clamped value.
    let p = Builder::new()
        .sample_type("samples", "count")
        .period("cpu", "seconds", i64::MAX / 1_000_000_000)
        .function(1, "f", "")
        .location(1, 0, 0, &[(1, 0)])
        .sample(&[1], &[2_000_000_000]);
    assert!(decode(&p).unwrap_err().to_string().contains("overflows"));

    // No period: nothing to convert with.
    let p = Builder::new()
        .sample_type("samples", "count")
        .function(1, "f", "")
        .location(1, 0, 0, &[(1, 0)])
        .sample(&[1], &[3]);
    let got = by_type(&decode(&p).unwrap());
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        ["process_cpu:samples:count::"]
    );

    // Wall profiles are not CPU.
    let p = Builder::new()
        .sample_type("samples", "count")
        .sample_type("wall", "microseconds")
        .period("wall", "microseconds", 10_000)
        .function(1, "f", "")
        .location(1, 0, 0, &[(1, 0)])
        .sample(&[1], &[3, 30_000]);
    let got = by_type(&decode(&p).unwrap());
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        [
            "wall:samples:count:wall:microseconds",
            "wall:wall:microseconds:wall:microseconds"
        ]
    );
}

#[test]
fn heap_profile_gets_memory_types_and_name_override_wins() {
    let p = Builder::new()
        .sample_type("alloc_objects", "count")
        .sample_type("alloc_space", "bytes")
        .sample_type("inuse_objects", "count")
        .sample_type("inuse_space", "bytes")
        .period("space", "bytes", 524_288)
        .function(1, "f", "")
        .location(1, 0, 0, &[(1, 0)])
        .sample(&[1], &[1, 2, 0, 4]);
    let got = by_type(&decode(&p).unwrap());
    assert_eq!(
        got.iter()
            .map(|(k, v)| (k.as_str(), v[0].1))
            .collect::<Vec<_>>(),
        vec![
            ("memory:alloc_objects:count:space:bytes", 1),
            ("memory:alloc_space:bytes:space:bytes", 2),
            ("memory:inuse_space:bytes:space:bytes", 4),
        ]
    );
    let mut o = opts();
    o.name = Some("custom".into());
    let b = decode_pprof(&p.bytes(), &o).unwrap();
    assert_eq!(
        b.series[0].labels.profile_type(),
        Some("custom:alloc_objects:count:space:bytes")
    );
    assert_eq!(b.series[0].labels.get(NAME_LABEL), Some("custom"));
}

#[test]
fn block_profile_recognised_via_sample_type_config() {
    let p = Builder::new()
        .sample_type("contentions", "count")
        .sample_type("delay", "nanoseconds")
        .period("contentions", "count", 1)
        .function(1, "f", "")
        .location(1, 0, 0, &[(1, 0)])
        .sample(&[1], &[1, 100]);
    let got = by_type(&decode(&p).unwrap());
    assert!(got.contains_key("mutex:delay:nanoseconds:contentions:count"));
    let mut o = opts();
    o.sample_type_config = Some(
        crate::profile_type::parse_sample_type_config(
            br#"{"contentions":{"display-name":"block_count"},"delay":{"display-name":"block_duration"}}"#,
        )
        .unwrap(),
    );
    let got = by_type(&decode_pprof(&p.bytes(), &o).unwrap());
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        [
            "block:contentions:count:contentions:count",
            "block:delay:nanoseconds:contentions:count"
        ]
    );
}

#[test]
fn time_nanos_zero_or_1970_falls_back() {
    let ts = |t: i64| {
        let p = go_cpu().time_nanos(t);
        decode(&p).unwrap().series[0].samples[0].timestamp_ms
    };
    assert_eq!(ts(0), FALLBACK_MS);
    // Old pyspy sent microseconds: a 1970 date.
    assert_eq!(ts(1_700_000_000_000_000 / 1000), FALLBACK_MS);
    assert_eq!(ts(-5), FALLBACK_MS);
    assert_eq!(ts(T0_NANOS), T0_MS);
}

mod errors;
mod props;
