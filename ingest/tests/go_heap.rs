//! Pyroscope's Go heap fixture: the runtime writes one sample per (stack, size
//! class), so stacks repeat with only the numeric `bytes` label differing.
//! Pyroscope stores one sample per stack with the values summed; so must we.
//! The expected numbers were counted from the raw protobuf (1,150 samples over 585
//! distinct stacks, 76 of them with in-use values). Skips when the fixture is absent
//! (fails instead with `PROFILEDB_REQUIRE_EXTERNAL=1`: docs/testing.md).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use profiledb_ingest::{decode_pprof, PprofOptions};

#[path = "../../storage/tests/support/external.rs"]
mod external;

#[test]
fn go_heap_duplicate_stacks_are_merged() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/pyroscope/heap.pb.gz");
    let data = match std::fs::read(&path) {
        Ok(data) => data,
        Err(e) => {
            return external::missing("the shared fixtures", format!("{}: {e}", path.display()))
        }
    };
    let b = decode_pprof(&data, &PprofOptions::default()).unwrap();
    b.validate().unwrap();
    let mut got: BTreeMap<&str, (usize, i64)> = BTreeMap::new();
    for s in &b.series {
        let e = got.entry(s.labels.profile_type().unwrap()).or_default();
        e.0 += s.samples.len();
        e.1 += s.samples.iter().map(|x| x.value).sum::<i64>();
        // No stack twice in a series, compared by content.
        let stacks: BTreeSet<&[u32]> = s
            .samples
            .iter()
            .map(|x| b.stacks.get(x.stack).unwrap())
            .collect();
        assert_eq!(stacks.len(), s.samples.len());
    }
    let want = BTreeMap::from([
        ("memory:alloc_objects:count:space:bytes", (585, 196_607_841)),
        (
            "memory:alloc_space:bytes:space:bytes",
            (585, 13_434_386_318),
        ),
        ("memory:inuse_objects:count:space:bytes", (76, 22_156_072)),
        ("memory:inuse_space:bytes:space:bytes", (76, 1_602_645_059)),
    ]);
    assert_eq!(got, want);
}
