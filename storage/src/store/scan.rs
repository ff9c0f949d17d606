//! The read side of the store: a snapshot of the sources overlapping a query and a
//! parallel scan over them. Every query (the querier, one layer up) is built on
//! [`StoreReader::scan_scoped`], or on [`StoreReader::scan_summaries`] when labels
//! and per-step totals answer it.
//!
//! A snapshot clones the head partitions' and segment handles' `Arc`s under the
//! state read lock, so a flush, compaction or retention run that swaps the live set
//! meanwhile neither blocks the scan nor deletes a file it still reads.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::state::{PartitionRef, SegmentHandle};
use super::{Inner, Store};
use crate::error::Result;
use crate::exec::frames::Frames;
use crate::exec::{self, Source, SummarySource, TimeRange};
use crate::model::TenantId;
use crate::stats::inc;

/// Which sources a scan reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Head partitions and segments.
    All,
    /// Immutable segments only (cacheable while `segments_version` is unchanged).
    Segments,
    /// Head partitions, including those being flushed.
    Head,
}

/// One source of a snapshot.
pub(super) enum Item {
    Head(PartitionRef),
    Segment(Arc<SegmentHandle>),
}

impl Store {
    /// Names frames kept as addresses (a mapping with a build id, no function)
    /// with `symbols` at query time, from the next query on.
    pub fn set_symbolizer(&self, symbols: std::sync::Arc<profiledb_symbolize::Symbolizer>) {
        self.inner.frames.set_symbolizer(symbols);
    }

    /// The symbolizer set with [`Store::set_symbolizer`].
    pub fn symbolizer(&self) -> Option<std::sync::Arc<profiledb_symbolize::Symbolizer>> {
        self.inner.frames.symbolizer()
    }

    /// Changes whenever the set of live segments changes, or a debug file arrives
    /// (names of frames kept as addresses may change: the symbolizer's generation
    /// is added in). A result computed from segments only is still valid while
    /// this value is unchanged.
    pub fn segments_version(&self) -> u64 {
        self.inner.segments_version.load(Ordering::SeqCst) + self.inner.frames.symbols_generation()
    }

    /// `Some(segments_version)` when no head partition of `tenant` (nor one being
    /// flushed) overlaps any of `ranges`: an answer over them then comes from
    /// immutable segments alone and stays valid while that version is unchanged.
    /// Read under one lock, so a flush (which moves a partition and bumps the version
    /// under the write lock) is either wholly before or wholly after it.
    pub fn segments_only_version(&self, tenant: &TenantId, ranges: &[TimeRange]) -> Option<u64> {
        let st = self.inner.state.read();
        for p in st.partitions() {
            let g = p.read();
            if &g.tenant == tenant && ranges.iter().any(|r| r.overlaps(g.start_ms, g.end_ms())) {
                return None;
            }
        }
        Some(self.segments_version())
    }
}

/// A read-only handle on a store's data: what the querier holds. Cheap to clone;
/// it keeps the data readable, not the store's threads running.
#[derive(Clone)]
pub(crate) struct StoreReader(pub(super) Arc<Inner>);

impl StoreReader {
    /// Runs `f` over every data source of `tenant` in `scope` (head partitions,
    /// segments, or both) overlapping `range`, in parallel, each thread folding
    /// into its own accumulator from `init`. The building block of every query;
    /// the scopes let a cache keep the segment part and compute the head part live.
    pub fn scan_scoped<T: Send>(
        &self,
        tenant: &TenantId,
        range: TimeRange,
        scope: Scope,
        init: impl Fn() -> T + Sync,
        f: impl Fn(&mut T, &dyn Source) -> Result<()> + Sync,
    ) -> Result<Vec<T>> {
        inc(&self.0.stats.queries, 1);
        let items = self.0.snapshot(tenant, range, scope);
        let _running = Running::new(&self.0.scans);
        exec::par_fold(&items, self.0.cfg.threads(), init, |acc, item| match item {
            Item::Head(p) => f(acc, &*p.read()),
            Item::Segment(h) => match self.0.load(h)? {
                Some(seg) => f(acc, &*seg),
                None => Ok(()),
            },
        })
    }

