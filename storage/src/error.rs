//! Errors of the storage engine.

use std::path::PathBuf;

pub type Result<T, E = StorageError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Bytes read from disk do not decode; the message says which structure and where.
    #[error("corrupt data: {0}")]
    Corrupt(String),
    #[error("checksum mismatch in {what}: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        what: String,
        stored: u32,
        computed: u32,
    },
    #[error("catalog error: {0}")]
    Catalog(String),
    /// The caller sent something the engine refuses (bad batch, bad matcher).
    #[error("invalid input: {0}")]
    Invalid(String),
    #[error("the data directory {0} is in use by another process (lock file held)")]
    Locked(PathBuf),
    /// The writer queue is full; the caller should retry later.
    #[error("write queue is full")]
    Busy,
    #[error("the store is shutting down")]
    Closed,
    #[error("query exceeds its limit: {0}")]
    QueryLimit(String),
}

impl StorageError {
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
            StorageError::Corrupt(_) | StorageError::Checksum { .. }
        )
    }
}

/// Attaches a path to I/O results.
pub trait IoContext<T> {
    fn at(self, path: impl Into<PathBuf>) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, path: impl Into<PathBuf>) -> Result<T> {
        self.map_err(|e| StorageError::io(path, e))
    }
}
