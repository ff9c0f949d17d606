//! `profiledb serve --storage s3://…`: the process as part of a cluster sharing a
//! bucket. Each role is a local store plus a storage-crate loop
//! (`profiledb_storage::{Uploader, Mirror, Compactor}`); this module opens them
//! under `--data-dir` (`writer/`, `querier/`, `compactor/`) and hands the server
//! what each role serves: the writer's store to the ingest pipeline, the
//! querier's mirror store to every query endpoint.

pub mod options;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use profiledb_storage::{
    Bucket, Compactor, CompactorConfig, Mirror, MirrorConfig, Store, StoreConfig, Uploader,
    UploaderConfig,
};

pub use options::{Ack, ClusterOptions, Roles};

use crate::error::ApiError;
use crate::metrics::family;

/// How long an `--ack bucket` write waits for its upload before it is answered
/// as durable in the local WAL only (header `X-Profiledb-Ack: local`).
pub const ACK_WAIT: Duration = Duration::from_secs(15);

/// The roles running in this process.
pub struct Running {
    pub roles: Roles,
    pub bucket: Bucket,
    pub writer: Option<Arc<Store>>,
    pub uploader: Option<Arc<Uploader>>,
    pub querier: Option<Arc<Store>>,
    pub mirror: Option<Mirror>,
    pub compactor: Option<Compactor>,
}

/// The stores and loops of `opts`' roles, under `data_dir`. Blocking (WAL
/// replay, the first index sync): call from a blocking thread.
pub fn open(
    data_dir: &std::path::Path,
    base: &StoreConfig,
    opts: &ClusterOptions,
    replay: &profiledb_storage::ReplayProgress,
) -> anyhow::Result<Running> {
    let bucket = Bucket::open(&opts.bucket)
        .with_context(|| format!("cannot open the object store {}", opts.bucket.url))?;
    let node = options::node_id(data_dir)?;
    tracing::info!(bucket = %bucket.describe(), roles = %opts.roles.names(), node, "joining the cluster");
    // The bucket, not a local store, compacts and expires: local lifecycle off.
    let local = StoreConfig {
        background_compaction: false,
        // Segments go to the bucket, whose readers fetch no symbol bases.
        symbol_bases: false,
        ..base.clone()
    };
    let (mut writer, mut uploader) = (None, None);
    if opts.roles.writer {
        let dir = data_dir.join("writer");
        let cfg = StoreConfig {
            warm_segment_cache: false,
            ..local.clone()
        };
        let store = Arc::new(
            Store::open_with_progress(&dir, cfg, replay)
                .with_context(|| format!("cannot open the writer's store in {}", dir.display()))?,
        );
        let up = Uploader::start(
            store.clone(),
            bucket.clone(),
            UploaderConfig {
                writer_id: node.clone(),
                interval: opts.upload_interval,
            },
        )?;
        writer = Some(store);
        uploader = Some(Arc::new(up));
    }
    let (mut querier, mut mirror) = (None, None);
    if opts.roles.querier {
        let dir = data_dir.join("querier");
        let store =
            Arc::new(Store::open(&dir, local.clone()).with_context(|| {
                format!("cannot open the querier's store in {}", dir.display())
            })?);
        let m = Mirror::start(
            store.clone(),
            bucket.clone(),
            MirrorConfig {
                interval: opts.sync_interval,
                disk_budget_bytes: opts.querier_disk_bytes,
            },
        )?;
        querier = Some(store);
        mirror = Some(m);
    }
    let compactor = if opts.roles.compactor {
        Some(Compactor::start(
            bucket.clone(),
            CompactorConfig {
                id: node,
                interval: opts.compaction_interval,
                policy: opts.merge.clone(),
                lease_ttl: opts.lease_ttl,
                grace: opts.gc_grace,
                retention: opts.retention,
                downsample: base.downsample.clone(),
                zstd_level: base.zstd_level,
                wide_zstd_level: base.wide_zstd_level,
                pause_before_swap: opts.compactor_pause,
            },
        )?)
    } else {
        None
    };
    Ok(Running {
        roles: opts.roles,
        bucket,
        writer,
        uploader,
        querier,
        mirror,
        compactor,
    })
}

