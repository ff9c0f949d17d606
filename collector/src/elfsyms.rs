//! Streaming ELF symbol lookup by file offset, in bounded memory.
//!
//! A mapping symbolizer (blazesym, which the agent used before) maps the whole ELF
//! file and indexes its symbol table; for big binaries on
//! the host (a `librustc_driver` has tens of MB of symbol tables) every page it
//! touches counts as the agent's RSS (docs/perf-log/2026-11-22-agent.md). Here the
//! symbol tables are read with `pread` in fixed-size chunks
//! (the page cache holds them, the agent's address space never maps them) and only
//! the best candidate per queried address is kept, so memory is O(queries), whatever
//! the file's size. The price is one sequential scan of the tables per batch of new
//! addresses of a file, which the agent's result cache makes rare.
//!
//! Only little-endian ELF64 (x86_64, aarch64) is read; anything else is
//! [`ElfError::Unsupported`] and its frames stay unsymbolized (with address, mapping
//! and file identity).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ElfError {
    #[error("reading the ELF file: {0}")]
    Io(#[from] std::io::Error),
    #[error("not a little-endian ELF64 file")]
    Unsupported,
    #[error("malformed ELF header or section table")]
    Malformed,
}

const SHT_SYMTAB: u32 = 2;
const SHT_NOTE: u32 = 7;
const SHT_DYNSYM: u32 = 11;
const PT_LOAD: u32 = 1;
const STT_FUNC: u8 = 2;
const STT_GNU_IFUNC: u8 = 10;
const NT_GNU_BUILD_ID: u32 = 3;
const SYM_SIZE: u64 = 24;
/// Symbols read per `pread` (24 B each: 64 KiB chunks).
const SYMS_PER_CHUNK: usize = 2730;
/// Longest symbol name read.
const MAX_NAME: usize = 4096;
/// Most sections / program headers looked at (real files have < 100).
const MAX_HEADERS: usize = 4096;

#[derive(Clone, Copy, Debug)]
struct Load {
    offset: u64,
    vaddr: u64,
    filesz: u64,
}

#[derive(Clone, Copy, Debug)]
struct SymTable {
    offset: u64,
    size: u64,
    str_offset: u64,
    str_size: u64,
}

/// An opened ELF file: its load segments and symbol tables (headers only).
#[derive(Debug)]
pub struct ElfSyms {
    file: File,
    loads: Vec<Load>,
    tables: Vec<SymTable>,
    notes: Vec<(u64, u64)>,
}

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

fn read_vec(file: &File, offset: u64, len: usize) -> Result<Vec<u8>, ElfError> {
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, offset)?;
    Ok(buf)
}

