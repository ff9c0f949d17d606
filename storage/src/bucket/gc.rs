//! Garbage: objects no querier may read any more, deleted after a grace period.
//!
//! Retired segments (replaced by a merge, or expired) leave the index first and
//! the bucket only once `grace` has passed, longer than any query and any
//! querier's sync interval, so a querier still reading one never finds it gone.
//! Orphans are segment objects in no list of the index: a writer or compactor
//! died between its upload and its index update (a restarted writer re-adds its
//! own under the same key). They too go once older than `grace`.

use std::collections::BTreeSet;
use std::time::Duration;

use super::client::Bucket;
use super::error::BucketError;
use super::layout::TENANTS;

/// What one collection deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Retired segments deleted.
    pub deleted_retired: Vec<String>,
    /// Orphaned objects deleted.
    pub deleted_orphans: Vec<String>,
}

impl Bucket {
    /// Deletes `tenant`'s retired segments and orphans older than `grace`.
    pub fn collect_garbage(
        &self,
        tenant: &str,
        grace: Duration,
        now_ms: i64,
    ) -> Result<GcReport, BucketError> {
        let cutoff = now_ms - grace.as_millis() as i64;
        let Some(view) = self.load_index(tenant, None)? else {
            return Ok(GcReport::default());
        };
        let mut report = GcReport::default();
        let due: Vec<String> = view
            .index
            .retired
            .iter()
            .filter(|r| r.retired_ms <= cutoff)
            .map(|r| r.key.clone())
            .collect();
        // Objects first: a crash in between leaves an entry whose object is
        // already gone, and deleting it again is harmless.
        for key in &due {
            self.delete(key)?;
        }
        if !due.is_empty() {
            self.forget_retired(tenant, &due)?;
            report.deleted_retired = due;
        }
        let known: BTreeSet<&str> = view
            .index
            .segments
            .iter()
            .map(|e| e.key.as_str())
            .chain(view.index.retired.iter().map(|r| r.key.as_str()))
            .chain(view.index.quarantined.iter().map(|q| q.key.as_str()))
            .collect();
        for obj in self.list(&format!("{TENANTS}{tenant}/segments/"))? {
            if known.contains(obj.key.as_str()) || obj.last_modified_ms > cutoff {
                continue;
            }
            // Listed after the index was read: an object added to the index
            // meanwhile is newer than the cutoff, so it was skipped above.
            self.delete(&obj.key)?;
            report.deleted_orphans.push(obj.key);
        }
        Ok(report)
    }
}
