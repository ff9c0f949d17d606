//! Each tenant's segment index: one JSON object, changed only by compare-and-swap.
//!
//! Every change reads the index with its ETag, applies itself to the copy and
//! writes it back on condition that the ETag is unchanged (create-if-absent for a
//! tenant's first segment). A writer that lost the race reads again and retries,
//! so concurrent writers and compactors never lose each other's changes, with no
//! coordinator. Queriers poll with a conditional GET: an unchanged index costs one
//! request and no body.
//!
//! JSON keeps the index readable with everyday tools (`aws s3 cp … - | jq`); at
//! ~300 bytes per entry it stays small until ~10^5 live segments per tenant, which
//! compaction keeps far away (see docs/scaling.md).

use std::time::Duration;

use bytes::Bytes;
use object_store::{PutMode, PutOptions, UpdateVersion};
use serde::{Deserialize, Serialize};

use super::client::Bucket;
use super::error::BucketError;
use super::layout::{index_key, tenant_of, TENANTS};

/// Attempts of one compare-and-swap before giving up.
const CAS_ATTEMPTS: u32 = 30;

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

/// A tenant's index document.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct TenantIndex {
    /// Bumped by every change.
    pub generation: u64,
    /// Live segments.
    pub segments: Vec<SegmentEntry>,
    /// Replaced or expired segments whose objects still exist.
    pub retired: Vec<Retired>,
    /// Damaged or missing segments.
    pub quarantined: Vec<Quarantined>,
}

impl TenantIndex {
    fn knows(&self, key: &str) -> bool {
        self.segments.iter().any(|e| e.key == key)
            || self.retired.iter().any(|e| e.key == key)
            || self.quarantined.iter().any(|e| e.key == key)
    }
}

/// An index and the ETag it was read (or written) with.
#[derive(Clone, Debug)]
pub struct IndexView {
    /// The document.
    pub index: TenantIndex,
    /// Its ETag ("" for a tenant without an index yet).
    pub etag: String,
}

