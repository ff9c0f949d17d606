//! Recordings built here by a tiny JFR writer, decoded with exact expectations,
//! plus corrupt and hostile variants that must fail cleanly.

use profiledb_model::{Batch, Labels, SERVICE_NAME_LABEL};

use super::*;

mod hostile;

/// Type ids of the writer's metadata.
const LONG: u64 = 1;
const INT: u64 = 2;
const BOOLEAN: u64 = 3;
const STRING: u64 = 4;
const CLASS: u64 = 10;
const SYMBOL: u64 = 11;
const METHOD: u64 = 12;
const FRAME: u64 = 13;
const TRACE: u64 = 14;
const STATE: u64 = 15;
const CHUNK_HEADER: u64 = 16;
const EXECUTION: u64 = 20;
const IN_TLAB: u64 = 21;
const OUTSIDE_TLAB: u64 = 22;
const MONITOR: u64 = 23;
const PARK: u64 = 24;
const LIVE: u64 = 25;
const SETTING: u64 = 26;

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn string(out: &mut Vec<u8>, s: &str) {
    out.push(3);
    varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// An event: its size as a 4-byte padded varint (counting itself), then `body`.
fn event(body: &[u8]) -> Vec<u8> {
    let size = body.len() as u64 + 4;
    let mut out = vec![
        (size as u8 & 0x7f) | 0x80,
        ((size >> 7) as u8 & 0x7f) | 0x80,
        ((size >> 14) as u8 & 0x7f) | 0x80,
        (size >> 21) as u8 & 0x7f,
    ];
    out.extend_from_slice(body);
    out
}

/// (id, name, fields as (name, type, constant pool, array)).
type ClassDef = (u64, &'static str, Vec<(&'static str, u64, bool, bool)>);

fn classes() -> Vec<ClassDef> {
    let ev = |extra: Vec<(&'static str, u64, bool, bool)>| {
        let mut f = vec![("startTime", LONG, false, false)];
        f.extend(extra);
        f
    };
    vec![
        (LONG, "long", vec![]),
        (INT, "int", vec![]),
        (BOOLEAN, "boolean", vec![]),
        (STRING, "java.lang.String", vec![]),
        (
            CLASS,
            "java.lang.Class",
            vec![("name", SYMBOL, true, false)],
        ),
        (
            SYMBOL,
            "jdk.types.Symbol",
            vec![("string", STRING, false, false)],
        ),
        (
            METHOD,
            "jdk.types.Method",
            vec![("type", CLASS, true, false), ("name", SYMBOL, true, false)],
        ),
        (
            FRAME,
            "jdk.types.StackFrame",
            vec![
                ("method", METHOD, true, false),
                ("lineNumber", INT, false, false),
            ],
        ),
        (
            TRACE,
            "jdk.types.StackTrace",
            vec![
                ("truncated", BOOLEAN, false, false),
                ("frames", FRAME, false, true),
            ],
        ),
        (
            STATE,
            "jdk.types.ThreadState",
            vec![("name", STRING, false, false)],
        ),
        (
            CHUNK_HEADER,
            "jdk.types.ChunkHeader",
            vec![("payload", LONG, false, true)],
        ),
        (
            EXECUTION,
            "jdk.ExecutionSample",
            ev(vec![
                ("stackTrace", TRACE, true, false),
                ("state", STATE, true, false),
                ("contextId", LONG, false, false),
            ]),
        ),
        (
            IN_TLAB,
            "jdk.ObjectAllocationInNewTLAB",
            ev(vec![
                ("stackTrace", TRACE, true, false),
                ("allocationSize", LONG, false, false),
                ("tlabSize", LONG, false, false),
                ("contextId", LONG, false, false),
            ]),
        ),
        (
            OUTSIDE_TLAB,
            "jdk.ObjectAllocationOutsideTLAB",
            ev(vec![
                ("stackTrace", TRACE, true, false),
                ("allocationSize", LONG, false, false),
            ]),
        ),
        (
            MONITOR,
            "jdk.JavaMonitorEnter",
            ev(vec![
                ("duration", LONG, false, false),
                ("stackTrace", TRACE, true, false),
            ]),
        ),
        (
            PARK,
            "jdk.ThreadPark",
            ev(vec![
                ("duration", LONG, false, false),
                ("stackTrace", TRACE, true, false),
            ]),
        ),
        (
            LIVE,
            "profiler.LiveObject",
            ev(vec![("stackTrace", TRACE, true, false)]),
        ),
        (
            SETTING,
            "jdk.ActiveSetting",
            ev(vec![
                ("id", LONG, false, false),
                ("name", STRING, false, false),
                ("value", STRING, false, false),
            ]),
        ),
    ]
}

