//! Errors of the storage engine.
//!
//! As redb does, each public operation has its own error, holding what its caller
//! decides on: [`OpenError`] for [`Store::open`](crate::Store::open),
//! [`WriteError`] for a write, [`QueryError`] for a query (every public method of
//! [`Querier`](crate::Querier)), and
//! `ClusterError` (`cluster/error.rs`) for the cluster roles' passes.
//! [`StorageError`] is every failure of the engine: what the internals pass up,
//! and what the per-operation errors convert into (with `?`) for a caller that
//! does not tell them apart.

use std::path::PathBuf;

use crate::model::InvalidBatch;

/// A result whose error is a [`StorageError`] unless said otherwise.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// Every error of the storage engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// The filesystem failed at `path`.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// Bytes read from disk do not decode; the message says which structure and where.
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// A segment written by a newer release, in a format version this build does
    /// not read. Not damage: the file is left in place (neither quarantined nor
    /// served), and a store holding one refuses to open.
    #[error("{what} has segment format version {version}, newer than this build reads ({oldest} to {newest}): run a newer profiledb")]
    UnsupportedVersion {
        /// Which file or object.
        what: String,
        /// The version in its trailer.
        version: u16,
        /// The oldest version this build reads.
        oldest: u16,
        /// The newest version this build reads.
        newest: u16,
    },
    /// A checksummed section does not match its checksum.
    #[error("checksum mismatch in {what}: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        /// Which structure.
        what: String,
        /// The checksum on disk.
        stored: u32,
        /// The checksum of the bytes read.
        computed: u32,
    },
    /// A segment was written on a symbol base (`segment/base.rs`) whose file is
    /// gone: the segment cannot be decoded, so it counts as damaged.
    #[error("{segment} was written on the symbol base {base}, which is missing")]
    MissingBase {
        /// The segment file.
        segment: PathBuf,
        /// Where its base should be.
        base: PathBuf,
    },
    /// The sled catalog failed.
    #[error("catalog error: {0}")]
    Catalog(String),
    /// The caller sent something the engine refuses (bad batch, bad matcher).
    #[error("invalid input: {0}")]
    Invalid(String),
    /// The store's configuration is refused.
    #[error(transparent)]
    Config(#[from] InvalidConfig),
    /// A test's fault point made the operation fail (`cluster/fault.rs`).
    #[error("fault injected at {point}")]
    Fault {
        /// The fault point's name.
        point: &'static str,
    },
    /// Another process holds the data directory.
    #[error("the data directory {0} is in use by another process (lock file held)")]
    Locked(PathBuf),
    /// The writer queue is full; the caller should retry later.
    #[error("write queue is full")]
    Busy,
    /// The store is closed or closing.
    #[error("the store is shutting down")]
    Closed,
    /// The object store failed (cluster roles).
    #[error(transparent)]
    Bucket(#[from] crate::bucket::BucketError),
    /// A query ran past its wall-clock budget ([`QueryError::Timeout`]).
    #[error("{}", QueryError::Timeout)]
    Timeout,
    /// A query's result would exceed a memory budget ([`QueryError::TooLarge`]).
    #[error("{}", too_large_message(*budget, *limit))]
    TooLarge {
        /// Which budget.
        budget: Budget,
        /// The budget's size (nodes or rows).
        limit: usize,
    },
}

/// Why [`Store::open`](crate::Store::open) failed. The caller decides on the
/// directory being another process's and on a refused configuration; the rest
/// (I/O, a catalog that does not open, a segment in a newer format) is
/// [`OpenError::Storage`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// Another process holds the data directory.
    #[error("the data directory {0} is in use by another process (lock file held)")]
    Locked(PathBuf),
    /// The configuration is refused.
    #[error(transparent)]
    Config(#[from] InvalidConfig),
    /// The store could not be read or started.
    #[error(transparent)]
    Storage(StorageError),
}

/// A selector or matcher that does not parse (a query's input: HTTP 400); the
/// message says what and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidSelector(pub String);

impl From<InvalidSelector> for StorageError {
    fn from(e: InvalidSelector) -> Self {
        StorageError::Invalid(e.0)
    }
}

/// A store configuration the engine cannot run with; the message says what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid input: store config: {0}")]
pub struct InvalidConfig(pub String);

/// Why a write was not stored. Callers map these, not messages: a refused batch
/// is the sender's fault (HTTP 400), a full queue is "retry later" (429), a
/// closing store is "unavailable" (503), the rest is the server's (500).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// The batch breaks the batch rules; nothing of it was stored.
    #[error("invalid input: {0}")]
    Invalid(#[from] InvalidBatch),
    /// The writer queue is full ([`Store::try_write`](crate::Store::try_write)).
    #[error("write queue is full")]
    Busy,
    /// The store is closed or closing.
    #[error("the store is shutting down")]
    Closed,
    /// The WAL or the head failed.
    #[error(transparent)]
    Storage(StorageError),
}

impl From<StorageError> for OpenError {
    fn from(e: StorageError) -> Self {
        match e {
            StorageError::Locked(dir) => OpenError::Locked(dir),
            StorageError::Config(c) => OpenError::Config(c),
            e => OpenError::Storage(e),
        }
    }
}

impl From<OpenError> for StorageError {
    fn from(e: OpenError) -> Self {
        match e {
            OpenError::Locked(dir) => StorageError::Locked(dir),
            OpenError::Config(c) => StorageError::Config(c),
            OpenError::Storage(e) => e,
        }
    }
}

impl From<StorageError> for WriteError {
    fn from(e: StorageError) -> Self {
        match e {
            StorageError::Busy => WriteError::Busy,
            StorageError::Closed => WriteError::Closed,
            e => WriteError::Storage(e),
        }
    }
}

impl From<WriteError> for StorageError {
    fn from(e: WriteError) -> Self {
        match e {
            WriteError::Invalid(b) => StorageError::Invalid(b.0),
            WriteError::Busy => StorageError::Busy,
            WriteError::Closed => StorageError::Closed,
            WriteError::Storage(e) => e,
        }
    }
}

/// Why a query ([`Querier`](crate::Querier)'s public methods) gave no answer.
/// Callers map these, not messages: [`QueryError::Timeout`] is "try later or
/// narrow it" (HTTP 503), [`QueryError::TooLarge`] is "this query can never fit"
/// (422), [`QueryError::Invalid`] is the caller's input (400),
/// [`QueryError::Unavailable`] is "the object store does not answer, retry" (503);
/// the rest, [`QueryError::Storage`], is the server's (500).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueryError {
    /// The query ran past its wall-clock budget.
    #[error("query timed out: narrow the time range or the selector")]
    Timeout,
    /// The query's result would exceed a memory budget.
    #[error("{}", too_large_message(*budget, *limit))]
    TooLarge {
        /// Which budget.
        budget: Budget,
        /// The budget's size (nodes or rows).
        limit: usize,
    },
    /// The query's input is refused: a partial answer of another querier that
    /// does not hold together (`NamedTree::check`); the message says what.
    #[error("invalid input: {0}")]
    Invalid(String),
    /// The object store a segment is fetched from does not answer
    /// ([`BucketError::is_unreachable`](crate::bucket::BucketError::is_unreachable)).
    #[error(transparent)]
    Unavailable(crate::bucket::BucketError),
    /// Reading the data failed: damage on disk
    /// ([`StorageError::is_corruption`]), I/O, a closing store.
    #[error(transparent)]
    Storage(StorageError),
}

