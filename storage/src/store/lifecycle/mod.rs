//! The lifecycle role: compaction, downsampling and retention, run by the
//! background `profiledb-compactor` thread or on request (admin API, CLI).
//!
//! One run at a time (the lifecycle lock). A run plans under the state read lock
//! (`plan.rs`), merges each planned partition without any store lock (`merge.rs`,
//! with the re-encoding in `merger.rs`), and swaps the output in under the
//! write lock; retention (`retention.rs`) drops whole expired segments. Replaced and
//! expired files are deleted once no query reads them (`super::segments`).

mod bases;
mod merge;
mod plan;
mod report;
mod retention;
#[cfg(test)]
pub(crate) use plan::{plan as plan_compaction, Scope as CompactionScope};

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam::channel::Receiver;
use tracing::{error, info, warn};

pub use report::{
    CompactProgress, CompactReport, CompactedPartition, RetentionReport, SkippedPartition,
};

use super::state::SegmentHandle;
use super::{now_ms, Inner, Store};
use crate::catalog::TenantSettings;
use crate::config::duration_ms;
use crate::error::{Result, StorageError};
use crate::exec::TimeRange;
use crate::model::TenantId;
use crate::stats::inc;
use merge::Outcome;

impl Store {
    /// Merges the live segments of each tenant and time partition that has more than
    /// one (or whose data is old enough to be downsampled per the configured rules)
    /// into one segment, partition by partition. `tenant` and `range` restrict which
    /// partitions are considered. `progress` is called after each partition.
    /// Queries and writes continue meanwhile; each partition switches atomically.
    pub fn compact(
        &self,
        tenant: Option<&TenantId>,
        range: Option<TimeRange>,
        progress: &dyn Fn(&CompactProgress),
    ) -> Result<CompactReport> {
        self.inner.compact(tenant, range, false, now_ms(), progress)
    }

    /// Like [`Store::compact`] with an explicit clock for downsampling decisions.
    pub fn compact_at(
        &self,
        tenant: Option<&TenantId>,
        range: Option<TimeRange>,
        now_ms: i64,
        progress: &dyn Fn(&CompactProgress),
    ) -> Result<CompactReport> {
        self.inner.compact(tenant, range, false, now_ms, progress)
    }

    /// Sets (or with `None` clears) the maximum data age of `tenant`. Takes effect
    /// at the next retention run ([`Store::apply_retention`] or the background
    /// compactor).
    pub fn set_retention(
        &self,
        tenant: &TenantId,
        max_age: Option<Duration>,
    ) -> Result<TenantSettings> {
        let mut s = self.inner.catalog.tenant_settings(tenant)?;
        s.max_age_ms = max_age.map(duration_ms);
        if s.max_age_ms.is_some_and(|a| a <= 0) {
            return Err(StorageError::Invalid("max_age must be positive".into()));
        }
        self.inner.catalog.set_tenant_settings(tenant, &s)?;
        Ok(s)
    }

    /// The stored settings of `tenant` (defaults: keep forever).
    pub fn tenant_settings(&self, tenant: &TenantId) -> Result<TenantSettings> {
        self.inner.catalog.tenant_settings(tenant)
    }

    /// Deletes every segment whose newest data is older than its tenant's maximum
    /// age, as whole files, from the catalog and the live set.
    pub fn apply_retention(&self) -> Result<RetentionReport> {
        self.inner.apply_retention(now_ms())
    }

    /// Merges the open partitions' segments in tiers, as the background compactor
    /// does after each flush (see `StoreConfig::open_merge_segments`), with an
    /// explicit clock deciding which partitions are still open.
    pub fn merge_open_partitions_at(&self, now_ms: i64) -> Result<CompactReport> {
        self.inner.merge_open(now_ms)
    }

    /// [`Store::apply_retention`] with an explicit clock.
    pub fn apply_retention_at(&self, now_ms: i64) -> Result<RetentionReport> {
        self.inner.apply_retention(now_ms)
    }
}

impl Inner {
    pub(in crate::store) fn compactor_loop(self: Arc<Self>, stop: Receiver<()>) {
        let mut next_full = Instant::now() + self.cfg.compaction_interval;
        loop {
            let wait = next_full.saturating_duration_since(Instant::now());
            crossbeam::select! {
                recv(stop) -> _ => return,
                recv(self.flushed.1) -> _ => {
                    // A flush landed: only the cheap tier merges of open partitions,
                    // unless the full run is due (a steady stream of flushes would
                    // otherwise keep retention and compaction from ever running).
                    self.log_compaction(self.merge_open(now_ms()), "open partition merge");
                    if Instant::now() < next_full {
                        continue;
                    }
                }
                default(wait) => {}
            }
            next_full = Instant::now() + self.cfg.compaction_interval;
            let now = now_ms();
            match self.apply_retention(now) {
                Ok(r) if !r.deleted.is_empty() => {
                    info!(
                        segments = r.deleted.len(),
                        bytes = r.bytes_deleted,
                        "retention deleted expired segments"
                    )
                }
                Ok(_) => {}
                Err(e) => error!(error = %e, "retention failed"),
            }
            let compacted = self.compact(None, None, true, now, &|_| {});
            self.log_compaction(compacted, "background compaction");
            self.log_compaction(self.merge_open(now), "open partition merge");
        }
    }

    fn log_compaction(&self, report: Result<CompactReport>, what: &str) {
        match report {
            Ok(r) => {
                if !r.compacted.is_empty() {
                    info!(
                        partitions = r.compacted.len(),
                        bytes_before = r.bytes_before,
                        bytes_after = r.bytes_after,
                        elapsed_ms = r.elapsed_ms,
                        "{what} done"
                    );
                }
                for s in r.skipped {
                    warn!(tenant = %s.tenant, partition = s.partition_start_ms, reason = %s.reason, "partition not compacted");
                }
            }
            Err(e) => error!(error = %e, "{what} failed"),
        }
    }