impl ElfSyms {
    /// Reads the ELF, program and section headers of `path`.
    pub fn open(path: &Path) -> Result<Self, ElfError> {
        let file = File::open(path)?;
        let eh = read_vec(&file, 0, 64)?;
        // ELFCLASS64, ELFDATA2LSB
        if eh.get(0..4) != Some(b"\x7fELF") || eh.get(4) != Some(&2) || eh.get(5) != Some(&1) {
            return Err(ElfError::Unsupported);
        }
        let phoff = u64_at(&eh, 32).ok_or(ElfError::Malformed)?;
        let shoff = u64_at(&eh, 40).ok_or(ElfError::Malformed)?;
        let phentsize = u16_at(&eh, 54).ok_or(ElfError::Malformed)? as usize;
        let phnum = u16_at(&eh, 56).ok_or(ElfError::Malformed)? as usize;
        let shentsize = u16_at(&eh, 58).ok_or(ElfError::Malformed)? as usize;
        let shnum = u16_at(&eh, 60).ok_or(ElfError::Malformed)? as usize;
        if phnum > MAX_HEADERS || shnum > MAX_HEADERS || (phnum > 0 && phentsize < 56) {
            return Err(ElfError::Malformed);
        }
        let mut loads = Vec::new();
        if phnum > 0 {
            let ph = read_vec(&file, phoff, phnum * phentsize)?;
            for i in 0..phnum {
                let o = i * phentsize;
                if u32_at(&ph, o) == Some(PT_LOAD) {
                    loads.push(Load {
                        offset: u64_at(&ph, o + 8).ok_or(ElfError::Malformed)?,
                        vaddr: u64_at(&ph, o + 16).ok_or(ElfError::Malformed)?,
                        filesz: u64_at(&ph, o + 32).ok_or(ElfError::Malformed)?,
                    });
                }
            }
        }
        let mut tables = Vec::new();
        let mut notes = Vec::new();
        if shnum > 0 && shentsize >= 64 {
            let sh = read_vec(&file, shoff, shnum * shentsize)?;
            let sec = |i: usize| -> Option<(u32, u64, u64, u32)> {
                let o = i * shentsize;
                Some((
                    u32_at(&sh, o + 4)?,
                    u64_at(&sh, o + 24)?,
                    u64_at(&sh, o + 32)?,
                    u32_at(&sh, o + 40)?,
                ))
            };
            for i in 0..shnum {
                let Some((ty, offset, size, link)) = sec(i) else {
                    continue;
                };
                match ty {
                    SHT_SYMTAB | SHT_DYNSYM => {
                        if let Some((_, str_offset, str_size, _)) = sec(link as usize) {
                            tables.push(SymTable {
                                offset,
                                size,
                                str_offset,
                                str_size,
                            });
                        }
                    }
                    SHT_NOTE => notes.push((offset, size)),
                    _ => {}
                }
            }
        }
        // .symtab (the full table) before .dynsym (its exported subset).
        tables.sort_by_key(|t| std::cmp::Reverse(t.size));
        Ok(Self {
            file,
            loads,
            tables,
            notes,
        })
    }

    /// The GNU build id (`NT_GNU_BUILD_ID` note), if the file has one.
    pub fn build_id(&self) -> Option<Vec<u8>> {
        for &(offset, size) in &self.notes {
            if size > 64 * 1024 {
                continue;
            }
            let Ok(b) = read_vec(&self.file, offset, size as usize) else {
                continue;
            };
            let mut o = 0usize;
            while o + 12 <= b.len() {
                let namesz = u32_at(&b, o)? as usize;
                let descsz = u32_at(&b, o + 4)? as usize;
                let ty = u32_at(&b, o + 8)?;
                let name_start = o + 12;
                let desc_start = name_start + namesz.div_ceil(4) * 4;
                let desc_end = desc_start.checked_add(descsz)?;
                if desc_end > b.len() {
                    break;
                }
                if ty == NT_GNU_BUILD_ID && b.get(name_start..name_start + namesz)? == b"GNU\0" {
                    return Some(b[desc_start..desc_end].to_vec());
                }
                o = desc_start + descsz.div_ceil(4) * 4;
            }
        }
        None
    }

    /// Virtual address (as in the symbol table) of a file offset inside a load segment.
    fn vaddr_of(&self, offset: u64) -> Option<u64> {
        self.loads
            .iter()
            .find(|l| offset >= l.offset && offset - l.offset < l.filesz)
            .map(|l| offset - l.offset + l.vaddr)
    }

    /// Function names (demangled) for file offsets; `None` where no sized function
    /// symbol covers the address. `offsets` need not be sorted. `debug` is the
    /// separate debug file of this one (same addresses, full `.symtab`), tried first.
    pub fn resolve(
        &self,
        offsets: &[u64],
        debug: Option<&ElfSyms>,
    ) -> Result<Vec<Option<String>>, ElfError> {
        let vaddrs: Vec<Option<u64>> = offsets.iter().map(|&o| self.vaddr_of(o)).collect();
        let mut out = vec![None; offsets.len()];
        if let Some(d) = debug {
            // A broken debug file must not cost the names the file itself has.
            if let Ok(names) = d.lookup(&vaddrs) {
                out = names;
            }
        }
        if out.iter().any(Option::is_none) {
            let open: Vec<Option<u64>> = vaddrs
                .iter()
                .zip(&out)
                .map(|(v, n)| if n.is_none() { *v } else { None })
                .collect();
            for (o, n) in out.iter_mut().zip(self.lookup(&open)?) {
                if o.is_none() {
                    *o = n;
                }
            }
        }
        Ok(out)
    }

