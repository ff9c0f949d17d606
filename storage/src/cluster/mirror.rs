//! The querier's mirror: a local store whose live segments follow the bucket index.
//!
//! Every pass lists the tenants, catches up with each tenant's index log (an
//! unchanged index costs one LIST and no body; a change, the new entries), reads
//! the head, trailer and footer of each segment it lists that is not here yet with
//! ranged GETs (two small requests), and swaps those in for the ones it no longer
//! lists, in a single change of the live set.
//!
//! The store asks for a segment's bytes through [`Fetch`] in two sizes. A query
//! needing only labels and per-step totals gets the segment's *summary*: its
//! Strings, Series, LabelIndex and SeriesTotals sections, read with one ranged GET
//! per run of nearby sections, checked, decoded and cached in memory by the store
//! (never written here). A query needing rows gets the body: downloaded into
//! `objects/` the first time, checked, and kept while the disk budget allows
//! (least recently fetched files go first; a query needing one again fetches it
//! again). A damaged object (missing, shorter than the index says, failing its
//! checks) is quarantined in the index (every querier then skips it) and
//! reported; everything else is still served. Only an unreachable store fails
//! a pass: the querier then answers 503 until a pass succeeds again.
//!
//! The download directory is a cache: a restarted querier keeps the files whose
//! size matches and fetches the rest on demand.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tracing::{error, info, warn};

use super::error::ClusterError;
use super::health::{Health, Turn};
use super::Worker;
use crate::bucket::{Bucket, SegmentEntry, TenantView};
use crate::error::{IoContext, Result, StorageError};
use crate::segment::{SegmentFile, SegmentSummary};
use crate::store::{now_ms, Fetch as Fetcher, Store};

/// How a querier follows the bucket.
#[derive(Clone, Debug)]
pub struct MirrorConfig {
    /// How often the index is checked for changes.
    pub interval: Duration,
    /// Bytes of segment bodies kept on local disk.
    pub disk_budget_bytes: u64,
}

/// Bytes read from the end of an object to find its trailer and footer at once.
const TAIL_BYTES: u64 = 64 << 10;

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
    /// Segment summaries read from the bucket (labels and totals, no body).
    pub summaries: AtomicU64,
    /// Ranged GETs of summary sections.
    pub section_reads: AtomicU64,
    /// Bytes of summary sections read.
    pub section_bytes: AtomicU64,
    /// Objects this node found corrupt or missing and took out of service
    /// (one another node quarantined first is not counted again).
    pub quarantined: AtomicU64,
    /// Bucket segments live here now.
    pub live: AtomicU64,
    /// Bytes of segment bodies on local disk now.
    pub disk_bytes: AtomicU64,
    /// Files evicted to stay within the disk budget.
    pub evictions: AtomicU64,
}

/// One tenant's mirrored state: its index as followed, and object key → local id.
struct TenantMirror {
    view: TenantView,
    live: BTreeMap<String, u64>,
    /// The live set may differ from the index (a pass failed midway).
    dirty: bool,
}

struct Shared {
    store: Arc<Store>,
    bucket: Bucket,
    objects: PathBuf,
    disk_budget: u64,
    tenants: Mutex<BTreeMap<String, TenantMirror>>,
    /// Local path → (tenant, object key), for fetching bodies on demand.
    remote: Mutex<BTreeMap<PathBuf, (String, String)>>,
    synced: AtomicBool,
    health: Health,
    stats: MirrorStats,
    /// Held while a fetched body is written and the disk budget enforced.
    disk: Mutex<()>,
}

/// The running mirror of one querier.
pub struct Mirror {
    shared: Arc<Shared>,
    _worker: Worker,
}

impl Mirror {
    /// Starts following the bucket into `store` (opened on the querier's cache
    /// directory, with no writes of its own).
    pub fn start(
        store: Arc<Store>,
        bucket: Bucket,
        cfg: MirrorConfig,
    ) -> Result<Mirror, ClusterError> {
        let objects = store.dir().join("objects");
        fs::create_dir_all(&objects).at(&objects)?;
        let shared = Arc::new(Shared {
            store,
            bucket,
            objects,
            disk_budget: cfg.disk_budget_bytes,
            tenants: Mutex::new(BTreeMap::new()),
            remote: Mutex::new(BTreeMap::new()),
            synced: AtomicBool::new(false),
            health: Health::default(),
            stats: MirrorStats::default(),
            disk: Mutex::new(()),
        });
        shared.store.set_fetcher(shared.clone());
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
        self.shared.health.healthy()
    }

