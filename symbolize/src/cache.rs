//! The symbolizer a store queries: parsed debug files cached per build id within a
//! byte bound, found in the data directory or fetched in the background from the
//! configured sources (debuginfod, a cluster's bucket).
//!
//! Query-time lookups never wait on the network: a build id not here yet is queued
//! for a fetch and its frames stay addresses. Whenever a new debug file arrives
//! (upload or fetch) the *generation* goes up; a store keys its frame tree and
//! result caches by it, so frames named before the file arrived get their names
//! at the next query, without re-ingesting anything.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::elf::{DebugFile, DebugFileError, Frame, Limits, MappingRange};
use crate::store::{normalize_build_id, BadBuildId, DebugStore};

/// Somewhere debug files can be fetched from by build id.
pub trait Source: Send + Sync {
    /// For logs and errors.
    fn name(&self) -> &str;
    /// The file of `build_id` (normalized), `None` when the source does not have it.
    fn fetch(&self, build_id: &str) -> Result<Option<Vec<u8>>, SourceError>;
}

/// A [`Source`]'s or [`Replica`]'s own failure: each kind of source has its own
/// error ([`FetchError`](crate::debuginfod::FetchError) for debuginfod); the
/// symbolizer only logs and counts it, and refuses an upload the replica did
/// not keep ([`UploadError::Replica`]).
pub type SourceError = Box<dyn std::error::Error + Send + Sync>;

/// Where uploaded and fetched files are also kept (a cluster's bucket), so every
/// node finds them.
pub trait Replica: Send + Sync {
    fn put(&self, build_id: &str, bytes: &[u8]) -> Result<(), SourceError>;
}

/// The symbolizer's bounds.
#[derive(Clone, Debug)]
pub struct Config {
    /// Parsed debug files kept in memory, by their approximate bytes.
    pub cache_bytes: u64,
    pub limits: Limits,
    /// How long a build id no source had waits before it is asked for again.
    pub retry_after: Duration,
    /// Build ids waiting for a fetch; more are dropped (and asked for again later).
    pub fetch_queue: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            cache_bytes: 512 << 20,
            limits: Limits::default(),
            retry_after: Duration::from_secs(300),
            fetch_queue: 256,
        }
    }
}

/// Why an upload was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UploadError {
    #[error(transparent)]
    BadBuildId(#[from] BadBuildId),
    #[error(transparent)]
    File(#[from] DebugFileError),
    #[error("storing the debug file failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("storing the debug file in the bucket failed: {0}")]
    Replica(#[source] SourceError),
}

/// What an accepted upload did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uploaded {
    pub build_id: String,
    pub bytes: u64,
    /// Whether a file of this build id was stored before (now replaced).
    pub replaced: bool,
    pub has_dwarf: bool,
}

/// Counters for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub cached_files: u64,
    pub cached_bytes: u64,
    pub generation: u64,
    pub lookups: u64,
    pub loads: u64,
    pub evictions: u64,
    pub fetches_ok: u64,
    pub fetches_missing: u64,
    pub fetches_failed: u64,
    pub fetches_dropped: u64,
}

struct Cached {
    file: Arc<DebugFile>,
    last_used: u64,
}

#[derive(Default)]
struct State {
    files: HashMap<String, Cached>,
    bytes: u64,
    tick: u64,
    /// Build ids no source had, and when that was learnt.
    missing: HashMap<String, Instant>,
    /// Build ids queued or being fetched.
    pending: HashSet<String>,
}

struct Shared {
    cfg: Config,
    store: DebugStore,
    sources: Vec<Arc<dyn Source>>,
    replica: Option<Arc<dyn Replica>>,
    state: Mutex<State>,
    generation: AtomicU64,
    lookups: AtomicU64,
    loads: AtomicU64,
    evictions: AtomicU64,
    fetches_ok: AtomicU64,
    fetches_missing: AtomicU64,
    fetches_failed: AtomicU64,
    fetches_dropped: AtomicU64,
}

/// Symbolizes addresses by build id (see the module doc).
pub struct Symbolizer {
    shared: Arc<Shared>,
    fetcher: Mutex<Option<SyncSender<String>>>,
}