    /// Names for virtual addresses (as in the symbol tables).
    fn lookup(&self, vaddrs: &[Option<u64>]) -> Result<Vec<Option<String>>, ElfError> {
        // (vaddr, index into vaddrs), sorted by vaddr.
        let mut q: Vec<(u64, usize)> = vaddrs
            .iter()
            .enumerate()
            .filter_map(|(i, &v)| Some((v?, i)))
            .collect();
        q.sort_unstable();
        // best[j] for q[j]: (symbol value, table, name offset)
        let mut best: Vec<Option<(u64, usize, u64)>> = vec![None; q.len()];
        let mut chunk = vec![0u8; SYMS_PER_CHUNK * SYM_SIZE as usize];
        for (ti, t) in self.tables.iter().enumerate() {
            if q.is_empty() {
                break;
            }
            let mut pos = 0u64;
            let total = t.size - t.size % SYM_SIZE;
            while pos < total {
                let n = (total - pos).min(chunk.len() as u64) as usize;
                let buf = &mut chunk[..n];
                self.file.read_exact_at(buf, t.offset + pos)?;
                pos += n as u64;
                for s in buf.chunks_exact(SYM_SIZE as usize) {
                    let name = u32_at(s, 0).unwrap_or(0) as u64;
                    let kind = s[4] & 0xf;
                    let shndx = u16_at(s, 6).unwrap_or(0);
                    let value = u64_at(s, 8).unwrap_or(0);
                    let size = u64_at(s, 16).unwrap_or(0);
                    if (kind != STT_FUNC && kind != STT_GNU_IFUNC) || shndx == 0 || size == 0 {
                        continue;
                    }
                    let end = value.saturating_add(size);
                    let mut j = q.partition_point(|&(a, _)| a < value);
                    while let Some(&(a, _)) = q.get(j) {
                        if a >= end {
                            break;
                        }
                        // The innermost (highest-starting) covering symbol wins.
                        if best[j].is_none_or(|(v, _, _)| value > v) {
                            best[j] = Some((value, ti, name));
                        }
                        j += 1;
                    }
                }
            }
            // .dynsym only fills what .symtab left open.
            if best.iter().all(Option::is_some) {
                break;
            }
        }
        let mut out = vec![None; vaddrs.len()];
        let mut name_buf = Vec::new();
        for (j, &(_, i)) in q.iter().enumerate() {
            let Some((_, ti, name_off)) = best[j] else {
                continue;
            };
            let t = self.tables[ti];
            if name_off >= t.str_size {
                continue;
            }
            let max = (t.str_size - name_off).min(MAX_NAME as u64) as usize;
            name_buf.resize(max, 0);
            let got = self.file.read_at(&mut name_buf, t.str_offset + name_off)?;
            let raw = &name_buf[..got];
            let raw = raw.split(|&c| c == 0).next().unwrap_or(raw);
            out[i] = Some(demangle(&String::from_utf8_lossy(raw)));
        }
        Ok(out)
    }
}

/// The separate debug file of a build id in the distribution's debug directory
/// (`/usr/lib/debug/.build-id/ab/cdef….debug`, as installed by `libc6-dbg` and
/// `*-dbgsym` packages), if present: stripped system libraries get their local
/// functions back (e.g. libc's `__libc_start_call_main`).
pub fn debug_file_for(build_id: &[u8]) -> Option<std::path::PathBuf> {
    let (first, rest) = build_id.split_first()?;
    if rest.is_empty() {
        return None;
    }
    let hex: String = rest.iter().map(|b| format!("{b:02x}")).collect();
    let p = Path::new("/usr/lib/debug/.build-id")
        .join(format!("{first:02x}"))
        .join(format!("{hex}.debug"));
    p.is_file().then_some(p)
}

