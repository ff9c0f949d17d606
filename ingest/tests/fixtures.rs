//! Decodes every real pprof fixture and checks the batch against totals computed
//! independently from the raw prost `Profile`, and against the sample counts and
//! profile type ids that the fixtures' SOURCES.md (and Pyroscope's ingest tests)
//! state. Skips, with a message, when the fixtures directory is absent (fails
//! instead with `PROFILEDB_REQUIRE_EXTERNAL=1`: docs/testing.md).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use profiledb_ingest::proto::pprof::Profile;
use profiledb_ingest::{decode_pprof, PprofOptions};
use profiledb_model::{Batch, Labels, NAME_LABEL, SERVICE_NAME_LABEL};
use prost::Message;

#[path = "../../storage/tests/support/external.rs"]
mod external;

fn fixtures_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures");
    if dir.join("pprof").is_dir() {
        Some(dir)
    } else {
        external::missing(
            "the shared fixtures",
            format!("not found at {}", dir.display()),
        );
        None
    }
}

struct Expect {
    file: &'static str,
    /// Profile name part (what Pyroscope's `/ingest` infers).
    name: &'static str,
    /// Raw pprof sample count, where SOURCES.md states it.
    samples: Option<usize>,
    /// Every profile type id the batch must contain, and nothing else.
    types: &'static [&'static str],
    /// How `process_cpu:cpu:nanoseconds:cpu:nanoseconds` is derived from
    /// `samples:count`, if it is.
    derived_cpu: Derived,
}

#[derive(Clone, Copy, PartialEq)]
enum Derived {
    No,
    /// count × the profile's period.
    Period,
    /// count × these nanoseconds (pyroscope-rs: 1 s / sampleRate, 100 Hz by default).
    PerSample(i128),
}

const GO_HEAP: &[&str] = &[
    "memory:alloc_objects:count:space:bytes",
    "memory:alloc_space:bytes:space:bytes",
    "memory:inuse_objects:count:space:bytes",
    "memory:inuse_space:bytes:space:bytes",
];
const GO_CPU: &[&str] = &[
    "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
    "process_cpu:samples:count:cpu:nanoseconds",
];
const CPU_NS: &[&str] = &["process_cpu:cpu:nanoseconds:cpu:nanoseconds"];

const EXPECTED: &[Expect] = &[
    Expect {
        file: "pprof/1644509272337470000.pb.gz",
        name: "memory",
        samples: None,
        types: GO_HEAP,
        derived_cpu: Derived::No,
    },
    Expect {
        file: "pprof/1644509299337903000.pb.gz",
        name: "memory",
        samples: None,
        types: GO_HEAP,
        derived_cpu: Derived::No,
    },
    Expect {
        file: "pprof/alloc_objects.pb.gz",
        name: "memory",
        samples: Some(4661),
        types: GO_HEAP,
        derived_cpu: Derived::No,
    },
    Expect {
        file: "pprof/alloc_space_delta.pb.gz",
        name: "memory",
        samples: Some(4942),
        types: GO_HEAP,
        derived_cpu: Derived::No,
    },
    Expect {
        file: "pprof/labels.pb.gz",
        name: "process_cpu",
        samples: Some(121),
        types: GO_CPU,
        derived_cpu: Derived::No,
    },
    Expect {
        file: "pprof/large.cpu",
        name: "process_cpu",
        samples: Some(20430),
        types: GO_CPU,
        derived_cpu: Derived::No,
    },
    // samples/count with a cpu/nanoseconds period of 52,631,578 ns.
    Expect {
        file: "pprof/node-profile.pb.gz",
        name: "process_cpu",
        samples: None,
        types: GO_CPU,
        derived_cpu: Derived::Period,
    },
    Expect {
        file: "pprof/normal-cpu.stripped.pprof",
        name: "process_cpu",
        samples: None,
        types: GO_CPU,
        derived_cpu: Derived::No,
    },
    // samples/count with period 0: nothing to derive nanoseconds from.
    Expect {
        file: "pprof/profile-with-labels.pb.gz",
        name: "process_cpu",
        samples: Some(439),
        types: &["process_cpu:samples:count:cpu:nanoseconds"],
        derived_cpu: Derived::No,
    },
    Expect {
        file: "pprof/two-stacks.pb.gz",
        name: "process_cpu",
        samples: Some(2),
        types: CPU_NS,
        derived_cpu: Derived::No,
    },
    Expect {
        file: "pyroscope/cpu.pb.gz",
        name: "process_cpu",
        samples: Some(7),
        types: GO_CPU,
        derived_cpu: Derived::No,
    },
    Expect {
        file: "pyroscope/go.cpu.labels.pprof",
        name: "process_cpu",
        samples: Some(480),
        types: GO_CPU,
        derived_cpu: Derived::No,
    },
    Expect {
        file: "pyroscope/heap.pb.gz",
        name: "memory",
        samples: Some(1150),
        types: GO_HEAP,
        derived_cpu: Derived::No,
    },
    Expect {
        file: "pyroscope/profile_java",
        name: "process_cpu",
        samples: Some(2614),
        types: CPU_NS,
        derived_cpu: Derived::No,
    },
    Expect {
        file: "pyroscope/profile_nodejs",
        name: "wall",
        samples: Some(27),
        types: &["wall:wall:microseconds:wall:microseconds"],
        derived_cpu: Derived::No,
    },
    // Pyroscope's ingest test expects exactly this id for pyspy output.
    Expect {
        file: "pyroscope/profile_python",
        name: "process_cpu",
        samples: None,
        types: &[
            "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
            "process_cpu:samples:count::milliseconds",
        ],
        derived_cpu: Derived::PerSample(10_000_000),
    },
    Expect {
        file: "pyroscope/profile_ruby",
        name: "process_cpu",
        samples: Some(1662),
        types: &[
            "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
            "process_cpu:samples:count::milliseconds",
        ],
        derived_cpu: Derived::PerSample(10_000_000),
    },
    Expect {
        file: "pyroscope/profile_rust",
        name: "process_cpu",
        samples: Some(30),
        types: CPU_NS,
        derived_cpu: Derived::No,
    },
    Expect {
        file: "pyroscope/single_group_with_optional_span_id.pb.gz",
        name: "process_cpu",
        samples: None,
        types: GO_CPU,
        derived_cpu: Derived::No,
    },
];