fn metadata_event() -> Vec<u8> {
    let mut strings: Vec<String> = Vec::new();
    let mut idx = |s: &str| -> u64 {
        match strings.iter().position(|x| x == s) {
            Some(i) => i as u64,
            None => {
                strings.push(s.to_string());
                strings.len() as u64 - 1
            }
        }
    };
    // Elements as (name, attributes, children), written depth first.
    let mut tree = Vec::new();
    let mut element = |out: &mut Vec<u8>, name: &str, attrs: &[(&str, String)], children: usize| {
        varint(out, idx(name));
        varint(out, attrs.len() as u64);
        for (k, v) in attrs {
            varint(out, idx(k));
            varint(out, idx(v));
        }
        varint(out, children as u64);
    };
    let defs = classes();
    element(&mut tree, "root", &[], 2);
    element(&mut tree, "metadata", &[], defs.len());
    for (id, name, fields) in &defs {
        element(
            &mut tree,
            "class",
            &[("id", id.to_string()), ("name", name.to_string())],
            fields.len(),
        );
        for (fname, ty, cp, array) in fields {
            let mut attrs = vec![("name", fname.to_string()), ("class", ty.to_string())];
            if *cp {
                attrs.push(("constantPool", "true".to_string()));
            }
            if *array {
                attrs.push(("dimension", "1".to_string()));
            }
            element(&mut tree, "field", &attrs, 0);
        }
    }
    element(&mut tree, "region", &[], 0);
    let mut body = Vec::new();
    for v in [0, 0, 0, 1] {
        varint(&mut body, v); // type 0, start, duration, metadata id
    }
    varint(&mut body, strings.len() as u64);
    for s in &strings {
        string(&mut body, s);
    }
    body.extend(tree);
    event(&body)
}

/// Stack trace 1: `Main.main` → `Main.work` (leaf); 2: `Main.main` → `Main.sleep`.
fn checkpoint_event() -> Vec<u8> {
    let mut b = Vec::new();
    for v in [1, 0, 0, 0] {
        varint(&mut b, v); // type 1, start, duration, delta 0 (the only checkpoint)
    }
    b.push(0);
    varint(&mut b, 7); // pools
                       // The JDK's raw copy of the chunk header, which is not field-encoded.
    varint(&mut b, CHUNK_HEADER);
    varint(&mut b, 1);
    varint(&mut b, 1);
    b.extend([0xff; chunk::HEADER_SIZE]);
    varint(&mut b, SYMBOL);
    varint(&mut b, 4);
    for (k, s) in [
        (1, "com/example/Main"),
        (2, "main"),
        (3, "work"),
        (4, "sleep"),
    ] {
        varint(&mut b, k);
        string(&mut b, s);
    }
    varint(&mut b, CLASS);
    varint(&mut b, 1);
    varint(&mut b, 1);
    varint(&mut b, 1); // name → symbol 1
    varint(&mut b, METHOD);
    varint(&mut b, 3);
    for (k, name) in [(1, 2), (2, 3), (3, 4)] {
        varint(&mut b, k);
        varint(&mut b, 1); // class 1
        varint(&mut b, name);
    }
    varint(&mut b, TRACE);
    varint(&mut b, 2);
    for (k, leaf) in [(1, 2), (2, 3)] {
        varint(&mut b, k);
        b.push(0); // not truncated
        varint(&mut b, 2);
        for (method, line) in [(leaf, 20), (1, 10)] {
            varint(&mut b, method);
            varint(&mut b, line);
        }
    }
    varint(&mut b, STATE);
    varint(&mut b, 2);
    for (k, s) in [(1, "STATE_RUNNABLE"), (2, "STATE_SLEEPING")] {
        varint(&mut b, k);
        string(&mut b, s);
    }
    varint(&mut b, STRING);
    varint(&mut b, 0);
    event(&b)
}

/// One event of type `ty` with integer fields `values` after `startTime` (strings
/// are written by [`setting`]).
fn ev(ty: u64, values: &[u64]) -> Vec<u8> {
    ev_at(ty, 1_000, values)
}

/// [`ev`] at `ticks` (ns after the chunk's start: the header's tick rate is 1e9).
fn ev_at(ty: u64, ticks: u64, values: &[u64]) -> Vec<u8> {
    let mut b = Vec::new();
    varint(&mut b, ty);
    varint(&mut b, ticks); // startTime
    for &v in values {
        varint(&mut b, v);
    }
    event(&b)
}

/// The chunk's start (header) and the time of events at 1,000 ticks, in ms.
const CHUNK_START_MS: i64 = 1_700_000_000_000;

fn setting(name: &str, value: &str) -> Vec<u8> {
    setting_of(0, name, value)
}

/// A `jdk.ActiveSetting` of the event type `id`.
fn setting_of(id: u64, name: &str, value: &str) -> Vec<u8> {
    let mut b = Vec::new();
    varint(&mut b, SETTING);
    varint(&mut b, 1_000);
    varint(&mut b, id);
    string(&mut b, name);
    string(&mut b, value);
    event(&b)
}

