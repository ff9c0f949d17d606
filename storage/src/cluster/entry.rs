//! A segment's index entry, from its metadata and its series' labels.

use std::collections::BTreeSet;

use crate::bucket::SegmentEntry;
use crate::model::{PROFILE_TYPE_LABEL, SERVICE_NAME_LABEL};
use crate::segment::{SegmentMeta, SegmentSummary};

/// The entry for `seg` stored under `key`, written by `origin`. The label
/// summary (profile types, services) lets a querier skip segments a selector
/// cannot match without reading them.
pub(super) fn entry_for(
    key: &str,
    meta: &SegmentMeta,
    seg: &SegmentSummary,
    origin: &str,
) -> SegmentEntry {
    let mut types = BTreeSet::new();
    let mut services = BTreeSet::new();
    for labels in &seg.series {
        if let Some(t) = labels.get(PROFILE_TYPE_LABEL) {
            types.insert(t.to_string());
        }
        if let Some(s) = labels.get(SERVICE_NAME_LABEL) {
            services.insert(s.to_string());
        }
    }
    SegmentEntry {
        key: key.to_string(),
        min_ms: meta.min_time_ms,
        max_ms: meta.max_time_ms + meta.step_ms,
        partition_ms: meta.partition_start_ms,
        level: meta.level,
        step_ms: meta.step_ms,
        width_ms: meta.partition_ms,
        bytes: meta.size_bytes,
        samples: meta.rows,
        series: meta.series,
        created_ms: meta.created_ms,
        origin: origin.to_string(),
        seq: None,
        profile_types: types.into_iter().collect(),
        services: services.into_iter().collect(),
    }
}

/// The object name of a segment: its origin and its id there.
pub(super) fn object_name(origin: &str, id: u64) -> String {
    format!("{origin}-{id:016x}")
}
