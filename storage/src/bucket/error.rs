//! Errors of the object store, one variant per way a caller reacts.

/// Why a bucket operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BucketError {
    /// The store did not answer, or answered with a server error, after retries:
    /// servers answer 503 and try again later.
    #[error("the object store is unreachable ({what}): {source}")]
    Unreachable {
        /// The operation and key.
        what: String,
        /// What the client said.
        #[source]
        source: object_store::Error,
    },
    /// The store refused our credentials or permissions.
    #[error("the object store refused access ({what}): {source}")]
    Denied {
        /// The operation and key.
        what: String,
        /// What the client said.
        #[source]
        source: object_store::Error,
    },
    /// No object at this key.
    #[error("no object {key} in the bucket")]
    NotFound {
        /// The key.
        key: String,
    },
    /// A segment to be replaced is no longer live in the index (another compactor
    /// merged it, or retention expired it): the replacement is abandoned.
    #[error("segment {key} is no longer live in the index")]
    SourcesGone {
        /// The first source found gone.
        key: String,
    },
    /// An object's bytes do not decode.
    #[error("object {key} is corrupt: {reason}")]
    Corrupt {
        /// The key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A compare-and-swap kept losing races.
    #[error("gave up updating {key} after {attempts} conflicting updates")]
    Contended {
        /// The object updated.
        key: String,
        /// Attempts made.
        attempts: u32,
    },
    /// The store lacks an operation profiledb needs (a local-file store has no
    /// conditional update, so it cannot hold the index).
    #[error("the object store does not support {what}; the cluster needs conditional writes (S3, MinIO, Ceph RGW, GCS, Azure): {source}")]
    Unsupported {
        /// The operation and key.
        what: String,
        /// What the client said.
        #[source]
        source: object_store::Error,
    },
    /// The bucket URL or options are unusable.
    #[error("invalid object store configuration: {0}")]
    Config(String),
}

impl BucketError {
    /// Classifies a client error for `what` on `key`.
    pub(super) fn from_store(what: &str, key: &str, e: object_store::Error) -> BucketError {
        use object_store::Error as E;
        match e {
            E::NotFound { .. } => BucketError::NotFound {
                key: key.to_string(),
            },
            E::PermissionDenied { .. } | E::Unauthenticated { .. } => BucketError::Denied {
                what: format!("{what} {key}"),
                source: e,
            },
            E::NotImplemented { .. } | E::NotSupported { .. } => BucketError::Unsupported {
                what: format!("{what} {key}"),
                source: e,
            },
            other => BucketError::Unreachable {
                what: format!("{what} {key}"),
                source: other,
            },
        }
    }
}
