//! Cluster: running as one role of a cluster sharing a bucket (docs/operations.md,
//! "Running a cluster on three machines").

use std::time::Duration;

use anyhow::bail;
use profiledb_storage::{BucketConfig, MergePolicy};

use super::{positive, to_ms};
use crate::cluster::split::{self, SplitOptions};
use crate::cluster::{Ack, ClusterOptions, Roles};
use crate::ServeOptions;

#[derive(clap::Args, Clone, Debug)]
#[command(next_help_heading = "Cluster")]
pub struct ClusterArgs {
    /// Keep segments in an object store: s3://bucket/prefix (S3, MinIO, Ceph RGW;
    /// credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY) or
    /// file:///dir. Unset: one process with everything in --data-dir.
    #[arg(long, value_name = "URL")]
    pub storage: Option<String>,
    /// Roles of this process with --storage: all, or a list of writer, querier,
    /// compactor.
    #[arg(long, default_value = "all")]
    pub role: String,
    /// S3 endpoint for non-AWS stores, e.g. http://127.0.0.1:9000 (plain HTTP is
    /// allowed for an http:// endpoint). Default: AWS_ENDPOINT_URL or AWS.
    #[arg(long, value_name = "URL")]
    pub s3_endpoint: Option<String>,
    /// S3 region. Default: AWS_REGION or us-east-1.
    #[arg(long)]
    pub s3_region: Option<String>,
    /// When a writer acknowledges a write.
    #[arg(long, value_enum, default_value_t = Ack::Bucket)]
    pub ack: Ack,
    /// Milliseconds between a writer's flush-and-upload passes.
    #[arg(long, default_value_t = 1000)]
    pub upload_interval_ms: u64,
    /// Milliseconds between a querier's checks of the bucket index.
    #[arg(long, default_value_t = 1000)]
    pub sync_interval_ms: u64,
    /// MiB of segment bodies a querier keeps on local disk (least recently
    /// fetched go first; a query needing one again downloads it again).
    #[arg(long, default_value_t = 10_240)]
    pub querier_disk_cache_mb: u64,
    /// Seconds between a compactor's passes.
    #[arg(long, default_value_t = 10)]
    pub bucket_compaction_interval_secs: u64,
    /// A compactor merges an active partition once it has this many segments.
    #[arg(long, default_value_t = 8)]
    pub merge_min_segments: usize,
    /// Seconds without a new segment after which a compactor merges a partition
    /// however few segments it has (the hour is over).
    #[arg(long, default_value_t = 60)]
    pub merge_settle_secs: u64,
    /// Seconds a replaced or orphaned object stays in the bucket before deletion
    /// (longer than any query and any querier's sync interval).
    #[arg(long, default_value_t = 300)]
    pub gc_grace_secs: u64,
    /// Seconds a compactor's claim on a partition lasts without renewal (a crashed
    /// compactor's work is picked up after it).
    #[arg(long, default_value_t = 120)]
    pub lease_ttl_secs: u64,
    /// Days of data the compactor keeps in the bucket (unset: everything).
    #[arg(long)]
    pub bucket_retention_days: Option<u64>,
    /// Milliseconds one request to the object store may wait for an answer (and
    /// for each further read of a body) before it counts as failed. A store that
    /// hangs is noticed within about (--s3-retries + 1) times this.
    #[arg(long, default_value_t = 2000)]
    pub s3_timeout_ms: u64,
    /// How often a failed or timed-out request to the object store is tried
    /// again before the store counts as unreachable.
    #[arg(long, default_value_t = 1)]
    pub s3_retries: usize,
    /// A querier whose last successful sync of the bucket index is older than
    /// this many seconds answers queries 503 (saying so) rather than possibly
    /// stale data, and /ready says so.
    #[arg(long, default_value_t = 10)]
    pub max_sync_age_secs: u64,
    /// Querier peers a long query is split across: comma-separated base URLs
    /// (http://host:port). A host name is resolved again at every query, so one
    /// DNS name with an address per querier (a Kubernetes headless service)
    /// names them all; this querier's own address may be among them.
    #[arg(long, value_name = "URLS", default_value = "")]
    pub querier_peers: String,
    /// A querier splits a query across its peers once its range reads at least
    /// this many segments and blocks (2 splits every query that can be split).
    #[arg(long, default_value_t = 16)]
    pub split_min_blocks: usize,
    /// Milliseconds a peer gets to answer one part of a split query before the
    /// part is asked of another peer (then computed by the asking querier).
    #[arg(long, default_value_t = 30_000)]
    pub split_part_timeout_ms: u64,
    /// Fault injection for tests: a compactor sleeps this long between uploading a
    /// merged segment and swapping it into the index.
    #[arg(long, hide = true)]
    pub fault_compactor_pause_ms: Option<u64>,
}

