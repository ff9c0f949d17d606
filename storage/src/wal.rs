//! Write-ahead log: numbered files of checksummed records.
//!
//! Record: `u32 LE payload length | u32 LE CRC-32 of (lsn ‖ payload) | u64 LE lsn |
//! payload`. Files are named after the first LSN they may hold, so replay order is the
//! lexical order of names. A record that is cut short or fails its checksum ends the
//! readable part of its file: the file is truncated there (a torn tail from a crash
//! mid-write) and the loss is logged, never a panic.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use tracing::{info, warn};

use crate::durable::sync_dir;
use crate::error::{IoContext, Result};

const HEADER_LEN: usize = 16;

/// Bytes each record takes besides its payload.
pub const RECORD_HEADER_BYTES: u64 = HEADER_LEN as u64;

#[derive(Debug)]
struct WalFile {
    path: PathBuf,
    /// Highest LSN written to the file (0 when empty).
    last_lsn: u64,
    /// Bytes in the file.
    bytes: u64,
}

/// How far WAL replay at open has come, readable from another thread while
/// [`crate::Store::open_with_progress`] runs (the server's `/ready` reports it).
#[derive(Debug, Default)]
pub struct ReplayProgress {
    total: AtomicU64,
    replayed: AtomicU64,
}

impl ReplayProgress {
    /// `(bytes replayed, bytes to replay)`; both 0 before replay starts.
    pub fn bytes(&self) -> (u64, u64) {
        (
            self.replayed.load(Ordering::Relaxed),
            self.total.load(Ordering::Relaxed),
        )
    }
}

/// What one truncation deleted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    pub files: usize,
    pub bytes: u64,
}

/// What replay found, for logs and metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReplayReport {
    pub files: usize,
    pub records: u64,
    pub bytes: u64,
    /// Bytes dropped from torn or corrupt tails.
    pub truncated_bytes: u64,
    pub last_lsn: u64,
}

pub struct Wal {
    dir: PathBuf,
    files: Vec<WalFile>,
    active: Option<File>,
    active_bytes: u64,
    rotate_bytes: u64,
    buf: Vec<u8>,
    pending_last: Option<u64>,
    /// Files started since open: which file a commit goes to (see
    /// [`Wal::next_commit_file`]).
    started: u64,
}

fn file_name(first_lsn: u64) -> String {
    format!("{first_lsn:020}.wal")
}