    /// The maximum age of every tenant that has one.
    fn max_ages(&self) -> Result<HashMap<TenantId, i64>> {
        Ok(self
            .catalog
            .all_tenant_settings()?
            .into_iter()
            .filter_map(|(t, s)| s.max_age_ms.map(|a| (t, a)))
            .collect())
    }

    /// (tenant, start, end) of every head partition, open or being flushed.
    fn head_ranges(&self) -> Vec<(TenantId, i64, i64)> {
        self.state
            .read()
            .partitions()
            .map(|p| {
                let p = p.read();
                (p.tenant.clone(), p.start_ms, p.end_ms())
            })
            .collect()
    }

    fn scope<'a>(
        &self,
        tenant: Option<&'a TenantId>,
        range: Option<TimeRange>,
        background: bool,
        now_ms: i64,
        busy: Vec<(TenantId, i64, i64)>,
        max_age_ms: HashMap<TenantId, i64>,
    ) -> plan::Scope<'a> {
        plan::Scope {
            max_age_ms,
            tenant,
            range,
            background,
            grace_ms: duration_ms(self.cfg.flush_grace),
            now_ms,
            blocks: self.cfg.blocks,
            busy,
            max_bytes: self.cfg.compaction_max_bytes,
        }
    }

    fn compact(
        &self,
        tenant: Option<&TenantId>,
        range: Option<TimeRange>,
        background: bool,
        now: i64,
        progress: &dyn Fn(&CompactProgress),
    ) -> Result<CompactReport> {
        // Taken before the plan reads the live segments: a partition that finishes
        // flushing in between is then a segment the plan sees.
        let scope = self.scope(
            tenant,
            range,
            background,
            now,
            self.head_ranges(),
            self.max_ages()?,
        );
        self.run_plan(progress, |live| {
            plan::plan(live, &scope, &self.cfg.downsample)
        })
    }

    /// Tier merges of the open partitions, repeated while a merge completes a tier
    /// of the next level; one report for all of them.
    fn merge_open(&self, now: i64) -> Result<CompactReport> {
        // Tier merges stay within their partition: no block, no head ranges needed.
        let scope = self.scope(None, None, true, now, Vec::new(), HashMap::new());
        let (min, max_bytes) = (self.cfg.open_merge_segments, self.cfg.open_merge_max_bytes);
        let mut total = CompactReport::default();
        // Each round lifts at least `min` segments a level up, so the levels bound it.
        for round in 0..16 {
            let r = self.run_plan(&|_| {}, |live| {
                plan::plan_open(live, &scope, min, max_bytes)
            })?;
            let done = r.compacted.is_empty();
            if round == 0 {
                (total.segments_before, total.bytes_before) = (r.segments_before, r.bytes_before);
            }
            (total.segments_after, total.bytes_after) = (r.segments_after, r.bytes_after);
            total.elapsed_ms += r.elapsed_ms;
            total.compacted.extend(r.compacted);
            total.skipped.extend(r.skipped);
            if done || !total.skipped.is_empty() {
                break;
            }
        }
        Ok(total)
    }

    /// Plans under the state read lock and merges partition by partition, under the
    /// lifecycle lock.
    fn run_plan(
        &self,
        progress: &dyn Fn(&CompactProgress),
        make_plan: impl FnOnce(&mut dyn Iterator<Item = &Arc<SegmentHandle>>) -> plan::Plan,
    ) -> Result<CompactReport> {
        let _guard = self.lifecycle.lock();
        let started = Instant::now();
        self.reap_retired();
        let (segments_before, bytes_before) = self.live_totals();
        let planned = make_plan(&mut self.state.read().segments.values());
        let mut report = CompactReport {
            segments_before,
            bytes_before,
            skipped: planned.skipped,
            ..Default::default()
        };
        let mut prog = CompactProgress {
            partitions_total: planned.partitions.len(),
            bytes_total: planned
                .partitions
                .iter()
                .flat_map(|p| p.sources.iter())
                .map(|h| h.meta.size_bytes)
                .sum(),
            ..Default::default()
        };
        progress(&prog);
        let merged_any = !planned.partitions.is_empty();
        for p in planned.partitions {
            if self.closed.load(Ordering::SeqCst) {
                break;
            }
            let bytes: u64 = p.sources.iter().map(|h| h.meta.size_bytes).sum();
            let (tenant, partition_start_ms) = (p.tenant.clone(), p.frame.start_ms);
            match self.compact_partition(p.sources, p.frame)? {
                Outcome::Compacted(done) => report.compacted.push(done),
                Outcome::Skipped(reason) => report.skipped.push(SkippedPartition {
                    tenant,
                    partition_start_ms,
                    reason: reason.to_string(),
                }),
            }
            prog.partitions_done += 1;
            prog.bytes_done += bytes;
            progress(&prog);
        }
        let (segments_after, bytes_after) = self.live_totals();
        report.segments_after = segments_after;
        report.bytes_after = bytes_after;
        report.elapsed_ms = started.elapsed().as_millis() as u64;
        inc(
            &self.stats.partitions_compacted,
            report.compacted.len() as u64,
        );
        for c in &report.compacted {
            inc(&self.stats.segments_compacted_away, c.sources.len() as u64);
            inc(&self.stats.compaction_bytes_read, c.bytes_before);
            inc(&self.stats.compaction_bytes_written, c.bytes_after);
        }
        inc(
            &self.stats.compaction_skipped_partitions,
            report.skipped.len() as u64,
        );
        // A merge may have cut a base, or replaced the last segment naming one.
        if merged_any {
            self.collect_bases()?;
        }
        Ok(report)
    }
}