impl Symbolizer {
    /// A symbolizer over `store`, fetching what it lacks from `sources` in a
    /// background thread (none when `sources` is empty).
    pub fn new(
        cfg: Config,
        store: DebugStore,
        sources: Vec<Arc<dyn Source>>,
        replica: Option<Arc<dyn Replica>>,
    ) -> Arc<Self> {
        let shared = Arc::new(Shared {
            cfg,
            store,
            sources,
            replica,
            state: Mutex::new(State::default()),
            generation: AtomicU64::new(1),
            lookups: AtomicU64::new(0),
            loads: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            fetches_ok: AtomicU64::new(0),
            fetches_missing: AtomicU64::new(0),
            fetches_failed: AtomicU64::new(0),
            fetches_dropped: AtomicU64::new(0),
        });
        let fetcher = if shared.sources.is_empty() {
            None
        } else {
            let (tx, rx) = sync_channel::<String>(shared.cfg.fetch_queue.max(1));
            let s = shared.clone();
            let spawned = std::thread::Builder::new()
                .name("debuginfo-fetch".into())
                .spawn(move || {
                    while let Ok(id) = rx.recv() {
                        s.fetch(&id);
                    }
                });
            match spawned {
                Ok(_) => Some(tx),
                Err(e) => {
                    tracing::error!(error = %e, "could not start the debug file fetcher");
                    None
                }
            }
        };
        Arc::new(Symbolizer {
            shared,
            fetcher: Mutex::new(fetcher),
        })
    }

    /// Goes up whenever a debug file arrives: names may have changed.
    pub fn generation(&self) -> u64 {
        self.shared.generation.load(Ordering::Acquire)
    }

    pub fn store(&self) -> &DebugStore {
        &self.shared.store
    }

    pub fn limits(&self) -> &Limits {
        &self.shared.cfg.limits
    }

    /// The frames of `address` sampled in a mapping of `build_id` at `range`,
    /// outermost first; `None` when no debug file for it is here yet (a fetch is
    /// then queued) or the file does not cover the address.
    pub fn frames(&self, build_id: &str, range: MappingRange, address: u64) -> Option<Vec<Frame>> {
        self.shared.lookups.fetch_add(1, Ordering::Relaxed);
        let file = self.file(build_id)?;
        let vaddr = file.vaddr(range, address)?;
        let frames = file.frames_at(vaddr);
        (!frames.is_empty()).then_some(frames)
    }

    /// The parsed file of `build_id`: cached, or loaded from the data directory,
    /// or `None` (a fetch queued when sources are configured).
    pub fn file(&self, build_id: &str) -> Option<Arc<DebugFile>> {
        let id = normalize_build_id(build_id).ok()?;
        {
            let mut st = self.shared.state.lock();
            st.tick += 1;
            let tick = st.tick;
            if let Some(c) = st.files.get_mut(&id) {
                c.last_used = tick;
                return Some(c.file.clone());
            }
            // Known absent (or on its way): no disk read per frame of a binary
            // nobody has a debug file for (libc in a fleet's every stack).
            let recent = |at: &Instant| at.elapsed() < self.shared.cfg.retry_after;
            if st.pending.contains(&id) || st.missing.get(&id).is_some_and(recent) {
                return None;
            }
        }
        match self.shared.load(&id) {
            Some(f) => Some(f),
            None => {
                self.want(&id);
                None
            }
        }
    }

