//! What the write path and the read path share: the head partitions (open and
//! being flushed) and the live segment set, under one lock.
//!
//! Every other piece of state belongs to one role (see `mod.rs`). A partition moves
//! from `head` to `flushing` when the writer seals it and from `flushing` to a
//! segment in `segments` when the flusher has made it durable, each move under the
//! write lock, so a snapshot sees every sample exactly once.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::head::HeadPartition;
use crate::model::TenantId;
use crate::segment::{SegmentFile, SegmentMeta};

/// A head partition shared between the writer (applies), the flusher (encodes)
/// and queries (scan).
pub(crate) type PartitionRef = Arc<RwLock<HeadPartition>>;

/// A segment known to the store.
#[derive(Debug)]
pub(crate) struct SegmentHandle {
    /// The segment's metadata, as in the catalog.
    pub meta: SegmentMeta,
    pub(crate) file: SegmentFile,
}

/// The head and the live segment set.
#[derive(Default)]
pub(crate) struct State {
    pub head: BTreeMap<(TenantId, i64), PartitionRef>,
    /// Sealed partitions being written; still visible to queries.
    pub flushing: Vec<PartitionRef>,
    pub segments: BTreeMap<u64, Arc<SegmentHandle>>,
}

impl State {
    /// Open and flushing head partitions.
    pub fn partitions(&self) -> impl Iterator<Item = &PartitionRef> {
        self.head.values().chain(self.flushing.iter())
    }
}
