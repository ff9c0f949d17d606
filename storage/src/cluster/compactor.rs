//! The bucket compactor: merges small segments, expires old ones, collects garbage.
//!
//! Work is claimed per partition with a lease (a conditional write in the bucket),
//! so two compactors do not merge the same segments; a crashed compactor's lease
//! expires. Correctness does not rest on the lease: the merged segment replaces its
//! sources in the index only if every source is still live at the change's place
//! in the log, so a compactor that lost its lease (a long pause) finds its swap
//! void and deletes what it uploaded. Sources leave the index first and the
//! bucket only after the grace period, when no querier can still be reading
//! them; objects in no list of the index (a crash between upload and swap) are
//! deleted after the same grace. The compactor also writes the index's
//! checkpoints and prunes the log entries they cover (`bucket/log.rs`).
//!
//! A damaged source (missing, truncated, failing its checks) is quarantined
//! in the index and counted; a pass quarantines every one it meets and merges
//! the rest of the partition on the next.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tracing::{error, info, warn};

use super::entry::{entry_for, object_name};
use super::error::ClusterError;
use super::fault::{reached, Fault, FaultPoint};
use super::health::{Health, Turn};
use super::plan::{plan_merges, MergePlan, MergePolicy};
use super::Worker;
use crate::bucket::{segment_key, Bucket, BucketError, Lease, SegmentEntry, TenantView, LOG_GRACE};
use crate::compaction::{Merger, OutputFrame};
use crate::config::{duration_ms, DownsampleRule};
use crate::error::{Result, StorageError};
use crate::segment::{encode_segment, LoadedSegment, SegmentFile};
use crate::store::now_ms;

/// How a compactor works.
#[derive(Clone, Debug)]
pub struct CompactorConfig {
    /// The compactor's name in leases and object keys.
    pub id: String,
    /// How often it looks for work.
    pub interval: Duration,
    /// When to merge.
    pub policy: MergePolicy,
    /// How long a claimed partition stays claimed without renewal.
    pub lease_ttl: Duration,
    /// How long replaced and orphaned objects stay in the bucket (longer than any
    /// query and any querier's sync interval).
    pub grace: Duration,
    /// Data older than this is expired; `None` keeps everything.
    pub retention: Option<Duration>,
    /// Old partitions are rewritten at coarser steps (as a single node's
    /// compaction does).
    pub downsample: Vec<DownsampleRule>,
    /// zstd level of merged segments.
    pub zstd_level: i32,
    /// zstd level of wide and wider blocks, when higher (`BlockPolicy::zstd_level`).
    pub wide_zstd_level: i32,
    /// Fault injection for tests: sleep this long between uploading a merged
    /// segment and swapping it into the index (a window to kill the process in).
    pub pause_before_swap: Option<Duration>,
    /// A fault point armed for tests.
    pub fault: Option<Fault>,
}

/// Counters of the compactor for `/metrics`.
#[derive(Debug, Default)]
pub struct CompactorStats {
    /// Merged segments uploaded (swapped in or not).
    pub uploads: AtomicU64,
    /// Merges swapped into the index.
    pub merges: AtomicU64,
    /// Source segments they replaced.
    pub merged_sources: AtomicU64,
    /// Partitions skipped because another compactor holds their lease.
    pub lease_busy: AtomicU64,
    /// Merges abandoned because a source left the index meanwhile.
    pub lost_races: AtomicU64,
    /// Segments expired by retention.
    pub expired: AtomicU64,
    /// Objects deleted by garbage collection.
    pub deleted: AtomicU64,
    /// Damaged or missing sources this compactor took out of service (one
    /// another node quarantined first is not counted again).
    pub quarantined: AtomicU64,
    /// Index checkpoints written, and their bytes.
    pub checkpoints: AtomicU64,
    /// Bytes of the checkpoints written.
    pub checkpoint_bytes: AtomicU64,
    /// Log entries and old checkpoints deleted under a newer checkpoint.
    pub pruned: AtomicU64,
    /// Passes that failed.
    pub errors: AtomicU64,
}