impl From<StorageError> for QueryError {
    fn from(e: StorageError) -> Self {
        match e {
            StorageError::Timeout => QueryError::Timeout,
            StorageError::TooLarge { budget, limit } => QueryError::TooLarge { budget, limit },
            StorageError::Invalid(m) => QueryError::Invalid(m),
            StorageError::Bucket(b) if b.is_unreachable() => QueryError::Unavailable(b),
            e => QueryError::Storage(e),
        }
    }
}

impl From<QueryError> for StorageError {
    fn from(e: QueryError) -> Self {
        match e {
            QueryError::Timeout => StorageError::Timeout,
            QueryError::TooLarge { budget, limit } => StorageError::TooLarge { budget, limit },
            QueryError::Invalid(m) => StorageError::Invalid(m),
            QueryError::Unavailable(b) => StorageError::Bucket(b),
            QueryError::Storage(e) => e,
        }
    }
}

/// A memory budget of a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// Nodes of a merged call tree.
    TreeNodes,
    /// Rows of a group-by.
    Groups,
}

fn too_large_message(budget: Budget, limit: usize) -> String {
    match budget {
        Budget::TreeNodes => format!(
            "the merged profile exceeds {limit} nodes (the query memory budget); narrow the selector or time range"
        ),
        Budget::Groups => format!(
            "the group-by produces more than {limit} groups; add filters or fewer keys"
        ),
    }
}

impl QueryError {
    /// A merged call tree over `limit` nodes.
    pub(crate) fn tree_too_large(limit: usize) -> Self {
        QueryError::TooLarge {
            budget: Budget::TreeNodes,
            limit,
        }
    }

    /// A group-by over `limit` rows.
    pub(crate) fn too_many_groups(limit: usize) -> Self {
        QueryError::TooLarge {
            budget: Budget::Groups,
            limit,
        }
    }
}

impl StorageError {
    /// An I/O error at `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StorageError::Io {
            path: path.into(),
            source,
        }
    }

    /// True when the error means bytes on disk are damaged (as opposed to the disk
    /// failing or the caller misbehaving).
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            StorageError::Corrupt(_)
                | StorageError::Checksum { .. }
                | StorageError::MissingBase { .. }
        )
    }
}

/// Attaches a path to I/O results.
pub trait IoContext<T> {
    /// The error, if any, with `path` attached.
    fn at(self, path: impl Into<PathBuf>) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, path: impl Into<PathBuf>) -> Result<T> {
        self.map_err(|e| StorageError::io(path, e))
    }
}
