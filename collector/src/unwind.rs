//! DWARF unwinding of user stacks copied by the kernel, with framehop.
//!
//! Release builds usually lack frame pointers, so the kernel's callchain holds only
//! the leaf. With `PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER` each sample also
//! carries the user registers (ip, sp, bp) and a copy of the top of the user stack;
//! this module unwinds that copy with the `.eh_frame`/`.debug_frame` CFI of the mapped
//! ELF files. Per file the unwind sections are found once and used in place from a
//! private read-only mmap of the file, cached by file identity (only the pages the
//! unwinder touches become resident, and [`DwarfUnwinder::release_pages`] gives
//! those back after every push window, so big binaries such as `librustc_driver`
//! do not pile up in the agent's RSS); per
//! process a framehop unwinder with one module per executable mapping is built
//! lazily and rebuilt when the process's maps change.
//!
//! Only x86_64 is implemented; elsewhere [`DwarfUnwinder::unwind`] returns no frames
//! and the frame-pointer callchain is used.

use std::collections::HashMap;
use std::sync::Arc;

use crate::procs::{FileId, ProcessTable};

/// Deepest user stack produced.
pub const MAX_DEPTH: usize = 128;
/// Largest ELF file the unwinder opens.
const MAX_FILE_BYTES: u64 = 4 << 30;
/// Most files kept in the cache before it is cleared.
const MAX_FILES: usize = 4096;
/// Most bytes of unwind sections (mapped, not copied) referenced by the cache.
const MAX_CACHED_BYTES: usize = 1 << 30;

/// A read-only private mapping of a whole file, unmapped on drop.
struct FileMap {
    ptr: *mut libc::c_void,
    len: usize,
}

impl FileMap {
    fn open(path: &str) -> Option<Self> {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::open(path).ok()?;
        let len = f.metadata().ok()?.len();
        if len == 0 || len > MAX_FILE_BYTES {
            return None;
        }
        let len = usize::try_from(len).ok()?;
        // SAFETY: mapping a file we opened read-only; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                f.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        Some(Self { ptr, len })
    }

    /// Drops the resident pages from this process's page tables. They stay in the
    /// page cache and fault back in (a minor fault) if touched again.
    fn release(&self) {
        // SAFETY: ptr/len describe a live private read-only file mapping that is never
        // written: discarding its pages cannot change what later reads see.
        unsafe {
            libc::madvise(self.ptr, self.len, libc::MADV_DONTNEED);
        }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: ptr/len describe a live mapping owned by self. A file truncated
        // underneath would SIGBUS; binaries being executed cannot be written.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

// SAFETY: the mapping is read-only and private, never written through `ptr`, and
// unmapped only on drop, so sharing or moving it between threads is sound.
unsafe impl Send for FileMap {}
// SAFETY: see `Send`: `&FileMap` only ever hands out shared `&[u8]`.
unsafe impl Sync for FileMap {}

impl Drop for FileMap {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `open` mapped.
        unsafe {
            libc::munmap(self.ptr, self.len);
        }
    }
}

/// A section's bytes inside a shared read-only file mapping: only the pages the
/// unwinder touches become resident.
#[derive(Clone)]
pub struct SectionData {
    map: Arc<FileMap>,
    range: std::ops::Range<usize>,
}

impl std::ops::Deref for SectionData {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.map.bytes().get(self.range.clone()).unwrap_or(&[])
    }
}

impl std::fmt::Debug for SectionData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SectionData({:?})", self.range)
    }
}

/// The unwind-relevant parts of one ELF file.
#[derive(Debug, Default)]
pub struct ElfUnwindInfo {
    pub text_svma: Option<std::ops::Range<u64>>,
    pub eh_frame_svma: Option<std::ops::Range<u64>>,
    pub eh_frame: Option<SectionData>,
    pub eh_frame_hdr_svma: Option<std::ops::Range<u64>>,
    pub eh_frame_hdr: Option<SectionData>,
    pub debug_frame: Option<SectionData>,
    /// `(p_offset, p_filesz, p_vaddr)` of the PT_LOAD segments.
    pub segments: Vec<(u64, u64, u64)>,
}

