//! The object store where a cluster's durable state lives (S3, MinIO, Ceph RGW, or
//! in memory for tests), behind a synchronous API for the engine's threads.
//!
//! | file         | holds                                                          |
//! |--------------|----------------------------------------------------------------|
//! | `config.rs`  | where the bucket is: URL, endpoint, region, credentials         |
//! | `client.rs`  | [`Bucket`]: put/get/list/delete over a private runtime, counters |
//! | `layout.rs`  | the key of every kind of object                                 |
//! | `index.rs`   | each tenant's segment index, updated by compare-and-swap        |
//! | `lease.rs`   | leases that let one compactor at a time work on a partition     |
//! | `gc.rs`      | deletion of replaced and orphaned objects after a grace period  |
//!
//! Nothing here needs a consensus protocol of our own: every shared update is a
//! conditional write the store itself arbitrates (create-if-absent, or replace-if-
//! the-ETag-is-still-this), so two processes racing for the same change see one
//! succeed and the other retry against the new state.

mod client;
mod config;
mod error;
mod gc;
mod index;
mod layout;
mod lease;

pub use client::{Bucket, BucketStats, ObjectInfo};
pub use config::BucketConfig;
pub use error::BucketError;
pub use gc::GcReport;
pub use index::{IndexView, Quarantined, Retired, SegmentEntry, TenantIndex};
pub use layout::{index_key, lease_key, segment_key, TENANTS};
pub use lease::Lease;
