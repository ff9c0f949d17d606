//! `profiledb serve --storage s3://…`: the process as part of a cluster sharing a
//! bucket. Each role is a local store plus a storage-crate loop
//! (`profiledb_storage::{Uploader, Mirror, Compactor}`); this module opens them
//! under `--data-dir` (`writer/`, `querier/`, `compactor/`) and hands the server
//! what each role serves: the writer's store to the ingest pipeline, the
//! querier's mirror store to every query endpoint.

mod metrics;
pub mod options;
pub mod split;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use profiledb_storage::{
    Acked, Bucket, Compactor, CompactorConfig, Fault, Mirror, MirrorConfig, Store, StoreConfig,
    Uploader, UploaderConfig,
};

pub use options::{Ack, ClusterOptions, Roles};

use crate::error::ApiError;

/// How long an `--ack bucket` write waits for its upload before it is answered
/// as durable in the local WAL only (header `X-Profiledb-Ack: local`).
pub const ACK_WAIT: Duration = Duration::from_secs(15);

/// Seconds a client is told to wait (`Retry-After`) while the store is out.
const RETRY_AFTER_SECS: u64 = 5;

/// The fault point tests arm through the environment (`fault.rs` in the
/// storage crate): the process aborts there.
fn fault_from_env() -> anyhow::Result<Option<Fault>> {
    match std::env::var("PROFILEDB_FAULT") {
        Ok(spec) if !spec.is_empty() => {
            let f = Fault::parse(&spec).map_err(anyhow::Error::msg)?;
            tracing::warn!(
                point = f.point().name(),
                "fault injection armed (PROFILEDB_FAULT)"
            );
            Ok(Some(f))
        }
        _ => Ok(None),
    }
}

/// What a cluster process waits for before it serves (`/ready` says which).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// The querier has not completed its first sync of the bucket index.
    FirstSync,
    /// The store does not answer the role named.
    Unreachable(&'static str),
    /// The querier's last successful sync is older than `--max-sync-age-secs`.
    Stale,
}

impl Waiting {
    /// The `status` field of `/ready`'s answer.
    pub fn status(self) -> &'static str {
        match self {
            Waiting::FirstSync => "syncing",
            Waiting::Unreachable(_) => "store_unreachable",
            Waiting::Stale => "stale",
        }
    }
}

/// The roles running in this process.
pub struct Running {
    pub roles: Roles,
    pub ack: Ack,
    /// Oldest last sync a querier answers from.
    pub max_sync_age: Duration,
    pub bucket: Bucket,
    pub writer: Option<Arc<Store>>,
    pub uploader: Option<Arc<Uploader>>,
    pub querier: Option<Arc<Store>>,
    pub mirror: Option<Mirror>,
    pub compactor: Option<Compactor>,
    /// A querier's splitting of long queries across its peers (`split/`).
    pub split: Option<Arc<split::Split>>,
}

/// The stores and loops of `opts`' roles, under `data_dir`. Blocking (WAL
/// replay, the first index sync): call from a blocking thread. A querier sends
/// `admin_token` with the parts it asks of its peers.
pub fn open(
    data_dir: &std::path::Path,
    base: &StoreConfig,
    opts: &ClusterOptions,
    replay: &profiledb_storage::ReplayProgress,
    admin_token: Option<String>,
) -> anyhow::Result<Running> {
    let bucket = Bucket::open(&opts.bucket)
        .with_context(|| format!("cannot open the object store {}", opts.bucket.url))?;
    let node = options::node_id(data_dir)?;
    let node_name = node.clone();
    let fault = fault_from_env()?;
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
                fault: fault.clone(),
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
                fault,
            },
        )?)
    } else {
        None
    };
    Ok(Running {
        roles: opts.roles,
        ack: opts.ack,
        max_sync_age: opts.max_sync_age,
        bucket,
        writer,
        uploader,
        querier,
        mirror,
        compactor,
        split: opts.roles.querier.then(|| {
            Arc::new(split::Split::new(
                opts.split.clone(),
                node_name,
                admin_token,
            ))
        }),
    })
}

