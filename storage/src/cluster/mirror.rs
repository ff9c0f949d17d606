//! The querier's mirror: a local store whose live segments follow the bucket index.
//!
//! Every pass lists the tenants, fetches each tenant's index only when it changed
//! (a conditional GET: an unchanged index costs one request and no body),
//! downloads the segments it lists that are not here yet into `objects/` under the
//! store's directory, checks them, and swaps them in for the ones it no longer
//! lists in a single change of the live set. A corrupt object is quarantined in
//! the index (every querier then skips it) and reported; a listed object that is
//! missing is reported and quarantined too; everything else is still served.
//!
//! The download directory is a cache: a restarted querier keeps the files whose
//! size matches and fetches the rest.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tracing::{error, info, warn};

use super::Worker;
use crate::bucket::{Bucket, BucketError, IndexView, SegmentEntry};
use crate::error::{IoContext, Result, StorageError};
use crate::segment::SegmentFile;
use crate::store::{now_ms, Store};

/// How a querier follows the bucket.
#[derive(Clone, Debug)]
pub struct MirrorConfig {
    /// How often the index is checked for changes.
    pub interval: Duration,
}

/// Counters of the mirror for `/metrics`.
#[derive(Debug, Default)]
pub struct MirrorStats {
    /// Completed passes.
    pub syncs: AtomicU64,
    /// Passes that failed (bucket unreachable); the last state keeps being served.
    pub errors: AtomicU64,
    /// Objects downloaded, and their bytes.
    pub downloads: AtomicU64,
    /// Bytes downloaded.
    pub download_bytes: AtomicU64,
    /// Objects found corrupt or missing and quarantined.
    pub quarantined: AtomicU64,
    /// Bucket segments live here now.
    pub live: AtomicU64,
}

/// One tenant's mirrored state: the index version held and object key → local id.
#[derive(Default)]
struct TenantMirror {
    etag: Option<String>,
    live: BTreeMap<String, u64>,
}

struct Shared {
    store: Arc<Store>,
    bucket: Bucket,
    objects: PathBuf,
    tenants: Mutex<BTreeMap<String, TenantMirror>>,
    synced: AtomicBool,
    healthy: AtomicBool,
    last_error: Mutex<Option<String>>,
    stats: MirrorStats,
}

/// The running mirror of one querier.
pub struct Mirror {
    shared: Arc<Shared>,
    _worker: Worker,
}

impl Mirror {
    /// Starts following the bucket into `store` (opened on the querier's cache
    /// directory, with no writes of its own).
    pub fn start(store: Arc<Store>, bucket: Bucket, cfg: MirrorConfig) -> Result<Mirror> {
        let objects = store.dir().join("objects");
        fs::create_dir_all(&objects).at(&objects)?;
        let shared = Arc::new(Shared {
            store,
            bucket,
            objects,
            tenants: Mutex::new(BTreeMap::new()),
            synced: AtomicBool::new(false),
            healthy: AtomicBool::new(true),
            last_error: Mutex::new(None),
            stats: MirrorStats::default(),
        });
        let worker = {
            let shared = shared.clone();
            let objects = shared.objects.clone();
            Worker::spawn("profiledb-mirror", cfg.interval, move || {
                shared.pass_logged();
                true
            })
            .at(objects)?
        };
        Ok(Mirror {
            shared,
            _worker: worker,
        })
    }

    /// True once a full pass has completed (the querier is ready).
    pub fn synced(&self) -> bool {
        self.shared.synced.load(Ordering::Relaxed)
    }

    /// False while the bucket is unreachable.
    pub fn healthy(&self) -> bool {
        self.shared.healthy.load(Ordering::Relaxed)
    }

    /// Why the last pass failed, if it did.
    pub fn last_error(&self) -> Option<String> {
        self.shared.last_error.lock().clone()
    }

    /// Runs one pass now.
    pub fn sync_now(&self) -> Result<()> {
        self.shared.pass()
    }

    /// Counters for `/metrics`.
    pub fn stats(&self) -> &MirrorStats {
        &self.shared.stats
    }
}

impl Shared {
    fn pass_logged(&self) {
        match self.pass() {
            Ok(()) => {
                self.stats.syncs.fetch_add(1, Ordering::Relaxed);
                if !self.healthy.swap(true, Ordering::Relaxed) {
                    info!(bucket = %self.bucket.describe(), "bucket reachable again");
                }
                *self.last_error.lock() = None;
                self.synced.store(true, Ordering::Relaxed);
            }
            Err(e) => {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                if self.healthy.swap(false, Ordering::Relaxed) {
                    warn!(error = %e, "bucket sync failed; serving the last synced state");
                }
                *self.last_error.lock() = Some(e.to_string());
            }
        }
    }

