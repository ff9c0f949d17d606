//! Debug files kept by build id in a directory (`<data-dir>/debuginfo/`): one file
//! per build id, written to a temporary name, synced and renamed, so a reader
//! never sees half a file and a crash leaves none.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Why a build id cannot name a file.
#[derive(Debug, thiserror::Error)]
#[error("a build id is 2 to 128 hex digits, not {0:?}")]
pub struct BadBuildId(pub String);

/// `id` lower-cased, when it is a well-formed build id (hex, even length, 2 to
/// 128 digits): the only text that ever becomes a file name or a URL path.
pub fn normalize_build_id(id: &str) -> Result<String, BadBuildId> {
    let ok = (2..=128).contains(&id.len())
        && id.len().is_multiple_of(2)
        && id.bytes().all(|b| b.is_ascii_hexdigit());
    if ok {
        Ok(id.to_ascii_lowercase())
    } else {
        Err(BadBuildId(id.chars().take(140).collect()))
    }
}

/// A directory of debug files named by build id.
#[derive(Clone, Debug)]
pub struct DebugStore {
    dir: PathBuf,
}

impl DebugStore {
    /// The store in `dir`, created when missing; leftovers of interrupted
    /// writes are removed.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        fs::create_dir_all(dir)?;
        for e in fs::read_dir(dir)?.flatten() {
            if e.file_name().to_string_lossy().ends_with(".tmp") {
                let _ = fs::remove_file(e.path());
            }
        }
        Ok(DebugStore {
            dir: dir.to_path_buf(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, build_id: &str) -> PathBuf {
        self.dir.join(format!("{build_id}.debug"))
    }

    /// Whether the file of (normalized) `build_id` is here.
    pub fn contains(&self, build_id: &str) -> bool {
        self.path(build_id).is_file()
    }

    /// The file of (normalized) `build_id`, if here.
    pub fn read(&self, build_id: &str) -> std::io::Result<Option<Vec<u8>>> {
        match fs::read(self.path(build_id)) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Stores `bytes` as the file of (normalized) `build_id`, durably.
    pub fn write(&self, build_id: &str, bytes: &[u8]) -> std::io::Result<()> {
        let tmp = self.dir.join(format!("{build_id}.debug.tmp"));
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, self.path(build_id))?;
        fs::File::open(&self.dir)?.sync_all()
    }

    /// Removes a file found unreadable, so it is fetched or uploaded again.
    pub fn remove(&self, build_id: &str) -> std::io::Result<()> {
        fs::remove_file(self.path(build_id))
    }

    /// Build ids stored, sorted.
    pub fn list(&self) -> std::io::Result<Vec<(String, u64)>> {
        let mut out = Vec::new();
        for e in fs::read_dir(&self.dir)?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(id) = name.strip_suffix(".debug") {
                if normalize_build_id(id).is_ok() {
                    out.push((id.to_string(), e.metadata().map(|m| m.len()).unwrap_or(0)));
                }
            }
        }
        out.sort();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_ids_are_hex_and_nothing_else() {
        assert_eq!(normalize_build_id("ABcd01").unwrap(), "abcd01");
        for bad in ["", "a", "abc", "../etc", "zz", &"ab".repeat(65), "ab/cd"] {
            assert!(normalize_build_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn files_round_trip_and_leftovers_go() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("ab.debug.tmp"), b"half").unwrap();
        let s = DebugStore::open(dir.path()).unwrap();
        assert!(!dir.path().join("ab.debug.tmp").exists());
        assert_eq!(s.read("ab").unwrap(), None);
        s.write("ab", b"elf").unwrap();
        assert!(s.contains("ab"));
        assert_eq!(s.read("ab").unwrap().as_deref(), Some(&b"elf"[..]));
        assert_eq!(s.list().unwrap(), vec![("ab".to_string(), 3)]);
    }
}