    /// Why the last pass failed, if it did.
    pub fn last_error(&self) -> Option<String> {
        self.shared.health.last_error()
    }

    /// The mirror's standing with the bucket: when it last synced.
    pub fn health(&self) -> &Health {
        &self.shared.health
    }

    /// Runs one pass now.
    pub fn sync_now(&self) -> Result<(), ClusterError> {
        Ok(self.shared.pass()?)
    }

    /// Counters for `/metrics`.
    pub fn stats(&self) -> &MirrorStats {
        &self.shared.stats
    }
}

impl Shared {
    fn pass_logged(&self) {
        let outcome = self.pass();
        match (self.health.record(&outcome), &outcome) {
            (Turn::Recovered, _) => {
                info!(bucket = %self.bucket.describe(), "bucket reachable again")
            }
            (Turn::Failed, Err(e)) => {
                warn!(error = %e, "bucket sync failed; queries answer 503 until it succeeds")
            }
            _ => {}
        }
        match outcome {
            Ok(()) => {
                self.stats.syncs.fetch_add(1, Ordering::Relaxed);
                self.synced.store(true, Ordering::Relaxed);
            }
            Err(_) => {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn pass(&self) -> Result<()> {
        for tenant in self.bucket.tenants()? {
            let mut m = self
                .tenants
                .lock()
                .remove(&tenant)
                .unwrap_or_else(|| TenantMirror {
                    view: TenantView::new(&tenant),
                    live: BTreeMap::new(),
                    dirty: true,
                });
            let outcome = self.follow(&mut m);
            self.tenants.lock().insert(tenant, m);
            outcome?;
        }
        let live: usize = self.tenants.lock().values().map(|m| m.live.len()).sum();
        self.stats.live.store(live as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Catches `m` up with its tenant's index and makes its live set match.
    fn follow(&self, m: &mut TenantMirror) -> Result<()> {
        if self.bucket.sync(&mut m.view)? || m.dirty {
            m.dirty = true;
            m.dirty = self.apply(m)?;
        }
        Ok(())
    }

    /// Makes the live set hold exactly the segments the index lists; true when
    /// it must run again (quarantining moved the index on past what it read).
    fn apply(&self, m: &mut TenantMirror) -> Result<bool> {
        let tenant = m.view.tenant.clone();
        let tenant = tenant.as_str();
        let listed = m.view.index.segments.clone();
        let wanted: BTreeMap<&str, &SegmentEntry> =
            listed.iter().map(|e| (e.key.as_str(), e)).collect();
        let mut add_keys = Vec::new();
        let mut add_files = Vec::new();
        let mut bad = Vec::new();
        for (key, entry) in &wanted {
            if m.live.contains_key(*key) {
                continue;
            }
            match self.attach(entry) {
                Ok(file) => {
                    self.remote
                        .lock()
                        .insert(file.path.clone(), (tenant.to_string(), key.to_string()));
                    add_keys.push(key.to_string());
                    add_files.push(file);
                }
                // Every damaged one, then the rest served: one bad object
                // never holds up the tenant (or a fresh querier's readiness).
                Err(Fetch::Bad(why)) => bad.push((key.to_string(), why)),
                Err(Fetch::Newer(why)) => {
                    // Left in the bucket for the queriers that read it; this one
                    // serves the rest until it is upgraded.
                    warn!(tenant, key = *key, error = %why, "segment of a newer format version not served");
                }
                Err(Fetch::Failed(e)) => return Err(e),
            }
        }
        for (key, why) in &bad {
            self.quarantine(&mut m.view, key, why)?;
        }
        let again = !bad.is_empty();
        let gone: BTreeSet<String> = m
            .live
            .keys()
            .filter(|k| !wanted.contains_key(k.as_str()))
            .cloned()
            .collect();
        let remove: Vec<u64> = gone.iter().filter_map(|k| m.live.get(k).copied()).collect();
        if add_files.is_empty() && remove.is_empty() {
            return Ok(again);
        }
        let ids = self.store.swap_external(add_files, &remove)?;
        let gone_paths: Vec<PathBuf> = gone
            .iter()
            .map(|k| self.objects.join(local_name(k)))
            .collect();
        self.remote.lock().retain(|p, _| !gone_paths.contains(p));
        m.live.retain(|k, _| !gone.contains(k));
        m.live.extend(add_keys.into_iter().zip(ids));
        Ok(again)
    }

    /// `entry`'s segment opened from its head, trailer and footer: from the local
    /// copy when one of the right size is there, else with ranged GETs.
    fn attach(&self, entry: &SegmentEntry) -> std::result::Result<SegmentFile, Fetch> {
        let path = self.objects.join(local_name(&entry.key));
        let opened = if fs::metadata(&path).is_ok_and(|m| m.len() == entry.bytes) {
            SegmentFile::open(&path)
        } else {
            let size = entry.bytes;
            let tail_start = size.saturating_sub(TAIL_BYTES);
            let mut tail: Option<bytes::Bytes> = None;
            let opened = SegmentFile::open_with(&path, size, |offset, len| {
                let end = offset + len as u64;
                if offset >= tail_start && end <= size {
                    if tail.is_none() {
                        tail = Some(self.bucket.get_range(&entry.key, tail_start..size)?);
                    }
                    let t = tail.as_deref().unwrap_or_default();
                    let at = (offset - tail_start) as usize;
                    return Ok(t.get(at..at + len).unwrap_or_default().to_vec());
                }
                Ok(self.bucket.get_range(&entry.key, offset..end)?.to_vec())
            });
            // A small segment came whole with its tail: keep it as the body, so
            // its first query needs no request.
            if let (Ok(_), 0, Some(whole)) = (&opened, tail_start, &tail) {
                self.stats.downloads.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .download_bytes
                    .fetch_add(whole.len() as u64, Ordering::Relaxed);
                // Checked now, as every fetched body is.
                self.keep_body(&path, whole).map_err(classify)?;
            }
            opened
        };
        opened.map_err(classify)
    }

    /// Downloads the body of the segment at `path` (a query needs it), checks
    /// every section, quarantines it in the index when damaged, and keeps the disk
    /// within budget.
    fn fetch_body(&self, path: &Path) -> Result<Vec<u8>> {
        let Some((tenant, key)) = self.remote.lock().get(path).cloned() else {
            return Err(StorageError::io(
                path,
                std::io::Error::new(std::io::ErrorKind::NotFound, "not a bucket segment"),
            ));
        };
        let checked = self
            .bucket
            .get(&key)
            .map_err(StorageError::from)
            .and_then(|bytes| {
                self.stats.downloads.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .download_bytes
                    .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                self.keep_body(path, &bytes)?;
                Ok(bytes.to_vec())
            });
        match checked.map_err(classify) {
            Ok(bytes) => Ok(bytes),
            Err(Fetch::Bad(why)) => {
                self.quarantine_found(&tenant, &key, &why)?;
                Err(StorageError::Corrupt(format!("{key}: {why}")))
            }
            Err(Fetch::Failed(e)) => Err(e),
            Err(Fetch::Newer(why)) => Err(StorageError::Invalid(why)),
        }
    }

    /// Reads the summary sections of the segment at `file.path` with ranged GETs
    /// (a label or totals query needs it, not the body). Each section's checksum
    /// is verified; a damaged or missing object is quarantined as in
    /// [`Shared::fetch_body`]. Nothing is written to disk: the store keeps the
    /// decoded summary in memory.
    fn fetch_summary(&self, file: &SegmentFile) -> Result<SegmentSummary> {
        let Some((tenant, key)) = self.remote.lock().get(&file.path).cloned() else {
            return Err(StorageError::io(
                &file.path,
                std::io::Error::new(std::io::ErrorKind::NotFound, "not a bucket segment"),
            ));
        };
        let loaded = file.load_summary_with(|offset, len| {
            let bytes = self.bucket.get_range(&key, offset..offset + len as u64)?;
            self.stats.section_reads.fetch_add(1, Ordering::Relaxed);
            self.stats
                .section_bytes
                .fetch_add(bytes.len() as u64, Ordering::Relaxed);
            Ok(bytes.to_vec())
        });
        match loaded.map_err(classify) {
            Ok(summary) => {
                self.stats.summaries.fetch_add(1, Ordering::Relaxed);
                Ok(summary)
            }
            Err(Fetch::Bad(why)) => {
                self.quarantine_found(&tenant, &key, &why)?;
                Err(StorageError::Corrupt(format!("{key}: {why}")))
            }
            Err(Fetch::Failed(e)) => Err(e),
            Err(Fetch::Newer(why)) => Err(StorageError::Invalid(why)),
        }
    }

    /// Takes a damaged or missing object out of service in the index, for every
    /// querier; counts it only when this node was the one to do so.
    fn quarantine(&self, view: &mut TenantView, key: &str, why: &str) -> Result<()> {
        let tenant = view.tenant.clone();
        if self.bucket.quarantine_segment(view, key, why, now_ms())? {
            self.stats.quarantined.fetch_add(1, Ordering::Relaxed);
            error!(tenant, key, reason = %why, "bucket segment quarantined; the rest is served");
        } else {
            warn!(tenant, key, reason = %why, "bucket segment already out of service (another node quarantined it)");
        }
        Ok(())
    }

    /// [`Shared::quarantine`] for an object a query met (outside a pass).
    fn quarantine_found(&self, tenant: &str, key: &str, why: &str) -> Result<()> {
        let mut view = self
            .tenants
            .lock()
            .get(tenant)
            .map(|m| m.view.clone())
            .unwrap_or_else(|| TenantView::new(tenant));
        self.quarantine(&mut view, key, why)
    }

    /// Writes a fetched body as the local copy at `path`, checks every section
    /// (a damaged copy is deleted), and keeps the disk within budget. One at a
    /// time: two queries fetching at once would otherwise each evict the body the
    /// other had just written, and a budget under two bodies would keep none.
    fn keep_body(&self, path: &Path, bytes: &[u8]) -> Result<()> {
        let _disk = self.disk.lock();
        let kept = write_file(path, bytes).and_then(|()| SegmentFile::open(path)?.verify());
        if kept.is_err() {
            let _ = fs::remove_file(path);
        }
        kept?;
        self.enforce_budget(path);
        Ok(())
    }

    /// Deletes the least recently fetched bodies until the disk holds at most the
    /// budget, sparing `keep` (just fetched for a query).
    fn enforce_budget(&self, keep: &Path) {
        let Ok(dir) = fs::read_dir(&self.objects) else {
            return;
        };
        let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = dir
            .filter_map(|e| {
                let e = e.ok()?;
                let m = e.metadata().ok()?;
                Some((m.modified().ok()?, m.len(), e.path()))
            })
            .filter(|(_, _, p)| p.extension().is_some_and(|x| x == "seg"))
            .collect();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        files.sort();
        for (_, len, p) in files {
            if total <= self.disk_budget {
                break;
            }
            if p == keep {
                continue;
            }
            // A query reading it holds it open: the bytes live until it is done.
            if fs::remove_file(&p).is_ok() {
                total -= len;
                self.stats.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.stats.disk_bytes.store(total, Ordering::Relaxed);
    }
}

impl Fetcher for Shared {
    fn body(&self, path: &Path) -> Result<Vec<u8>> {
        self.fetch_body(path)
    }

    fn summary(&self, file: &SegmentFile) -> Result<SegmentSummary> {
        self.fetch_summary(file)
    }
}

/// Damaged or missing objects are quarantined; an unreachable store (or a
/// failing disk) is retried.
fn classify(e: StorageError) -> Fetch {
    match e {
        StorageError::Bucket(crate::bucket::BucketError::NotFound { .. }) => {
            Fetch::Bad("listed in the index but missing from the bucket".into())
        }
        StorageError::Bucket(b) if b.is_damage() => Fetch::Bad(b.to_string()),
        e if e.is_corruption() => Fetch::Bad(e.to_string()),
        e @ StorageError::UnsupportedVersion { .. } => Fetch::Newer(e.to_string()),
        e => Fetch::Failed(e),
    }
}

/// Why an object could not be mirrored.
enum Fetch {
    /// The object is damaged or missing: quarantine it, serve the rest.
    Bad(String),
    /// The bucket or the disk failed: retry the pass later.
    Failed(StorageError),
    /// The object is in a newer format version: leave it, serve the rest.
    Newer(String),
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