    fn pass(&self) -> Result<()> {
        for tenant in self.bucket.tenants()? {
            let known = self
                .tenants
                .lock()
                .get(&tenant)
                .and_then(|m| m.etag.clone());
            if let Some(view) = self.bucket.load_index(&tenant, known.as_deref())? {
                self.apply(&tenant, view)?;
            }
        }
        let live: usize = self.tenants.lock().values().map(|m| m.live.len()).sum();
        self.stats.live.store(live as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Makes the live set hold exactly the segments `view` lists for `tenant`.
    fn apply(&self, tenant: &str, view: IndexView) -> Result<()> {
        let wanted: BTreeMap<&str, &SegmentEntry> = view
            .index
            .segments
            .iter()
            .map(|e| (e.key.as_str(), e))
            .collect();
        let (have, mut etag): (BTreeMap<String, u64>, Option<String>) = {
            let t = self.tenants.lock();
            let m = t.get(tenant);
            (
                m.map(|m| m.live.clone()).unwrap_or_default(),
                Some(view.etag.clone()),
            )
        };
        let mut add_keys = Vec::new();
        let mut add_paths = Vec::new();
        for (key, entry) in &wanted {
            if have.contains_key(*key) {
                continue;
            }
            match self.fetch(entry) {
                Ok(path) => {
                    add_keys.push(key.to_string());
                    add_paths.push(path);
                }
                Err(Fetch::Bad(why)) => {
                    self.stats.quarantined.fetch_add(1, Ordering::Relaxed);
                    error!(tenant, key, reason = %why, "bucket segment quarantined; the rest is served");
                    self.bucket
                        .quarantine_segment(tenant, key, &why, now_ms())?;
                    // The index changed under us: read it again next pass.
                    etag = None;
                }
                Err(Fetch::Failed(e)) => return Err(e),
            }
        }
        let gone: BTreeSet<&String> = have
            .keys()
            .filter(|k| !wanted.contains_key(k.as_str()))
            .collect();
        let remove: Vec<u64> = gone.iter().filter_map(|k| have.get(*k).copied()).collect();
        if add_paths.is_empty() && remove.is_empty() {
            self.tenants
                .lock()
                .entry(tenant.to_string())
                .or_default()
                .etag = etag;
            return Ok(());
        }
        let ids = self.store.swap_external(&add_paths, &remove)?;
        let mut t = self.tenants.lock();
        let m = t.entry(tenant.to_string()).or_default();
        m.live.retain(|k, _| !gone.contains(k));
        m.live.extend(add_keys.into_iter().zip(ids));
        m.etag = etag;
        Ok(())
    }

    /// The local copy of `entry`'s object, downloaded and checked when needed.
    fn fetch(&self, entry: &SegmentEntry) -> std::result::Result<PathBuf, Fetch> {
        let path = self.objects.join(local_name(&entry.key));
        let cached = fs::metadata(&path).is_ok_and(|m| m.len() == entry.bytes);
        if !cached {
            let bytes = match self.bucket.get(&entry.key) {
                Ok(b) => b,
                Err(BucketError::NotFound { .. }) => {
                    return Err(Fetch::Bad(
                        "listed in the index but missing from the bucket".into(),
                    ))
                }
                Err(e) => return Err(Fetch::Failed(e.into())),
            };
            self.stats.downloads.fetch_add(1, Ordering::Relaxed);
            self.stats
                .download_bytes
                .fetch_add(bytes.len() as u64, Ordering::Relaxed);
            write_file(&path, &bytes).map_err(Fetch::Failed)?;
        }
        let checked = SegmentFile::open(&path).and_then(|f| f.verify());
        match checked {
            Ok(()) => Ok(path),
            Err(e) if e.is_corruption() => {
                let _ = fs::remove_file(&path);
                Err(Fetch::Bad(e.to_string()))
            }
            Err(e) => Err(Fetch::Failed(e)),
        }
    }
}

/// Why an object could not be mirrored.
enum Fetch {
    /// The object is damaged or missing: quarantine it, serve the rest.
    Bad(String),
    /// The bucket or the disk failed: retry the pass later.
    Failed(StorageError),
}

/// A flat, filesystem-safe file name for an object key.
fn local_name(key: &str) -> String {
    key.replace('/', "__")
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("part");
    fs::write(&tmp, bytes).at(&tmp)?;
    fs::rename(&tmp, path).at(path)?;
    Ok(())
}
