//! Host symbolization of raw stacks, off the sampling thread.
//!
//! The sampling thread only captures, per window, each stack's addresses and the
//! mapping each user address lies in ([`Batch`], cheap: mappings are shared `Arc`s);
//! a [`SymbolizerThread`] resolves batches while sampling goes on, so a slow window
//! (new big binaries) no longer makes the ring buffers overflow.
//!
//! User frames are resolved by file offset against the ELF symbol tables of the
//! mapped file with [`crate::elfsyms`] (streamed with `pread`, never mapped: memory is
//! O(addresses), not O(file)); kernel frames against `/proc/kallsyms`
//! ([`crate::kallsyms`], read once into a compact index).
//! Results live in bounded caches keyed by file identity — the GNU build id when the
//! file has one, else (device, inode, mtime, size) — so a rebuilt binary at the same
//! path is never answered from stale entries, and the same library mapped by many
//! processes is resolved once. Frames that cannot be resolved keep their address,
//! mapping and build id.

use std::collections::HashMap;
use std::hash::Hash;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::aggregate::is_kernel_addr;
use crate::elfsyms::ElfSyms;
use crate::kallsyms::KernelSymbols;
use crate::procs::{FileId, Mapping, ProcessTable};

/// The mapping a user frame belongs to, as written into pprof.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ModuleRef {
    pub file: Arc<FileId>,
    pub build_id: Option<Arc<str>>,
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
}

/// One symbolized (or not) frame.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Function name, `None` when unknown.
    pub function: Option<Arc<str>>,
    /// The sampled address (return address for callers).
    pub address: u64,
    pub module: Option<ModuleRef>,
}

impl Frame {
    /// The name shown for the frame: the function, or `module+0xoffset` / `0xaddr`.
    pub fn display_name(&self) -> String {
        match (&self.function, &self.module) {
            (Some(f), _) => f.to_string(),
            (None, Some(m)) => {
                let base = m.file.path.rsplit('/').next().unwrap_or(&m.file.path);
                format!(
                    "{base}+{:#x}",
                    self.address.wrapping_sub(m.start).wrapping_add(m.pgoff)
                )
            }
            (None, None) => format!("{:#x}", self.address),
        }
    }
}

/// Counters of how symbolization went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SymbolStats {
    pub frames: u64,
    pub unsymbolized: u64,
    /// Windows dropped because the symbolizer thread was still busy with earlier ones.
    pub dropped_windows: u64,
}

/// A map bounded at `cap` entries with approximate LRU eviction: two generations;
/// when the young one is full the old one is dropped wholesale and the young one
/// becomes old. A hit in the old generation moves the entry back to the young one,
/// so entries in use survive and memory never passes `cap` entries.
#[derive(Debug)]
pub struct BoundedCache<K, V> {
    young: HashMap<K, V>,
    old: HashMap<K, V>,
    half: usize,
    /// Entries dropped by eviction so far.
    pub evicted: u64,
}

impl<K: Hash + Eq, V> BoundedCache<K, V> {
    pub fn new(cap: usize) -> Self {
        Self {
            young: HashMap::new(),
            old: HashMap::new(),
            half: (cap / 2).max(1),
            evicted: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn contains(&self, k: &K) -> bool {
        self.young.contains_key(k) || self.old.contains_key(k)
    }

    pub fn get(&mut self, k: &K) -> Option<&V> {
        if !self.young.contains_key(k) {
            let (k, v) = self.old.remove_entry(k)?;
            self.insert(k, v);
        }
        self.young.get(k)
    }

    pub fn insert(&mut self, k: K, v: V) {
        if self.young.len() >= self.half && !self.young.contains_key(&k) {
            self.evicted += self.old.len() as u64;
            self.old = std::mem::take(&mut self.young);
        }
        self.old.remove(&k);
        self.young.insert(k, v);
    }
}

/// What identifies a file's contents for caching symbols.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum FileKey {
    /// The GNU build id: the same bytes wherever the file lives.
    BuildId(Arc<[u8]>),
    /// No build id: where the file is and when it was last written.
    Inode {
        dev: u64,
        ino: u64,
        mtime_ns: i64,
        size: u64,
    },
}

/// What is known about one mapped file.
#[derive(Debug)]
struct FileInfo {
    key: FileKey,
    build_id: Option<Arc<str>>,
}

/// Cached `(file, offset)` names; ~100 B each, so ≤ ~10 MB in the worst case.
const MAX_NAMES: usize = 100_000;
/// Cached kernel addresses.
const MAX_KERNEL: usize = 50_000;
/// Cached file identities.
const MAX_FILES: usize = 4096;

/// One user or kernel address of a captured stack and where it was mapped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapturedStack {
    /// Addresses, leaf first.
    pub frames: Box<[u64]>,
    /// Per frame: index into [`Batch::maps`], or [`NO_MAP`].
    pub maps: Box<[u32]>,
}