    /// Like [`StoreReader::scan_scoped`], for queries answered from labels and
    /// per-step totals alone: a segment is read as its summary (four small
    /// sections) unless it is decoded in the cache anyway, so such a query never
    /// decodes (nor, on a querier, downloads) a segment's stacks and rows.
    pub fn scan_summaries<T: Send>(
        &self,
        tenant: &TenantId,
        range: TimeRange,
        scope: Scope,
        init: impl Fn() -> T + Sync,
        f: impl Fn(&mut T, &dyn SummarySource) -> Result<()> + Sync,
    ) -> Result<Vec<T>> {
        inc(&self.0.stats.queries, 1);
        let items = self.0.snapshot(tenant, range, scope);
        let _running = Running::new(&self.0.scans);
        exec::par_fold(&items, self.0.cfg.threads(), init, |acc, item| match item {
            Item::Head(p) => f(acc, &*p.read()),
            Item::Segment(h) => match self.0.summary(h)? {
                Some(s) => f(acc, s.source()),
                None => Ok(()),
            },
        })
    }

    /// See [`Store::segments_version`].
    pub fn segments_version(&self) -> u64 {
        self.0.segments_version.load(Ordering::SeqCst) + self.0.frames.symbols_generation()
    }

    /// The store's shared frame tree (see [`crate::exec::frames`]).
    pub fn frames(&self) -> &Frames {
        &self.0.frames
    }
}

/// Counts a scan as running for as long as it lives (see `Inner::scans`).
struct Running<'a>(&'a AtomicUsize);

impl<'a> Running<'a> {
    fn new(n: &'a AtomicUsize) -> Self {
        n.fetch_add(1, Ordering::SeqCst);
        Running(n)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Inner {
    /// The sources of `tenant` in `scope` overlapping `range`.
    pub(super) fn snapshot(&self, tenant: &TenantId, range: TimeRange, scope: Scope) -> Vec<Item> {
        let mut items = self.snapshot_all(tenant, range);
        items.retain(|i| {
            matches!(
                (scope, i),
                (Scope::All, _)
                    | (Scope::Segments, Item::Segment(_))
                    | (Scope::Head, Item::Head(_))
            )
        });
        items
    }

    fn snapshot_all(&self, tenant: &TenantId, range: TimeRange) -> Vec<Item> {
        let st = self.state.read();
        let mut items = Vec::new();
        for p in st.partitions() {
            let g = p.read();
            if &g.tenant == tenant && range.overlaps(g.start_ms, g.end_ms()) {
                items.push(Item::Head(p.clone()));
            }
        }
        for h in st.segments.values() {
            // A window starting inside a partition's last step touches the partition
            // but selects none of its steps (a dashboard's moving window almost always
            // does): leaving it out saves a load and a scan thread.
            let m = &h.meta;
            if &m.tenant != tenant || !m.overlaps(range.start_ms, range.end_ms) {
                continue;
            }
            let (lo, hi) = crate::segment::step_range(
                m.partition_start_ms,
                m.step_ms,
                range.start_ms,
                range.end_ms,
            );
            if lo < hi {
                items.push(Item::Segment(h.clone()));
            }
        }
        // Largest segments first: scan threads take items in order, and a big
        // segment taken last (the newest hour is often the biggest, and has the
        // largest id) left one thread working alone on it while the others had
        // finished: the first query after a restart, which also loads each one,
        // waited for it. Heads stay ahead of segments.
        items.sort_by_key(|i| match i {
            Item::Head(_) => (0, std::cmp::Reverse(0)),
            Item::Segment(h) => (1, std::cmp::Reverse(h.meta.size_bytes)),
        });
        items
    }
}
