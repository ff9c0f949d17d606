//! The object store where a cluster's durable state lives (S3, MinIO, Ceph RGW,
//! or in memory for tests), behind a synchronous API for the engine's threads.
//!
//! | file         | holds                                                          |
//! |--------------|----------------------------------------------------------------|
//! | `config.rs`  | where the bucket is: URL, endpoint, region, credentials, timeouts |
//! | `client.rs`  | [`Bucket`]: put/get/delete over a private runtime, counters      |
//! | `list.rs`    | listing: under a prefix, after a key, the tenants               |
//! | `error.rs`   | unreachable store apart from damaged objects                    |
//! | `layout.rs`  | the key of every kind of object                                 |
//! | `index.rs`   | a tenant's index and the changes that make it (a pure fold)     |
//! | `log.rs`     | each tenant's log of changes and its checkpoints                |
//! | `lease.rs`   | leases that let one compactor at a time work on a partition     |
//! | `gc.rs`      | deletion of replaced and orphaned objects after a grace period  |
//!
//! Nothing here needs a consensus protocol of our own: every shared update is a
//! conditional write the store itself arbitrates (create-if-absent for a log
//! entry, replace-if-the-ETag-is-still-this for a lease), so two processes
//! racing for the same change see one succeed and the other retry against the
//! new state.

mod client;
mod config;
mod error;
mod gc;
mod index;
mod layout;
mod lease;
mod list;
mod log;

pub use client::{Bucket, BucketStats, ObjectInfo};
pub use config::{BucketConfig, DEFAULT_REQUEST_TIMEOUT};
pub use error::{BucketError, Unreachable};
pub use gc::GcReport;
pub use index::{Change, Outcome, Quarantined, Retired, SegmentEntry, TenantIndex};
pub use layout::{index_key, lease_key, segment_key, TENANTS};
pub use lease::Lease;
pub use log::{AppendHint, TenantView, LOG_GRACE};

impl Bucket {
    /// Adds a writer's uploads to `tenant`'s index (one log entry).
    pub fn add_segments(
        &self,
        tenant: &str,
        entries: Vec<SegmentEntry>,
        hint: &mut AppendHint,
    ) -> Result<u64, BucketError> {
        self.append_change(tenant, Change::Add { entries }, hint)
    }

    /// In one change: `sources` leave the live set for `retired`, `merged` join
    /// it. Fails with [`BucketError::SourcesGone`] when a source was no longer
    /// live at the change's place in the log (it then changed nothing).
    pub fn replace_segments(
        &self,
        view: &mut TenantView,
        sources: &[String],
        merged: Vec<SegmentEntry>,
        now_ms: i64,
    ) -> Result<(), BucketError> {
        let change = Change::Replace {
            sources: sources.to_vec(),
            merged,
            at_ms: now_ms,
        };
        match self.apply_change(view, change)? {
            Outcome::SourceGone(key) => Err(BucketError::SourcesGone { key }),
            Outcome::Changed(_) => Ok(()),
        }
    }

    /// Moves live `keys` to `retired` (retention); how many were live.
    pub fn retire_segments(
        &self,
        view: &mut TenantView,
        keys: &[String],
        now_ms: i64,
    ) -> Result<usize, BucketError> {
        let change = Change::Retire {
            keys: keys.to_vec(),
            at_ms: now_ms,
        };
        Ok(match self.apply_change(view, change)? {
            Outcome::Changed(n) => n,
            Outcome::SourceGone(_) => 0,
        })
    }

    /// Takes a live segment out of service as damaged or missing, with why.
    ///
    /// Returns whether this call moved it: when several nodes meet the same bad
    /// object at once, exactly one of them does (the first in the log), so
    /// counting only `true` reports each damaged object once across the cluster.
    pub fn quarantine_segment(
        &self,
        view: &mut TenantView,
        key: &str,
        reason: &str,
        now_ms: i64,
    ) -> Result<bool, BucketError> {
        let change = Change::Quarantine {
            key: key.to_string(),
            reason: reason.to_string(),
            at_ms: now_ms,
        };
        Ok(self.apply_change(view, change)? == Outcome::Changed(1))
    }
}
