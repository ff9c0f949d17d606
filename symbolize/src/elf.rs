//! One debug file: an ELF named by its GNU build id, its load segments (which turn a
//! mapping's file offset into a virtual address, as pprof does), its DWARF (through
//! `addr2line`, inlined frames expanded) and its symbol table for code DWARF does
//! not cover.
//!
//! Everything here reads untrusted bytes: sizes are checked against [`Limits`]
//! before anything is decompressed or copied, and parse errors are values.

use std::borrow::Cow;
use std::sync::Arc;

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};

/// What a debug file may cost. Decompressed sizes are checked from the section
/// headers before decompression, so a small file claiming a huge section is
/// refused without allocating it.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Largest debug file accepted (upload, debuginfod, data directory).
    pub max_file_bytes: u64,
    /// Largest DWARF section, decompressed.
    pub max_section_bytes: u64,
    /// All DWARF sections together, decompressed.
    pub max_dwarf_bytes: u64,
    /// Line-table rows a file may have (checked when it is validated).
    pub max_line_rows: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_file_bytes: 1 << 30,
            max_section_bytes: 1 << 30,
            max_dwarf_bytes: 2 << 30,
            max_line_rows: 200_000_000,
        }
    }
}

/// Why a file cannot serve as a debug file. Every variant is the uploader's
/// fault (a 4xx), never the server's.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DebugFileError {
    #[error("the file is {size} bytes, above the limit of {limit}")]
    TooLarge { size: u64, limit: u64 },
    #[error("not an ELF file: {0}")]
    NotElf(String),
    #[error("the ELF file has no GNU build id note (.note.gnu.build-id)")]
    NoBuildId,
    #[error("the file's build id is {found}, not {claimed}")]
    BuildIdMismatch { claimed: String, found: String },
    #[error("the file has neither DWARF (.debug_info) nor a symbol table")]
    NoSymbols,
    #[error("section {section} is {size} bytes decompressed, above the limit of {limit}")]
    SectionTooLarge {
        section: String,
        size: u64,
        limit: u64,
    },
    #[error("malformed DWARF: {0}")]
    Dwarf(String),
    #[error("the line tables have more than {0} rows")]
    TooManyLines(u64),
    #[error("the file could not be read: {0}")]
    Panicked(String),
}

/// One frame of a symbolized address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Function name, demangled; empty when unknown.
    pub function: String,
    /// Source file, empty when unknown.
    pub file: String,
    /// Source line, 0 when unknown.
    pub line: u32,
}

/// Where a mapping lay in its process (pprof's `Mapping`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MappingRange {
    pub start: u64,
    pub limit: u64,
    pub offset: u64,
}

#[derive(Clone, Copy, Debug)]
struct Segment {
    offset: u64,
    file_size: u64,
    mem_size: u64,
    vaddr: u64,
    exec: bool,
}

const PAGE: u64 = 0x1000;

#[derive(Clone, Debug)]
struct Symbol {
    address: u64,
    size: u64,
    name: Arc<str>,
}

type Reader = gimli::EndianArcSlice<gimli::RunTimeEndian>;

/// A parsed debug file, ready for lookups.
pub struct DebugFile {
    build_id: String,
    segments: Vec<Segment>,
    symbols: Vec<Symbol>,
    /// addr2line builds its tables lazily, in cells that are not `Sync`: one
    /// lookup at a time per file (queries memoise names per frame anyway).
    dwarf: Option<parking_lot::Mutex<addr2line::Context<Reader>>>,
    bytes: u64,
}

impl std::fmt::Debug for DebugFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DebugFile")
            .field("build_id", &self.build_id)
            .field("symbols", &self.symbols.len())
            .field("dwarf", &self.dwarf.is_some())
            .field("bytes", &self.bytes)
            .finish()
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The GNU build id of an ELF file, hex; an error when it has none.
pub fn build_id(data: &[u8]) -> Result<String, DebugFileError> {
    let file = object::File::parse(data).map_err(|e| DebugFileError::NotElf(e.to_string()))?;
    elf_build_id(&file)
}