impl Running {
    /// 503 while the mirror cannot reach the bucket, or has not synced for
    /// longer than `--max-sync-age-secs`: its answers could be stale.
    pub fn check_queries(&self) -> Result<(), ApiError> {
        let Some(m) = &self.mirror else {
            return Ok(());
        };
        if !m.synced() {
            return Err(ApiError::unavailable(match m.last_error() {
                Some(e) => format!("this querier could not read the bucket index yet: {e}"),
                None => "this querier has not read the bucket index yet".to_string(),
            }));
        }
        if !m.healthy() {
            return Err(ApiError::unavailable(format!(
                "the object store is unreachable, so answers could be stale: {}",
                m.last_error().unwrap_or_default()
            ))
            .with_retry_after(RETRY_AFTER_SECS));
        }
        match m.health().since_success() {
            Some(age) if age > self.max_sync_age => Err(ApiError::unavailable(format!(
                "this querier's last successful sync of the bucket index was {:.1} s ago, over the {} s --max-sync-age-secs allows (the object store may be hanging)",
                age.as_secs_f64(),
                self.max_sync_age.as_secs()
            ))
            .with_retry_after(RETRY_AFTER_SECS)),
            _ => Ok(()),
        }
    }

    /// What this process waits for before it serves, if anything: a querier's
    /// first sync, a store that does not answer a role that needs it (a writer
    /// acknowledging from the bucket, a querier, a compactor), a querier's
    /// sync too old.
    pub fn waiting(&self) -> Option<Waiting> {
        if let Some(m) = &self.mirror {
            if !m.synced() {
                return Some(Waiting::FirstSync);
            }
            if !m.health().reachable() {
                return Some(Waiting::Unreachable("querier"));
            }
            if m.health()
                .since_success()
                .is_some_and(|a| a > self.max_sync_age)
            {
                return Some(Waiting::Stale);
            }
        }
        if let Some(u) = &self.uploader {
            if self.ack == Ack::Bucket && !u.health().reachable() {
                return Some(Waiting::Unreachable("writer"));
            }
        }
        if let Some(c) = &self.compactor {
            if !c.health().reachable() {
                return Some(Waiting::Unreachable("compactor"));
            }
        }
        None
    }

    /// `/ready`'s message for what this process waits for.
    pub fn explain(&self, w: Waiting) -> String {
        let err = |e: Option<String>| e.unwrap_or_else(|| "no answer yet".into());
        match w {
            Waiting::FirstSync => format!(
                "this querier has not completed its first sync of the bucket index: {}",
                err(self.mirror.as_ref().and_then(|m| m.last_error()))
            ),
            Waiting::Unreachable(role) => {
                let e = match role {
                    "writer" => self.uploader.as_ref().and_then(|u| u.last_error()),
                    "querier" => self.mirror.as_ref().and_then(|m| m.last_error()),
                    _ => self.compactor.as_ref().and_then(|c| c.last_error()),
                };
                format!("the object store does not answer the {role}: {}", err(e))
            }
            Waiting::Stale => format!(
                "this querier's last successful sync of the bucket index is older than {} s (--max-sync-age-secs)",
                self.max_sync_age.as_secs()
            ),
        }
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
        .with_retry_after(RETRY_AFTER_SECS))
    }

    /// Waits (on a blocking thread) until record `lsn` is in the bucket; false
    /// when [`ACK_WAIT`] passed first, or an upload pass failed meanwhile (it is
    /// in the local WAL and uploads later).
    pub async fn uploaded(&self, lsn: u64) -> bool {
        let up = self.0.clone();
        tokio::task::spawn_blocking(move || up.wait_uploaded(lsn, ACK_WAIT) == Acked::Bucket)
            .await
            .unwrap_or(false)
    }
}