impl ClusterArgs {
    /// `None` without --storage (the single-node default). A compactor merges
    /// into the blocks of `o.store`, so storage's flags apply first.
    pub fn apply(&self, o: &mut ServeOptions) -> anyhow::Result<()> {
        o.cluster = self.options(o.store.blocks)?;
        Ok(())
    }

    fn options(
        &self,
        blocks: profiledb_storage::BlockPolicy,
    ) -> anyhow::Result<Option<ClusterOptions>> {
        let Some(url) = self.storage.as_deref() else {
            if self.role != "all" {
                bail!(
                    "--role {} needs --storage: roles split a cluster sharing a bucket",
                    self.role
                );
            }
            return Ok(None);
        };
        let roles = Roles::parse(&self.role)?;
        let mut bucket = bucket_config(url, self.s3_endpoint.as_deref(), self.s3_region.as_deref());
        bucket.request_timeout =
            Duration::from_millis(positive(self.s3_timeout_ms, "s3-timeout-ms")?);
        bucket.retries = self.s3_retries;
        Ok(Some(ClusterOptions {
            bucket,
            roles,
            ack: self.ack,
            upload_interval: Duration::from_millis(positive(
                self.upload_interval_ms,
                "upload-interval-ms",
            )?),
            sync_interval: Duration::from_millis(positive(
                self.sync_interval_ms,
                "sync-interval-ms",
            )?),
            querier_disk_bytes: super::mib(self.querier_disk_cache_mb),
            compaction_interval: Duration::from_secs(positive(
                self.bucket_compaction_interval_secs,
                "bucket-compaction-interval-secs",
            )?),
            merge: MergePolicy {
                min_segments: self.merge_min_segments.max(2),
                settle_ms: to_ms(self.merge_settle_secs, 1000, "merge-settle-secs")?,
                blocks,
                ..MergePolicy::default()
            },
            gc_grace: Duration::from_secs(self.gc_grace_secs),
            lease_ttl: Duration::from_secs(positive(self.lease_ttl_secs, "lease-ttl-secs")?),
            retention: self
                .bucket_retention_days
                .map(|d| Duration::from_secs(d.saturating_mul(86_400))),
            compactor_pause: self.fault_compactor_pause_ms.map(Duration::from_millis),
            max_sync_age: Duration::from_secs(positive(
                self.max_sync_age_secs,
                "max-sync-age-secs",
            )?),
            split: self.split(&roles)?,
        }))
    }
}

impl ClusterArgs {
    fn split(&self, roles: &Roles) -> anyhow::Result<SplitOptions> {
        let peers = split::peers::parse_list(&self.querier_peers)?;
        if !peers.is_empty() && !roles.querier {
            bail!("--querier-peers needs the querier role: only queriers split queries");
        }
        Ok(SplitOptions {
            peers,
            min_sources: self.split_min_blocks.max(2),
            part_timeout: Duration::from_millis(positive(
                self.split_part_timeout_ms,
                "split-part-timeout-ms",
            )?),
        })
    }
}

/// The bucket `--storage URL` names, with `--s3-endpoint` and `--s3-region` over
/// the `AWS_*` environment (plain HTTP allowed for an `http://` endpoint).
pub(crate) fn bucket_config(
    url: &str,
    endpoint: Option<&str>,
    region: Option<&str>,
) -> BucketConfig {
    let mut bucket = BucketConfig::new(url);
    if let Some(e) = endpoint {
        bucket.allow_http = e.starts_with("http://");
        bucket.endpoint = Some(e.to_string());
    }
    if let Some(r) = region {
        bucket.region = Some(r.to_string());
    }
    bucket
}