/// A one-chunk recording: header, `events`, metadata, constant pool.
fn recording(events: &[Vec<u8>]) -> Vec<u8> {
    let mut body: Vec<u8> = events.concat();
    let meta_at = chunk::HEADER_SIZE + body.len();
    body.extend(metadata_event());
    let cp_at = chunk::HEADER_SIZE + body.len();
    body.extend(checkpoint_event());
    let size = chunk::HEADER_SIZE + body.len();
    let mut out = b"FLR\0".to_vec();
    out.extend(2u16.to_be_bytes());
    out.extend(0u16.to_be_bytes());
    for v in [
        size as u64,
        cp_at as u64,
        meta_at as u64,
        1_700_000_000_000_000_000,
        0,
        0,
        1_000_000_000,
    ] {
        out.extend(v.to_be_bytes());
    }
    out.extend(1u32.to_be_bytes()); // compressed integers
    out.extend(body);
    out
}

fn options() -> JfrOptions {
    JfrOptions {
        base_labels: Labels::new([(SERVICE_NAME_LABEL, "app")]),
        time_ms: 42,
        sample_rate: Some(100),
        ..JfrOptions::default()
    }
}

/// (profile type, labels other than the fixed ones, root-first function names,
/// value) for every sample.
fn rows(b: &Batch) -> Vec<(String, String, Vec<String>, i64)> {
    let mut out = Vec::new();
    for s in &b.series {
        let extra: Vec<String> = s
            .labels
            .iter()
            .filter(|(k, _)| !k.starts_with("__") && *k != SERVICE_NAME_LABEL)
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        for x in &s.samples {
            let names = b.frame_names(x.stack).unwrap();
            out.push((
                s.labels.profile_type().unwrap().to_string(),
                extra.join(","),
                names,
                x.value,
            ));
            assert_eq!(x.timestamp_ms, CHUNK_START_MS);
        }
    }
    out.sort();
    out
}

fn stack(leaf: &str) -> Vec<String> {
    vec![
        "com/example/Main.main".to_string(),
        format!("com/example/Main.{leaf}"),
    ]
}

#[test]
fn cpu_recording_counts_running_samples_only() {
    let data = recording(&[
        setting("event", "cpu"),
        ev(EXECUTION, &[1, 1, 0]),
        ev(EXECUTION, &[1, 1, 0]),
        ev(EXECUTION, &[2, 2, 0]), // sleeping: no CPU
        ev(EXECUTION, &[9, 1, 0]), // missing stack trace: dropped
    ]);
    let b = decode_jfr(&data, None, &options()).unwrap();
    b.validate().unwrap();
    let cpu = "process_cpu:cpu:nanoseconds:cpu:nanoseconds".to_string();
    assert_eq!(
        rows(&b),
        vec![(cpu, "jfr_event=cpu".into(), stack("work"), 20_000_000)]
    );
    let loc = b.symbols.locations[b.stacks.get(0).unwrap()[1] as usize];
    assert_eq!(loc.line, 20);
}

#[test]
fn the_recordings_period_weighs_samples_when_the_upload_names_none() {
    // The JDK's recorder with its default settings: every 20 ms, stated in the
    // chunk after some of its samples (the JDK flushes settings late).
    let data = recording(&[
        ev(EXECUTION, &[1, 1, 0]),
        setting_of(IN_TLAB, "period", "5 ms"), // another event's: ignored
        setting_of(EXECUTION, "period", "20 ms"),
        ev(EXECUTION, &[1, 1, 0]),
    ]);
    let cpu = "process_cpu:cpu:nanoseconds:cpu:nanoseconds".to_string();
    let mut opts = options();
    opts.sample_rate = None;
    let b = decode_jfr(&data, None, &opts).unwrap();
    assert_eq!(
        rows(&b),
        vec![(cpu.clone(), String::new(), stack("work"), 40_000_000)]
    );
    // The upload's sampleRate wins.
    let b = decode_jfr(&data, None, &options()).unwrap();
    assert_eq!(
        rows(&b),
        vec![(cpu.clone(), String::new(), stack("work"), 20_000_000)]
    );
    // Neither: Pyroscope's 100 Hz.
    let data = recording(&[ev(EXECUTION, &[1, 1, 0])]);
    let b = decode_jfr(&data, None, &opts).unwrap();
    assert_eq!(
        rows(&b),
        vec![(cpu, String::new(), stack("work"), 10_000_000)]
    );
    for (text, ns) in [
        ("20 ms", Some(20_000_000)),
        ("1 s", Some(1_000_000_000)),
        ("off", None),
    ] {
        assert_eq!(super::convert::period_ns_of(text), ns, "{text}");
    }
}