/// Rust (legacy and v0) and C++ names demangled; Rust without the hash suffix.
pub fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return format!("{d:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            if let Ok(s) = sym.demangle() {
                return s;
            }
        }
    }
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    #[no_mangle]
    pub extern "C" fn profiledb_elfsyms_test_fn(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_mul(17).rotate_left(3)
    }

    /// File offset of a function of this test binary, from `/proc/self/maps`.
    fn own_offset(addr: u64) -> (String, u64) {
        let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
        for line in maps.lines() {
            let mut it = line.split_whitespace();
            let (Some(range), Some(_), Some(off), Some(_), Some(_), Some(path)) = (
                it.next(),
                it.next(),
                it.next(),
                it.next(),
                it.next(),
                it.next(),
            ) else {
                continue;
            };
            let (a, b) = range.split_once('-').expect("range");
            let (a, b) = (
                u64::from_str_radix(a, 16).expect("hex"),
                u64::from_str_radix(b, 16).expect("hex"),
            );
            if (a..b).contains(&addr) {
                let off = u64::from_str_radix(off, 16).expect("hex");
                return (path.to_string(), addr - a + off);
            }
        }
        panic!("own address not mapped");
    }

    #[test]
    fn resolves_own_function_and_build_id() {
        assert!(profiledb_elfsyms_test_fn(3) > 0);
        let addr = profiledb_elfsyms_test_fn as *const () as u64 + 1;
        let (path, off) = own_offset(addr);
        let elf = ElfSyms::open(Path::new(&path)).expect("open own binary");
        let names = elf.resolve(&[off, 0], None).expect("resolve");
        assert_eq!(names[0].as_deref(), Some("profiledb_elfsyms_test_fn"));
        assert_eq!(names[1], None, "offset 0 is the ELF header, no function");
        assert!(elf.build_id().is_some_and(|b| b.len() >= 16));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 48, ..Default::default() })]

        /// Host files can be anything (truncated, rewritten, hostile): a real ELF
        /// file with bytes overwritten or cut short is refused or read, never a panic.
        #[test]
        fn damaged_elf_files_never_panic(
            edits in proptest::collection::vec((0usize..1 << 20, proptest::num::u8::ANY), 1..24),
            cut in proptest::option::of(0usize..1 << 20),
            offsets in proptest::collection::vec(0u64..1 << 22, 1..8),
        ) {
            let Ok(mut bytes) = std::fs::read("/proc/self/exe") else { return Ok(()) };
            // Most edits land in the headers and tables at both ends of the file.
            let n = bytes.len();
            for (i, (at, v)) in edits.iter().enumerate() {
                let pos = if i % 2 == 0 { at % 4096.min(n) } else { n - 1 - at % n };
                bytes[pos] = *v;
            }
            if let Some(c) = cut {
                bytes.truncate(c % n);
            }
            let dir = tempfile::tempdir().expect("tempdir");
            let p = dir.path().join("damaged");
            std::fs::write(&p, &bytes).expect("write");
            if let Ok(syms) = ElfSyms::open(&p) {
                let _ = syms.build_id();
                let _ = syms.resolve(&offsets, None);
                let _ = syms.resolve(&offsets, Some(&syms));
            }
        }
    }

    #[test]
    fn rejects_non_elf() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("x");
        std::fs::write(&p, vec![0u8; 128]).expect("write");
        assert!(matches!(ElfSyms::open(&p), Err(ElfError::Unsupported)));
    }

    #[test]
    fn demangles_rust_and_cpp() {
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("_Z3fooi"), "foo(int)");
        assert_eq!(demangle("main"), "main");
    }
}
