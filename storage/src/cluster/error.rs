//! The error of the cluster roles' public operations: starting a role and running
//! one pass of it (an upload, a sync).

use crate::bucket::BucketError;
use crate::error::StorageError;

/// Why a role did not start or a pass failed. Callers decide on the bucket's
/// failures (an unreachable store is retried, [`BucketError::is_unreachable`])
/// and on a test's injected fault; the rest is [`ClusterError::Storage`]. A pass
/// that failed is retried by the role's loop either way.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// The object store failed.
    #[error(transparent)]
    Bucket(BucketError),
    /// A fault point armed to fail the pass was reached (`FaultAction::Fail`).
    #[error("fault injected at {point}")]
    Fault {
        /// The point's name ([`FaultPoint::name`](super::FaultPoint::name)).
        point: &'static str,
    },
    /// The local store failed.
    #[error(transparent)]
    Storage(StorageError),
}

/// A `PROFILEDB_FAULT` spec that names no fault point or no count; the message
/// lists the points.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidFault(pub String);

impl From<StorageError> for ClusterError {
    fn from(e: StorageError) -> Self {
        match e {
            StorageError::Bucket(b) => ClusterError::Bucket(b),
            StorageError::Fault { point } => ClusterError::Fault { point },
            e => ClusterError::Storage(e),
        }
    }
}

impl From<ClusterError> for StorageError {
    fn from(e: ClusterError) -> Self {
        match e {
            ClusterError::Bucket(b) => StorageError::Bucket(b),
            ClusterError::Fault { point } => StorageError::Fault { point },
            ClusterError::Storage(e) => e,
        }
    }
}
