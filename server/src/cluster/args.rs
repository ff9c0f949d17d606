//! The cluster flags of `profiledb serve`, parsed once and resolved into
//! [`ClusterOptions`] (validated before anything opens).

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use profiledb_storage::{BlockPolicy, BucketConfig, MergePolicy};

/// Which roles a process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Roles {
    pub writer: bool,
    pub querier: bool,
    pub compactor: bool,
}

impl Roles {
    pub const ALL: Roles = Roles {
        writer: true,
        querier: true,
        compactor: true,
    };

    /// `all`, or a comma-separated list of `writer`, `querier`, `compactor`.
    pub fn parse(s: &str) -> anyhow::Result<Roles> {
        let mut r = Roles {
            writer: false,
            querier: false,
            compactor: false,
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "all" => r = Roles::ALL,
                "writer" => r.writer = true,
                "querier" => r.querier = true,
                "compactor" => r.compactor = true,
                other => bail!(
                    "unknown role {other:?} in --role {s:?}: use all, or a list of writer, querier, compactor"
                ),
            }
        }
        if !(r.writer || r.querier || r.compactor) {
            bail!("--role {s:?} names no role: use all, or a list of writer, querier, compactor");
        }
        Ok(r)
    }

    pub fn names(&self) -> String {
        let mut v = Vec::new();
        for (on, name) in [
            (self.writer, "writer"),
            (self.querier, "querier"),
            (self.compactor, "compactor"),
        ] {
            if on {
                v.push(name);
            }
        }
        v.join(",")
    }
}

/// When a writer acknowledges a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Ack {
    /// Once the segment holding it is in the bucket and its index (about one
    /// upload interval): losing the writer's disk loses nothing acknowledged.
    Bucket,
    /// Once it is in the writer's local WAL: faster, but a writer whose disk is
    /// lost for good loses up to one upload interval of acknowledged writes.
    Local,
}

/// `profiledb serve` flags for running as part of a cluster.
#[derive(clap::Args, Clone, Debug)]
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
    /// Hours of the blocks compaction merges old partitions into, on one node as
    /// in a cluster's compactors (a week is then read as 7 segments, not 168, and
    /// a block stores its stack tree once); 0 keeps partitions apart. Must be a
    /// multiple of the partition width to apply.
    #[arg(long, default_value_t = 24)]
    pub block_hours: u64,
    /// Minutes after a block's end before its partitions are merged into it
    /// (late writes land in their hours first).
    #[arg(long, default_value_t = 120)]
    pub block_delay_minutes: u64,
    /// Until a block is due, its partitions are merged into part blocks of this
    /// many hours as each ends (after the same delay), so the last day is read as
    /// a few segments, not one per hour; 0 for none (so does --block-hours 0).
    /// Must divide --block-hours.
    #[arg(long, default_value_t = 6)]
    pub part_block_hours: u64,
    /// Once a week (this many days, aligned to the epoch) and the day after it
    /// are over for the delay, its blocks are merged into one wide block: a month
    /// is then stored with about five stack trees instead of thirty. 0 for none.
    /// Must be a multiple of --block-hours. Not applied to data whose retention is
    /// under four of them (retention drops whole segments, so it would keep data
    /// too long).
    #[arg(long, default_value_t = 7)]
    pub wide_block_days: u64,
    /// Once this many days (aligned to the epoch; four weeks by default) and the
    /// wide block after them are over for the delay, their wide blocks are merged
    /// into one wider block: old data then keeps one stack tree per four weeks.
    /// 0 for none (so does --wide-block-days 0). Must be a multiple of
    /// --wide-block-days. Not applied to data whose retention is under four of
    /// them.
    #[arg(long, default_value_t = 28)]
    pub wider_block_days: u64,
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
    /// Fault injection for tests: a compactor sleeps this long between uploading a
    /// merged segment and swapping it into the index.
    #[arg(long, hide = true)]
    pub fault_compactor_pause_ms: Option<u64>,
}

