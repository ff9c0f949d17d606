//! Counters the engine keeps for `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($($name:ident => $help:literal),* $(,)?) => {
        /// Monotonic counters, updated lock-free on the hot paths.
        #[derive(Debug, Default)]
        pub struct StoreStats {
            $(#[doc = $help] pub $name: AtomicU64,)*
        }

        impl StoreStats {
            /// `(metric name, help, value)` of every counter.
            pub fn counters(&self) -> Vec<(&'static str, &'static str, u64)> {
                vec![$((stringify!($name), $help, self.$name.load(Ordering::Relaxed)),)*]
            }
        }
    };
}

counters! {
    samples_written => "Samples acknowledged by the write path.",
    batches_written => "Write batches acknowledged.",
    writes_rejected_busy => "Writes refused because the writer queue was full.",
    wal_bytes_written => "Bytes appended to the write-ahead log.",
    wal_syncs => "fsync calls on the write-ahead log.",
    wal_replayed_records => "WAL records replayed at open.",
    wal_truncated_bytes => "Bytes dropped from torn or corrupt WAL tails at open.",
    wal_removed_bytes => "Bytes of WAL files deleted because segments hold their records.",
    wal_removed_files => "WAL files deleted because segments hold their records.",
    early_flushes_head => "Open partitions flushed early because the head passed its budget.",
    early_flushes_wal => "Open partitions flushed early because the WAL passed the head budget.",
    segments_flushed => "Segments written from the head.",
    flush_errors => "Failed segment flushes (retried).",
    segments_quarantined => "Segments moved to quarantine because they failed verification.",
    segments_missing => "Catalog entries removed because their file was missing.",
    segments_adopted => "Segment files found without a catalog entry and adopted.",
    queries => "Queries executed.",
    segment_cache_hits => "Segment loads served from the decoded-segment cache.",
    segment_cache_misses => "Segment loads that read the file.",
    summary_cache_hits => "Segment summary loads (labels and totals only) served from the summary cache.",
    summary_cache_misses => "Segment summary loads that read the summary sections.",
    partitions_compacted => "Partitions rewritten by compaction or downsampling.",
    segments_compacted_away => "Source segments replaced by compaction.",
    compaction_bytes_read => "Bytes of source segments compacted.",
    compaction_bytes_written => "Bytes of segments written by compaction.",
    compaction_skipped_partitions => "Partitions compaction left alone (over the memory budget).",
    retention_segments_deleted => "Segments deleted by retention.",
    retention_bytes_deleted => "Bytes deleted by retention.",
}

pub(crate) fn inc(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Point-in-time gauges.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Gauges {
    /// Approximate bytes of the head (open and flushing partitions).
    pub head_bytes: u64,
    /// Head partitions, open and flushing.
    pub head_partitions: u64,
    /// Aggregated rows in the head.
    pub head_rows: u64,
    /// Live segments.
    pub segments: u64,
    /// File bytes of the live segments.
    pub segment_bytes: u64,
    /// Weight of the decoded-segment cache.
    pub segment_cache_bytes: u64,
    /// Weight of the segment summary cache (a share of the segment-cache budget).
    pub summary_cache_bytes: u64,
    /// 1 while the after-open warm-up is decoding segments into the cache.
    pub segment_cache_warming: u64,
    /// 1 once the warm-up is past the last day's segments (see
    /// `Store::recent_data_warm`).
    pub segment_cache_recent_warm: u64,
    /// Bytes in the WAL files (what a replay after a crash would read).
    pub wal_bytes: u64,
    /// Bytes the WAL writer's group-commit buffer holds.
    pub wal_buffer_bytes: u64,
    /// Bytes the running compaction holds (the merge so far and the source
    /// being added).
    pub compaction_bytes: u64,
    /// Estimated bytes of a flush's encode under way (beside the partition).
    pub flush_bytes: u64,
    /// Approximate bytes of the shared name-level frame tree queries build.
    pub frame_tree_bytes: u64,
    /// Bytes of the query scratch spaces pooled between queries.
    pub query_scratch_bytes: u64,
    /// Approximate bytes of the stack interner (store-wide stack ids for writes).
    pub stack_interner_bytes: u64,
    /// Stacks with an id in the interner's current generation.
    pub stack_interner_stacks: u64,
    /// Times the interner emptied its tables for being over its budget.
    pub stack_interner_resets: u64,
    /// Series in the head (summed over partitions).
    pub head_series: u64,
    /// Stack-tree nodes in the head's dictionaries (distinct stack prefixes).
    pub head_stack_nodes: u64,
    /// Bytes of the head's series label sets and label index.
    pub head_index_bytes: u64,
    /// Bytes of the head's dictionaries (strings, functions, locations, stack tree).
    pub head_dictionary_bytes: u64,
    /// Symbol base files on disk, as of the last lifecycle run.
    pub symbol_bases: u64,
    /// Bytes of those files (beside `segment_bytes`).
    pub symbol_base_bytes: u64,
    /// Bytes of symbol bases held in memory for reading and writing segments.
    pub symbol_base_cache_bytes: u64,
}
