//! cgroup v2 paths: sample cgroup ids are inode numbers of directories in the unified
//! hierarchy; counting mode opens those directories.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Maps cgroup ids to paths (cgroup v2: the id is the directory's inode number).
#[derive(Default)]
pub struct CgroupNames {
    pub names: HashMap<u64, String>,
    scanned: Option<Instant>,
}

impl CgroupNames {
    /// Walks the hierarchy again (at most every 30 s; bounded at 100 000 cgroups).
    pub fn scan(&mut self) {
        if self
            .scanned
            .is_some_and(|t| t.elapsed() < Duration::from_secs(30))
        {
            return;
        }
        self.scanned = Some(Instant::now());
        let Some(root) = cgroup2_root() else {
            return;
        };
        let root = root.as_path();
        let mut stack = vec![root.to_path_buf()];
        let mut seen = 0usize;
        while let Some(dir) = stack.pop() {
            seen += 1;
            if seen > 100_000 || self.names.len() > 100_000 {
                break;
            }
            if let Ok(md) = std::fs::metadata(&dir) {
                use std::os::unix::fs::MetadataExt;
                let rel = dir
                    .strip_prefix(root)
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                self.names.insert(md.ino(), format!("/{rel}"));
            }
            if let Ok(rd) = std::fs::read_dir(&dir) {
                for e in rd.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        stack.push(e.path());
                    }
                }
            }
        }
    }

    /// The path of cgroup `id`, scanning once more when it is unknown.
    pub fn get(&mut self, id: u64) -> Option<String> {
        if id == 0 {
            return None;
        }
        if !self.names.contains_key(&id) {
            self.scan();
        }
        self.names.get(&id).cloned()
    }
}

/// The cgroup v2 hierarchy: `/sys/fs/cgroup` (unified) or `/sys/fs/cgroup/unified`
/// (hybrid systems). Sample cgroup ids are inode numbers in it.
pub fn cgroup2_root() -> Option<std::path::PathBuf> {
    const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
    for p in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
        let Ok(c) = std::ffi::CString::new(p) else {
            continue;
        };
        // SAFETY: statfs writes into a zeroed struct we own; the path is NUL-terminated.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::statfs(c.as_ptr(), &mut st) } == 0
            && st.f_type as i64 == CGROUP2_SUPER_MAGIC
        {
            return Some(p.into());
        }
    }
    None
}

impl CgroupNames {
    /// Every known cgroup path under one of `prefixes` (all when empty), sorted.
    pub fn paths(&mut self, prefixes: &[String]) -> Vec<String> {
        self.scan();
        let mut v: Vec<String> = self
            .names
            .values()
            .filter(|p| prefixes.is_empty() || prefixes.iter().any(|x| under(p, x)))
            .cloned()
            .collect();
        v.sort();
        v.dedup();
        v
    }
}

/// Whether cgroup `path` is `prefix` or lies below it.
pub fn under(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    prefix.is_empty()
        || path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_match_whole_components() {
        assert!(under("/system.slice/a.service", "/system.slice"));
        assert!(under("/system.slice", "/system.slice/"));
        assert!(!under("/system.slicex", "/system.slice"));
        assert!(under("/anything", "/"));
    }
}
