//! How a role's loop stands with the bucket: whether its last pass succeeded,
//! whether the store answered, when a pass last succeeded and why the last one
//! failed. Every role keeps one; `/ready`, `/metrics` and the 503s read it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::{Result, StorageError};

/// What a pass's outcome changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Turn {
    /// It succeeded after one or more failed.
    Recovered,
    /// It failed after one or more succeeded.
    Failed,
    /// As before.
    Same,
}

/// A role's standing with the bucket.
#[derive(Debug)]
pub struct Health {
    ok: AtomicBool,
    reachable: AtomicBool,
    last_ok: Mutex<Option<Instant>>,
    last_error: Mutex<Option<String>>,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            ok: AtomicBool::new(true),
            reachable: AtomicBool::new(true),
            last_ok: Mutex::new(None),
            last_error: Mutex::new(None),
        }
    }
}

impl Health {
    /// Notes a pass's outcome.
    pub(super) fn record(&self, outcome: &Result<()>) -> Turn {
        match outcome {
            Ok(()) => {
                *self.last_ok.lock() = Some(Instant::now());
                *self.last_error.lock() = None;
                self.reachable.store(true, Ordering::Relaxed);
                if self.ok.swap(true, Ordering::Relaxed) {
                    Turn::Same
                } else {
                    Turn::Recovered
                }
            }
            Err(e) => {
                *self.last_error.lock() = Some(e.to_string());
                let unreachable = matches!(e, StorageError::Bucket(b) if b.is_unreachable());
                self.reachable.store(!unreachable, Ordering::Relaxed);
                if self.ok.swap(false, Ordering::Relaxed) {
                    Turn::Failed
                } else {
                    Turn::Same
                }
            }
        }
    }

    /// The last pass succeeded (or none ran yet).
    pub fn healthy(&self) -> bool {
        self.ok.load(Ordering::Relaxed)
    }

    /// The store answered the last pass (it may have failed for another
    /// reason, e.g. a full disk).
    pub fn reachable(&self) -> bool {
        self.reachable.load(Ordering::Relaxed)
    }

    /// How long ago a pass last succeeded (`None`: none yet).
    pub fn since_success(&self) -> Option<Duration> {
        self.last_ok.lock().map(|t| t.elapsed())
    }

    /// Why the last pass failed, if it did.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().clone()
    }
}
