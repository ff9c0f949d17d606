//! Segment lifecycle: compaction (merging one partition's segments), downsampling
//! (a compaction whose output step is coarser) and retention (whole-file deletion).
//!
//! This module holds the pure parts: re-encoding several decoded segments into one
//! [`SegmentInput`], choosing the output step, and the reports. The orchestration —
//! planning under the state lock, durable write, atomic swap, deferred deletion —
//! lives in [`crate::store`], which owns the live segment set.
//!
//! Atomicity: the output segment is written durably (tmp, fsync, rename) with the
//! ids it replaces in its footer (`sources`), then cataloged, then swapped into the
//! live set under one lock, then the sources are deleted. A crash before the rename
//! leaves the sources (the `.tmp` is removed at open); after it, `reconcile` at open
//! sees the output and deletes every segment it lists, so the data is never counted
//! twice and never lost.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::DownsampleRule;
use crate::dict::{DictBuilder, LocationRec, NO_PARENT};
use crate::error::{Result, StorageError};
use crate::model::{Labels, TenantId};
use crate::segment::{LoadedSegment, Row, SegmentInput, SegmentMeta};

/// Progress of a long lifecycle operation, reported after each partition.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CompactProgress {
    pub partitions_done: usize,
    pub partitions_total: usize,
    /// Bytes of source segments processed so far / in total.
    pub bytes_done: u64,
    pub bytes_total: u64,
}

/// One partition rewritten.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CompactedPartition {
    pub tenant: TenantId,
    pub partition_start_ms: i64,
    pub sources: Vec<u64>,
    pub output: u64,
    pub level: u32,
    pub step_ms_before: i64,
    pub step_ms_after: i64,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub rows_before: u64,
    pub rows_after: u64,
}

/// A partition that needed work but was left alone, and why.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SkippedPartition {
    pub tenant: TenantId,
    pub partition_start_ms: i64,
    pub reason: String,
}

/// What a compaction run did.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CompactReport {
    pub compacted: Vec<CompactedPartition>,
    pub skipped: Vec<SkippedPartition>,
    /// Live segments (all tenants) and their bytes before and after the run.
    pub segments_before: usize,
    pub segments_after: usize,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub elapsed_ms: u64,
}

/// What a retention run did.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RetentionReport {
    /// Ids of the deleted segments.
    pub deleted: Vec<u64>,
    pub bytes_deleted: u64,
    pub segments_before: usize,
    pub segments_after: usize,
    pub elapsed_ms: u64,
}

/// Per-tenant settings kept in the catalog.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct TenantSettings {
    /// Data older than this is deleted; `None` keeps it forever.
    #[serde(default)]
    pub max_age_ms: Option<i64>,
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

fn lcm(a: i64, b: i64) -> Option<i64> {
    if a <= 0 || b <= 0 {
        return None;
    }
    (a / gcd(a, b)).checked_mul(b)
}

/// The step a partition's merged output is written at: a multiple of every source
/// step (so re-bucketing is exact), coarsened to the step of the oldest downsampling
/// rule whose age the partition's end has passed — when that still divides the
/// partition width. `None` if the sources' steps cannot share a step.
pub fn output_step(
    partition_end_ms: i64,
    partition_ms: i64,
    source_steps: &[i64],
    rules: &[DownsampleRule],
    now_ms: i64,
) -> Option<i64> {
    let mut step = 1i64;
    for &s in source_steps {
        step = lcm(step, s)?;
    }
    if partition_ms <= 0 || partition_ms % step != 0 {
        return None;
    }
    // The coarsest applicable rule whose step fits the partition.
    let mut targets: Vec<i64> = rules
        .iter()
        .filter(|r| partition_end_ms <= now_ms.saturating_sub(duration_ms(r.after)))
        .map(|r| r.step_ms)
        .collect();
    targets.sort_unstable_by(|a, b| b.cmp(a));
    for t in targets {
        if let Some(c) = lcm(step, t) {
            if partition_ms % c == 0 {
                return Some(c);
            }
        }
    }
    Some(step)
}

/// Parses an age such as `30d`, `12h`, `90m`, `3600s`, `2w` or a bare number of
/// seconds. `forever`, `none` and `0` mean no limit (`Ok(None)`).
pub fn parse_max_age(s: &str) -> Result<Option<Duration>> {
    let s = s.trim();
    if matches!(s, "forever" | "none" | "0" | "") {
        return Ok(None);
    }
    let bad = || StorageError::Invalid(format!("cannot parse age {s:?}; use e.g. 30d, 12h, 90m"));
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| bad())?;
    let secs = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => return Err(bad()),
    };
    let total = n.checked_mul(secs).ok_or_else(bad)?;
    if total == 0 {
        return Ok(None);
    }
    Ok(Some(Duration::from_secs(total)))
}

pub(crate) fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn corrupt(seg: &SegmentMeta, what: &str) -> StorageError {
    StorageError::Corrupt(format!("segment {}: {what}", seg.id))
}

/// Accumulates decoded segments of one partition into one segment's input: the
/// dictionaries and stack trees re-interned into one builder, series merged by
/// labels, rows re-bucketed to the output step (values summed by the writer).
pub struct Merger {
    builder: DictBuilder,
    series: BTreeMap<Labels, Vec<Row>>,
    step_ms: i64,
    rows: usize,
}

