//! Garbage: objects no querier may read any more, deleted after a grace period.
//!
//! Retired segments (replaced by a merge, or expired) leave the index first and
//! the bucket only once `grace` has passed, longer than any query and any
//! querier's sync interval, so a querier still reading one never finds it gone.
//! Orphans are segment objects in no list of the index: a writer or compactor
//! died between its upload and its index update, or a writer retried an upload
//! the index had already counted (its mark refuses the entry). They too go once
//! older than `grace`.

use std::collections::BTreeSet;
use std::time::Duration;

use super::client::Bucket;
use super::error::BucketError;
use super::index::Change;
use super::layout::TENANTS;
use super::log::TenantView;

/// What one collection deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Retired segments deleted.
    pub deleted_retired: Vec<String>,
    /// Orphaned objects deleted.
    pub deleted_orphans: Vec<String>,
}

impl Bucket {
    /// Deletes the retired segments and orphans of `view`'s tenant older than
    /// `grace`. `view` is synced first.
    pub fn collect_garbage(
        &self,
        view: &mut TenantView,
        grace: Duration,
        now_ms: i64,
    ) -> Result<GcReport, BucketError> {
        self.collect_garbage_then(view, grace, now_ms, |_| Ok::<(), BucketError>(()))
    }

    /// [`Bucket::collect_garbage`], calling `between` after the retired objects
    /// are deleted and before the index forgets them (a fault point).
    pub fn collect_garbage_then<E: From<BucketError>>(
        &self,
        view: &mut TenantView,
        grace: Duration,
        now_ms: i64,
        between: impl FnOnce(&[String]) -> Result<(), E>,
    ) -> Result<GcReport, E> {
        let cutoff = now_ms - grace.as_millis() as i64;
        self.sync(view)?;
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
            between(&due)?;
            self.apply_change(view, Change::Forget { keys: due.clone() })?;
            report.deleted_retired = due;
        }
        let index = &view.index;
        let known: BTreeSet<&str> = index
            .segments
            .iter()
            .map(|e| e.key.as_str())
            .chain(index.retired.iter().map(|r| r.key.as_str()))
            .chain(index.quarantined.iter().map(|q| q.key.as_str()))
            .collect();
        for obj in self.list(&format!("{TENANTS}{}/segments/", view.tenant))? {
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