impl Running {
    /// 503 while the mirror cannot reach the bucket: its answers would be stale.
    pub fn check_queries(&self) -> Result<(), ApiError> {
        match &self.mirror {
            Some(m) if !m.healthy() => Err(ApiError::unavailable(format!(
                "the object store is unreachable, so answers could be stale: {}",
                m.last_error().unwrap_or_default()
            ))),
            Some(m) if !m.synced() => Err(ApiError::unavailable(match m.last_error() {
                Some(e) => format!("this querier could not read the bucket index yet: {e}"),
                None => "this querier has not read the bucket index yet".to_string(),
            })),
            _ => Ok(()),
        }
    }

    /// True once every role can serve (the querier has synced once).
    pub fn ready(&self) -> bool {
        self.mirror.as_ref().is_none_or(|m| m.synced())
    }

    /// Stops uploading after a last pass, so a clean shutdown leaves nothing
    /// acknowledged only in the local WAL.
    pub fn stop(&self) {
        if let Some(u) = &self.uploader {
            if let Err(e) = u.stop() {
                tracing::error!(error = %e, "last upload at shutdown failed; the WAL keeps the data and it is uploaded at the next start");
            }
        }
    }

    /// Cluster gauges and counters for `/metrics`.
    pub fn render_metrics(&self, out: &mut String) {
        use std::sync::atomic::Ordering::Relaxed;
        let b = self.bucket.stats();
        for (name, help, v) in [
            (
                "profiledb_bucket_get_requests_total",
                "GET requests to the object store (whole and ranged).",
                b.gets + b.range_gets,
            ),
            (
                "profiledb_bucket_put_requests_total",
                "PUT requests to the object store.",
                b.puts,
            ),
            (
                "profiledb_bucket_list_requests_total",
                "LIST requests to the object store.",
                b.lists,
            ),
            (
                "profiledb_bucket_delete_requests_total",
                "DELETE requests to the object store.",
                b.deletes,
            ),
            (
                "profiledb_bucket_read_bytes_total",
                "Bytes read from the object store.",
                b.bytes_read,
            ),
            (
                "profiledb_bucket_written_bytes_total",
                "Bytes written to the object store.",
                b.bytes_written,
            ),
            (
                "profiledb_bucket_cas_conflicts_total",
                "Conditional writes that lost a race and were retried.",
                b.cas_conflicts,
            ),
            (
                "profiledb_bucket_errors_total",
                "Object store requests that failed.",
                b.errors,
            ),
        ] {
            family(out, name, "counter", help, v);
        }
        if let Some(u) = &self.uploader {
            let s = u.stats();
            family(
                out,
                "profiledb_upload_segments_total",
                "counter",
                "Segments a writer uploaded.",
                s.segments.load(Relaxed),
            );
            family(
                out,
                "profiledb_upload_bytes_total",
                "counter",
                "Bytes a writer uploaded.",
                s.bytes.load(Relaxed),
            );
            family(
                out,
                "profiledb_upload_passes_total",
                "counter",
                "Upload passes the writer's loop ran, failed or not.",
                s.passes.load(Relaxed),
            );
            family(
                out,
                "profiledb_upload_errors_total",
                "counter",
                "Upload passes that failed (retried).",
                s.errors.load(Relaxed),
            );
            family(
                out,
                "profiledb_upload_pending_segments",
                "gauge",
                "Local segments waiting for upload.",
                s.pending.load(Relaxed),
            );
            family(
                out,
                "profiledb_upload_watermark_lsn",
                "gauge",
                "Highest WAL record durable in the bucket.",
                s.watermark.load(Relaxed),
            );
            family(
                out,
                "profiledb_bucket_healthy",
                "gauge",
                "1 while the writer reaches the object store.",
                u64::from(u.healthy()),
            );
        }
        if let Some(m) = &self.mirror {
            let s = m.stats();
            family(
                out,
                "profiledb_mirror_syncs_total",
                "counter",
                "Index sync passes of a querier.",
                s.syncs.load(Relaxed),
            );
            family(
                out,
                "profiledb_mirror_errors_total",
                "counter",
                "Index sync passes that failed.",
                s.errors.load(Relaxed),
            );
            family(
                out,
                "profiledb_mirror_downloads_total",
                "counter",
                "Segment objects a querier downloaded.",
                s.downloads.load(Relaxed),
            );
            family(
                out,
                "profiledb_mirror_download_bytes_total",
                "counter",
                "Bytes of segment objects downloaded.",
                s.download_bytes.load(Relaxed),
            );
            family(
                out,
                "profiledb_mirror_summaries_total",
                "counter",
                "Segment summaries (labels and totals) a querier read with ranged GETs instead of downloading the object.",
                s.summaries.load(Relaxed),
            );
            family(
                out,
                "profiledb_mirror_section_reads_total",
                "counter",
                "Ranged GETs of segment summary sections.",
                s.section_reads.load(Relaxed),
            );
            family(
                out,
                "profiledb_mirror_section_bytes_total",
                "counter",
                "Bytes of segment summary sections read.",
                s.section_bytes.load(Relaxed),
            );
            family(
                out,
                "profiledb_mirror_quarantined_total",
                "counter",
                "Objects this node found corrupt or missing and took out of service.",
                s.quarantined.load(Relaxed),
            );
            family(
                out,
                "profiledb_mirror_live_segments",
                "gauge",
                "Bucket segments a querier serves.",
                s.live.load(Relaxed),
            );
        }
        if let Some(c) = &self.compactor {
            let s = c.stats();
            family(
                out,
                "profiledb_bucket_merge_uploads_total",
                "counter",
                "Merged segments uploaded (swapped in or not).",
                s.uploads.load(Relaxed),
            );
            family(
                out,
                "profiledb_bucket_merges_total",
                "counter",
                "Merges swapped into the bucket index.",
                s.merges.load(Relaxed),
            );
            family(
                out,
                "profiledb_bucket_merged_sources_total",
                "counter",
                "Segments replaced by merges.",
                s.merged_sources.load(Relaxed),
            );
            family(
                out,
                "profiledb_bucket_lease_busy_total",
                "counter",
                "Partitions skipped: another compactor held the lease.",
                s.lease_busy.load(Relaxed),
            );
            family(
                out,
                "profiledb_bucket_merge_races_total",
                "counter",
                "Merges abandoned: a source left the index meanwhile.",
                s.lost_races.load(Relaxed),
            );
            family(
                out,
                "profiledb_bucket_expired_segments_total",
                "counter",
                "Segments expired by retention.",
                s.expired.load(Relaxed),
            );
            family(
                out,
                "profiledb_bucket_deleted_objects_total",
                "counter",
                "Objects deleted past the grace period.",
                s.deleted.load(Relaxed),
            );
            family(
                out,
                "profiledb_bucket_compaction_errors_total",
                "counter",
                "Compaction passes that failed.",
                s.errors.load(Relaxed),
            );
        }
    }
}

/// The `--ack bucket` gate of the ingest pipeline: refuses writes while the
/// bucket is unreachable (nothing is written, so a retry cannot double count)
/// and waits for a write's upload before it is acknowledged.
pub struct UploadGate(pub Arc<Uploader>);

impl UploadGate {
    /// 503 before anything is written when the last upload pass failed.
    pub fn admit(&self) -> Result<(), ApiError> {
        if self.0.healthy() {
            return Ok(());
        }
        Err(ApiError::unavailable(format!(
            "the object store is unreachable, so this write could not be made durable there (--ack bucket); nothing was stored, retry later: {}",
            self.0.last_error().unwrap_or_default()
        ))
        .with_retry_after(5))
    }

    /// Waits (on a blocking thread) until record `lsn` is in the bucket; false
    /// when [`ACK_WAIT`] passed first (it is in the local WAL and uploads later).
    pub async fn uploaded(&self, lsn: u64) -> bool {
        let up = self.0.clone();
        tokio::task::spawn_blocking(move || up.wait_uploaded(lsn, ACK_WAIT))
            .await
            .unwrap_or(false)
    }
}
