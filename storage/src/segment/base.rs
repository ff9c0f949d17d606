//! Symbol bases: the symbol tables and stack tree a tenant's blocks share.
//!
//! A fleet samples nearly the same stacks every day, so every block of a tenant
//! held nearly the same stack tree, a large share of the tenant's bytes
//! (docs/perf-log/2026-11-27-round-17-symbol-bases.md). A base is such a set of
//! tables (Strings, Mappings, Functions,
//! Locations, Stacks) written once into its own file under the tenant's
//! `bases/` directory. A segment written on a base numbers its symbols and
//! nodes as the base does, with what it adds after them, and compresses its
//! Mappings, Functions, Locations and Stacks sections with the base's same
//! section as a zstd prefix (codec 3): the part it shares costs a few bytes.
//! Strings stay self-contained because a querier reads them alone, as part of
//! the summary. Decoded, a segment's tables are whole again: nothing above the
//! reader knows bases exist (the segments on a base share its stack nodes'
//! frame-tree ids, inside their memos: `gid_memo.rs`).
//!
//! Bases are immutable and named by id; a segment names its base and the base's
//! checksum in its footer. Which base a block is written on, and when a base is
//! deleted, is the lifecycle's business (`store/lifecycle/bases.rs`).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::{GidMemo, SectionKind};
use crate::codec::{put_uvarint, Reader};
use crate::dict::{self, Dict};
use crate::durable::{sync_dir, write_file};
use crate::error::{IoContext, Result, StorageError};

/// First 8 bytes of a base file.
pub const BASE_MAGIC: &[u8; 8] = b"PRFDBBAS";
/// The base file layout's version.
pub const BASE_VERSION: u16 = 1;
/// The directory, inside a tenant's segment directory, that holds its bases.
pub const BASES_DIR: &str = "bases";

/// The sections a base holds, in file order.
pub(super) const KINDS: [SectionKind; 5] = [
    SectionKind::Strings,
    SectionKind::Mappings,
    SectionKind::Functions,
    SectionKind::Locations,
    SectionKind::Stacks,
];

/// Whether a segment may compress section `kind` against its base (codec 3).
pub(crate) fn base_coded(kind: SectionKind) -> bool {
    matches!(
        kind,
        SectionKind::Mappings
            | SectionKind::Functions
            | SectionKind::Locations
            | SectionKind::Stacks
    )
}

/// What a segment footer says about the base it was written on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BaseRef {
    /// The base's id (unique in the data directory, from the segment ids).
    pub id: u64,
    /// CRC-32 of the base's decompressed sections: a base file replaced by
    /// another with the same name is refused, not decoded against.
    pub checksum: u32,
}

/// A base's decompressed sections.
pub struct SymbolBase {
    id: u64,
    checksum: u32,
    raw: [Vec<u8>; 5],
    /// Each section prepared as a zstd dictionary once, when a segment first
    /// decodes a section on it: loading a base's stack tree (megabytes) into a
    /// fresh decoder was a copy per segment decoded.
    prepared: [std::sync::OnceLock<zstd::dict::DecoderDictionary<'static>>; 5],
    /// Its stack nodes' frame-tree ids, shared by the segments on it (see
    /// `gid_memo.rs`).
    memo: Arc<GidMemo>,
}

impl std::fmt::Debug for SymbolBase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SymbolBase")
            .field("id", &self.id)
            .field("checksum", &self.checksum)
            .field("bytes", &self.approx_bytes())
            .finish()
    }
}

fn content_checksum(raw: &[Vec<u8>; 5]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for r in raw {
        h.update(&(r.len() as u64).to_le_bytes());
        h.update(r);
    }
    h.finalize()
}

impl SymbolBase {
    /// A base of the raw Strings, Mappings, Functions, Locations and Stacks
    /// sections of a segment, as its writer encoded them.
    pub(crate) fn new(id: u64, raw: [Vec<u8>; 5]) -> Self {
        SymbolBase {
            id,
            checksum: content_checksum(&raw),
            raw,
            prepared: Default::default(),
            memo: Arc::default(),
        }
    }

    /// What a segment written on this base stores in its footer.
    pub fn reference(&self) -> BaseRef {
        BaseRef {
            id: self.id,
            checksum: self.checksum,
        }
    }

    /// The raw section of `kind` (one of the five a base holds).
    pub(crate) fn raw(&self, kind: SectionKind) -> Option<&[u8]> {
        KINDS
            .iter()
            .position(|k| *k == kind)
            .map(|i| &self.raw[i][..])
    }

