//! Host symbolization of raw stacks with blazesym.
//!
//! User frames are resolved by file offset against the ELF symbol table of the mapped
//! file (blazesym keeps the parsed files open), kernel frames against
//! `/proc/kallsyms`. Results are cached per `(file identity, offset)` and per kernel
//! address; build ids are cached per file identity. Frames that cannot be resolved
//! keep their address, mapping and build id.
//!
//! blazesym was chosen because it is maintained by the libbpf project for exactly this
//! job (profilers symbolizing perf/BPF stacks), handles ELF, DWARF, kallsyms and
//! demangling, and accepts file offsets, so processes that already exited still
//! resolve from the maps the agent recorded.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use blazesym::symbolize::evict::{Elf as EvictElf, Evict};
use blazesym::symbolize::source::{Elf, Kernel, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use blazesym::MaybeDefault;

use crate::aggregate::is_kernel_addr;
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
}

/// Windows after which blazesym's parsed copy of an unused file is released.
const EVICT_AFTER_WINDOWS: u64 = 2;

/// Most cached `(file, offset)` results before the cache is cleared.
const MAX_CACHE: usize = 200_000;

/// Symbolizer with caches; lives for the agent's lifetime.
pub struct HostSymbolizer {
    inner: Symbolizer,
    user: HashMap<(Arc<FileId>, u64), Option<Arc<str>>>,
    kernel: HashMap<u64, Option<Arc<str>>>,
    build_ids: HashMap<Arc<FileId>, Option<Arc<str>>>,
    kernel_readable: bool,
    /// Window number of the last time blazesym was asked about each file.
    last_parsed: HashMap<Arc<FileId>, u64>,
    windows: u64,
    /// Totals since the agent started.
    pub stats: SymbolStats,
}

impl Default for HostSymbolizer {
    fn default() -> Self {
        Self::new()
    }
}

fn kallsyms_readable() -> bool {
    // With kptr_restrict, /proc/kallsyms lists all-zero addresses.
    std::fs::read_to_string("/proc/kallsyms")
        .map(|s| {
            s.lines().take(64).any(|l| {
                l.split(' ')
                    .next()
                    .is_some_and(|a| a.chars().any(|c| c != '0'))
            })
        })
        .unwrap_or(false)
}

impl HostSymbolizer {
    pub fn new() -> Self {
        Self {
            inner: Symbolizer::builder()
                .enable_code_info(false)
                .enable_inlined_fns(false)
                .build(),
            user: HashMap::new(),
            kernel: HashMap::new(),
            build_ids: HashMap::new(),
            kernel_readable: kallsyms_readable(),
            last_parsed: HashMap::new(),
            windows: 0,
            stats: SymbolStats::default(),
        }
    }

    /// Whether kernel symbols are available.
    pub fn kernel_readable(&self) -> bool {
        self.kernel_readable
    }

    fn build_id(&mut self, file: &Arc<FileId>) -> Option<Arc<str>> {
        if let Some(b) = self.build_ids.get(file) {
            return b.clone();
        }
        let b = blazesym::helper::read_elf_build_id(&PathBuf::from(&*file.path))
            .ok()
            .flatten()
            .map(|id| Arc::from(id.iter().map(|b| format!("{b:02x}")).collect::<String>()));
        self.build_ids.insert(file.clone(), b.clone());
        b
    }

    /// Symbolizes a single ELF file's offsets and fills the cache.
    fn resolve_file(&mut self, file: &Arc<FileId>, offsets: &mut Vec<u64>) {
        offsets.sort_unstable();
        offsets.dedup();
        let src = Source::Elf({
            let mut e = Elf::new(PathBuf::from(&*file.path));
            e.debug_syms = false;
            e
        });
        let res = self.inner.symbolize(&src, Input::FileOffset(&offsets[..]));
        match res {
            Ok(syms) => {
                for (off, s) in offsets.iter().zip(syms) {
                    let name = match s {
                        Symbolized::Sym(sym) => Some(Arc::from(&*sym.name)),
                        Symbolized::Unknown(_) => None,
                    };
                    self.user.insert((file.clone(), *off), name);
                }
            }
            Err(_) => {
                for off in offsets.iter() {
                    self.user.insert((file.clone(), *off), None);
                }
            }
        }
    }