const FALLBACK_MS: i64 = 1_234;

fn raw_profile(data: &[u8]) -> Profile {
    let bytes = if data.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(data)
            .read_to_end(&mut out)
            .unwrap();
        out
    } else {
        data.to_vec()
    };
    Profile::decode(bytes.as_slice()).unwrap()
}

/// A raw sample's identity under Pyroscope's merge: location ids and kept labels.
type SampleKey<'p> = (Vec<u64>, Vec<(&'p str, &'p str)>);

/// Straightforward per-type totals and sample counts from the raw profile, with
/// Pyroscope's rule: a sample with a negative value is dropped, and samples with
/// equal locations and kept string labels count once.
fn expected_totals(p: &Profile, e: &Expect) -> BTreeMap<String, (i128, usize)> {
    let s = |i: i64| std::str::from_utf8(&p.string_table[i as usize]).unwrap();
    let (pt, pu) = p
        .period_type
        .as_ref()
        .map(|v| (s(v.r#type), s(v.unit)))
        .unwrap_or(("", ""));
    let mut groups: BTreeMap<SampleKey<'_>, Vec<i128>> = BTreeMap::new();
    for sample in p.sample.iter().filter(|x| x.value.iter().all(|&v| v >= 0)) {
        let mut labels: Vec<(&str, &str)> = sample
            .label
            .iter()
            .filter(|l| l.str != 0)
            .map(|l| (s(l.key), s(l.str)))
            .filter(|(k, _)| {
                !k.starts_with("__") && !["span_id", "trace_id", "profile_id"].contains(k)
            })
            .collect();
        labels.sort();
        let sums = groups
            .entry((sample.location_id.clone(), labels))
            .or_insert_with(|| vec![0; sample.value.len()]);
        for (dst, &v) in sums.iter_mut().zip(&sample.value) {
            *dst += i128::from(v);
        }
    }
    let mut out: BTreeMap<String, (i128, usize)> = BTreeMap::new();
    for (i, vt) in p.sample_type.iter().enumerate() {
        let id = format!("{}:{}:{}:{pt}:{pu}", e.name, s(vt.r#type), s(vt.unit));
        let entry = out.entry(id).or_default();
        for sums in groups.values() {
            entry.0 += sums[i];
            entry.1 += usize::from(sums[i] != 0);
        }
    }
    if e.derived_cpu != Derived::No {
        let scale = match e.derived_cpu {
            Derived::PerSample(ns) => ns,
            _ => i128::from(p.period),
        };
        let idx = p
            .sample_type
            .iter()
            .position(|vt| s(vt.r#type) == "samples")
            .unwrap();
        let entry = out
            .entry("process_cpu:cpu:nanoseconds:cpu:nanoseconds".to_string())
            .or_default();
        for sums in groups.values() {
            entry.0 += sums[idx] * scale;
            entry.1 += usize::from(sums[idx] != 0);
        }
    }
    out.retain(|_, (_, n)| *n > 0);
    out
}

fn batch_totals(b: &Batch) -> BTreeMap<String, (i128, usize)> {
    let mut out: BTreeMap<String, (i128, usize)> = BTreeMap::new();
    for s in &b.series {
        let entry = out
            .entry(s.labels.profile_type().unwrap().to_string())
            .or_default();
        for x in &s.samples {
            entry.0 += i128::from(x.value);
            entry.1 += 1;
        }
    }
    out
}

fn decode(data: &[u8]) -> Batch {
    let opts = PprofOptions {
        base_labels: Labels::new([(SERVICE_NAME_LABEL, "fixture")]),
        fallback_time_ms: FALLBACK_MS,
        ..PprofOptions::default()
    };
    decode_pprof(data, &opts).unwrap()
}

#[test]
fn every_pprof_fixture_decodes_with_exact_totals() {
    let Some(dir) = fixtures_dir() else { return };
    // Every pprof fixture on disk must be in the table, so new ones are not skipped.
    for sub in ["pprof", "pyroscope"] {
        for entry in std::fs::read_dir(dir.join(sub)).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            let ignored = name == "SOURCES.md"
                || name.ends_with(".jfr.gz")
                || name.ends_with(".json")
                || name.ends_with(".labels.pb.gz");
            let rel = format!("{sub}/{name}");
            assert!(
                ignored || EXPECTED.iter().any(|e| e.file == rel),
                "fixture {rel} has no expectation"
            );
        }
    }
    for e in EXPECTED {
        let data = std::fs::read(dir.join(e.file)).unwrap();
        let raw = raw_profile(&data);
        if let Some(n) = e.samples {
            assert_eq!(raw.sample.len(), n, "{}: raw sample count", e.file);
        }
        let batch = decode(&data);
        assert_eq!(batch.validate(), Ok(()), "{}", e.file);
        let got = batch_totals(&batch);
        let types: BTreeSet<&str> = got.keys().map(String::as_str).collect();
        assert_eq!(
            types,
            e.types.iter().copied().collect(),
            "{}: profile types",
            e.file
        );
        assert_eq!(got, expected_totals(&raw, e), "{}: totals", e.file);

        // One frame per line, one per line-less location.
        let frames: usize = raw.location.iter().map(|l| l.line.len().max(1)).sum();
        assert_eq!(batch.symbols.locations.len(), frames, "{}: frames", e.file);
        assert_eq!(batch.symbols.functions.len(), raw.function.len());
        assert_eq!(batch.symbols.mappings.len(), raw.mapping.len());

        let expected_ms = raw.time_nanos / 1_000_000;
        for s in &batch.series {
            assert_eq!(s.labels.get(SERVICE_NAME_LABEL), Some("fixture"));
            assert_eq!(s.labels.get(NAME_LABEL), Some(e.name));
            for dropped in ["span_id", "trace_id", "profile_id"] {
                assert_eq!(s.labels.get(dropped), None, "{}", e.file);
            }
            assert!(s
                .samples
                .iter()
                .all(|x| x.timestamp_ms == expected_ms && x.value != 0));
        }
    }
}

/// Series per label value, counted in pprof samples of one profile type: the
/// `samples:count` values, since equal stacks are merged into one sample.
fn samples_by_label(b: &Batch, profile_type: &str, label: &str) -> BTreeMap<Option<String>, usize> {
    let mut out = BTreeMap::new();
    for s in b
        .series
        .iter()
        .filter(|s| s.labels.profile_type() == Some(profile_type))
    {
        *out.entry(s.labels.get(label).map(str::to_string))
            .or_default() += s.samples.iter().map(|x| x.value as usize).sum::<usize>();
    }
    out
}

/// For samples with and without a string label `label` in the raw profile: how
/// many there are and the sum of their `samples` values.
fn raw_by_label(raw: &Profile, label: &str) -> BTreeMap<bool, (usize, usize)> {
    let s = |i: i64| raw.string_table[i as usize].as_ref();
    let idx = raw
        .sample_type
        .iter()
        .position(|vt| s(vt.r#type) == b"samples")
        .unwrap();
    let mut out = BTreeMap::new();
    for sample in &raw.sample {
        let has = sample
            .label
            .iter()
            .any(|l| s(l.key) == label.as_bytes() && l.str != 0);
        let e: &mut (usize, usize) = out.entry(has).or_default();
        e.0 += 1;
        e.1 += sample.value[idx] as usize;
    }
    out
}

/// `samples_by_label` summed over labelled (`true`) and unlabelled samples.
fn by_presence(by_value: &BTreeMap<Option<String>, usize>) -> BTreeMap<bool, usize> {
    let mut out = BTreeMap::new();
    for (k, v) in by_value {
        *out.entry(k.is_some()).or_default() += v;
    }
    out
}

#[test]
fn sample_labels_from_fixtures() {
    let Some(dir) = fixtures_dir() else { return };
    let read = |f: &str| std::fs::read(dir.join(f)).unwrap();
    let pt = "process_cpu:samples:count:cpu:nanoseconds";

    // `api` is set on 11 of 121 samples (SOURCES.md); each keeps its label.
    let raw = raw_profile(&read("pprof/labels.pb.gz"));
    let counts = raw_by_label(&raw, "api");
    assert_eq!((counts[&false].0, counts[&true].0), (110, 11));
    let b = decode(&read("pprof/labels.pb.gz"));
    let got = by_presence(&samples_by_label(&b, pt, "api"));
    assert_eq!(
        got,
        BTreeMap::from([(false, counts[&false].1), (true, counts[&true].1)])
    );

    // thread_id / thread_name on all 439 samples.
    let raw = raw_profile(&read("pprof/profile-with-labels.pb.gz"));
    let counts = raw_by_label(&raw, "thread_id");
    assert_eq!(counts.get(&true).map(|c| c.0), Some(439));
    let b = decode(&read("pprof/profile-with-labels.pb.gz"));
    assert_eq!(samples_by_label(&b, pt, "thread_id").get(&None), None);
    assert_eq!(samples_by_label(&b, pt, "thread_name").get(&None), None);
    assert_eq!(
        samples_by_label(&b, pt, "thread_id")
            .values()
            .sum::<usize>(),
        counts[&true].1
    );

    // `foo` and `function` kept, `profile_id` dropped.
    let raw = raw_profile(&read("pyroscope/go.cpu.labels.pprof"));
    let b = decode(&read("pyroscope/go.cpu.labels.pprof"));
    let names: BTreeSet<&str> = b
        .series
        .iter()
        .flat_map(|s| s.labels.iter().map(|(k, _)| k))
        .collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "__name__",
            "__profile_type__",
            "foo",
            "function",
            "service_name"
        ])
    );
    let with_foo = raw_by_label(&raw, "foo")[&true].1;
    assert_eq!(
        by_presence(&samples_by_label(&b, pt, "foo")).get(&true),
        Some(&with_foo)
    );

    // span_id dropped; the other labels stay.
    let b = decode(&read("pyroscope/single_group_with_optional_span_id.pb.gz"));
    assert!(b.series.iter().all(|s| s.labels.get("span_id").is_none()));
}

#[test]
fn unsymbolized_fixture_keeps_addresses_and_build_ids() {
    let Some(dir) = fixtures_dir() else { return };
    let data = std::fs::read(dir.join("pprof/normal-cpu.stripped.pprof")).unwrap();
    let raw = raw_profile(&data);
    let b = decode(&data);
    assert!(b.symbols.functions.is_empty());
    assert!(b.symbols.locations.iter().all(|l| l.function.is_none()));
    let addrs: BTreeSet<u64> = b.symbols.locations.iter().map(|l| l.address).collect();
    let raw_addrs: BTreeSet<u64> = raw.location.iter().map(|l| l.address).collect();
    assert_eq!(addrs, raw_addrs);
    let with_build_id = b
        .symbols
        .mappings
        .iter()
        .filter(|m| !m.build_id.is_empty())
        .count();
    assert_eq!(with_build_id, 1);
    let mapped = b
        .symbols
        .locations
        .iter()
        .filter(|l| l.mapping.is_some())
        .count();
    assert_eq!(
        mapped,
        raw.location.iter().filter(|l| l.mapping_id != 0).count()
    );
}

#[test]
fn time_fallback_for_profiles_without_time() {
    let Some(dir) = fixtures_dir() else { return };
    let mut raw = raw_profile(&std::fs::read(dir.join("pyroscope/cpu.pb.gz")).unwrap());
    raw.time_nanos = 0;
    let b = decode(&raw.encode_to_vec());
    assert!(b
        .series
        .iter()
        .all(|s| s.samples.iter().all(|x| x.timestamp_ms == FALLBACK_MS)));
}
