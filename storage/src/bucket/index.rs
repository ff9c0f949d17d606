//! A tenant's segment index: what it holds, and the changes that make it.
//!
//! The index is never written whole by the roles. Each change is a [`Change`],
//! appended to the tenant's log (`log.rs`); the index is the fold of the log
//! from the newest checkpoint ([`TenantIndex::apply`]). The fold is a pure
//! function of the log, so every reader that read the same generations holds
//! the same index, and a change that depends on the state (a merge replacing
//! sources still live, a quarantine of a key still live, an upload not yet
//! added) is decided by its place in the log, the same way for everyone.
//!
//! **Uploads are counted once by construction.** Every segment a writer uploads
//! carries a sequence number the writer assigned before the upload and kept on
//! its disk, increasing with every upload. The index keeps, per writer, the
//! highest sequence number it ever added (`writers`), and an entry at or below
//! it is not added again. The mark survives garbage collection (a merged and
//! deleted source leaves no key behind, but the mark stays), so an upload
//! retried after a crash is recognised however late it comes. A writer adds a
//! tenant's pending segments in one change, in sequence order, so a sequence
//! number below the mark always belongs to a segment that was added.
//!
//! JSON keeps the log and checkpoints readable with everyday tools (`aws s3 cp
//! … - | jq`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One live segment object and what a querier or compactor needs to know of it
/// without reading it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct SegmentEntry {
    /// Object key.
    pub key: String,
    /// First sample time (ms).
    pub min_ms: i64,
    /// End of the last step with data (ms, exclusive).
    pub max_ms: i64,
    /// Start of its time partition.
    pub partition_ms: i64,
    /// 0 as flushed by a writer; each merge raises it.
    pub level: u32,
    /// Width of one time step of its rows (ms; 0 when unknown).
    #[serde(default)]
    pub step_ms: i64,
    /// Width of its time partition (ms; 0 when unknown).
    #[serde(default)]
    pub width_ms: i64,
    /// Object size.
    pub bytes: u64,
    /// Rows (series × step × stack).
    pub samples: u64,
    /// Series.
    pub series: u64,
    /// When it was written (ms).
    pub created_ms: i64,
    /// The writer or compactor that wrote it.
    pub origin: String,
    /// The writer's upload sequence number (writers' segments only): an entry
    /// whose number is at or below its writer's mark was added before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// Label summary: profile types present.
    pub profile_types: Vec<String>,
    /// Label summary: services present.
    pub services: Vec<String>,
}

/// A segment replaced or expired, kept until the grace period has passed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Retired {
    /// Object key.
    pub key: String,
    /// When it left the live set (ms).
    pub retired_ms: i64,
}

/// A segment found damaged or missing: not served, kept for inspection.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Quarantined {
    /// Object key.
    pub key: String,
    /// What was wrong.
    pub reason: String,
    /// When it was found (ms).
    pub at_ms: i64,
}

/// A tenant's index: the fold of its log up to `generation`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct TenantIndex {
    /// The last log generation folded in.
    pub generation: u64,
    /// Live segments.
    pub segments: Vec<SegmentEntry>,
    /// Replaced or expired segments whose objects still exist.
    pub retired: Vec<Retired>,
    /// Damaged or missing segments.
    pub quarantined: Vec<Quarantined>,
    /// Per writer, the highest upload sequence number added: kept for good, so
    /// a late retry of an upload long merged and deleted is still recognised.
    #[serde(default)]
    pub writers: BTreeMap<String, u64>,
    /// Log generations that could not be decoded, folded in as no change (every
    /// reader does the same) and reported.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<u64>,
}

/// One change to a tenant's index, as appended to its log.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// A writer's uploads, in sequence order. An entry whose key is known, or
    /// whose sequence number is at or below its writer's mark, is skipped.
    Add {
        /// The new segments.
        entries: Vec<SegmentEntry>,
    },
    /// A merge: `sources` leave the live set for `retired` and `merged` join
    /// it, only if every source is still live (else nothing changes).
    Replace {
        /// Keys replaced.
        sources: Vec<String>,
        /// Their replacement.
        merged: Vec<SegmentEntry>,
        /// When (ms).
        at_ms: i64,
    },
    /// Retention: live `keys` move to `retired`.
    Retire {
        /// Keys expired.
        keys: Vec<String>,
        /// When (ms).
        at_ms: i64,
    },
    /// A live segment found damaged or missing leaves service.
    Quarantine {
        /// Key.
        key: String,
        /// What is wrong with it.
        reason: String,
        /// When (ms).
        at_ms: i64,
    },
    /// Retired entries whose objects were deleted (garbage collection).
    Forget {
        /// Keys deleted.
        keys: Vec<String>,
    },
}

/// What a change did when folded in at its place in the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It changed this many entries (0: nothing left to do, e.g. a retried
    /// upload already added, or a quarantine another node made first).
    Changed(usize),
    /// A merge whose source (the first found) was no longer live: void.
    SourceGone(String),
}

impl TenantIndex {
    /// Whether `key` is listed anywhere (live, retired or quarantined).
    pub fn knows(&self, key: &str) -> bool {
        self.segments.iter().any(|e| e.key == key)
            || self.retired.iter().any(|e| e.key == key)
            || self.quarantined.iter().any(|e| e.key == key)
    }

    /// Whether `key` is live.
    pub fn is_live(&self, key: &str) -> bool {
        self.segments.iter().any(|e| e.key == key)
    }

