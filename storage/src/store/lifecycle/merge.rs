//! Merging one planned partition: decode its segments (no store lock held: they
//! are immutable), re-encode them into one (`merger.rs`), write the output
//! durably, check it holds the sources' total, and swap it in for the sources under
//! the state write lock. The sources are retired last.

use std::collections::BTreeSet;
use std::fs;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::report::CompactedPartition;
use crate::compaction::{Merger, OutputFrame};
use crate::error::{IoContext, Result};
use crate::segment::{self, BaseChoice, SegmentFile};
use crate::store::state::SegmentHandle;
use crate::store::{now_ms, Inner};

/// The `compaction_bytes` gauge while a compaction runs (one at a time, under the
/// lifecycle lock), back to zero when it ends however it ends.
struct Held<'a>(&'a AtomicU64);

impl Held<'_> {
    fn set(&self, bytes: usize) {
        self.0.store(bytes as u64, Ordering::Relaxed);
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.set(0);
    }
}

/// What became of a planned partition.
pub(super) enum Outcome {
    Compacted(CompactedPartition),
    /// Left as it was; the run goes on with the next partition.
    Skipped(SkipReason),
}

/// Why a planned partition was left as it was (reported as text).
#[derive(Debug, thiserror::Error)]
pub(super) enum SkipReason {
    #[error("no segments")]
    NoSegments,
    #[error("segment {segment} is corrupt and was quarantined")]
    Quarantined { segment: u64 },
    #[error("the merge would hold more than the compaction memory budget ({limit} bytes)")]
    TooLarge { limit: usize },
    #[error("segment {segment} cannot be merged: {why}")]
    Unmergeable { segment: u64, why: String },
    #[error("merged value total {merged} differs from the sources' {expected}; sources kept")]
    TotalMismatch { merged: i64, expected: i64 },
    #[error("sources changed during compaction; try again")]
    SourcesChanged,
}

impl Inner {
    /// Merges `handles` (one tenant, inside `frame`) into one segment covering
    /// `frame`: their partition, or the block they go into.
    /// [`Outcome::Skipped`] when the partition was left as it was.
    pub(super) fn compact_partition(
        &self,
        handles: Vec<Arc<SegmentHandle>>,
        frame: OutputFrame,
    ) -> Result<Outcome> {
        if handles.is_empty() {
            return Ok(Outcome::Skipped(SkipReason::NoSegments));
        }
        let budget = self.cfg.compaction_max_bytes as usize;
        let mut merger = Merger::new(frame);
        let held = Held(&self.compaction_bytes);
        // The heavy part runs without any store lock: sources are immutable files.
        for h in &handles {
            let seg = match self.cache.get(&h.meta.id) {
                Some(s) => s,
                None => match h.file.load() {
                    Ok(s) => Arc::new(s),
                    Err(e) if e.is_corruption() => {
                        self.quarantine(h, &e);
                        return Ok(Outcome::Skipped(SkipReason::Quarantined {
                            segment: h.meta.id,
                        }));
                    }
                    Err(e) => return Err(e),
                },
            };
            // What this merge holds: the merged output so far and the source
            // being added. The merger copies what it takes (strings re-interned,
            // rows re-bucketed), so each source is dropped after its turn; a
            // week of hour segments, each with its own stack tree, decodes to far
            // more than it merges into.
            let holding = merger.approx_bytes() + seg.approx_bytes();
            held.set(holding);
            if holding > budget {
                return Ok(Outcome::Skipped(SkipReason::TooLarge { limit: budget }));
            }
            if let Err(e) = merger.add(&seg) {
                return Ok(Outcome::Skipped(SkipReason::Unmergeable {
                    segment: h.meta.id,
                    why: e.to_string(),
                }));
            }
        }
        let mut sources: BTreeSet<u64> = BTreeSet::new();
        for h in &handles {
            sources.insert(h.meta.id);
            // Transitively: a source's own sources may linger as files whose
            // deletion was deferred; they must never be adopted again.
            sources.extend(h.meta.sources.iter().copied());
        }
        let Some(meta) = merger.merged_meta(
            self.next_segment_id.fetch_add(1, Ordering::SeqCst),
            handles.iter().map(|h| &h.meta),
            sources.into_iter().collect(),
            now_ms(),
        ) else {
            return Ok(Outcome::Skipped(SkipReason::NoSegments));
        };
        let input = merger.finish(meta);
        let level = self.cfg.blocks.zstd_level(
            frame.width_ms,
            self.cfg.zstd_level,
            self.cfg.wide_zstd_level,
        );
        let on_base = self.cfg.symbol_bases && super::bases::block_uses_bases(frame.width_ms);
        let current = on_base
            .then(|| self.current_base(&input.meta.tenant))
            .flatten();
        let choice = match on_base {
            true => BaseChoice::Shared {
                current: current.as_deref(),
                new_id: self.next_segment_id.fetch_add(1, Ordering::SeqCst),
                decide: &super::bases::decide,
            },
            false => BaseChoice::None,
        };
        let (meta, _) = segment::write_segment_on(&self.dir, input, level, choice)?;
        let path = self.dir.join(&meta.file);
        let expected = handles
            .iter()
            .fold(0i64, |a, h| a.wrapping_add(h.meta.value_total));
        let undo = |why: SkipReason| -> Result<Outcome> {
            // File first: a catalog entry without its file is dropped at open.
            fs::remove_file(&path).at(&path)?;
            self.catalog.remove(meta.id)?;
            self.catalog.flush()?;
            Ok(Outcome::Skipped(why))
        };
        if meta.value_total != expected {
            return undo(SkipReason::TotalMismatch {
                merged: meta.value_total,
                expected,
            });
        }
        let file = SegmentFile::open(&path)?;
        self.catalog.insert(&meta)?;
        self.catalog.flush()?;
        let new = Arc::new(SegmentHandle {
            meta: meta.clone(),
            file,
        });
        {
            let mut st = self.state.write();
            let intact = handles.iter().all(|h| {
                st.segments
                    .get(&h.meta.id)
                    .is_some_and(|x| Arc::ptr_eq(x, h))
            });
            if !intact {
                drop(st);
                return undo(SkipReason::SourcesChanged);
            }
            for h in &handles {
                st.segments.remove(&h.meta.id);
            }
            st.segments.insert(meta.id, new);
            self.segments_version.fetch_add(1, Ordering::SeqCst);
        }
        let done = CompactedPartition {
            tenant: meta.tenant.clone(),
            partition_start_ms: meta.partition_start_ms,
            sources: handles.iter().map(|h| h.meta.id).collect(),
            output: meta.id,
            level: meta.level,
            step_ms_before: handles
                .iter()
                .map(|h| h.meta.step_ms)
                .min()
                .unwrap_or(frame.step_ms),
            step_ms_after: frame.step_ms,
            bytes_before: handles.iter().map(|h| h.meta.size_bytes).sum(),
            bytes_after: meta.size_bytes,
            rows_before: handles.iter().map(|h| h.meta.rows).sum(),
            rows_after: meta.rows,
        };
        self.retire(handles)?;
        Ok(Outcome::Compacted(done))
    }
}