/// Frame without a known mapping (kernel, JIT, or an address outside every mapping).
pub const NO_MAP: u32 = u32::MAX;

/// A window's stacks with the mappings their user frames lie in, captured on the
/// sampling thread so the symbolizer needs no process table (and exited processes
/// still resolve).
#[derive(Debug, Default)]
pub struct Batch {
    pub maps: Vec<Mapping>,
    index: HashMap<Mapping, u32>,
    pub stacks: Vec<CapturedStack>,
}

impl Batch {
    /// Captures the stack of `pid` (frames leaf first).
    pub fn push(&mut self, procs: &ProcessTable, pid: u32, frames: &[u64]) {
        let p = procs.get(pid);
        let maps = frames
            .iter()
            .enumerate()
            .map(|(i, &a)| {
                if is_kernel_addr(a) {
                    return NO_MAP;
                }
                let Some(m) = p.and_then(|p| p.lookup(lookup_addr(a, i))) else {
                    return NO_MAP;
                };
                if let Some(&i) = self.index.get(m) {
                    return i;
                }
                let i = u32::try_from(self.maps.len()).unwrap_or(NO_MAP);
                if i != NO_MAP {
                    self.maps.push(m.clone());
                    self.index.insert(m.clone(), i);
                }
                i
            })
            .collect();
        self.stacks.push(CapturedStack {
            frames: frames.into(),
            maps,
        });
    }

    fn mapping(&self, stack: &CapturedStack, i: usize) -> Option<&Mapping> {
        let &m = stack.maps.get(i)?;
        self.maps.get(m as usize)
    }
}

/// Where user frames get their names (`--symbolize`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SymbolizeMode {
    /// Here, from the mapped files' ELF symbol tables.
    #[default]
    Host,
    /// On the server: user frames are sent as addresses in mappings with build
    /// ids, and no symbol table is read on the host. Kernel frames are still
    /// named here (the server has no kernel image).
    Server,
}

/// Symbolizer with bounded caches; lives for the agent's lifetime (on its own thread).
pub struct HostSymbolizer {
    mode: SymbolizeMode,
    /// Loaded on the first kernel frame (`None` until then).
    kallsyms: Option<KernelSymbols>,
    names: BoundedCache<(FileKey, u64), Option<Arc<str>>>,
    kernel: BoundedCache<u64, Option<Arc<str>>>,
    files: BoundedCache<Arc<FileId>, Option<Arc<FileInfo>>>,
    kernel_readable: bool,
    /// Totals since the agent started.
    pub stats: SymbolStats,
}