struct Shared {
    bucket: Bucket,
    cfg: CompactorConfig,
    stats: CompactorStats,
    seq: AtomicU64,
    health: Health,
    /// Each tenant's index as this compactor follows it.
    views: Mutex<BTreeMap<String, TenantView>>,
}

/// A running compactor.
pub struct Compactor {
    shared: Arc<Shared>,
    _worker: Worker,
}

impl Compactor {
    /// Starts the compaction loop.
    pub fn start(bucket: Bucket, cfg: CompactorConfig) -> Result<Compactor, ClusterError> {
        let shared = Arc::new(Shared {
            bucket,
            cfg,
            stats: CompactorStats::default(),
            seq: AtomicU64::new(0),
            health: Health::default(),
            views: Mutex::new(BTreeMap::new()),
        });
        let worker = {
            let shared = shared.clone();
            Worker::spawn("profiledb-bucket-compactor", shared.cfg.interval, move || {
                let outcome = shared.pass();
                if outcome.is_err() {
                    shared.stats.errors.fetch_add(1, Ordering::Relaxed);
                }
                match (shared.health.record(&outcome), &outcome) {
                    (Turn::Failed, Err(e)) => {
                        warn!(error = %e, "bucket compaction pass failed; retried next interval");
                    }
                    (Turn::Recovered, _) => info!("bucket compaction passes succeed again"),
                    _ => {}
                }
                true
            })
            // No file is involved: the error names the thread that failed to start.
            .map_err(|e| StorageError::io("profiledb-bucket-compactor thread", e))?
        };
        Ok(Compactor {
            shared,
            _worker: worker,
        })
    }

    /// Counters for `/metrics`.
    pub fn stats(&self) -> &CompactorStats {
        &self.shared.stats
    }

    /// Why the last pass failed, if it did.
    pub fn last_error(&self) -> Option<String> {
        self.shared.health.last_error()
    }

    /// The compactor's standing with the bucket.
    pub fn health(&self) -> &Health {
        &self.shared.health
    }
}

impl Shared {
    fn pass(&self) -> Result<()> {
        for tenant in self.bucket.tenants()? {
            self.tenant_pass(&tenant)?;
        }
        Ok(())
    }

    fn tenant_pass(&self, tenant: &str) -> Result<()> {
        let mut view = self
            .views
            .lock()
            .remove(tenant)
            .unwrap_or_else(|| TenantView::new(tenant));
        let outcome = self.tenant_work(&mut view);
        self.views.lock().insert(tenant.to_string(), view);
        outcome
    }