fn elf_build_id(file: &object::File<'_>) -> Result<String, DebugFileError> {
    if file.format() != object::BinaryFormat::Elf {
        return Err(DebugFileError::NotElf(format!("{:?} file", file.format())));
    }
    match file.build_id() {
        Ok(Some(id)) if !id.is_empty() => Ok(hex(id)),
        Ok(_) => Err(DebugFileError::NoBuildId),
        Err(e) => Err(DebugFileError::NotElf(e.to_string())),
    }
}

/// `name` demangled (Rust or C++), or as it is.
pub fn demangle(name: &str) -> Cow<'_, str> {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return format!("{d:#}").into();
    }
    if name.starts_with("_Z") {
        if let Ok(s) = cpp_demangle::Symbol::new(name) {
            if let Ok(d) = s.demangle() {
                return d.into();
            }
        }
    }
    name.into()
}

impl DebugFile {
    /// Parses `data`; `claimed` is the build id the caller says it has.
    /// `validate` also walks every line table (an upload's check; files from
    /// the data directory were checked when they arrived).
    pub fn parse(
        data: &[u8],
        claimed: Option<&str>,
        limits: &Limits,
        validate: bool,
    ) -> Result<DebugFile, DebugFileError> {
        if data.len() as u64 > limits.max_file_bytes {
            return Err(DebugFileError::TooLarge {
                size: data.len() as u64,
                limit: limits.max_file_bytes,
            });
        }
        // object reads headers in place and refuses bytes not aligned for them
        // (an HTTP body may start anywhere): such bytes are copied. The global
        // allocator aligns a buffer this large to at least 8 bytes.
        let copy: Vec<u8>;
        let data = if data.as_ptr().align_offset(8) == 0 {
            data
        } else {
            copy = data.to_vec();
            &copy[..]
        };
        // gimli and object return errors for malformed input; a panic would be
        // a bug of theirs, and must not take a query or an upload down with it.
        std::panic::catch_unwind(|| Self::parse_inner(data, claimed, limits, validate))
            .unwrap_or_else(|p| {
                let why = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a parser panicked".into());
                Err(DebugFileError::Panicked(why))
            })
    }

    fn parse_inner(
        data: &[u8],
        claimed: Option<&str>,
        limits: &Limits,
        validate: bool,
    ) -> Result<DebugFile, DebugFileError> {
        let file = object::File::parse(data).map_err(|e| DebugFileError::NotElf(e.to_string()))?;
        let build_id = elf_build_id(&file)?;
        if let Some(c) = claimed {
            if !c.eq_ignore_ascii_case(&build_id) {
                return Err(DebugFileError::BuildIdMismatch {
                    claimed: c.to_ascii_lowercase(),
                    found: build_id,
                });
            }
        }
        let segments = file
            .segments()
            .map(|s| {
                let (offset, file_size) = s.file_range();
                let exec = matches!(s.flags(), object::SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0);
                Segment {
                    offset,
                    file_size,
                    mem_size: s.size(),
                    vaddr: s.address(),
                    exec,
                }
            })
            .collect();
        let symbols = symbols(&file);
        let (dwarf, dwarf_bytes) = load_dwarf(&file, limits)?;
        if dwarf.is_none() && symbols.is_empty() {
            return Err(DebugFileError::NoSymbols);
        }
        let dwarf = match dwarf {
            Some(d) => {
                if validate {
                    check_line_tables(&d, limits)?;
                }
                Some(parking_lot::Mutex::new(
                    addr2line::Context::from_dwarf(d)
                        .map_err(|e| DebugFileError::Dwarf(e.to_string()))?,
                ))
            }
            None => None,
        };
        let sym_bytes: u64 = symbols.iter().map(|s| 40 + s.name.len() as u64).sum();
        Ok(DebugFile {
            build_id,
            segments,
            symbols,
            dwarf,
            bytes: dwarf_bytes + sym_bytes,
        })
    }