impl Default for HostSymbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl HostSymbolizer {
    /// Whether `/proc/kallsyms` shows real addresses (not hidden by kptr_restrict).
    pub fn kallsyms_readable() -> bool {
        use std::io::{BufRead, BufReader};
        // With kptr_restrict, /proc/kallsyms lists all-zero addresses. Only the first
        // lines are read: the whole file is ~5 MB of text the kernel generates.
        let Ok(f) = std::fs::File::open("/proc/kallsyms") else {
            return false;
        };
        BufReader::new(f).lines().take(64).any(|l| {
            l.is_ok_and(|l| {
                l.split(' ')
                    .next()
                    .is_some_and(|a| a.chars().any(|c| c != '0'))
            })
        })
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

impl HostSymbolizer {
    pub fn new() -> Self {
        Self::with_mode(SymbolizeMode::Host)
    }

    pub fn with_mode(mode: SymbolizeMode) -> Self {
        Self {
            mode,
            kallsyms: None,
            names: BoundedCache::new(MAX_NAMES),
            kernel: BoundedCache::new(MAX_KERNEL),
            files: BoundedCache::new(MAX_FILES),
            kernel_readable: Self::kallsyms_readable(),
            stats: SymbolStats::default(),
        }
    }

    /// Whether kernel symbols are available.
    pub fn kernel_readable(&self) -> bool {
        self.kernel_readable
    }

    /// Identity and build id of a mapped file; `None` when it cannot be read or the
    /// file now at the path is not the one that was mapped (replaced since: its
    /// symbols would be wrong).
    fn file_info(&mut self, file: &Arc<FileId>) -> Option<Arc<FileInfo>> {
        if let Some(i) = self.files.get(file) {
            return i.clone();
        }
        let info = Self::read_file_info(file).map(Arc::new);
        self.files.insert(file.clone(), info.clone());
        info
    }

    fn read_file_info(file: &FileId) -> Option<FileInfo> {
        let md = std::fs::metadata(&*file.path).ok()?;
        if file.ino != 0 && md.ino() != file.ino {
            return None;
        }
        let build_id = ElfSyms::open(Path::new(&*file.path))
            .ok()
            .and_then(|e| e.build_id());
        Some(FileInfo {
            key: match &build_id {
                Some(b) => FileKey::BuildId(Arc::from(&b[..])),
                None => FileKey::Inode {
                    dev: md.dev(),
                    ino: md.ino(),
                    mtime_ns: md.mtime() * 1_000_000_000 + md.mtime_nsec(),
                    size: md.size(),
                },
            },
            build_id: build_id.map(|b| Arc::from(hex(&b))),
        })
    }

    /// Resolves one file's offsets and fills the cache. The file is opened, read
    /// with `pread` and closed here: nothing of it stays resident.
    fn resolve_file(&mut self, file: &FileId, key: &FileKey, offsets: &mut Vec<u64>) {
        offsets.sort_unstable();
        offsets.dedup();
        let debug = match key {
            FileKey::BuildId(b) => {
                crate::elfsyms::debug_file_for(b).and_then(|p| ElfSyms::open(&p).ok())
            }
            FileKey::Inode { .. } => None,
        };
        let names =
            ElfSyms::open(Path::new(&*file.path)).and_then(|e| e.resolve(offsets, debug.as_ref()));
        let names = names.unwrap_or_else(|_| vec![None; offsets.len()]);
        // One Arc per distinct name: a hot function has many return addresses.
        let mut interned: HashMap<String, Arc<str>> = HashMap::new();
        for (off, name) in offsets.iter().zip(names) {
            let name = name.map(|n| {
                interned
                    .entry(n)
                    .or_insert_with_key(|n| Arc::from(n.as_str()))
                    .clone()
            });
            self.names.insert((key.clone(), *off), name);
        }
    }

    fn resolve_kernel(&mut self, addrs: &mut Vec<u64>) {
        addrs.sort_unstable();
        addrs.dedup();
        if self.kernel_readable && self.kallsyms.is_none() {
            // Unreadable now means unreadable later: do not retry every window.
            self.kallsyms = Some(KernelSymbols::load().unwrap_or_default());
        }
        for a in addrs.iter() {
            let name = self
                .kallsyms
                .as_ref()
                .and_then(|k| k.lookup(*a))
                .map(Arc::from);
            self.kernel.insert(*a, name);
        }
    }

    /// Symbolizes a captured window. Returns the frames of each stack, leaf first.
    pub fn symbolize(&mut self, batch: &Batch) -> Vec<Vec<Frame>> {
        // Pass 1: what is not cached yet, grouped per file (one scan per file).
        let mut by_file: HashMap<Arc<FileId>, (Arc<FileInfo>, Vec<u64>)> = HashMap::new();
        let mut kernel: Vec<u64> = Vec::new();
        for st in &batch.stacks {
            for (i, &addr) in st.frames.iter().enumerate() {
                let lookup = lookup_addr(addr, i);
                if is_kernel_addr(addr) {
                    if !self.kernel.contains(&lookup) {
                        kernel.push(lookup);
                    }
                } else if let Some(m) = batch
                    .mapping(st, i)
                    .filter(|m| m.is_file() && self.mode == SymbolizeMode::Host)
                {
                    let Some(info) = self.file_info(&m.file) else {
                        continue;
                    };
                    let off = m.file_offset(lookup);
                    if !self.names.contains(&(info.key.clone(), off)) {
                        by_file
                            .entry(m.file.clone())
                            .or_insert_with(|| (info.clone(), Vec::new()))
                            .1
                            .push(off);
                    }
                }
            }
        }
        for (file, (info, mut offs)) in by_file {
            self.resolve_file(&file, &info.key, &mut offs);
        }
        if !kernel.is_empty() {
            self.resolve_kernel(&mut kernel);
        }
        // Pass 2: build frames.
        let mut out = Vec::with_capacity(batch.stacks.len());
        for st in &batch.stacks {
            let mut v = Vec::with_capacity(st.frames.len());
            for (i, &addr) in st.frames.iter().enumerate() {
                let lookup = lookup_addr(addr, i);
                let frame = if is_kernel_addr(addr) {
                    Frame {
                        function: self.kernel.get(&lookup).cloned().flatten(),
                        address: addr,
                        module: None,
                    }
                } else {
                    match batch.mapping(st, i) {
                        // The address the server symbolizes: the call's, not the
                        // return address after it (as the host looks up).
                        Some(m) if self.mode == SymbolizeMode::Server => {
                            self.user_frame(lookup, lookup, m)
                        }
                        Some(m) => self.user_frame(addr, lookup, m),
                        None => Frame {
                            function: None,
                            address: addr,
                            module: None,
                        },
                    }
                };
                self.stats.frames += 1;
                if frame.function.is_none() {
                    self.stats.unsymbolized += 1;
                }
                v.push(frame);
            }
            out.push(v);
        }
        out
    }

    /// Captures and symbolizes stacks of live processes in one go.
    pub fn symbolize_procs(
        &mut self,
        procs: &ProcessTable,
        stacks: &[(u32, &[u64])],
    ) -> Vec<Vec<Frame>> {
        let mut b = Batch::default();
        for (pid, frames) in stacks {
            b.push(procs, *pid, frames);
        }
        self.symbolize(&b)
    }

    fn user_frame(&mut self, addr: u64, lookup: u64, m: &Mapping) -> Frame {
        let info = if m.is_file() {
            self.file_info(&m.file)
        } else {
            None
        };
        let function = info
            .as_ref()
            .filter(|_| self.mode == SymbolizeMode::Host)
            .and_then(|i| {
                self.names
                    .get(&(i.key.clone(), m.file_offset(lookup)))
                    .cloned()
                    .flatten()
            });
        Frame {
            function,
            address: addr,
            module: Some(ModuleRef {
                file: m.file.clone(),
                build_id: info.and_then(|i| i.build_id.clone()),
                start: m.start,
                end: m.end,
                pgoff: m.pgoff,
            }),
        }
    }
}

/// Gives freed heap memory back to the OS. A window's batch, frames and pprof are
/// a burst of allocations on this thread's malloc arena; without this, glibc keeps
/// the arena at its high-water mark (docs/perf-log/2026-11-22-agent.md).
fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// A symbolizer on its own thread fed through a bounded queue. Each job's batch is
/// symbolized and handed with the job to `sink` (on the same thread), in order.
pub struct SymbolizerThread<J: Send + 'static> {
    tx: Option<SyncSender<(J, Batch)>>,
    handle: Option<JoinHandle<SymbolStats>>,
    dropped: u64,
}

impl<J: Send + 'static> SymbolizerThread<J> {
    /// `queue` windows may wait; more are dropped (counted) so the sampling thread
    /// never blocks on symbolization.
    pub fn spawn<F>(queue: usize, sink: F) -> std::io::Result<Self>
    where
        F: FnMut(J, Vec<Vec<Frame>>) + Send + 'static,
    {
        Self::spawn_with(queue, SymbolizeMode::Host, sink)
    }