/// The resolved cluster options.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    pub bucket: BucketConfig,
    pub roles: Roles,
    pub ack: Ack,
    pub upload_interval: Duration,
    pub sync_interval: Duration,
    pub querier_disk_bytes: u64,
    pub compaction_interval: Duration,
    pub merge: MergePolicy,
    pub gc_grace: Duration,
    pub lease_ttl: Duration,
    pub retention: Option<Duration>,
    pub compactor_pause: Option<Duration>,
    pub max_sync_age: Duration,
}

impl ClusterArgs {
    /// `None` without --storage (the single-node default).
    /// `--block-hours`, `--block-delay-minutes`, `--part-block-hours`,
    /// `--wide-block-days` and `--wider-block-days`, for a single node's store or a compactor's merge policy.
    pub fn block_policy(&self) -> anyhow::Result<BlockPolicy> {
        let policy = BlockPolicy {
            width_ms: to_ms(self.block_hours, 3_600_000, "block-hours")?,
            delay_ms: to_ms(self.block_delay_minutes, 60_000, "block-delay-minutes")?,
            part_width_ms: to_ms(self.part_block_hours, 3_600_000, "part-block-hours")?,
            wide_width_ms: to_ms(self.wide_block_days, 86_400_000, "wide-block-days")?,
            wider_width_ms: to_ms(self.wider_block_days, 86_400_000, "wider-block-days")?,
        };
        policy.validate().map_err(anyhow::Error::msg)?;
        Ok(policy)
    }

    pub fn resolve(&self) -> anyhow::Result<Option<ClusterOptions>> {
        let blocks = self.block_policy()?;
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
        let mut bucket = BucketConfig::new(url);
        if let Some(e) = &self.s3_endpoint {
            bucket.allow_http = e.starts_with("http://");
            bucket.endpoint = Some(e.clone());
        }
        if let Some(r) = &self.s3_region {
            bucket.region = Some(r.clone());
        }
        bucket.request_timeout = Duration::from_millis(self.s3_timeout_ms.max(1));
        bucket.retries = self.s3_retries;
        let positive = |v: u64, flag: &str| {
            if v == 0 {
                bail!("--{flag} must be positive");
            }
            Ok(v)
        };
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
            querier_disk_bytes: self.querier_disk_cache_mb.saturating_mul(1 << 20),
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
        }))
    }
}

/// This process's name in object keys and leases: random at first start, kept in
/// the data directory so a restarted writer re-uploads under the same names.
pub fn node_id(data_dir: &Path) -> anyhow::Result<String> {
    let path = data_dir.join("NODE_ID");
    if let Ok(s) = std::fs::read_to_string(&path) {
        let s = s.trim();
        if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Ok(s.to_string());
        }
    }
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create {}", data_dir.display()))?;
    let id = random_id();
    let tmp = data_dir.join("NODE_ID.tmp");
    std::fs::write(&tmp, &id).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(id)
}

/// 16 hex digits from the clock and the process id, hashed: unique enough to
/// name a node (a collision would need two nodes started in the same nanosecond
/// with the same pid).
fn random_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

/// `n` units of `unit_ms` in milliseconds, refusing a value too large to be a
/// time width.
fn to_ms(n: u64, unit_ms: i64, flag: &str) -> anyhow::Result<i64> {
    i64::try_from(n)
        .ok()
        .and_then(|n| n.checked_mul(unit_ms))
        .ok_or_else(|| anyhow::anyhow!("--{flag} {n} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_parse_lists_and_refuse_unknown_names() {
        assert_eq!(Roles::parse("all").unwrap(), Roles::ALL);
        let r = Roles::parse("writer, compactor").unwrap();
        assert!(r.writer && r.compactor && !r.querier);
        assert_eq!(r.names(), "writer,compactor");
        let e = Roles::parse("writer,reader").unwrap_err().to_string();
        assert!(e.contains("unknown role \"reader\""), "{e}");
        assert!(Roles::parse(",").is_err());
    }

    #[test]
    fn node_id_is_kept_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let a = node_id(dir.path()).unwrap();
        assert_eq!(a.len(), 16);
        assert_eq!(node_id(dir.path()).unwrap(), a);
        let other = tempfile::tempdir().unwrap();
        assert_ne!(node_id(other.path()).unwrap(), a);
    }
}