impl ElfUnwindInfo {
    /// Reads the unwind sections of the ELF file at `path`.
    pub fn read(path: &str) -> Option<Self> {
        use object::{Object, ObjectSection, ObjectSegment};
        let map = Arc::new(FileMap::open(path)?);
        let file = object::File::parse(map.bytes()).ok()?;
        let mut info = ElfUnwindInfo::default();
        let section = |name: &str| -> Option<(std::ops::Range<u64>, Option<SectionData>)> {
            let s = file.section_by_name(name)?;
            let range = s.address()..s.address().checked_add(s.size())?;
            // Compressed or NOBITS sections have no usable file range.
            let data = s
                .file_range()
                .filter(|(_, size)| *size > 0 && *size == s.size())
                .and_then(|(off, size)| {
                    let start = usize::try_from(off).ok()?;
                    let end = start.checked_add(usize::try_from(size).ok()?)?;
                    (end <= map.len).then(|| SectionData {
                        map: map.clone(),
                        range: start..end,
                    })
                });
            Some((range, data))
        };
        if let Some((r, _)) = file.section_by_name(".text").map(|s| {
            let a = s.address();
            (a..a.saturating_add(s.size()), ())
        }) {
            info.text_svma = Some(r);
        }
        if let Some((r, d)) = section(".eh_frame") {
            info.eh_frame_svma = Some(r);
            info.eh_frame = d;
        }
        if let Some((r, d)) = section(".eh_frame_hdr") {
            info.eh_frame_hdr_svma = Some(r);
            info.eh_frame_hdr = d;
        }
        if let Some((_, d)) = section(".debug_frame") {
            info.debug_frame = d;
        }
        for seg in file.segments() {
            let (off, size) = seg.file_range();
            info.segments.push((off, size, seg.address()));
        }
        Some(info)
    }

    /// The load bias (avma − svma) of a mapping that starts at `start` with file
    /// offset `pgoff`.
    pub fn bias(&self, start: u64, pgoff: u64) -> Option<u64> {
        // Mappings start on page boundaries, so a segment may begin up to a page
        // after the mapping's offset; the previous segment may also still cover it.
        // The right one is the segment with the highest page-aligned start.
        let &(off, _, vaddr) = self
            .segments
            .iter()
            .filter(|(off, size, _)| (off & !0xfff) <= pgoff && pgoff < off + size.max(&1))
            .max_by_key(|(off, _, _)| *off)?;
        let svma = vaddr.wrapping_add(pgoff).wrapping_sub(off);
        Some(start.wrapping_sub(svma))
    }
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use super::*;
    use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
    use framehop::{ExplicitModuleSectionInfo, Module, Unwinder};

    pub struct ProcUnwinder {
        generation: u64,
        unwinder: UnwinderX86_64<SectionData>,
    }

    pub struct Inner {
        cache: CacheX86_64,
        procs: HashMap<u32, ProcUnwinder>,
    }

    impl Default for Inner {
        fn default() -> Self {
            Self {
                cache: CacheX86_64::new(),
                procs: HashMap::new(),
            }
        }
    }