    /// Folds in `change`. Deterministic: no clock, no randomness, so every
    /// reader folding the same log holds the same index.
    pub fn apply(&mut self, change: &Change) -> Outcome {
        match change {
            Change::Add { entries } => Outcome::Changed(self.add(entries)),
            Change::Replace {
                sources,
                merged,
                at_ms,
            } => {
                if let Some(gone) = sources.iter().find(|k| !self.is_live(k)) {
                    return Outcome::SourceGone(gone.clone());
                }
                self.segments.retain(|e| !sources.contains(&e.key));
                self.retired.extend(sources.iter().map(|k| Retired {
                    key: k.clone(),
                    retired_ms: *at_ms,
                }));
                for m in merged {
                    if !self.knows(&m.key) {
                        self.segments.push(m.clone());
                    }
                }
                Outcome::Changed(sources.len() + merged.len())
            }
            Change::Retire { keys, at_ms } => {
                let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.segments)
                    .into_iter()
                    .partition(|e| keys.contains(&e.key));
                self.segments = kept;
                let n = gone.len();
                self.retired.extend(gone.into_iter().map(|e| Retired {
                    key: e.key,
                    retired_ms: *at_ms,
                }));
                Outcome::Changed(n)
            }
            Change::Quarantine { key, reason, at_ms } => {
                let Some(pos) = self.segments.iter().position(|e| &e.key == key) else {
                    return Outcome::Changed(0);
                };
                self.segments.remove(pos);
                self.quarantined.push(Quarantined {
                    key: key.clone(),
                    reason: reason.clone(),
                    at_ms: *at_ms,
                });
                Outcome::Changed(1)
            }
            Change::Forget { keys } => {
                let before = self.retired.len();
                self.retired.retain(|r| !keys.contains(&r.key));
                Outcome::Changed(before - self.retired.len())
            }
        }
    }

    /// Adds the entries not added before; the marks are compared as they stood
    /// before this change, so one change's entries never shadow each other.
    fn add(&mut self, entries: &[SegmentEntry]) -> usize {
        let marks = self.writers.clone();
        let mut added = 0;
        for e in entries {
            let seen = match e.seq {
                Some(seq) => marks.get(&e.origin).is_some_and(|&m| seq <= m),
                None => false,
            };
            if seen || self.knows(&e.key) {
                continue;
            }
            if let Some(seq) = e.seq {
                let mark = self.writers.entry(e.origin.clone()).or_insert(0);
                *mark = (*mark).max(seq);
            }
            self.segments.push(e.clone());
            added += 1;
        }
        added
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, seq: Option<u64>) -> SegmentEntry {
        SegmentEntry {
            key: key.into(),
            min_ms: 0,
            max_ms: 10,
            partition_ms: 0,
            level: 0,
            step_ms: 10,
            width_ms: 3_600_000,
            bytes: 1,
            samples: 1,
            series: 1,
            created_ms: 0,
            origin: "w".into(),
            seq,
            profile_types: vec![],
            services: vec![],
        }
    }

    fn keys(idx: &TenantIndex) -> Vec<&str> {
        idx.segments.iter().map(|e| e.key.as_str()).collect()
    }

    /// The double count: an upload added, merged, its object deleted
    /// and forgotten, then retried by a writer restarted late. The key is
    /// unknown by then; the writer's mark still refuses it.
    #[test]
    fn a_retried_upload_is_refused_after_its_key_was_forgotten() {
        let mut idx = TenantIndex::default();
        let add = Change::Add {
            entries: vec![entry("w-1", Some(7))],
        };
        assert_eq!(idx.apply(&add), Outcome::Changed(1));
        let merge = Change::Replace {
            sources: vec!["w-1".into()],
            merged: vec![entry("m", None)],
            at_ms: 5,
        };
        assert_eq!(idx.apply(&merge), Outcome::Changed(2));
        idx.apply(&Change::Forget {
            keys: vec!["w-1".into()],
        });
        assert!(!idx.knows("w-1"));
        assert_eq!(idx.apply(&add), Outcome::Changed(0));
        assert_eq!(keys(&idx), ["m"]);
    }

    /// Entries of one change are judged against the marks before it: a change
    /// listing sequence numbers out of order adds all of them.
    #[test]
    fn one_change_adds_every_new_sequence_number_in_any_order() {
        let mut idx = TenantIndex::default();
        let add = Change::Add {
            entries: vec![entry("b", Some(9)), entry("a", Some(3))],
        };
        assert_eq!(idx.apply(&add), Outcome::Changed(2));
        assert_eq!(idx.writers["w"], 9);
        // A retry carrying them again with a new one adds only the new one.
        let retry = Change::Add {
            entries: vec![
                entry("a", Some(3)),
                entry("b", Some(9)),
                entry("c", Some(10)),
            ],
        };
        assert_eq!(idx.apply(&retry), Outcome::Changed(1));
        assert_eq!(keys(&idx), ["b", "a", "c"]);
    }

    #[test]
    fn a_merge_of_sources_no_longer_live_is_void() {
        let mut idx = TenantIndex::default();
        idx.apply(&Change::Add {
            entries: vec![entry("a", None), entry("b", None)],
        });
        idx.apply(&Change::Quarantine {
            key: "b".into(),
            reason: "checksum".into(),
            at_ms: 1,
        });
        let merge = Change::Replace {
            sources: vec!["a".into(), "b".into()],
            merged: vec![entry("m", None)],
            at_ms: 2,
        };
        assert_eq!(idx.apply(&merge), Outcome::SourceGone("b".into()));
        assert_eq!(keys(&idx), ["a"]);
        // A second quarantine of the same key changes nothing.
        let again = Change::Quarantine {
            key: "b".into(),
            reason: "missing".into(),
            at_ms: 3,
        };
        assert_eq!(idx.apply(&again), Outcome::Changed(0));
        assert_eq!(idx.quarantined.len(), 1);
    }
}