    /// Lets blazesym release files it has not been asked about for a few windows
    /// (their parsed symbol tables and mappings); our own cache keeps the answers.
    fn evict_idle(&mut self) {
        let now = self.windows;
        let idle: Vec<Arc<FileId>> = self
            .last_parsed
            .iter()
            .filter(|(_, &w)| now.saturating_sub(w) >= EVICT_AFTER_WINDOWS)
            .map(|(f, _)| f.clone())
            .collect();
        for f in idle {
            let _ = self
                .inner
                .evict(&Evict::Elf(EvictElf::new(PathBuf::from(&*f.path))));
            self.last_parsed.remove(&f);
        }
    }

    fn resolve_kernel(&mut self, addrs: &mut Vec<u64>) {
        addrs.sort_unstable();
        addrs.dedup();
        let names: Vec<Option<Arc<str>>> = if self.kernel_readable {
            let k = Kernel {
                vmlinux: MaybeDefault::None,
                debug_syms: false,
                ..Default::default()
            };
            match self
                .inner
                .symbolize(&Source::Kernel(k), Input::AbsAddr(&addrs[..]))
            {
                Ok(syms) => syms
                    .into_iter()
                    .map(|s| s.into_sym().map(|s| Arc::from(&*s.name)))
                    .collect(),
                Err(_) => vec![None; addrs.len()],
            }
        } else {
            vec![None; addrs.len()]
        };
        for (a, n) in addrs.iter().zip(names) {
            self.kernel.insert(*a, n);
        }
    }

    /// Symbolizes the stacks of one window. `stacks[i] = (pid, frames leaf first)`.
    /// Returns the frames of each stack, leaf first.
    pub fn symbolize(&mut self, procs: &ProcessTable, stacks: &[(u32, &[u64])]) -> Vec<Vec<Frame>> {
        if self.user.len() > MAX_CACHE {
            self.user.clear();
        }
        if self.kernel.len() > MAX_CACHE {
            self.kernel.clear();
        }
        // Pass 1: collect what is not cached yet.
        let mut by_file: HashMap<Arc<FileId>, Vec<u64>> = HashMap::new();
        let mut kernel: Vec<u64> = Vec::new();
        for (pid, frames) in stacks {
            let proc_ = procs.get(*pid);
            for (i, &addr) in frames.iter().enumerate() {
                let lookup = lookup_addr(addr, i);
                if is_kernel_addr(addr) {
                    if !self.kernel.contains_key(&lookup) {
                        kernel.push(lookup);
                    }
                } else if let Some(m) = proc_.and_then(|p| p.lookup(lookup)).filter(|m| m.is_file())
                {
                    let off = m.file_offset(lookup);
                    if !self.user.contains_key(&(m.file.clone(), off)) {
                        by_file.entry(m.file.clone()).or_default().push(off);
                    }
                }
            }
        }
        self.windows += 1;
        for (file, mut offs) in by_file {
            self.resolve_file(&file, &mut offs);
            self.last_parsed.insert(file, self.windows);
        }
        self.evict_idle();
        if !kernel.is_empty() {
            self.resolve_kernel(&mut kernel);
        }
        // Pass 2: build frames.
        let mut out = Vec::with_capacity(stacks.len());
        for (pid, frames) in stacks {
            let proc_ = procs.get(*pid);
            let mut v = Vec::with_capacity(frames.len());
            for (i, &addr) in frames.iter().enumerate() {
                let lookup = lookup_addr(addr, i);
                let frame = if is_kernel_addr(addr) {
                    Frame {
                        function: self.kernel.get(&lookup).cloned().flatten(),
                        address: addr,
                        module: None,
                    }
                } else {
                    match proc_.and_then(|p| p.lookup(lookup)) {
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

    fn user_frame(&mut self, addr: u64, lookup: u64, m: &Mapping) -> Frame {
        let function = if m.is_file() {
            self.user
                .get(&(m.file.clone(), m.file_offset(lookup)))
                .cloned()
                .flatten()
        } else {
            None
        };
        let build_id = if m.is_file() {
            self.build_id(&m.file)
        } else {
            None
        };
        Frame {
            function,
            address: addr,
            module: Some(ModuleRef {
                file: m.file.clone(),
                build_id,
                start: m.start,
                end: m.end,
                pgoff: m.pgoff,
            }),
        }
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
        let out = s.symbolize(&procs, &stacks);
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
}