    pub fn build_id(&self) -> &str {
        &self.build_id
    }

    /// Bytes it holds once parsed (sections and symbols; addr2line's lazily
    /// built tables come on top, measured by `bench symbolize`).
    pub fn approx_bytes(&self) -> u64 {
        self.bytes
    }

    pub fn has_dwarf(&self) -> bool {
        self.dwarf.is_some()
    }

    /// The virtual address in this file of `address` sampled in mapping `m`, as
    /// pprof computes it: the file offset `address - start + offset`, placed
    /// through the load segment holding the mapping's offset (or the address's).
    /// A mapping of unknown range (all zeros) takes addresses as they are.
    ///
    /// A debug-only file (`objcopy --only-keep-debug`) keeps its segments' virtual
    /// addresses but not their file offsets (its segments hold no bytes), so the
    /// file offset places nothing there. The mapping is then taken to be the
    /// executable segment's (the one whose page-rounded size is closest to the
    /// mapping's), starting at that segment's first page, as the loader maps it.
    pub fn vaddr(&self, m: MappingRange, address: u64) -> Option<u64> {
        if m == MappingRange::default() {
            return Some(address);
        }
        let in_mapping = address.checked_sub(m.start)?;
        let file_offset = in_mapping.checked_add(m.offset)?;
        let holds = |s: &&Segment, at: u64| at >= s.offset && at - s.offset < s.file_size;
        let found = self
            .segments
            .iter()
            .find(|s| holds(s, m.offset) && holds(s, file_offset))
            .or_else(|| self.segments.iter().find(|s| holds(s, file_offset)));
        if let Some(seg) = found {
            return (file_offset - seg.offset).checked_add(seg.vaddr);
        }
        let size = m.limit.saturating_sub(m.start);
        let pages = |s: &Segment| (s.vaddr % PAGE + s.mem_size).div_ceil(PAGE) * PAGE;
        let seg = self
            .segments
            .iter()
            .filter(|s| s.exec && s.file_size == 0)
            .min_by_key(|s| pages(s).abs_diff(size))?;
        (seg.vaddr - seg.vaddr % PAGE).checked_add(in_mapping)
    }

    /// The frames at virtual address `vaddr`, outermost first (an inlined call
    /// gives its caller, then the callee); empty when nothing covers it.
    pub fn frames_at(&self, vaddr: u64) -> Vec<Frame> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.frames_inner(vaddr)))
            .unwrap_or_default()
    }

    fn frames_inner(&self, vaddr: u64) -> Vec<Frame> {
        let mut out = Vec::new();
        if let Some(ctx) = &self.dwarf {
            let ctx = ctx.lock();
            let found = ctx.find_frames(vaddr).skip_all_loads();
            if let Ok(mut frames) = found {
                while let Ok(Some(f)) = frames.next() {
                    let function = f
                        .function
                        .as_ref()
                        .and_then(|n| n.demangle().ok())
                        .map(|n| n.into_owned())
                        .unwrap_or_default();
                    let (file, line) = f
                        .location
                        .as_ref()
                        .map(|l| (l.file.unwrap_or("").to_owned(), l.line.unwrap_or(0)))
                        .unwrap_or_default();
                    out.push(Frame {
                        function,
                        file,
                        line,
                    });
                    if out.len() >= 256 {
                        break;
                    }
                }
            }
        }
        out.reverse();
        let symbol = self.symbol_at(vaddr);
        match (out.first_mut(), symbol) {
            // DWARF without a name for the outer function: the symbol table's.
            (Some(outer), Some(s)) if outer.function.is_empty() => {
                outer.function = s.to_string();
            }
            (None, Some(s)) => out.push(Frame {
                function: s.to_string(),
                file: String::new(),
                line: 0,
            }),
            _ => {}
        }
        out
    }

    fn symbol_at(&self, vaddr: u64) -> Option<&str> {
        let i = self.symbols.partition_point(|s| s.address <= vaddr);
        let s = self.symbols.get(i.checked_sub(1)?)?;
        // A symbol of size 0 (hand-written assembly) covers up to the next one.
        let covers = s.size == 0 || vaddr - s.address < s.size;
        covers.then_some(&*s.name)
    }
}