    /// Section `kind` of a segment written on this base, decompressed from
    /// `stored` (codec 3: at most `capacity` bytes).
    pub(super) fn decompress(
        &self,
        kind: SectionKind,
        stored: &[u8],
        capacity: usize,
    ) -> std::io::Result<Vec<u8>> {
        zstd::bulk::Decompressor::with_prepared_dictionary(self.prepared(kind)?)?
            .decompress(stored, capacity)
    }

    /// The first `n` bytes of section `kind` of a segment on this base (codec 3).
    pub(super) fn head(
        &self,
        kind: SectionKind,
        stored: &[u8],
        n: usize,
    ) -> std::io::Result<Vec<u8>> {
        super::unzstd::head(stored, Some(self.prepared(kind)?), n)
    }

    /// Section `kind` prepared as a zstd dictionary.
    fn prepared(
        &self,
        kind: SectionKind,
    ) -> std::io::Result<&zstd::dict::DecoderDictionary<'static>> {
        let Some(i) = KINDS.iter().position(|k| *k == kind) else {
            return Err(std::io::Error::other(format!(
                "{kind:?} is not a base section"
            )));
        };
        // A dictionary without zstd's magic number is raw content, as written
        // by `compress_on`.
        Ok(self.prepared[i].get_or_init(|| zstd::dict::DecoderDictionary::copy(&self.raw[i])))
    }

    /// The number of stack nodes the base holds (the Stacks section's count),
    /// `None` when the section does not start with one.
    pub(crate) fn nodes(&self) -> Option<usize> {
        let stacks = self.raw(SectionKind::Stacks)?;
        Reader::new(stacks, "base stacks")
            .uvarint()
            .ok()?
            .try_into()
            .ok()
    }

    /// A memo for a segment on this base: the base's own nodes are memoised in
    /// the memo the base's segments share.
    pub(crate) fn segment_memo(&self) -> GidMemo {
        match self.nodes() {
            Some(below) => GidMemo::sharing(self.memo.clone(), below),
            None => GidMemo::default(),
        }
    }

    /// The base's tables, decoded and checked like a segment's.
    pub fn dict(&self) -> Result<Dict> {
        let [s, m, f, l, t] = &self.raw;
        dict::decode(s, m, f, l, t)
    }

    /// Bytes held in memory.
    pub fn approx_bytes(&self) -> usize {
        self.raw.iter().map(Vec::len).sum()
    }

    /// The file's bytes: magic, version, each section as `uvarint raw_len,
    /// uvarint stored_len` and a zstd frame, the content checksum (`u32le`), and a
    /// CRC-32 of everything before it (`u32le`).
    pub(crate) fn encode_file(&self, zstd_level: i32) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(1 << 16);
        out.extend_from_slice(BASE_MAGIC);
        out.extend_from_slice(&BASE_VERSION.to_le_bytes());
        for raw in &self.raw {
            let stored = zstd::bulk::compress(raw, zstd_level)?;
            put_uvarint(&mut out, raw.len() as u64);
            put_uvarint(&mut out, stored.len() as u64);
            out.extend_from_slice(&stored);
        }
        out.extend_from_slice(&self.checksum.to_le_bytes());
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(out)
    }

    /// Reads and checks the base file at `path`.
    pub fn read(path: &Path) -> Result<Self> {
        let bytes = fs::read(path).at(path)?;
        Self::decode_file(path, &bytes)
    }

    /// Decodes and checks a base file's bytes (`path` names it in errors).
    pub(crate) fn decode_file(path: &Path, bytes: &[u8]) -> Result<Self> {
        let corrupt = |why: &str| StorageError::Corrupt(format!("{}: {why}", path.display()));
        let Some(body_len) = bytes.len().checked_sub(4) else {
            return Err(corrupt("file too short to be a symbol base"));
        };
        let (body, tail) = bytes.split_at(body_len);
        let stored_crc = u32::from_le_bytes(tail.try_into().expect("4 bytes"));
        let computed = crc32fast::hash(body);
        if computed != stored_crc {
            return Err(StorageError::Checksum {
                what: format!("{}", path.display()),
                stored: stored_crc,
                computed,
            });
        }
        let mut r = Reader::new(body, "symbol base");
        if r.bytes(BASE_MAGIC.len())? != BASE_MAGIC {
            return Err(corrupt("bad magic"));
        }
        let version = r.u16_le()?;
        if version != BASE_VERSION {
            return Err(corrupt(&format!(
                "symbol base version {version}, this build reads {BASE_VERSION}"
            )));
        }
        let mut raw: [Vec<u8>; 5] = Default::default();
        for (slot, kind) in raw.iter_mut().zip(KINDS) {
            let raw_len =
                usize::try_from(r.uvarint()?).map_err(|_| corrupt("section too large"))?;
            let stored_len =
                usize::try_from(r.uvarint()?).map_err(|_| corrupt("section too large"))?;
            let stored = r.bytes(stored_len)?;
            let out = super::unzstd::decompress(stored, raw_len)
                .map_err(|e| corrupt(&format!("section {kind:?}: zstd: {e}")))?;
            if out.len() != raw_len {
                return Err(corrupt(&format!("section {kind:?} has the wrong length")));
            }
            *slot = out;
        }
        let checksum = r.u32_le()?;
        if !r.is_empty() {
            return Err(corrupt("trailing bytes"));
        }
        if content_checksum(&raw) != checksum {
            return Err(corrupt("content checksum disagrees with the sections"));
        }
        let id = id_from_file_name(&path.file_name().unwrap_or_default().to_string_lossy())
            .ok_or_else(|| corrupt("not a base file name"))?;
        Ok(SymbolBase {
            id,
            checksum,
            raw,
            prepared: Default::default(),
            memo: Arc::default(),
        })
    }
}

