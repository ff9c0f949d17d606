//! Retention: whole segments past their tenant's maximum age leave the live set,
//! the catalog, and then the disk (once no query reads them).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::report::RetentionReport;
use crate::error::Result;
use crate::stats::inc;
use crate::store::state::SegmentHandle;
use crate::store::Inner;

impl Inner {
    pub(super) fn apply_retention(&self, now: i64) -> Result<RetentionReport> {
        let _guard = self.lifecycle.lock();
        let started = Instant::now();
        self.reap_retired();
        let (segments_before, bytes_before) = self.live_totals();
        let limits = self.max_ages()?;
        let expired: Vec<Arc<SegmentHandle>> = {
            let mut st = self.state.write();
            let ids: Vec<u64> = st
                .segments
                .values()
                .filter(|h| {
                    limits
                        .get(&h.meta.tenant)
                        .is_some_and(|&age| h.meta.expired(age, now))
                })
                .map(|h| h.meta.id)
                .collect();
            let out: Vec<_> = ids.iter().filter_map(|id| st.segments.remove(id)).collect();
            if !out.is_empty() {
                self.segments_version.fetch_add(1, Ordering::SeqCst);
            }
            out
        };
        let deleted: Vec<u64> = expired.iter().map(|h| h.meta.id).collect();
        self.retire(expired)?;
        self.collect_bases()?;
        let (segments_after, bytes_after) = self.live_totals();
        let report = RetentionReport {
            deleted,
            bytes_deleted: bytes_before - bytes_after.min(bytes_before),
            segments_before,
            segments_after,
            elapsed_ms: started.elapsed().as_millis() as u64,
        };
        inc(
            &self.stats.retention_segments_deleted,
            report.deleted.len() as u64,
        );
        inc(&self.stats.retention_bytes_deleted, report.bytes_deleted);
        Ok(report)
    }
}