    fn tenant_work(&self, view: &mut TenantView) -> Result<()> {
        let tenant = view.tenant.clone();
        let tenant = tenant.as_str();
        let now = now_ms();
        self.bucket.sync(view)?;
        let mut live = view.index.segments.clone();
        if let Some(keep) = self.cfg.retention {
            let cutoff = now - keep.as_millis() as i64;
            let expired: Vec<String> = live
                .iter()
                .filter(|e| e.max_ms <= cutoff)
                .map(|e| e.key.clone())
                .collect();
            if !expired.is_empty() {
                let n = self.bucket.retire_segments(view, &expired, now)?;
                self.stats.expired.fetch_add(n as u64, Ordering::Relaxed);
                info!(tenant, segments = n, "expired segments past retention");
                live.retain(|e| e.max_ms > cutoff);
            }
        }
        // The bucket's one retention decides whether it gets wide blocks.
        let policy = MergePolicy {
            blocks: self
                .cfg
                .policy
                .blocks
                .for_max_age(self.cfg.retention.map(duration_ms)),
            ..self.cfg.policy.clone()
        };
        for plan in plan_merges(&live, now, &policy, &self.cfg.downsample) {
            let name = format!("compact/{tenant}/{}+{}", plan.partition_ms, plan.width_ms);
            let ttl = self.cfg.lease_ttl;
            let Some(lease) = self.bucket.try_lease(&name, &self.cfg.id, ttl, now_ms())? else {
                self.stats.lease_busy.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            let sources: BTreeMap<&str, &SegmentEntry> =
                live.iter().map(|e| (e.key.as_str(), e)).collect();
            let mut lease = lease;
            let result = self.merge(view, &plan, &sources, &mut lease);
            if let Err(e) = self.bucket.release_lease(lease) {
                warn!(error = %e, lease = name, "could not release a lease; it expires");
            }
            result?;
        }
        let fault = &self.cfg.fault;
        let gc = self
            .bucket
            .collect_garbage_then(view, self.cfg.grace, now_ms(), |_| {
                reached(fault, FaultPoint::CompactorAfterGcDelete)
            })?;
        let deleted = gc.deleted_retired.len() + gc.deleted_orphans.len();
        if deleted > 0 {
            self.stats
                .deleted
                .fetch_add(deleted as u64, Ordering::Relaxed);
            info!(
                tenant,
                retired = gc.deleted_retired.len(),
                orphans = gc.deleted_orphans.len(),
                "deleted objects past the grace period"
            );
        }
        if view.checkpoint_due() {
            let n = self.bucket.write_checkpoint(view)?;
            self.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
            self.stats.checkpoint_bytes.fetch_add(n, Ordering::Relaxed);
            reached(&self.cfg.fault, FaultPoint::CompactorAfterCheckpoint)?;
            let pruned = self.bucket.prune_log(tenant, LOG_GRACE, now_ms())?;
            self.stats
                .pruned
                .fetch_add(pruned as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Merges one plan's segments into one object and swaps it in.
    fn merge(
        &self,
        view: &mut TenantView,
        plan: &MergePlan,
        live: &BTreeMap<&str, &SegmentEntry>,
        lease: &mut Lease,
    ) -> Result<()> {
        let tenant = view.tenant.clone();
        let tenant = tenant.as_str();
        let mut segs: Vec<LoadedSegment> = Vec::with_capacity(plan.keys.len());
        let mut bad = Vec::new();
        for key in &plan.keys {
            let size = live.get(key.as_str()).map_or(0, |e| e.bytes);
            match self.load(key, size) {
                Ok(seg) => segs.push(seg),
                // Every bad source of the plan, not just the first: one pass
                // takes them all out of service.
                Err(Load::Bad(why)) => bad.push((key, why)),
                Err(Load::Failed(e)) => return Err(e),
            }
        }
        if !bad.is_empty() {
            for (key, why) in bad {
                if self.bucket.quarantine_segment(view, key, &why, now_ms())? {
                    self.stats.quarantined.fetch_add(1, Ordering::Relaxed);
                    error!(tenant, key, reason = %why, "damaged bucket segment quarantined; the rest of its partition is merged next pass");
                } else {
                    warn!(tenant, key, reason = %why, "bucket segment already out of service (another node quarantined it)");
                }
            }
            return Ok(());
        }
        let mut merger = Merger::new(OutputFrame {
            start_ms: plan.partition_ms,
            width_ms: plan.width_ms,
            step_ms: plan.step_ms,
        });
        for s in &segs {
            merger.add(s)?;
        }
        let id = self.seq.fetch_add(1, Ordering::Relaxed);
        // Bucket segments record no WAL position or local sources: writers'
        // LSNs and ids mean nothing outside their own data directory.
        let Some(mut meta) =
            merger.merged_meta(id, segs.iter().map(|s| &s.meta), Vec::new(), now_ms())
        else {
            return Ok(());
        };
        meta.max_lsn = 0;
        let expected = segs
            .iter()
            .fold(0i64, |a, s| a.wrapping_add(s.meta.value_total));
        let level = self.cfg.policy.blocks.zstd_level(
            meta.partition_ms,
            self.cfg.zstd_level,
            self.cfg.wide_zstd_level,
        );
        let (bytes, mut meta) = encode_segment(merger.finish(meta), level)?;
        if meta.value_total != expected {
            error!(
                tenant,
                merged = meta.value_total,
                expected,
                "merged total differs from the sources'; merge dropped"
            );
            return Ok(());
        }
        meta.size_bytes = bytes.len() as u64;
        // The merged segment's summary sections give its labels, as writers do.
        let name = object_name(&format!("c-{}-{:x}", self.cfg.id, meta.created_ms), id);
        let key = segment_key(tenant, &name);
        let summary =
            open_in_memory(&key, &bytes)?.load_summary_with(|o, l| slice_at(&bytes, o, l))?;
        let entry = entry_for(&key, &meta, &summary, &self.cfg.id);
        self.bucket.put(&key, bytes.into())?;
        self.stats.uploads.fetch_add(1, Ordering::Relaxed);
        if let Some(pause) = self.cfg.pause_before_swap {
            std::thread::sleep(pause);
        }
        reached(&self.cfg.fault, FaultPoint::CompactorAfterUpload)?;
        // A lease lost while merging (a pause past its expiry) means another
        // compactor may be merging the same segments: leave it to them.
        if !self
            .bucket
            .renew_lease(lease, self.cfg.lease_ttl, now_ms())?
        {
            warn!(
                tenant,
                partition = plan.partition_ms,
                "lease lost during the merge; merged object deleted"
            );
            self.bucket.delete(&key)?;
            return Ok(());
        }
        let sources: Vec<String> = plan
            .keys
            .iter()
            .filter(|k| live.contains_key(k.as_str()))
            .cloned()
            .collect();
        match self
            .bucket
            .replace_segments(view, &sources, vec![entry], now_ms())
        {
            Ok(()) => {
                reached(&self.cfg.fault, FaultPoint::CompactorAfterSwap)?;
                self.stats.merges.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .merged_sources
                    .fetch_add(sources.len() as u64, Ordering::Relaxed);
                info!(
                    tenant,
                    partition = plan.partition_ms,
                    width_ms = plan.width_ms,
                    sources = sources.len(),
                    key,
                    "merged bucket segments"
                );
                Ok(())
            }
            Err(BucketError::SourcesGone { key: gone }) => {
                self.stats.lost_races.fetch_add(1, Ordering::Relaxed);
                warn!(
                    tenant,
                    source = gone,
                    "a source left the index during the merge; merged object deleted"
                );
                self.bucket.delete(&key)?;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    fn load(&self, key: &str, size: u64) -> std::result::Result<LoadedSegment, Load> {
        let bytes = match self.bucket.get_sized(key, size) {
            Ok(b) => b,
            Err(BucketError::NotFound { .. }) => {
                return Err(Load::Bad(
                    "listed in the index but missing from the bucket".into(),
                ))
            }
            Err(e) if e.is_damage() => return Err(Load::Bad(e.to_string())),
            Err(e) => return Err(Load::Failed(e.into())),
        };
        let loaded = open_in_memory(key, &bytes).and_then(|f| f.load_from(bytes.to_vec()));
        match loaded {
            Ok(seg) => Ok(seg),
            Err(e) if e.is_corruption() => Err(Load::Bad(e.to_string())),
            Err(e) => Err(Load::Failed(e)),
        }
    }
}

/// A segment whose bytes are in memory (downloaded or just encoded), opened
/// without a round trip through the disk; `key` names it in errors.
fn open_in_memory(key: &str, bytes: &[u8]) -> Result<SegmentFile> {
    SegmentFile::open_with(Path::new(key), bytes.len() as u64, |o, l| {
        slice_at(bytes, o, l)
    })
}

/// `len` bytes at `offset` of `bytes`; a range past the end is corruption (the
/// footer pointed outside the object).
fn slice_at(bytes: &[u8], offset: u64, len: usize) -> Result<Vec<u8>> {
    usize::try_from(offset)
        .ok()
        .and_then(|o| bytes.get(o..o.checked_add(len)?))
        .map(<[u8]>::to_vec)
        .ok_or_else(|| StorageError::Corrupt("a section lies past the end of the object".into()))
}

/// Why a source could not be read.
enum Load {
    /// Damaged or missing: quarantine it.
    Bad(String),
    /// The bucket or the disk failed: retry later.
    Failed(crate::error::StorageError),
}