    /// [`SymbolizerThread::spawn`] symbolizing user frames as `mode` says.
    pub fn spawn_with<F>(queue: usize, mode: SymbolizeMode, mut sink: F) -> std::io::Result<Self>
    where
        F: FnMut(J, Vec<Vec<Frame>>) + Send + 'static,
    {
        let (tx, rx) = mpsc::sync_channel::<(J, Batch)>(queue.max(1));
        let handle = std::thread::Builder::new()
            .name("symbolizer".into())
            .spawn(move || {
                let mut s = HostSymbolizer::with_mode(mode);
                for (job, batch) in rx {
                    let frames = s.symbolize(&batch);
                    drop(batch);
                    sink(job, frames);
                    trim_heap();
                }
                s.stats
            })?;
        Ok(Self {
            tx: Some(tx),
            handle: Some(handle),
            dropped: 0,
        })
    }

    /// Queues a window; returns false (and counts it) if the queue is full.
    pub fn submit(&mut self, job: J, batch: Batch) -> bool {
        let Some(tx) = &self.tx else {
            return false;
        };
        match tx.try_send((job, batch)) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped += 1;
                false
            }
        }
    }

    /// Queues a window, waiting for room; false only if the thread is gone.
    pub fn submit_wait(&mut self, job: J, batch: Batch) -> bool {
        let ok = self
            .tx
            .as_ref()
            .is_some_and(|tx| tx.send((job, batch)).is_ok());
        if !ok {
            self.dropped += 1;
        }
        ok
    }

    /// Waits until every queued window went through `sink`; returns the totals.
    pub fn finish(mut self) -> SymbolStats {
        self.tx = None;
        let mut stats = self
            .handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        stats.dropped_windows = self.dropped;
        stats
    }
}

