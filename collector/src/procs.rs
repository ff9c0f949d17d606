//! The process table: memory maps and names of the processes being sampled.
//!
//! It is seeded from `/proc` when the agent starts and then kept current from the
//! perf `MMAP2`, `COMM`, `FORK` and `EXIT` records, so that a process that exits in
//! the middle of a push window can still be symbolized when the window is flushed.
//! Exited processes are removed only after the flush ([`ProcessTable::gc`]).

use std::collections::HashMap;
use std::fs;
use std::sync::Arc;

/// Identity of a mapped file: path plus device/inode when known.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FileId {
    pub path: Arc<str>,
    pub dev: u64,
    pub ino: u64,
}

/// One executable mapping of a process.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    pub file: Arc<FileId>,
}

impl Mapping {
    /// Whether the mapping is backed by a regular file (not `[vdso]`, anonymous, ...).
    pub fn is_file(&self) -> bool {
        self.file.path.starts_with('/')
    }

    /// File offset of the address `addr` inside the mapping.
    pub fn file_offset(&self, addr: u64) -> u64 {
        addr.wrapping_sub(self.start).wrapping_add(self.pgoff)
    }
}

/// What the agent knows about one process.
#[derive(Clone, Debug, Default)]
pub struct Process {
    pub comm: String,
    /// Executable mappings, sorted by start, not overlapping.
    pub maps: Vec<Mapping>,
    /// Seen an EXIT record: kept until the next [`ProcessTable::gc`].
    pub exited: bool,
    /// Bumped whenever `maps` changes (the unwinder rebuilds its modules then).
    pub generation: u64,
}

impl Process {
    /// The mapping containing `addr`.
    pub fn lookup(&self, addr: u64) -> Option<&Mapping> {
        let i = self.maps.partition_point(|m| m.start <= addr);
        let m = self.maps.get(i.checked_sub(1)?)?;
        (addr < m.end).then_some(m)
    }

    /// Adds a mapping, cutting away whatever it overlaps.
    pub fn add_mapping(&mut self, m: Mapping) {
        if m.end <= m.start {
            return;
        }
        let mut kept = Vec::with_capacity(self.maps.len() + 1);
        for old in self.maps.drain(..) {
            if old.end <= m.start || old.start >= m.end {
                kept.push(old);
                continue;
            }
            if old.start < m.start {
                kept.push(Mapping {
                    end: m.start,
                    ..old.clone()
                });
            }
            if old.end > m.end {
                let cut = m.end - old.start;
                kept.push(Mapping {
                    start: m.end,
                    pgoff: old.pgoff + cut,
                    ..old
                });
            }
        }
        kept.push(m);
        kept.sort_by_key(|m| m.start);
        self.maps = kept;
        self.generation += 1;
    }
}

/// A new mapping as reported by the kernel.
#[derive(Clone, Copy, Debug)]
pub struct MmapInfo<'a> {
    pub start: u64,
    pub len: u64,
    pub pgoff: u64,
    pub path: &'a str,
    pub dev: u64,
    pub ino: u64,
}

/// Bounds on the table so a fork bomb cannot grow the agent without limit.
pub const MAX_PROCESSES: usize = 65_536;
/// Most executable mappings kept per process.
pub const MAX_MAPS_PER_PROCESS: usize = 8_192;

/// All processes known to the agent, keyed by pid (thread group id).
#[derive(Debug, Default)]
pub struct ProcessTable {
    procs: HashMap<u32, Process>,
    interned: HashMap<FileId, Arc<FileId>>,
}