    impl Inner {
        pub fn unwind(
            &mut self,
            files: &mut Files,
            procs: &ProcessTable,
            pid: u32,
            regs: &[u64],
            stack: &[u8],
            out: &mut Vec<u64>,
        ) -> usize {
            // Mask order (bit index): bp (6), sp (7), ip (8).
            let (Some(&bp), Some(&sp), Some(&ip)) = (regs.first(), regs.get(1), regs.get(2)) else {
                return 0;
            };
            let Some(proc_) = procs.get(pid) else {
                return 0;
            };
            let stale = self
                .procs
                .get(&pid)
                .is_none_or(|p| p.generation != proc_.generation);
            if stale {
                let mut unwinder = UnwinderX86_64::new();
                for m in proc_.maps.iter().filter(|m| m.is_file()) {
                    let Some(info) = files.get(&m.file) else {
                        continue;
                    };
                    let Some(bias) = info.bias(m.start, m.pgoff) else {
                        continue;
                    };
                    let section_info = ExplicitModuleSectionInfo {
                        base_svma: 0,
                        text_svma: info.text_svma.clone(),
                        eh_frame_svma: info.eh_frame_svma.clone(),
                        eh_frame: info.eh_frame.clone(),
                        eh_frame_hdr_svma: info.eh_frame_hdr_svma.clone(),
                        eh_frame_hdr: info.eh_frame_hdr.clone(),
                        debug_frame: info.debug_frame.clone(),
                        text: None,
                        stubs_svma: None,
                        stub_helper_svma: None,
                        got_svma: None,
                        unwind_info: None,
                        text_segment_svma: None,
                        text_segment: None,
                    };
                    unwinder.add_module(Module::new(
                        m.file.path.to_string(),
                        m.start..m.end,
                        bias,
                        section_info,
                    ));
                }
                self.procs.insert(
                    pid,
                    ProcUnwinder {
                        generation: proc_.generation,
                        unwinder,
                    },
                );
            }
            let Some(pu) = self.procs.get(&pid) else {
                return 0;
            };
            let stack_end = sp.saturating_add(stack.len() as u64);
            let mut read_stack = |addr: u64| -> Result<u64, ()> {
                if addr < sp || addr.checked_add(8).is_none_or(|e| e > stack_end) {
                    return Err(());
                }
                let off = (addr - sp) as usize;
                let b = stack.get(off..off + 8).ok_or(())?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                Ok(u64::from_le_bytes(a))
            };
            let before = out.len();
            let mut it = pu.unwinder.iter_frames(
                ip,
                UnwindRegsX86_64::new(ip, sp, bp),
                &mut self.cache,
                &mut read_stack,
            );
            while out.len() - before < MAX_DEPTH {
                match it.next() {
                    Ok(Some(f)) => out.push(f.address()),
                    Ok(None) => break,
                    Err(e) => {
                        if std::env::var_os("PROFILEDB_AGENT_DEBUG_UNWIND").is_some() {
                            eprintln!("unwind error after {} frames: {e:?}", out.len() - before);
                        }
                        break;
                    }
                }
            }
            out.len() - before
        }

        pub fn retain(&mut self, procs: &ProcessTable) {
            self.procs.retain(|pid, _| procs.get(*pid).is_some());
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    use super::*;

    #[derive(Default)]
    pub struct Inner;

    impl Inner {
        pub fn unwind(
            &mut self,
            _files: &mut Files,
            _procs: &ProcessTable,
            _pid: u32,
            _regs: &[u64],
            _stack: &[u8],
            _out: &mut Vec<u64>,
        ) -> usize {
            0
        }

        pub fn retain(&mut self, _procs: &ProcessTable) {}
    }
}

/// Cache of per-file unwind info, keyed by file identity, bounded in files and bytes.
#[derive(Default)]
pub struct Files {
    map: HashMap<Arc<FileId>, Option<Arc<ElfUnwindInfo>>>,
    bytes: usize,
}

impl Files {
    fn get(&mut self, file: &Arc<FileId>) -> Option<Arc<ElfUnwindInfo>> {
        if let Some(v) = self.map.get(file) {
            return v.clone();
        }
        if self.map.len() >= MAX_FILES || self.bytes >= MAX_CACHED_BYTES {
            // Unwinders already built keep their own references; new ones re-read.
            self.map.clear();
            self.bytes = 0;
        }
        let v = ElfUnwindInfo::read(&file.path).map(Arc::new);
        if let Some(i) = &v {
            self.bytes += i.eh_frame.as_ref().map_or(0, |d| d.len())
                + i.eh_frame_hdr.as_ref().map_or(0, |d| d.len())
                + i.debug_frame.as_ref().map_or(0, |d| d.len());
        }
        self.map.insert(file.clone(), v.clone());
        v
    }

    fn release_pages(&self) {
        for info in self.map.values().flatten() {
            // All sections of a file share one mapping.
            if let Some(d) = [&info.eh_frame, &info.eh_frame_hdr, &info.debug_frame]
                .into_iter()
                .flatten()
                .next()
            {
                d.map.release();
            }
        }
    }
}

/// Unwinds user stacks from registers + a copy of the stack.
#[derive(Default)]
pub struct DwarfUnwinder {
    files: Files,
    inner: imp::Inner,
}

impl DwarfUnwinder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends the user frames of `pid` (leaf first) to `out`; `regs` are the sampled
    /// user registers in [`crate::perf::USER_REGS_MASK`] order, `stack` the copy of
    /// the stack starting at the sampled sp. Returns how many frames were added.
    pub fn unwind(
        &mut self,
        procs: &ProcessTable,
        pid: u32,
        regs: &[u64],
        stack: &[u8],
        out: &mut Vec<u64>,
    ) -> usize {
        self.inner
            .unwind(&mut self.files, procs, pid, regs, stack, out)
    }