/// Compresses a section with `prefix` (its base's same section) as a
/// raw-content dictionary whose runs, most of the section, cost a few bytes
/// each; the window covers both. `None` for a prefix zstd would take for a
/// trained dictionary (it starts with their magic number; a uvarint-encoded
/// section almost never does): such a section is compressed on its own
/// instead. zstd's `refPrefix` would say "raw content" outright, but in a
/// probe through the bulk compressor it left the prefix unused (noise against
/// itself did not shrink), where a loaded dictionary took a few bytes.
pub(super) fn compress_on(
    raw: &[u8],
    prefix: &[u8],
    level: i32,
) -> Option<std::io::Result<Vec<u8>>> {
    if prefix.starts_with(&ZSTD_DICT_MAGIC) {
        return None;
    }
    let log2 = |n: usize| usize::BITS - (n.max(2) - 1).leading_zeros();
    let compress = || {
        let window_log = log2(prefix.len() + raw.len()).clamp(10, super::writer::MAX_WINDOW_LOG);
        let mut c = zstd::bulk::Compressor::with_dictionary(level, prefix)?;
        c.set_parameter(zstd::zstd_safe::CParameter::WindowLog(window_log))?;
        // zstd indexes only the last 2^(hashLog + 3) bytes of a dictionary; the
        // fast levels' tables are too small for a base's stack tree (a day block
        // on its base stored more than alone:
        // docs/perf-log/2026-11-27-round-17-symbol-bases.md). The slow levels'
        // are large enough already.
        let needed = log2(prefix.len()).saturating_sub(3);
        if level < 10 && needed > 17 {
            c.set_parameter(zstd::zstd_safe::CParameter::HashLog(needed.min(26)))?;
        }
        // No long-distance matching: it does not see a dictionary, and its
        // matches displaced the dictionary's.
        c.compress(raw)
    };
    Some(compress())
}

/// The first bytes of a trained zstd dictionary (`ZSTD_MAGIC_DICTIONARY`).
const ZSTD_DICT_MAGIC: [u8; 4] = 0xEC30_A437u32.to_le_bytes();

/// The file name of base `id`.
pub fn base_file_name(id: u64) -> String {
    format!("{id:016x}.base")
}

/// The id in a base file name.
pub fn id_from_file_name(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".base")?;
    (hex.len() == 16)
        .then(|| u64::from_str_radix(hex, 16).ok())
        .flatten()
}

/// Where the segment file at `segment_path` finds base `id`: beside it, in
/// `bases/`.
pub fn base_path(segment_path: &Path, id: u64) -> PathBuf {
    segment_path
        .parent()
        .unwrap_or(Path::new(""))
        .join(BASES_DIR)
        .join(base_file_name(id))
}