impl ProcessTable {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.procs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }

    pub fn get(&self, pid: u32) -> Option<&Process> {
        self.procs.get(&pid)
    }

    fn intern(&mut self, id: FileId) -> Arc<FileId> {
        if let Some(a) = self.interned.get(&id) {
            return a.clone();
        }
        let a = Arc::new(id.clone());
        self.interned.insert(id, a.clone());
        a
    }

    fn entry(&mut self, pid: u32) -> Option<&mut Process> {
        if !self.procs.contains_key(&pid) && self.procs.len() >= MAX_PROCESSES {
            return None;
        }
        Some(self.procs.entry(pid).or_default())
    }

    /// Records an executable mapping (from an MMAP2 record or `/proc/PID/maps`).
    pub fn on_mmap(&mut self, pid: u32, m: &MmapInfo<'_>) {
        let file = self.intern(FileId {
            path: Arc::from(m.path),
            dev: m.dev,
            ino: m.ino,
        });
        if let Some(p) = self.entry(pid) {
            if p.maps.len() < MAX_MAPS_PER_PROCESS {
                p.add_mapping(Mapping {
                    start: m.start,
                    end: m.start.saturating_add(m.len),
                    pgoff: m.pgoff,
                    file,
                });
            }
        }
    }

    /// A COMM record; `exec` means the process image was replaced (maps reset).
    pub fn on_comm(&mut self, pid: u32, tid: u32, comm: &str, exec: bool) {
        if let Some(p) = self.entry(pid) {
            if exec {
                p.maps.clear();
                p.generation += 1;
                p.exited = false;
            }
            // Thread renames do not rename the process.
            if exec || pid == tid || p.comm.is_empty() {
                p.comm = comm.to_string();
            }
        }
    }

    /// A FORK record: a new process starts as a copy of its parent.
    pub fn on_fork(&mut self, pid: u32, ppid: u32, tid: u32) {
        if pid != tid || pid == ppid {
            return; // a new thread, same process
        }
        let parent = self.procs.get(&ppid).cloned().unwrap_or_default();
        if let Some(p) = self.entry(pid) {
            *p = Process {
                exited: false,
                generation: 0,
                ..parent
            };
        }
    }

    /// An EXIT record of a whole process (pid == tid).
    pub fn on_exit(&mut self, pid: u32, tid: u32) {
        if pid == tid {
            if let Some(p) = self.procs.get_mut(&pid) {
                p.exited = true;
            }
        }
    }

    /// Drops exited processes and file identities nobody maps any more.
    pub fn gc(&mut self) {
        self.procs.retain(|_, p| !p.exited);
        self.interned.retain(|_, a| Arc::strong_count(a) > 1);
    }

    /// Loads a process from `/proc/PID` (maps and comm). Returns whether it existed.
    pub fn load_from_proc(&mut self, pid: u32) -> bool {
        let Ok(maps) = fs::read_to_string(format!("/proc/{pid}/maps")) else {
            return false;
        };
        let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if let Some(p) = self.entry(pid) {
            p.comm = comm.trim_end().to_string();
            p.maps.clear();
        }
        for line in maps.lines() {
            if let Some(m) = parse_maps_line(line) {
                if m.exec {
                    self.on_mmap(
                        pid,
                        &MmapInfo {
                            start: m.start,
                            len: m.end - m.start,
                            pgoff: m.pgoff,
                            path: &m.path,
                            dev: m.dev,
                            ino: m.ino,
                        },
                    );
                }
            }
        }
        true
    }

    /// Seeds the table with every process in `/proc`.
    pub fn load_all(&mut self) -> usize {
        let Ok(dir) = fs::read_dir("/proc") else {
            return 0;
        };
        let mut n = 0;
        for e in dir.flatten() {
            if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
                if self.load_from_proc(pid) {
                    n += 1;
                }
            }
        }
        n
    }
}

/// One parsed line of `/proc/PID/maps`.
#[derive(Debug, PartialEq, Eq)]
pub struct MapsLine {
    pub start: u64,
    pub end: u64,
    pub exec: bool,
    pub pgoff: u64,
    pub dev: u64,
    pub ino: u64,
    pub path: String,
}