/// Function symbols, sorted by address, demangled; the dynamic table when the
/// file has no static one.
fn symbols(file: &object::File<'_>) -> Vec<Symbol> {
    let collect = |it: object::SymbolIterator<'_, '_>| -> Vec<Symbol> {
        it.filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .filter_map(|s| {
                let name = s.name().ok().filter(|n| !n.is_empty())?;
                Some(Symbol {
                    address: s.address(),
                    size: s.size(),
                    name: Arc::from(demangle(name).as_ref()),
                })
            })
            .collect()
    };
    let mut out = collect(file.symbols());
    if out.is_empty() {
        out = collect(file.dynamic_symbols());
    }
    out.sort_by(|a, b| a.address.cmp(&b.address).then(b.size.cmp(&a.size)));
    out.dedup_by_key(|s| s.address);
    out
}

/// The DWARF sections, decompressed within the limits; `None` without
/// `.debug_info`.
fn load_dwarf(
    file: &object::File<'_>,
    limits: &Limits,
) -> Result<(Option<gimli::Dwarf<Reader>>, u64), DebugFileError> {
    if file.section_by_name(".debug_info").is_none() {
        return Ok((None, 0));
    }
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let mut total = 0u64;
    let mut load = |id: gimli::SectionId| -> Result<Reader, DebugFileError> {
        let bytes: Arc<[u8]> = match file.section_by_name(id.name()) {
            None => Arc::from(&[][..]),
            Some(section) => {
                let compressed = section
                    .compressed_data()
                    .map_err(|e| DebugFileError::Dwarf(format!("{}: {e}", id.name())))?;
                let size = compressed.uncompressed_size;
                if size > limits.max_section_bytes {
                    return Err(DebugFileError::SectionTooLarge {
                        section: id.name().to_string(),
                        size,
                        limit: limits.max_section_bytes,
                    });
                }
                total = total.saturating_add(size);
                if total > limits.max_dwarf_bytes {
                    return Err(DebugFileError::SectionTooLarge {
                        section: "all DWARF sections".into(),
                        size: total,
                        limit: limits.max_dwarf_bytes,
                    });
                }
                let data = compressed
                    .decompress()
                    .map_err(|e| DebugFileError::Dwarf(format!("{}: {e}", id.name())))?;
                if data.len() as u64 != size {
                    return Err(DebugFileError::Dwarf(format!(
                        "{} decompressed to {} bytes, its header says {size}",
                        id.name(),
                        data.len()
                    )));
                }
                Arc::from(data.as_ref())
            }
        };
        Ok(gimli::EndianArcSlice::new(bytes, endian))
    };
    let dwarf = gimli::Dwarf::load(&mut load)?;
    Ok((Some(dwarf), total))
}

/// Walks every unit's line program to its end: malformed or hostile tables are
/// refused when the file arrives, not met by queries.
fn check_line_tables(dwarf: &gimli::Dwarf<Reader>, limits: &Limits) -> Result<(), DebugFileError> {
    let err = |e: gimli::Error| DebugFileError::Dwarf(e.to_string());
    let mut units = dwarf.units();
    let mut rows = 0u64;
    while let Some(header) = units.next().map_err(err)? {
        let unit = dwarf.unit(header).map_err(err)?;
        let Some(program) = unit.line_program.clone() else {
            continue;
        };
        let mut it = program.rows();
        while it.next_row().map_err(err)?.is_some() {
            rows += 1;
            if rows > limits.max_line_rows {
                return Err(DebugFileError::TooManyLines(limits.max_line_rows));
            }
        }
    }
    Ok(())
}