impl Bucket {
    /// Tenants that have an index.
    pub fn tenants(&self) -> Result<Vec<String>, BucketError> {
        let mut out: Vec<String> = self
            .list(TENANTS)?
            .into_iter()
            .filter(|o| o.key.ends_with("/index.json"))
            .filter_map(|o| tenant_of(&o.key).map(str::to_string))
            .collect();
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// `tenant`'s index; `Ok(None)` when its ETag is still `known` (unchanged). A
    /// tenant without one gets an empty index with ETag "".
    pub fn load_index(
        &self,
        tenant: &str,
        known: Option<&str>,
    ) -> Result<Option<IndexView>, BucketError> {
        let key = index_key(tenant);
        let known = known.filter(|k| !k.is_empty());
        match self.get_with_etag(&key, known) {
            Ok(None) => Ok(None),
            Ok(Some((bytes, etag))) => Ok(Some(IndexView {
                index: decode(&key, &bytes)?,
                etag: etag.unwrap_or_default(),
            })),
            Err(BucketError::NotFound { .. }) => Ok(Some(IndexView {
                index: TenantIndex::default(),
                etag: String::new(),
            })),
            Err(e) => Err(e),
        }
    }

    /// Applies `change` to `tenant`'s index by compare-and-swap, retrying on lost
    /// races. `change` returns false to leave the index as it is.
    fn update_index(
        &self,
        tenant: &str,
        mut change: impl FnMut(&mut TenantIndex) -> Result<bool, BucketError>,
    ) -> Result<IndexView, BucketError> {
        let key = index_key(tenant);
        for attempt in 0..CAS_ATTEMPTS {
            let Some(view) = self.load_index(tenant, None)? else {
                continue;
            };
            let mut next = view.index.clone();
            if !change(&mut next)? {
                return Ok(view);
            }
            next.generation += 1;
            let mode = if view.etag.is_empty() {
                PutMode::Create
            } else {
                PutMode::Update(UpdateVersion {
                    e_tag: Some(view.etag.clone()),
                    version: None,
                })
            };
            let body = serde_json::to_vec(&next).map_err(|e| BucketError::Corrupt {
                key: key.clone(),
                reason: format!("cannot encode: {e}"),
            })?;
            let opts = PutOptions {
                mode,
                ..PutOptions::default()
            };
            match self.put_opts(&key, Bytes::from(body), opts) {
                Ok(r) => {
                    return Ok(IndexView {
                        index: next,
                        etag: r.e_tag.unwrap_or_default(),
                    })
                }
                Err(object_store::Error::Precondition { .. })
                | Err(object_store::Error::AlreadyExists { .. }) => {
                    self.conflict();
                    // Jittered so racing writers spread out.
                    let ms = 5 + (u64::from(attempt) * 7 + jitter()) % 50;
                    std::thread::sleep(Duration::from_millis(ms));
                }
                Err(e) => return Err(BucketError::from_store("PUT", &key, e)),
            }
        }
        Err(BucketError::Contended {
            key,
            attempts: CAS_ATTEMPTS,
        })
    }

    /// Adds `entries` to `tenant`'s live segments; an entry whose key the index
    /// already knows (live, retired or quarantined) is skipped, so a retried
    /// upload never counts a segment twice.
    pub fn add_segments(
        &self,
        tenant: &str,
        entries: Vec<SegmentEntry>,
    ) -> Result<IndexView, BucketError> {
        self.update_index(tenant, |idx| {
            let mut changed = false;
            for e in &entries {
                if !idx.knows(&e.key) {
                    idx.segments.push(e.clone());
                    changed = true;
                }
            }
            Ok(changed)
        })
    }

    /// In one change: `sources` leave the live set for `retired`, `merged` join
    /// it. Fails with [`BucketError::SourcesGone`], changing nothing, when any
    /// source is no longer live.
    pub fn replace_segments(
        &self,
        tenant: &str,
        sources: &[String],
        merged: Vec<SegmentEntry>,
        now_ms: i64,
    ) -> Result<IndexView, BucketError> {
        self.update_index(tenant, |idx| {
            if let Some(gone) = sources
                .iter()
                .find(|k| !idx.segments.iter().any(|e| &e.key == *k))
            {
                return Err(BucketError::SourcesGone { key: gone.clone() });
            }
            idx.segments.retain(|e| !sources.contains(&e.key));
            idx.retired.extend(sources.iter().map(|k| Retired {
                key: k.clone(),
                retired_ms: now_ms,
            }));
            for m in &merged {
                if !idx.knows(&m.key) {
                    idx.segments.push(m.clone());
                }
            }
            Ok(true)
        })
    }

    /// Moves live `keys` to `retired` (retention); keys not live are ignored.
    pub fn retire_segments(
        &self,
        tenant: &str,
        keys: &[String],
        now_ms: i64,
    ) -> Result<IndexView, BucketError> {
        self.update_index(tenant, |idx| {
            let before = idx.segments.len();
            let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut idx.segments)
                .into_iter()
                .partition(|e| keys.contains(&e.key));
            idx.segments = kept;
            idx.retired.extend(gone.into_iter().map(|e| Retired {
                key: e.key,
                retired_ms: now_ms,
            }));
            Ok(idx.segments.len() != before)
        })
    }

    /// Takes a live segment out of service as damaged or missing, with why.
    ///
    /// Returns whether this call moved it: when several nodes meet the same bad
    /// object at once, exactly one of them does, so counting only `true`
    /// reports each damaged object once across the cluster.
    pub fn quarantine_segment(
        &self,
        tenant: &str,
        key: &str,
        reason: &str,
        now_ms: i64,
    ) -> Result<bool, BucketError> {
        let mut moved = false;
        self.update_index(tenant, |idx| {
            // A lost compare-and-swap reruns this on the newer index.
            moved = false;
            let Some(pos) = idx.segments.iter().position(|e| e.key == key) else {
                return Ok(false);
            };
            idx.segments.remove(pos);
            idx.quarantined.push(Quarantined {
                key: key.to_string(),
                reason: reason.to_string(),
                at_ms: now_ms,
            });
            moved = true;
            Ok(true)
        })?;
        Ok(moved)
    }

    /// Drops retired entries whose objects were deleted (garbage collection).
    pub(super) fn forget_retired(
        &self,
        tenant: &str,
        keys: &[String],
    ) -> Result<IndexView, BucketError> {
        self.update_index(tenant, |idx| {
            let before = idx.retired.len();
            idx.retired.retain(|r| !keys.contains(&r.key));
            Ok(idx.retired.len() != before)
        })
    }
}

fn decode(key: &str, bytes: &[u8]) -> Result<TenantIndex, BucketError> {
    serde_json::from_slice(bytes).map_err(|e| BucketError::Corrupt {
        key: key.to_string(),
        reason: e.to_string(),
    })
}

/// A few bits of per-call randomness from the clock.
fn jitter() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()) >> 10)
}