/// Parses `start-end perms offset maj:min inode path`.
pub fn parse_maps_line(line: &str) -> Option<MapsLine> {
    let mut it = line.splitn(6, ' ');
    let range = it.next()?;
    let perms = it.next()?;
    let off = it.next()?;
    let dev = it.next()?;
    let ino = it.next()?;
    let path = it.next().unwrap_or("").trim_start().to_string();
    let (s, e) = range.split_once('-')?;
    let (maj, min) = dev.split_once(':')?;
    let maj = u64::from_str_radix(maj, 16).ok()?;
    let min = u64::from_str_radix(min, 16).ok()?;
    let start = u64::from_str_radix(s, 16).ok()?;
    let end = u64::from_str_radix(e, 16).ok()?;
    if end < start {
        return None;
    }
    Some(MapsLine {
        start,
        end,
        exec: perms.as_bytes().get(2) == Some(&b'x'),
        pgoff: u64::from_str_radix(off, 16).ok()?,
        dev: makedev(maj, min),
        ino: ino.parse().ok()?,
        path,
    })
}

/// Combines major/minor numbers the way the kernel's `MKDEV` does for user space.
pub fn makedev(maj: u64, min: u64) -> u64 {
    ((maj & 0xfff) << 8) | (min & 0xff) | ((min & !0xff) << 12) | ((maj & !0xfff) << 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_line() {
        let l = "55d0c8a00000-55d0c8a21000 r-xp 00002000 fd:01 1234   /usr/bin/cat";
        let m = parse_maps_line(l).expect("parses");
        assert_eq!(m.start, 0x55d0c8a00000);
        assert!(m.exec);
        assert_eq!(m.pgoff, 0x2000);
        assert_eq!(m.ino, 1234);
        assert_eq!(m.path, "/usr/bin/cat");
        let anon = parse_maps_line("7ffd-8000 rw-p 00000000 00:00 0").expect("parses");
        assert_eq!(anon.path, "");
        assert!(!anon.exec);
    }

    #[test]
    fn fork_exec_exit_and_lookup() {
        let mut t = ProcessTable::new();
        t.on_comm(10, 10, "parent", false);
        t.on_mmap(
            10,
            &MmapInfo {
                start: 0x1000,
                len: 0x1000,
                pgoff: 0,
                path: "/bin/a",
                dev: 1,
                ino: 2,
            },
        );
        t.on_mmap(
            10,
            &MmapInfo {
                start: 0x4000,
                len: 0x2000,
                pgoff: 0x3000,
                path: "/lib/b.so",
                dev: 1,
                ino: 3,
            },
        );
        let p = t.get(10).expect("present");
        assert_eq!(p.lookup(0x1800).map(|m| &*m.file.path), Some("/bin/a"));
        assert_eq!(
            p.lookup(0x5000).map(|m| m.file_offset(0x5000)),
            Some(0x4000)
        );
        assert!(p.lookup(0x3000).is_none());
        // a new thread is not a new process
        t.on_fork(10, 10, 11);
        assert_eq!(t.len(), 1);
        t.on_fork(20, 10, 20);
        assert_eq!(t.get(20).map(|p| p.maps.len()), Some(2));
        t.on_comm(20, 20, "child", true);
        assert_eq!(t.get(20).map(|p| p.maps.len()), Some(0));
        assert_eq!(t.get(20).map(|p| p.comm.as_str()), Some("child"));
        // exited processes stay until gc
        t.on_exit(10, 10);
        assert!(t.get(10).is_some());
        t.gc();
        assert!(t.get(10).is_none());
    }

    #[test]
    fn overlapping_mmap_splits() {
        let mut p = Process::default();
        let f = Arc::new(FileId {
            path: "/x".into(),
            dev: 0,
            ino: 0,
        });
        p.add_mapping(Mapping {
            start: 0,
            end: 0x3000,
            pgoff: 0,
            file: f.clone(),
        });
        p.add_mapping(Mapping {
            start: 0x1000,
            end: 0x2000,
            pgoff: 0x9000,
            file: f,
        });
        assert_eq!(p.maps.len(), 3);
        assert_eq!(
            p.lookup(0x2800).map(|m| m.file_offset(0x2800)),
            Some(0x2800)
        );
        assert_eq!(
            p.lookup(0x1800).map(|m| m.file_offset(0x1800)),
            Some(0x9800)
        );
    }
}