    /// Queues a fetch of `build_id` unless it is here, queued, or was missing
    /// everywhere less than `retry_after` ago. Cheap: ingest calls it for every
    /// new build id it sees, so a file is usually here before anyone asks.
    pub fn want(&self, build_id: &str) {
        let Ok(id) = normalize_build_id(build_id) else {
            return;
        };
        let guard = self.fetcher.lock();
        let Some(tx) = guard.as_ref() else {
            // Nowhere to fetch from: absent until an upload (which clears this)
            // or until `retry_after` (another process may have written the file).
            self.shared.state.lock().missing.insert(id, Instant::now());
            return;
        };
        {
            let mut st = self.shared.state.lock();
            if st.files.contains_key(&id) || st.pending.contains(&id) {
                return;
            }
            if let Some(at) = st.missing.get(&id) {
                if at.elapsed() < self.shared.cfg.retry_after {
                    return;
                }
            }
            if self.shared.store.contains(&id) {
                return;
            }
            st.pending.insert(id.clone());
        }
        if let Err(e) = tx.try_send(id) {
            let id = match e {
                TrySendError::Full(id) | TrySendError::Disconnected(id) => id,
            };
            self.shared.state.lock().pending.remove(&id);
            self.shared.fetches_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Validates and stores an uploaded debug file. `claimed` is the build id the
    /// uploader named, checked against the file's own.
    pub fn upload(&self, bytes: &[u8], claimed: Option<&str>) -> Result<Uploaded, UploadError> {
        let claimed = claimed.map(normalize_build_id).transpose()?;
        let file = DebugFile::parse(bytes, claimed.as_deref(), &self.shared.cfg.limits, true)?;
        let id = file.build_id().to_string();
        let replaced = self.shared.store.contains(&id);
        if let Some(r) = &self.shared.replica {
            r.put(&id, bytes).map_err(UploadError::Replica)?;
        }
        self.shared.store.write(&id, bytes)?;
        let has_dwarf = file.has_dwarf();
        self.shared.install(&id, Arc::new(file));
        Ok(Uploaded {
            build_id: id,
            bytes: bytes.len() as u64,
            replaced,
            has_dwarf,
        })
    }

    /// Waits until no fetch is queued or running, at most `timeout` (tests and
    /// the bench use it; queries never wait).
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        while Instant::now() < until {
            if self.shared.state.lock().pending.is_empty() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// Drops every parsed file (the files stay on disk): a cold cache, for the bench.
    pub fn clear_cache(&self) {
        let mut st = self.shared.state.lock();
        st.files.clear();
        st.bytes = 0;
    }

    pub fn stats(&self) -> Stats {
        let s = &self.shared;
        let st = s.state.lock();
        Stats {
            cached_files: st.files.len() as u64,
            cached_bytes: st.bytes,
            generation: self.generation(),
            lookups: s.lookups.load(Ordering::Relaxed),
            loads: s.loads.load(Ordering::Relaxed),
            evictions: s.evictions.load(Ordering::Relaxed),
            fetches_ok: s.fetches_ok.load(Ordering::Relaxed),
            fetches_missing: s.fetches_missing.load(Ordering::Relaxed),
            fetches_failed: s.fetches_failed.load(Ordering::Relaxed),
            fetches_dropped: s.fetches_dropped.load(Ordering::Relaxed),
        }
    }

    /// Stops the fetcher thread once its queue is empty.
    pub fn shutdown(&self) {
        self.fetcher.lock().take();
    }
}

impl Shared {
    /// Loads `id` from the data directory into the cache.
    fn load(&self, id: &str) -> Option<Arc<DebugFile>> {
        let bytes = match self.store.read(id) {
            Ok(Some(b)) => b,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(build_id = id, error = %e, "reading a debug file failed");
                return None;
            }
        };
        match DebugFile::parse(&bytes, Some(id), &self.cfg.limits, false) {
            Ok(f) => {
                self.loads.fetch_add(1, Ordering::Relaxed);
                let f = Arc::new(f);
                self.insert(id, f.clone());
                Some(f)
            }
            Err(e) => {
                // Checked when it arrived: a file that no longer parses was
                // damaged on disk. Put aside, so it can be fetched or uploaded again.
                tracing::error!(build_id = id, error = %e, "a stored debug file is unreadable; removed");
                let _ = self.store.remove(id);
                None
            }
        }
    }

    fn insert(&self, id: &str, file: Arc<DebugFile>) {
        let mut st = self.state.lock();
        st.tick += 1;
        let tick = st.tick;
        let bytes = file.approx_bytes();
        if let Some(old) = st.files.insert(
            id.to_string(),
            Cached {
                file,
                last_used: tick,
            },
        ) {
            st.bytes -= old.file.approx_bytes();
        }
        st.bytes += bytes;
        // Least recently used out first; the file just added stays, even alone
        // above the bound (a query needs it now).
        while st.bytes > self.cfg.cache_bytes && st.files.len() > 1 {
            let Some(victim) = st
                .files
                .iter()
                .filter(|(k, _)| k.as_str() != id)
                .min_by_key(|(_, c)| c.last_used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(c) = st.files.remove(&victim) {
                st.bytes -= c.file.approx_bytes();
                self.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// A new file for `id` is here: cached, and the generation goes up.
    fn install(&self, id: &str, file: Arc<DebugFile>) {
        self.insert(id, file);
        {
            let mut st = self.state.lock();
            st.missing.remove(id);
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        tracing::info!(
            build_id = id,
            "debug file available; frames are named again"
        );
    }

    fn fetch(&self, id: &str) {
        let mut outcome = None;
        for src in &self.sources {
            match src.fetch(id) {
                Ok(Some(bytes)) => match DebugFile::parse(&bytes, Some(id), &self.cfg.limits, true)
                {
                    Ok(file) => {
                        let stored = self.store.write(id, &bytes).map_err(SourceError::from);
                        let replicated = match &self.replica {
                            Some(r) => r.put(id, &bytes),
                            None => Ok(()),
                        };
                        if let Err(e) = stored.and(replicated) {
                            tracing::warn!(build_id = id, error = %e, "keeping a fetched debug file failed");
                        }
                        self.install(id, Arc::new(file));
                        outcome = Some(true);
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(build_id = id, source = src.name(), error = %e, "a fetched debug file was refused");
                        outcome = Some(false);
                    }
                },
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(build_id = id, source = src.name(), error = %e, "fetching a debug file failed");
                    outcome = Some(false);
                }
            }
        }
        let counter = match outcome {
            Some(true) => &self.fetches_ok,
            Some(false) => &self.fetches_failed,
            None => &self.fetches_missing,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let mut st = self.state.lock();
        if outcome != Some(true) {
            st.missing.insert(id.to_string(), Instant::now());
        }
        st.pending.remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test binary itself: an ELF with a build id, symbols and DWARF.
    fn own_exe() -> (Vec<u8>, String) {
        let bytes = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let id = crate::elf::build_id(&bytes).unwrap();
        (bytes, id)
    }

    struct Once(Mutex<Option<Vec<u8>>>);

    impl Source for Once {
        fn name(&self) -> &str {
            "test"
        }
        fn fetch(&self, _: &str) -> Result<Option<Vec<u8>>, SourceError> {
            Ok(self.0.lock().take())
        }
    }

    #[inline(never)]
    fn marker(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_mul(3)
    }

    #[test]
    fn an_upload_names_addresses_and_moves_the_generation() {
        let dir = tempfile::tempdir().unwrap();
        let sym = Symbolizer::new(
            Config::default(),
            DebugStore::open(dir.path()).unwrap(),
            Vec::new(),
            None,
        );
        let (bytes, id) = own_exe();
        assert!(marker(1) > 0);
        assert_eq!(sym.frames(&id, MappingRange::default(), 0x10), None);
        let g = sym.generation();
        let up = sym.upload(&bytes, Some(&id)).unwrap();
        assert_eq!(up.build_id, id);
        assert!(!up.replaced);
        assert!(sym.generation() > g, "a new file moves the generation");
        assert!(sym.stats().cached_bytes > 0);
        // The test binary is position independent: its symbol's address in the
        // file is the function's address less the load bias, found through
        // the process's own mapping of it.
        let at = marker as *const () as u64;
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let exe = std::env::current_exe().unwrap();
        let m = maps
            .lines()
            .filter(|l| l.ends_with(&*exe.to_string_lossy()))
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let (s, e) = f[0].split_once('-')?;
                let (s, e) = (
                    u64::from_str_radix(s, 16).ok()?,
                    u64::from_str_radix(e, 16).ok()?,
                );
                (s <= at && at < e && f[1].contains('x')).then(|| MappingRange {
                    start: s,
                    limit: e,
                    offset: u64::from_str_radix(f[2], 16).unwrap(),
                })
            })
            .expect("the text mapping of the test binary");
        let frames = sym.frames(&id, m, at).expect("named");
        assert!(
            frames.last().unwrap().function.ends_with("marker"),
            "{frames:?}"
        );
        assert!(frames.last().unwrap().file.ends_with("cache.rs"));
        // A fresh symbolizer over the same directory finds it on disk.
        let again = Symbolizer::new(
            Config::default(),
            DebugStore::open(dir.path()).unwrap(),
            Vec::new(),
            None,
        );
        assert!(again.file(&id).is_some());
        assert_eq!(again.stats().loads, 1);
    }

    #[test]
    fn the_cache_stays_within_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let store = DebugStore::open(dir.path()).unwrap();
        let (bytes, id) = own_exe();
        let one = DebugFile::parse(&bytes, None, &Limits::default(), false)
            .unwrap()
            .approx_bytes();
        let sym = Symbolizer::new(
            Config {
                cache_bytes: one + one / 2,
                ..Config::default()
            },
            store,
            Vec::new(),
            None,
        );
        // The same file under several names stands for several build ids.
        for i in 0..4 {
            sym.shared.insert(
                &format!("{id}{i:02x}"),
                Arc::new(DebugFile::parse(&bytes, None, &Limits::default(), false).unwrap()),
            );
            let s = sym.stats();
            assert!(s.cached_bytes <= one + one / 2, "{s:?}");
        }
        assert_eq!(sym.stats().cached_files, 1);
        assert_eq!(sym.stats().evictions, 3);
    }

    #[test]
    fn a_missing_file_is_fetched_in_the_background() {
        let dir = tempfile::tempdir().unwrap();
        let (bytes, id) = own_exe();
        let src: Arc<dyn Source> = Arc::new(Once(Mutex::new(Some(bytes))));
        let sym = Symbolizer::new(
            Config::default(),
            DebugStore::open(dir.path()).unwrap(),
            vec![src],
            None,
        );
        let g = sym.generation();
        assert!(sym.file(&id).is_none(), "not here yet: queued");
        assert!(sym.wait_idle(Duration::from_secs(30)));
        assert!(sym.generation() > g);
        assert!(sym.file(&id).is_some());
        assert!(sym.store().contains(&id), "kept in the data directory");
        assert_eq!(sym.stats().fetches_ok, 1);
        // A build id no source has is asked for once, then left alone.
        let other = "ab".repeat(20);
        assert!(sym.file(&other).is_none());
        assert!(sym.wait_idle(Duration::from_secs(30)));
        assert!(sym.file(&other).is_none());
        assert!(sym.wait_idle(Duration::from_secs(30)));
        assert_eq!(sym.stats().fetches_missing, 1);
        sym.shutdown();
    }
}