impl Wal {
    /// Opens the WAL directory and replays every record through `apply` in LSN
    /// order: its LSN, its payload and whether it is the first of its file.
    pub fn open(
        dir: &Path,
        rotate_bytes: u64,
        progress: &ReplayProgress,
        mut apply: impl FnMut(u64, &[u8], bool),
    ) -> Result<(Wal, ReplayReport)> {
        fs::create_dir_all(dir).at(dir)?;
        let mut names: Vec<PathBuf> = fs::read_dir(dir)
            .at(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "wal"))
            .collect();
        names.sort();
        let total: u64 = names
            .iter()
            .filter_map(|p| fs::metadata(p).ok())
            .map(|m| m.len())
            .sum();
        progress.total.store(total, Ordering::Relaxed);
        let mut report = ReplayReport::default();
        let mut files = Vec::new();
        for path in names {
            let (last, bytes) =
                replay_file(&path, report.last_lsn, &mut apply, &mut report, progress)?;
            report.files += 1;
            if last > 0 {
                report.last_lsn = last;
            }
            files.push(WalFile {
                path,
                last_lsn: last,
                bytes,
            });
        }
        if report.records > 0 || report.truncated_bytes > 0 {
            info!(
                files = report.files,
                records = report.records,
                bytes = report.bytes,
                truncated_bytes = report.truncated_bytes,
                "replayed write-ahead log"
            );
        }
        Ok((
            Wal {
                dir: dir.to_path_buf(),
                files,
                active: None,
                active_bytes: 0,
                rotate_bytes,
                buf: Vec::new(),
                pending_last: None,
                started: 0,
            },
            report,
        ))
    }

    /// Queues a record; it reaches the file at the next [`Wal::commit`].
    pub fn append(&mut self, lsn: u64, payload: &[u8]) {
        self.append_parts(lsn, &[payload]);
    }

    /// Queues a record whose payload is `parts` end to end.
    pub fn append_parts(&mut self, lsn: u64, parts: &[&[u8]]) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut crc = crc32fast::Hasher::new();
        crc.update(&lsn.to_le_bytes());
        for p in parts {
            crc.update(p);
        }
        self.buf.extend_from_slice(&(len as u32).to_le_bytes());
        self.buf.extend_from_slice(&crc.finalize().to_le_bytes());
        self.buf.extend_from_slice(&lsn.to_le_bytes());
        for p in parts {
            self.buf.extend_from_slice(p);
        }
        self.pending_last = Some(lsn);
    }

    /// A number for the file the next [`Wal::commit`] writes to, the same for every
    /// commit to one file and different from any earlier file's since open: a
    /// record that must be readable without the files before it (their deletion
    /// does not wait for it) can tell what its file already holds.
    pub fn next_commit_file(&self) -> u64 {
        self.started + u64::from(self.commit_rotates())
    }

    /// Whether the next commit starts a new file.
    fn commit_rotates(&self) -> bool {
        self.active.is_none() || self.active_bytes >= self.rotate_bytes
    }

    /// Writes queued records in one call and, if `sync`, fsyncs them.
    pub fn commit(&mut self, first_lsn: u64, sync: bool) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        if self.commit_rotates() {
            self.rotate(first_lsn)?;
        }
        let path = self
            .files
            .last()
            .map(|f| f.path.clone())
            .unwrap_or_default();
        let res = (|| -> std::io::Result<()> {
            let f = self
                .active
                .as_mut()
                .ok_or_else(|| std::io::Error::other("no active WAL file"))?;
            f.write_all(&self.buf)?;
            if sync {
                f.sync_data()?;
            }
            Ok(())
        })();
        let written = self.buf.len() as u64;
        self.active_bytes += written;
        self.buf.clear();
        if let Some(f) = self.files.last_mut() {
            f.bytes += written;
            if let Some(last) = self.pending_last.take() {
                f.last_lsn = last;
            }
        }
        res.at(path)
    }

    pub fn sync(&mut self) -> Result<()> {
        if let Some(f) = self.active.as_mut() {
            let path = self
                .files
                .last()
                .map(|f| f.path.clone())
                .unwrap_or_default();
            f.sync_data().at(path)?;
        }
        Ok(())
    }

    fn rotate(&mut self, first_lsn: u64) -> Result<()> {
        let path = self.dir.join(file_name(first_lsn));
        // After replay dropped a torn first record, the next LSN names the same file
        // again: forget the old entry, or truncation would delete the active file.
        self.files.retain(|f| f.path != path);
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .at(&path)?;
        sync_dir(&self.dir)?;
        self.active = Some(f);
        self.active_bytes = 0;
        self.started += 1;
        self.files.push(WalFile {
            path,
            last_lsn: 0,
            bytes: 0,
        });
        Ok(())
    }

    /// Bytes in the WAL files on disk: what a replay would read now.
    pub fn retained_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).sum()
    }

    /// Bytes the group-commit buffer holds on to between commits.
    pub fn buffer_capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Deletes every file whose records all have LSN below `min_needed` (all their
    /// samples are in durable segments). The active file is closed first if it
    /// qualifies, so the next commit starts a fresh one.
    pub fn truncate_before(&mut self, min_needed: u64) -> Result<Removed> {
        let mut removed = Removed::default();
        let n = self.files.len();
        let mut keep = Vec::with_capacity(n);
        for (i, f) in std::mem::take(&mut self.files).into_iter().enumerate() {
            let is_active = i + 1 == n && self.active.is_some();
            let unneeded = f.last_lsn < min_needed && (f.last_lsn > 0 || !is_active);
            if unneeded {
                if is_active {
                    self.active = None;
                    self.active_bytes = 0;
                }
                match fs::remove_file(&f.path) {
                    Ok(()) => {
                        removed.files += 1;
                        removed.bytes += f.bytes;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(crate::StorageError::io(&f.path, e)),
                }
            } else {
                keep.push(f);
            }
        }
        self.files = keep;
        if removed.files > 0 {
            sync_dir(&self.dir)?;
        }
        Ok(removed)
    }

    #[cfg(test)]
    pub fn file_count(&self) -> usize {
        self.files.len()
    }
}

/// Replays one file; returns the last valid LSN in it (0 if none) and the bytes
/// kept.
fn replay_file(
    path: &Path,
    prev_lsn: u64,
    apply: &mut impl FnMut(u64, &[u8], bool),
    report: &mut ReplayReport,
    progress: &ReplayProgress,
) -> Result<(u64, u64)> {
    let mut data = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut data))
        .at(path)?;
    let mut pos = 0usize;
    let mut last = 0u64;
    let mut prev = prev_lsn;
    let bad = loop {
        if pos == data.len() {
            break None;
        }
        let Some(h) = data.get(pos..pos + HEADER_LEN) else {
            break Some("truncated record header");
        };
        let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let crc = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
        let mut lsn_bytes = [0u8; 8];
        lsn_bytes.copy_from_slice(&h[8..16]);
        let lsn = u64::from_le_bytes(lsn_bytes);
        let Some(payload) = data.get(pos + HEADER_LEN..pos + HEADER_LEN + len) else {
            break Some("truncated record payload");
        };
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&lsn_bytes);
        hasher.update(payload);
        if hasher.finalize() != crc {
            break Some("record checksum mismatch");
        }
        if lsn <= prev {
            break Some("record sequence number out of order");
        }
        apply(lsn, payload, pos == 0);
        prev = lsn;
        last = lsn;
        report.records += 1;
        report.bytes += (HEADER_LEN + len) as u64;
        progress
            .replayed
            .fetch_add((HEADER_LEN + len) as u64, Ordering::Relaxed);
        pos += HEADER_LEN + len;
    };
    if let Some(why) = bad {
        let dropped = (data.len() - pos) as u64;
        warn!(
            file = %path.display(),
            offset = pos,
            dropped_bytes = dropped,
            "write-ahead log: {why}; dropping the rest of the file (torn write from a crash?)"
        );
        report.truncated_bytes += dropped;
        let f = OpenOptions::new().write(true).open(path).at(path)?;
        f.set_len(pos as u64).at(path)?;
        f.sync_all().at(path)?;
    }
    Ok((last, pos as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replay(dir: &Path) -> (Vec<(u64, Vec<u8>)>, ReplayReport, Wal) {
        let mut got = Vec::new();
        let (wal, rep) = Wal::open(dir, 1 << 20, &ReplayProgress::default(), |l, p, _| {
            got.push((l, p.to_vec()))
        })
        .unwrap();
        (got, rep, wal)
    }

    #[test]
    fn records_survive_reopen_and_torn_tail_is_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, _, mut wal) = replay(tmp.path());
        for lsn in 1..=3u64 {
            wal.append(lsn, format!("rec{lsn}").as_bytes());
            wal.commit(lsn, true).unwrap();
        }
        drop(wal);
        // Simulate a crash mid-write: half a record at the end.
        let path = tmp.path().join(file_name(1));
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[9, 0, 0, 0, 1, 2]).unwrap();
        drop(f);
        let (got, rep, _) = replay(tmp.path());
        assert_eq!(
            got,
            vec![
                (1, b"rec1".to_vec()),
                (2, b"rec2".to_vec()),
                (3, b"rec3".to_vec())
            ]
        );
        assert_eq!(rep.truncated_bytes, 6);
        assert_eq!(rep.last_lsn, 3);
        // The file was truncated, so a second open finds nothing to drop.
        let (_, rep, _) = replay(tmp.path());
        assert_eq!(rep.truncated_bytes, 0);
    }

    #[test]
    fn flipped_byte_drops_that_record_and_after() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, _, mut wal) = replay(tmp.path());
        wal.append(1, b"first");
        wal.append(2, b"second");
        wal.commit(1, true).unwrap();
        drop(wal);
        let path = tmp.path().join(file_name(1));
        let mut data = fs::read(&path).unwrap();
        let n = data.len();
        data[n - 2] ^= 0xff;
        fs::write(&path, data).unwrap();
        let (got, rep, _) = replay(tmp.path());
        assert_eq!(got, vec![(1, b"first".to_vec())]);
        assert_eq!(rep.truncated_bytes, (HEADER_LEN + 6) as u64);
    }

    /// A crash that tore the only record of a new file leaves an empty file whose
    /// name the next commit reuses; truncation must not delete that active file.
    #[test]
    fn reusing_a_torn_files_name_keeps_the_new_records() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, _, mut wal) = replay(tmp.path());
        wal.append(1, b"one");
        wal.commit(1, true).unwrap();
        drop(wal);
        // The crash: file 2 holds only half of record 2.
        fs::write(tmp.path().join(file_name(2)), [9, 0, 0, 0, 1]).unwrap();
        let (got, rep, mut wal) = replay(tmp.path());
        assert_eq!(got.len(), 1);
        assert_eq!(rep.last_lsn, 1);
        wal.append(2, b"two");
        wal.commit(2, true).unwrap();
        assert_eq!(
            wal.truncate_before(2).unwrap().files,
            1,
            "only file 1 is fully flushed"
        );
        drop(wal);
        let (got, _, _) = replay(tmp.path());
        assert_eq!(got, vec![(2, b"two".to_vec())]);
    }

    #[test]
    fn truncation_removes_only_fully_flushed_files() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, _, mut wal) = Wal::open(tmp.path(), 10, &ReplayProgress::default(), |_, _, _| {})
            .map(|(w, r)| ((), r, w))
            .unwrap();
        for lsn in 1..=4u64 {
            wal.append(lsn, b"0123456789abcdef");
            wal.commit(lsn, false).unwrap();
        }
        assert_eq!(wal.file_count(), 4);
        let record = (HEADER_LEN + 16) as u64;
        assert_eq!(wal.retained_bytes(), 4 * record);
        assert_eq!(
            wal.truncate_before(3).unwrap(),
            Removed {
                files: 2,
                bytes: 2 * record
            }
        );
        assert_eq!(wal.retained_bytes(), 2 * record);
        drop(wal);
        let progress = ReplayProgress::default();
        let mut got = Vec::new();
        let (mut wal, _) = Wal::open(tmp.path(), 10, &progress, |l, _, _| got.push(l)).unwrap();
        assert_eq!(got, vec![3, 4]);
        assert_eq!(progress.bytes(), (2 * record, 2 * record));
        assert_eq!(wal.truncate_before(5).unwrap().files, 2);
        assert_eq!(wal.file_count(), 0);
        assert_eq!(wal.retained_bytes(), 0);
    }

    #[test]
    fn commits_know_their_file_and_replay_marks_each_files_first_record() {
        let tmp = tempfile::tempdir().unwrap();
        let open = |got: &mut Vec<(u64, Vec<u8>, bool)>| {
            // Records of 22 bytes (16 of header): a file takes two, then rotates.
            Wal::open(tmp.path(), 40, &ReplayProgress::default(), |l, p, first| {
                got.push((l, p.to_vec(), first))
            })
            .unwrap()
            .0
        };
        let mut wal = open(&mut Vec::new());
        let mut files = Vec::new();
        for lsn in 1..=5u64 {
            files.push(wal.next_commit_file());
            wal.append_parts(lsn, &[b"ab", b"", b"cdef"]);
            wal.commit(lsn, false).unwrap();
        }
        assert_eq!(files, vec![1, 1, 2, 2, 3]);
        assert_eq!(wal.next_commit_file(), 3);
        drop(wal);

        let mut got = Vec::new();
        let mut wal = open(&mut got);
        let firsts: Vec<(u64, bool)> = got.iter().map(|g| (g.0, g.2)).collect();
        assert_eq!(
            firsts,
            vec![(1, true), (2, false), (3, true), (4, false), (5, true)]
        );
        assert!(got.iter().all(|g| g.1 == b"abcdef"));
        // After open, and after the active file is deleted, a new file starts.
        assert_eq!(wal.next_commit_file(), 1);
        wal.append(6, b"x");
        wal.commit(6, false).unwrap();
        assert_eq!(wal.next_commit_file(), 1);
        wal.truncate_before(u64::MAX).unwrap();
        assert_eq!(wal.next_commit_file(), 2);
    }
}
