//! Index entries for tests of the bucket's index: what a writer's upload or a
//! merge would list, with no object behind it unless the test puts one.

#![allow(dead_code)]

use profiledb_storage::SegmentEntry;

/// An entry for `key` of writer `w`, with upload number `seq` (`None`: a merge's).
pub fn entry_seq(key: &str, seq: Option<u64>) -> SegmentEntry {
    SegmentEntry {
        key: key.into(),
        min_ms: 0,
        max_ms: 10_000,
        partition_ms: 0,
        level: 0,
        step_ms: 10_000,
        width_ms: 3_600_000,
        bytes: 3,
        samples: 1,
        series: 1,
        created_ms: 0,
        origin: "w".into(),
        seq,
        profile_types: vec!["cpu".into()],
        services: vec!["app".into()],
    }
}

/// An entry for `key` with no upload number.
pub fn entry(key: &str) -> SegmentEntry {
    entry_seq(key, None)
}
