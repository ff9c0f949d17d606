//! Errors of the object store, one variant per way a caller reacts.
//!
//! Two families matter most, because callers do opposite things with them:
//! the store *unreachable* (connection refused, reset, timed out, a server
//! error: answer 503 and try again, nothing is wrong with the data) and an
//! object *damaged* (missing, shorter than the index says, failing its checks:
//! quarantine that object and serve the rest).

use object_store::client::{HttpError, HttpErrorKind};

/// How the store failed to answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unreachable {
    /// No connection could be made (refused, no route, name not resolved).
    Connect,
    /// The store took longer than the request timeout to answer.
    TimedOut,
    /// The connection broke mid-request (reset, closed early, garbled).
    Broken,
    /// The store answered with an error status after the retries (5xx, or a
    /// status the client has no better name for).
    ErrorStatus,
}

impl Unreachable {
    /// Every kind, in the order of [`super::BucketStats::unreachable`].
    pub const ALL: [Unreachable; 4] = [
        Unreachable::Connect,
        Unreachable::TimedOut,
        Unreachable::Broken,
        Unreachable::ErrorStatus,
    ];

    /// Its place in [`Unreachable::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Its name as a metric label.
    pub fn label(self) -> &'static str {
        match self {
            Unreachable::Connect => "connect",
            Unreachable::TimedOut => "timed_out",
            Unreachable::Broken => "broken",
            Unreachable::ErrorStatus => "error_status",
        }
    }
}

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Unreachable::Connect => "could not connect",
            Unreachable::TimedOut => "timed out",
            Unreachable::Broken => "connection broken mid-request",
            Unreachable::ErrorStatus => "error status",
        })
    }
}

/// Why a bucket operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BucketError {
    /// The store did not answer, or answered with a server error, after retries:
    /// servers answer 503 and try again later.
    #[error("the object store is unreachable ({what}: {why}): {source}")]
    Unreachable {
        /// The operation and key.
        what: String,
        /// How it failed.
        why: Unreachable,
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
    /// The object is shorter than the index says (truncated): a range past its
    /// end was asked for (HTTP 416), or fewer bytes came back.
    #[error("object {key} is {size} bytes, shorter than the {wanted} expected (truncated)")]
    Short {
        /// The key.
        key: String,
        /// Bytes the reader needed the object to have.
        wanted: u64,
        /// Bytes it has.
        size: u64,
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
    /// Appending to a tenant's log kept losing races.
    #[error("gave up updating {key} after {attempts} conflicting updates")]
    Contended {
        /// The object updated.
        key: String,
        /// Attempts made.
        attempts: u32,
    },
    /// The store lacks an operation profiledb needs (a local-file store has no
    /// conditional update, so it cannot hold leases).
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
                why: transport_failure(&other).unwrap_or(Unreachable::ErrorStatus),
                source: other,
            },
        }
    }

    /// The store was not reached, or did not answer in time: nothing is known
    /// about the object, and a retry later may succeed.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, BucketError::Unreachable { .. })
    }

    /// The object itself is bad (missing, truncated, undecodable): quarantine
    /// it and serve the rest.
    pub fn is_damage(&self) -> bool {
        matches!(
            self,
            BucketError::NotFound { .. } | BucketError::Short { .. } | BucketError::Corrupt { .. }
        )
    }
}

/// How a request failed on the way (no answer at all), if it did: the client's
/// transport error found in the error's chain. `None` for an answer the store
/// gave (an error status, or a response that did not fit the request).
pub(super) fn transport_failure(e: &object_store::Error) -> Option<Unreachable> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = current {
        if let Some(http) = err.downcast_ref::<HttpError>() {
            return Some(match http.kind() {
                HttpErrorKind::Connect => Unreachable::Connect,
                HttpErrorKind::Timeout => Unreachable::TimedOut,
                _ => Unreachable::Broken,
            });
        }
        current = err.source();
    }
    None
}
