//! A writer's upload sequence numbers, kept on its disk: the identity of each
//! upload that outlives the object (see `bucket/index.rs`).
//!
//! A local segment gets its number before its first upload, and the number is
//! fsynced before the upload starts, so an upload retried after a crash carries
//! the same number and the index recognises it. Numbers only grow: a new one is
//! above every number given before, and at least the clock in microseconds, so
//! even a data directory restored from an old copy hands out numbers above
//! those it handed out since (unless the clock went back too).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::durable::write_file;
use crate::error::{IoContext, Result, StorageError};

/// The file in the writer's store directory.
const FILE: &str = "upload-seqs.json";

#[derive(Serialize, Deserialize, Default)]
struct Doc {
    /// The highest number given.
    last: u64,
    /// Local segment id → its number, for segments not yet dropped.
    assigned: BTreeMap<u64, u64>,
}

/// The numbers of one writer's local segments.
pub(super) struct UploadSeqs {
    path: PathBuf,
    doc: Doc,
}

impl UploadSeqs {
    /// The numbers kept in `dir` (none yet for a new writer).
    pub(super) fn open(dir: &Path) -> Result<UploadSeqs> {
        let path = dir.join(FILE);
        let doc = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| {
                StorageError::Corrupt(format!(
                    "{}: {e}; it holds the writer's upload sequence numbers (delete it only with NODE_ID, so the writer starts as a new one)",
                    path.display()
                ))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Doc::default(),
            Err(e) => return Err(e).at(&path),
        };
        Ok(UploadSeqs { path, doc })
    }

    /// Gives each of `ids` without a number the next one, in id order, and
    /// forgets the numbers of segments not in `present`; durable on return.
    pub(super) fn assign(&mut self, ids: &[u64], present: &[u64]) -> Result<()> {
        let mut changed = false;
        let mut sorted = ids.to_vec();
        sorted.sort_unstable();
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        for id in sorted {
            if self.doc.assigned.contains_key(&id) {
                continue;
            }
            let seq = (self.doc.last + 1).max(now_us);
            self.doc.last = seq;
            self.doc.assigned.insert(id, seq);
            changed = true;
        }
        let before = self.doc.assigned.len();
        self.doc.assigned.retain(|id, _| present.contains(id));
        changed |= self.doc.assigned.len() != before;
        if changed {
            let body = serde_json::to_vec(&self.doc)
                .map_err(|e| StorageError::io(&self.path, e.into()))?;
            write_file(&self.path, &body)?;
        }
        Ok(())
    }

    /// The number of local segment `id`, once assigned.
    pub(super) fn get(&self, id: u64) -> Option<u64> {
        self.doc.assigned.get(&id).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_kept_across_reopen_and_only_grow() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = UploadSeqs::open(dir.path()).unwrap();
        s.assign(&[5, 3], &[3, 5]).unwrap();
        let (a, b) = (s.get(3).unwrap(), s.get(5).unwrap());
        assert!(a < b, "id order");
        let mut s = UploadSeqs::open(dir.path()).unwrap();
        assert_eq!((s.get(3), s.get(5)), (Some(a), Some(b)));
        // 3 dropped locally, 9 new: above every number given before.
        s.assign(&[9], &[5, 9]).unwrap();
        assert_eq!(s.get(3), None);
        assert!(s.get(9).unwrap() > b);
    }
}
