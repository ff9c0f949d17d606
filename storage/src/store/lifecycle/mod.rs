//! The lifecycle role: compaction, downsampling and retention, run by the
//! background `profiledb-compactor` thread or on request (admin API, CLI).
//!
//! One run at a time (the lifecycle lock). A run plans under the state read lock
//! (`plan.rs`), merges each planned partition without any store lock (`merge.rs`,
//! with the re-encoding in `crate::merger`), and swaps the output in under the
//! write lock; retention (`retention.rs`) drops whole expired segments. Replaced and
//! expired files are deleted once no query reads them (`super::segments`).

mod merge;
mod plan;
mod report;
mod retention;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam::channel::{Receiver, RecvTimeoutError};
use tracing::{error, info, warn};

pub(crate) use plan::output_step;
pub use report::{
    CompactProgress, CompactReport, CompactedPartition, RetentionReport, SkippedPartition,
};

use super::{now_ms, Inner, Store};
use crate::catalog::TenantSettings;
use crate::config::duration_ms;
use crate::error::{Result, StorageError};
use crate::model::TenantId;
use crate::query::TimeRange;
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

    /// [`Store::apply_retention`] with an explicit clock.
    pub fn apply_retention_at(&self, now_ms: i64) -> Result<RetentionReport> {
        self.inner.apply_retention(now_ms)
    }
}

impl Inner {
    pub(in crate::store) fn compactor_loop(self: Arc<Self>, stop: Receiver<()>) {
        loop {
            match stop.recv_timeout(self.cfg.compaction_interval) {
                Err(RecvTimeoutError::Timeout) => {}
                _ => return,
            }
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
            match self.compact(None, None, true, now, &|_| {}) {
                Ok(r) => {
                    if !r.compacted.is_empty() {
                        info!(
                            partitions = r.compacted.len(),
                            bytes_before = r.bytes_before,
                            bytes_after = r.bytes_after,
                            elapsed_ms = r.elapsed_ms,
                            "background compaction done"
                        );
                    }
                    for s in r.skipped {
                        warn!(tenant = %s.tenant, partition = s.partition_start_ms, reason = %s.reason, "partition not compacted");
                    }
                }
                Err(e) => error!(error = %e, "background compaction failed"),
            }
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
        let _guard = self.lifecycle.lock();
        let started = Instant::now();
        self.reap_retired();
        let (segments_before, bytes_before) = self.live_totals();
        let scope = plan::Scope {
            tenant,
            range,
            background,
            grace_ms: duration_ms(self.cfg.flush_grace),
            now_ms: now,
        };
        let planned = plan::plan(
            self.state.read().segments.values(),
            &scope,
            &self.cfg.downsample,
        );
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
        for p in planned.partitions {
            if self.closed.load(Ordering::SeqCst) {
                break;
            }
            let bytes: u64 = p.sources.iter().map(|h| h.meta.size_bytes).sum();
            let (tenant, partition_start_ms) = (p.tenant.clone(), p.partition_start_ms);
            match self.compact_partition(p.sources, p.step_ms)? {
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
        Ok(report)
    }
}