    /// Forgets unwinders of processes no longer in the table.
    pub fn retain(&mut self, procs: &ProcessTable) {
        self.inner.retain(procs);
    }

    /// Gives back the resident pages of the cached files' mappings (see
    /// [`FileMap::release`]): what the next window needs faults back in cheaply.
    pub fn release_pages(&self) {
        self.files.release_pages();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_unwind_info() {
        let exe = std::env::current_exe().expect("exe");
        let info = ElfUnwindInfo::read(&exe.to_string_lossy()).expect("parses");
        assert!(info.eh_frame.is_some());
        assert!(info.eh_frame_hdr.is_some());
        assert!(!info.segments.is_empty());
    }

    #[test]
    fn bias_from_segments() {
        let info = ElfUnwindInfo {
            segments: vec![(0, 0x1000, 0), (0x1000, 0x5000, 0x1000)],
            ..Default::default()
        };
        assert_eq!(info.bias(0x5555_0000_1000, 0x1000), Some(0x5555_0000_0000));
        assert_eq!(info.bias(0x10, 0x9000_0000), None);
        // a text segment that starts mid-page after a read-only one
        let info = ElfUnwindInfo {
            segments: vec![(0, 0x100738, 0), (0x100740, 0x2f3430, 0x101740)],
            ..Default::default()
        };
        assert_eq!(
            info.bias(0x5000_0010_0000, 0x100000),
            Some(0x5000_0010_0000 - 0x101000)
        );
    }

    /// Unwinds this very thread's stack: capture regs + stack copy like perf does.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn unwinds_own_stack() {
        #[inline(never)]
        fn capture() -> (u64, u64, u64, Vec<u8>) {
            let (ip, sp, bp): (u64, u64, u64);
            // SAFETY: reads registers only.
            unsafe {
                std::arch::asm!("lea {ip}, [rip]", "mov {sp}, rsp", "mov {bp}, rbp", ip = out(reg) ip, sp = out(reg) sp, bp = out(reg) bp);
            }
            // The live stack runs from sp up to the top of its mapping, which may be
            // only a few KiB away: never read past it.
            let top = std::fs::read_to_string("/proc/self/maps")
                .ok()
                .and_then(|maps| {
                    maps.lines().find_map(|l| {
                        let (range, _) = l.split_once(' ')?;
                        let (a, b) = range.split_once('-')?;
                        let (a, b) = (
                            u64::from_str_radix(a, 16).ok()?,
                            u64::from_str_radix(b, 16).ok()?,
                        );
                        (a <= sp && sp < b).then_some(b)
                    })
                })
                .expect("sp lies in a mapping");
            let len = (16 * 1024).min((top - sp) as usize);
            // SAFETY: [sp, sp + len) lies inside this thread's mapped stack (checked
            // against /proc/self/maps above), and the frames it holds are live.
            let stack = unsafe { std::slice::from_raw_parts(sp as *const u8, len) }.to_vec();
            (ip, sp, bp, stack)
        }
        #[inline(never)]
        fn depth2() -> (u64, u64, u64, Vec<u8>) {
            let r = capture();
            std::hint::black_box(r)
        }
        let (ip, sp, bp, stack) = depth2();
        let me = std::process::id();
        let mut procs = ProcessTable::new();
        assert!(procs.load_from_proc(me));
        let mut u = DwarfUnwinder::new();
        let mut out = Vec::new();
        let n = u.unwind(&procs, me, &[bp, sp, ip], &stack, &mut out);
        assert!(n >= 4, "only {n} frames: {out:x?}");
        let mut s = crate::symbolize::HostSymbolizer::new();
        let frames = s.symbolize_procs(&procs, &[(me, &out[..])]);
        let names: Vec<String> = frames[0].iter().map(|f| f.display_name()).collect();
        assert!(
            names.iter().any(|n| n.contains("unwinds_own_stack")),
            "{names:?}"
        );
    }
}