impl Merger {
    pub fn new(step_ms: i64) -> Self {
        Merger {
            builder: DictBuilder::new(),
            series: BTreeMap::new(),
            step_ms,
            rows: 0,
        }
    }

    /// Rough heap footprint of what was accumulated so far.
    pub fn approx_bytes(&self) -> usize {
        self.builder.approx_bytes() + self.rows * 16 + self.series.len() * 96
    }

    /// Adds every row of `seg`.
    pub fn add(&mut self, seg: &LoadedSegment) -> Result<()> {
        let m = &seg.meta;
        if m.step_ms <= 0 || self.step_ms % m.step_ms != 0 {
            return Err(StorageError::Invalid(format!(
                "segment {} step {} ms does not divide the output step {} ms",
                m.id, m.step_ms, self.step_ms
            )));
        }
        let ratio = self.step_ms / m.step_ms;
        let d = &seg.dict;
        let b = &mut self.builder;

        let mut mappings = Vec::with_capacity(d.mappings.len());
        for mp in &d.mappings {
            mappings.push(b.mapping(d.str(mp.file), d.str(mp.build_id)));
        }
        let mut functions = Vec::with_capacity(d.functions.len());
        for f in &d.functions {
            functions.push(b.function(d.str(f.name), d.str(f.file)));
        }
        let mut locations = Vec::with_capacity(d.locations.len());
        for l in &d.locations {
            let function = match l.function {
                Some(f) => Some(
                    *functions
                        .get(f as usize)
                        .ok_or_else(|| corrupt(m, "location refers to a missing function"))?,
                ),
                None => None,
            };
            let mapping = match l.mapping {
                Some(x) => Some(
                    *mappings
                        .get(x as usize)
                        .ok_or_else(|| corrupt(m, "location refers to a missing mapping"))?,
                ),
                None => None,
            };
            locations.push(b.location(LocationRec {
                function,
                mapping,
                address: l.address,
                line: l.line,
            }));
        }
        // Parents precede children, so one forward pass maps the whole tree.
        let mut nodes: Vec<u32> = Vec::with_capacity(d.parents.len());
        for (i, (&parent, &loc)) in d.parents.iter().zip(&d.node_locations).enumerate() {
            let parent = if parent == NO_PARENT {
                NO_PARENT
            } else if (parent as usize) < i {
                nodes[parent as usize]
            } else {
                return Err(corrupt(m, "stack node parent out of order"));
            };
            let loc = *locations
                .get(loc as usize)
                .ok_or_else(|| corrupt(m, "stack node refers to a missing location"))?;
            nodes.push(b.child(parent, loc));
        }

        for (sid, labels) in seg.series.iter().enumerate() {
            let rows = self.series.entry(labels.clone()).or_default();
            let before = rows.len();
            let mut bad = false;
            seg.for_each_row(sid as u32, |t, stack, value| {
                match nodes.get(stack as usize) {
                    Some(&n) => rows.push(Row {
                        t: (i64::from(t) / ratio) as u32,
                        stack: n,
                        value,
                    }),
                    None => bad = true,
                }
            })?;
            if bad {
                return Err(corrupt(m, "row refers to a missing stack node"));
            }
            self.rows += rows.len() - before;
        }
        Ok(())
    }

    /// The merged input; `meta` supplies identity and provenance.
    pub fn finish(self, meta: SegmentMeta) -> SegmentInput {
        SegmentInput {
            meta,
            dict: self.builder.finish(),
            series: self.series.into_iter().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_parse() {
        assert_eq!(
            parse_max_age("30d").unwrap(),
            Some(Duration::from_secs(30 * 86_400))
        );
        assert_eq!(
            parse_max_age("90m").unwrap(),
            Some(Duration::from_secs(5400))
        );
        assert_eq!(parse_max_age("15").unwrap(), Some(Duration::from_secs(15)));
        assert_eq!(parse_max_age("forever").unwrap(), None);
        assert!(parse_max_age("3x").is_err());
        assert!(parse_max_age("d").is_err());
    }

    #[test]
    fn output_step_follows_rules_and_sources() {
        let rules = DownsampleRule::defaults();
        let day = 86_400_000i64;
        let now = 100 * day;
        let h = 3_600_000;
        // Recent: keep the source step.
        assert_eq!(
            output_step(now - day, h, &[10_000], &rules, now),
            Some(10_000)
        );
        // Older than 7 days: 1 minute.
        assert_eq!(
            output_step(now - 8 * day, h, &[10_000], &rules, now),
            Some(60_000)
        );
        // Older than 30 days: 1 hour.
        assert_eq!(
            output_step(now - 31 * day, h, &[10_000, 60_000], &rules, now),
            Some(h)
        );
        // A rule step that does not divide the partition is not applied; the next
        // coarsest one that does is.
        assert_eq!(
            output_step(now - 31 * day, 1_800_000, &[10_000], &rules, now),
            Some(60_000)
        );
        // Mixed source steps share their least common multiple.
        assert_eq!(
            output_step(now, h, &[10_000, 15_000], &[], now),
            Some(30_000)
        );
        assert_eq!(output_step(now, 50_000, &[20_000, 15_000], &[], now), None);
    }
}