#[test]
fn samples_are_stored_at_their_events_times() {
    let data = recording(&[
        ev_at(EXECUTION, 1_000, &[1, 1, 0]),
        ev_at(EXECUTION, 400_000_000, &[1, 1, 0]),
        ev_at(EXECUTION, 2_500_000_000, &[1, 1, 0]),
    ]);
    let b = decode_jfr(&data, None, &options()).unwrap();
    let times: Vec<(i64, i64)> = b.series[0]
        .samples
        .iter()
        .map(|s| (s.timestamp_ms, s.value))
        .collect();
    // To the second: the first two share one.
    assert_eq!(
        times,
        [
            (CHUNK_START_MS, 20_000_000),
            (CHUNK_START_MS + 2_000, 10_000_000)
        ]
    );
}

#[test]
fn wall_recording_adds_wall_time_for_every_sample() {
    let data = recording(&[
        setting("event", "wall"),
        ev(EXECUTION, &[1, 1, 0]),
        ev(EXECUTION, &[2, 2, 0]),
        ev(EXECUTION, &[2, 2, 0]),
    ]);
    let mut opts = options();
    opts.sample_rate = Some(50);
    let b = decode_jfr(&gzip(&data), None, &opts).unwrap();
    let (cpu, wall) = (
        "process_cpu:cpu:nanoseconds:cpu:nanoseconds".to_string(),
        "wall:wall:nanoseconds:wall:nanoseconds".to_string(),
    );
    let ev = "jfr_event=wall".to_string();
    assert_eq!(
        rows(&b),
        vec![
            (cpu, ev.clone(), stack("work"), 20_000_000),
            (wall.clone(), ev.clone(), stack("sleep"), 40_000_000),
            (wall, ev, stack("work"), 20_000_000),
        ]
    );
}

#[test]
fn allocation_lock_and_live_events() {
    let data = recording(&[
        ev(IN_TLAB, &[1, 24, 4096, 0]),
        ev(IN_TLAB, &[1, 16, 8192, 0]),
        ev(OUTSIDE_TLAB, &[2, 100_000]),
        ev(MONITOR, &[1_500, 1]),
        ev(PARK, &[700, 2]),
        ev(PARK, &[300, 2]),
        ev(LIVE, &[1]),
    ]);
    let b = decode_jfr(&data, None, &options()).unwrap();
    let got: Vec<(String, i64)> = rows(&b).into_iter().map(|r| (r.0, r.3)).collect();
    let want = [
        ("block:contentions:count:block:count", 2),
        ("block:delay:nanoseconds:block:count", 1_000),
        ("memory:alloc_in_new_tlab_bytes:bytes:space:bytes", 12_288),
        ("memory:alloc_in_new_tlab_objects:count:space:bytes", 2),
        ("memory:alloc_outside_tlab_bytes:bytes:space:bytes", 100_000),
        ("memory:alloc_outside_tlab_objects:count:space:bytes", 1),
        ("memory:live:count:objects:count", 1),
        ("mutex:contentions:count:mutex:count", 1),
        ("mutex:delay:nanoseconds:mutex:count", 1_500),
    ];
    assert_eq!(got, want.map(|(t, v)| (t.to_string(), v)));
    let memory = b
        .series
        .iter()
        .find(|s| s.labels.get("__name__") == Some("memory"));
    assert!(memory.is_some());
}

fn snapshot() -> Vec<u8> {
    use prost::Message;
    let mut s = LabelsSnapshot::default();
    for (k, v) in [
        (1, "thread_name"),
        (2, "worker-1"),
        (3, "span_id"),
        (4, "abc"),
        (5, "__x"),
    ] {
        s.strings.insert(k, v.to_string());
    }
    s.contexts.insert(
        7,
        labels::Context {
            labels: [(1, 2), (3, 4), (5, 4)].into_iter().collect(),
        },
    );
    s.encode_to_vec()
}

#[test]
fn context_ids_pick_labels_from_the_snapshot() {
    let data = recording(&[
        ev(EXECUTION, &[1, 1, 7]),
        ev(EXECUTION, &[1, 1, 0]),
        ev(EXECUTION, &[1, 1, 8]), // unknown context: no labels
    ]);
    let b = decode_jfr(&data, Some(&gzip(&snapshot())), &options()).unwrap();
    let cpu = "process_cpu:cpu:nanoseconds:cpu:nanoseconds".to_string();
    assert_eq!(
        rows(&b),
        vec![
            (cpu.clone(), String::new(), stack("work"), 20_000_000),
            (
                cpu,
                "thread_name=worker-1".into(),
                stack("work"),
                10_000_000
            ),
        ]
    );
    let err = decode_jfr(&data, Some(b"\xff\xff"), &options()).unwrap_err();
    assert!(
        matches!(err, IngestError::InvalidJfr(JfrError::Labels(_))),
        "{err:?}"
    );
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}