/// Writes `base` into `tenant_dir/bases/` durably (temporary name, fsync,
/// rename, fsync of the directory): before any segment names it, so a crash
/// leaves at worst a base no segment names, which the lifecycle deletes.
pub(crate) fn write_base(tenant_dir: &Path, base: &SymbolBase, zstd_level: i32) -> Result<PathBuf> {
    let dir = tenant_dir.join(BASES_DIR);
    let created = !dir.exists();
    fs::create_dir_all(&dir).at(&dir)?;
    if created {
        sync_dir(tenant_dir)?;
    }
    let bytes = base.encode_file(zstd_level).at("<zstd>")?;
    let path = dir.join(base_file_name(base.id));
    if path.exists() {
        // Segments may name the file there: never replaced.
        return Err(StorageError::Invalid(format!(
            "symbol base {} exists already",
            path.display()
        )));
    }
    write_file(&path, &bytes)?;
    Ok(path)
}

/// Bases read lately, most recent last. A handful: a tenant writes its blocks
/// on one base at a time, and each is a few megabytes.
static LOADED: Mutex<Vec<(PathBuf, Arc<SymbolBase>)>> = Mutex::new(Vec::new());
pub(crate) const LOADED_MAX: usize = 4;

/// Base `want`, for the segment at `segment_path`: from memory when read
/// lately, else from its file. A missing file, or one with another checksum,
/// makes the segment unreadable: [`StorageError::MissingBase`] or corruption.
pub(crate) fn load(segment_path: &Path, want: BaseRef) -> Result<Arc<SymbolBase>> {
    let path = base_path(segment_path, want.id);
    {
        let mut loaded = LOADED.lock();
        if let Some(i) = loaded
            .iter()
            .position(|(p, b)| *p == path && b.reference() == want)
        {
            let hit = loaded.remove(i);
            let base = hit.1.clone();
            loaded.push(hit);
            return Ok(base);
        }
    }
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(StorageError::MissingBase {
                segment: segment_path.to_path_buf(),
                base: path,
            })
        }
        Err(e) => return Err(StorageError::io(&path, e)),
    };
    let base = Arc::new(SymbolBase::decode_file(&path, &bytes)?);
    if base.reference() != want {
        return Err(StorageError::Corrupt(format!(
            "{}: names base {} with checksum {:#010x}, {} has {:#010x}",
            segment_path.display(),
            want.id,
            want.checksum,
            path.display(),
            base.checksum
        )));
    }
    let mut loaded = LOADED.lock();
    loaded.retain(|(p, _)| *p != path);
    if loaded.len() >= LOADED_MAX {
        loaded.remove(0);
    }
    loaded.push((path, base.clone()));
    Ok(base)
}

/// Drops the base at `path` from memory: its file was deleted.
pub(crate) fn forget(path: &Path) {
    LOADED.lock().retain(|(p, _)| p != path);
}

/// Bytes of the bases held in memory, for `/metrics`.
pub fn loaded_bytes() -> u64 {
    LOADED
        .lock()
        .iter()
        .map(|(_, b)| b.approx_bytes() as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SymbolBase {
        SymbolBase::new(
            7,
            [b"\x01\x00".to_vec(), vec![0], vec![0], vec![0], vec![0]],
        )
    }

    #[test]
    fn a_base_file_round_trips_and_refuses_any_flipped_byte() {
        let dir = tempfile::tempdir().unwrap();
        let b = sample();
        let path = write_base(dir.path(), &b, 3).unwrap();
        assert_eq!(path, dir.path().join("bases").join("0000000000000007.base"));
        let bytes = fs::read(&path).unwrap();
        let back = SymbolBase::decode_file(&path, &bytes).unwrap();
        assert_eq!(back.reference(), b.reference());
        assert_eq!(back.raw, b.raw);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x20;
            let err = SymbolBase::decode_file(&path, &bad).unwrap_err();
            assert!(err.is_corruption(), "byte {i}: {err}");
        }
        let err = SymbolBase::decode_file(&path, &bytes[..bytes.len() - 1]).unwrap_err();
        assert!(err.is_corruption(), "{err}");
    }

    #[test]
    fn a_segment_finds_its_base_beside_it_and_a_missing_or_other_base_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let b = sample();
        let seg = dir.path().join("1-0000000000000009.seg");
        let err = load(&seg, b.reference()).unwrap_err();
        assert!(
            matches!(err, StorageError::MissingBase { .. }) && err.is_corruption(),
            "{err}"
        );
        write_base(dir.path(), &b, 3).unwrap();
        assert_eq!(load(&seg, b.reference()).unwrap().raw, b.raw);
        let other = BaseRef {
            checksum: b.checksum ^ 1,
            ..b.reference()
        };
        assert!(load(&seg, other).unwrap_err().is_corruption());
        assert_eq!(id_from_file_name("0000000000000007.base"), Some(7));
        assert_eq!(id_from_file_name("7.base"), None);
    }
}
