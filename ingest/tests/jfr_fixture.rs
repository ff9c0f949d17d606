//! Decodes Pyroscope's `dump2.jfr.gz` recording with its `dump2.labels.pb.gz`
//! snapshot and checks the totals per profile type, and per `thread_name`, against
//! what Pyroscope gives for the same upload: the golden profiles its ingest test
//! keeps next to the fixture (`pkg/og/convert/jfr/testdata/dump2.jfr.gz.<type>.*`,
//! SelectMergeProfile answers after `/ingest?format=jfr` with the default
//! `sampleRate` of 100). Skips, with a message, when the fixtures are absent (fails
//! instead with `PROFILEDB_REQUIRE_EXTERNAL=1`: docs/testing.md).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use profiledb_ingest::{decode_jfr, JfrOptions};
use profiledb_model::{Batch, Labels, SERVICE_NAME_LABEL};

#[path = "../../storage/tests/support/external.rs"]
mod external;

fn fixture(name: &str) -> Option<Vec<u8>> {
    let path: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/pyroscope")
        .join(name);
    match std::fs::read(&path) {
        Ok(b) => Some(b),
        Err(e) => {
            external::missing("the shared fixtures", format!("{}: {e}", path.display()));
            None
        }
    }
}

fn options() -> JfrOptions {
    JfrOptions {
        base_labels: Labels::new([(SERVICE_NAME_LABEL, "javaapp")]),
        time_ms: 1_700_000_000_000,
        sample_rate: Some(100),
        ..JfrOptions::default()
    }
}

/// Sum of values per (profile type, `thread_name`), and per profile type.
type Totals = BTreeMap<(String, Option<String>), i64>;

fn totals(b: &Batch) -> (BTreeMap<String, i64>, Totals) {
    let (mut by_type, mut by_thread) = (BTreeMap::new(), Totals::new());
    for s in &b.series {
        let t = s.labels.profile_type().unwrap_or_default().to_string();
        let sum: i64 = s.samples.iter().map(|x| x.value).sum();
        *by_type.entry(t.clone()).or_insert(0) += sum;
        let thread = s.labels.get("thread_name").map(str::to_string);
        *by_thread.entry((t, thread)).or_insert(0) += sum;
    }
    (by_type, by_thread)
}

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
const WALL: &str = "wall:wall:nanoseconds:wall:nanoseconds";

#[test]
fn dump2_totals_match_pyroscope() {
    let (Some(jfr), Some(labels)) = (fixture("dump2.jfr.gz"), fixture("dump2.labels.pb.gz")) else {
        return;
    };
    let b = decode_jfr(&jfr, Some(&labels), &options()).unwrap();
    b.validate().unwrap();
    let (by_type, by_thread) = totals(&b);
    // Pyroscope's golden SelectMergeProfile totals, no label selector.
    let expected: BTreeMap<String, i64> = [
        (
            "memory:alloc_in_new_tlab_bytes:bytes:space:bytes",
            2_097_148,
        ),
        ("memory:alloc_in_new_tlab_objects:count:space:bytes", 4),
        ("memory:live:count:objects:count", 4),
        (CPU, 33_580_000_000),
        (WALL, 147_230_000_000),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(by_type, expected);

    // Pyroscope's goldens per `thread_name` selector: 4.35 s for seven pool
    // threads and 3.05 s for the eighth, in both CPU and wall.
    for ty in [CPU, WALL] {
        for n in 1..=8 {
            let thread = format!("pool-2-thread-{n}");
            let want = if n == 6 { 3_050_000_000 } else { 4_350_000_000 };
            assert_eq!(
                by_thread.get(&(ty.to_string(), Some(thread.clone()))),
                Some(&want),
                "{ty} {thread}"
            );
        }
    }

    // The context labels become series labels; profile ids do not.
    let cpu = b
        .series
        .iter()
        .find(|s| s.labels.get("thread_name") == Some("pool-2-thread-1"))
        .unwrap();
    assert_eq!(cpu.labels.get(SERVICE_NAME_LABEL), Some("javaapp"));
    assert_eq!(cpu.labels.get("jfr_event"), Some("wall"));
    assert_eq!(cpu.labels.get("profile_id"), None);
}

#[test]
fn dump2_without_labels_keeps_the_totals() {
    let Some(jfr) = fixture("dump2.jfr.gz") else {
        return;
    };
    let b = decode_jfr(&jfr, None, &options()).unwrap();
    let (by_type, by_thread) = totals(&b);
    assert_eq!(by_type.get(CPU), Some(&33_580_000_000));
    assert!(by_thread.keys().all(|(_, thread)| thread.is_none()));
    // Each stack appears once per series and second: samples were summed per
    // stack and event second.
    for s in &b.series {
        let mut stacks: Vec<(u32, i64)> = s
            .samples
            .iter()
            .map(|x| (x.stack, x.timestamp_ms))
            .collect();
        stacks.sort_unstable();
        stacks.dedup();
        assert_eq!(stacks.len(), s.samples.len());
    }
}

#[test]
fn dump2_frames_are_java_methods() {
    let Some(jfr) = fixture("dump2.jfr.gz") else {
        return;
    };
    let b = decode_jfr(&jfr, None, &options()).unwrap();
    let names: Vec<&str> = b.symbols.functions.iter().map(|f| &*f.name).collect();
    assert!(
        names.contains(&"java/lang/Thread.run"),
        "{:?}",
        &names[..10]
    );
}