/// Callers' addresses are return addresses: look up the byte before so a call at the
/// very end of a function resolves to that function.
fn lookup_addr(addr: u64, depth: usize) -> u64 {
    if depth == 0 {
        addr
    } else {
        addr.saturating_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    #[no_mangle]
    pub extern "C" fn profiledb_agent_test_symbol(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_mul(31).wrapping_add(7)
    }

    /// Symbol lookup on a binary built by the test: the test executable itself.
    #[test]
    fn resolves_own_function_by_file_offset() {
        let me = std::process::id();
        let mut procs = ProcessTable::new();
        assert!(procs.load_from_proc(me));
        let addr = profiledb_agent_test_symbol as *const () as u64 + 2;
        assert!(profiledb_agent_test_symbol(1) > 0);
        let mut s = HostSymbolizer::new();
        let stacks = [(me, &[addr, 0x10][..])];
        let out = s.symbolize_procs(&procs, &stacks);
        assert_eq!(out.len(), 1);
        assert_eq!(
            out[0][0].function.as_deref(),
            Some("profiledb_agent_test_symbol")
        );
        let m = out[0][0].module.as_ref().expect("has a mapping");
        assert!(m.build_id.is_some(), "rust test binaries carry a build id");
        // an unmapped address stays unsymbolized with its address
        assert_eq!(out[0][1].function, None);
        assert_eq!(out[0][1].address, 0x10);
        assert_eq!(s.stats.unsymbolized, 1);
    }

    /// In server mode user frames keep no name but their mapping and build id, and
    /// a caller's address is its call's (the return address minus one), what the
    /// server then symbolizes.
    #[test]
    fn server_mode_sends_addresses_with_build_ids() {
        let me = std::process::id();
        let mut procs = ProcessTable::new();
        assert!(procs.load_from_proc(me));
        let addr = profiledb_agent_test_symbol as *const () as u64 + 2;
        let mut s = HostSymbolizer::with_mode(SymbolizeMode::Server);
        let stacks = [(me, &[addr, addr + 4][..])];
        let out = s.symbolize_procs(&procs, &stacks);
        assert_eq!(out[0][0].function, None);
        assert_eq!(out[0][0].address, addr);
        assert_eq!(
            out[0][1].address,
            addr + 3,
            "the call, not the return address"
        );
        let m = out[0][0].module.as_ref().expect("has a mapping");
        assert!(m.build_id.is_some());
        assert!(m.start <= addr && addr < m.end);
        assert!(s.names.is_empty(), "no symbol table was read");
    }

    #[test]
    fn display_names() {
        let f = Frame {
            function: None,
            address: 0x1234,
            module: Some(ModuleRef {
                file: Arc::new(FileId {
                    path: "/usr/lib/libfoo.so".into(),
                    dev: 0,
                    ino: 0,
                }),
                build_id: None,
                start: 0x1000,
                end: 0x2000,
                pgoff: 0x100,
            }),
        };
        assert_eq!(f.display_name(), "libfoo.so+0x334");
    }

    #[test]
    fn bounded_cache_evicts_cold_entries_and_keeps_used_ones() {
        let mut c: BoundedCache<u32, u32> = BoundedCache::new(4);
        for k in 0..2 {
            c.insert(k, k * 10);
        }
        // young full: 0 and 1 become old
        c.insert(2, 20);
        assert_eq!(c.len(), 3);
        // a hit moves 0 back to young (now 2, 0 → full)
        assert_eq!(c.get(&0), Some(&0));
        c.insert(3, 30); // young {2, 0} becomes old, 1 is evicted
        assert!(!c.contains(&1), "unused entry evicted");
        assert!(c.contains(&0) && c.contains(&2) && c.contains(&3));
        assert!(c.len() <= 4);
        for k in 100..1000 {
            c.insert(k, k);
            assert!(c.len() <= 4, "bounded");
        }
        assert!(c.evicted > 900);
        // re-inserting an existing key does not rotate or duplicate
        let before = c.len();
        c.insert(999, 1);
        assert_eq!(c.len(), before);
        assert_eq!(c.get(&999), Some(&1));
    }

    #[test]
    fn file_key_is_build_id_or_inode_identity() {
        let me = std::fs::read_link("/proc/self/exe").expect("exe");
        let md = std::fs::metadata(&me).expect("stat");
        let own = FileId {
            path: Arc::from(me.to_string_lossy().as_ref()),
            dev: 0,
            ino: md.ino(),
        };
        let info = HostSymbolizer::read_file_info(&own).expect("own binary");
        assert!(matches!(info.key, FileKey::BuildId(_)));
        // the same bytes at another path share the key (and so the cache entries)
        let dir = tempfile::tempdir().expect("tempdir");
        let copy = dir.path().join("copy");
        std::fs::copy(&me, &copy).expect("copy");
        let copied = FileId {
            path: Arc::from(copy.to_string_lossy().as_ref()),
            dev: 0,
            ino: 0,
        };
        let info2 = HostSymbolizer::read_file_info(&copied).expect("copy");
        assert_eq!(info.key, info2.key);
        // a file without a build id is keyed by inode and mtime: rewriting it changes the key
        let plain = dir.path().join("plain");
        std::fs::write(&plain, b"not an elf").expect("write");
        let plain_id = FileId {
            path: Arc::from(plain.to_string_lossy().as_ref()),
            dev: 0,
            ino: 0,
        };
        let k1 = HostSymbolizer::read_file_info(&plain_id)
            .expect("plain")
            .key;
        assert!(matches!(k1, FileKey::Inode { .. }));
        std::fs::write(&plain, b"not an elf, longer").expect("rewrite");
        let k2 = HostSymbolizer::read_file_info(&plain_id)
            .expect("plain")
            .key;
        assert_ne!(k1, k2);
        // the file at the path is not the mapped one (other inode): no symbols
        let stale = FileId {
            ino: md.ino().wrapping_add(1),
            ..own
        };
        assert!(HostSymbolizer::read_file_info(&stale).is_none());
    }

    #[test]
    fn symbolizer_thread_matches_direct_resolution() {
        let me = std::process::id();
        let mut procs = ProcessTable::new();
        assert!(procs.load_from_proc(me));
        let a = profiledb_agent_test_symbol as *const () as u64 + 1;
        let b = display_names as *const () as u64 + 1;
        let stacks: Vec<(u32, Vec<u64>)> = vec![
            (me, vec![a, b, 0x10]),
            (me, vec![b]),
            (me, vec![0xffff_ffff_8100_0000, a]),
        ];
        let mut batch = Batch::default();
        let mut direct_batch = Batch::default();
        for (pid, f) in &stacks {
            batch.push(&procs, *pid, f);
            direct_batch.push(&procs, *pid, f);
        }
        let direct = HostSymbolizer::new().symbolize(&direct_batch);
        let (tx, rx) = mpsc::channel();
        let mut t = SymbolizerThread::spawn(1, move |job: u32, frames| {
            let _ = tx.send((job, frames));
        })
        .expect("spawn");
        assert!(t.submit(7, batch));
        let stats = t.finish();
        let (job, queued) = rx.recv().expect("one window");
        assert_eq!(job, 7);
        assert_eq!(queued, direct);
        assert_eq!(
            queued[0][0].function.as_deref(),
            Some("profiledb_agent_test_symbol")
        );
        assert_eq!(stats.frames, 6);
        assert_eq!(stats.dropped_windows, 0);
    }

    #[test]
    fn full_symbolizer_queue_drops_and_counts_instead_of_blocking() {
        let (started_tx, started_rx) = mpsc::channel::<u32>();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let mut t = SymbolizerThread::spawn(1, move |job: u32, _frames| {
            let _ = started_tx.send(job);
            let _ = go_rx.recv();
        })
        .expect("spawn");
        assert!(t.submit(1, Batch::default()));
        assert_eq!(started_rx.recv().ok(), Some(1), "thread busy with window 1");
        assert!(t.submit(2, Batch::default()), "window 2 waits in the queue");
        assert!(!t.submit(3, Batch::default()), "window 3 does not fit");
        for _ in 0..3 {
            let _ = go_tx.send(());
        }
        // the final window at shutdown waits for room instead
        assert!(t.submit_wait(4, Batch::default()));
        let stats = t.finish();
        assert_eq!(stats.dropped_windows, 1);
        let seen: Vec<u32> = started_rx.try_iter().collect();
        assert_eq!(seen, vec![2, 4]);
    }
}
