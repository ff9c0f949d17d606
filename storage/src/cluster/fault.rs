//! Fault points: the steps of a writer's upload and a compactor's merge at which
//! a test makes the process die, to check that a crash at any of them loses and
//! doubles nothing.
//!
//! The server arms one from `PROFILEDB_FAULT=<point>[:<n>]` (the `n`-th time the
//! point is reached, 1 by default); the process then aborts there, as `kill -9`
//! would stop it. In-process tests arm one that makes the pass fail there
//! instead, leaving the rest of the pass undone.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::error::InvalidFault;
use crate::error::{Result, StorageError};

/// A step of a role after which a crash is tested.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultPoint {
    /// Writer: segments uploaded, not yet in the index.
    WriterAfterUpload,
    /// Writer: in the index, writes not yet acknowledged.
    WriterAfterIndex,
    /// Writer: writes acknowledged (their answers sent), local copies not yet
    /// dropped.
    WriterAfterAck,
    /// Writer: local copies dropped.
    WriterAfterForget,
    /// Compactor: merged segment uploaded, not yet swapped in.
    CompactorAfterUpload,
    /// Compactor: merge swapped into the index.
    CompactorAfterSwap,
    /// Compactor: replaced objects deleted, the index not yet told.
    CompactorAfterGcDelete,
    /// Compactor: checkpoint written, covered log entries not yet pruned.
    CompactorAfterCheckpoint,
}

impl FaultPoint {
    /// Every point, in the order a writer and then a compactor reach them.
    pub const ALL: [FaultPoint; 8] = [
        FaultPoint::WriterAfterUpload,
        FaultPoint::WriterAfterIndex,
        FaultPoint::WriterAfterAck,
        FaultPoint::WriterAfterForget,
        FaultPoint::CompactorAfterUpload,
        FaultPoint::CompactorAfterSwap,
        FaultPoint::CompactorAfterGcDelete,
        FaultPoint::CompactorAfterCheckpoint,
    ];

    /// Its name in `PROFILEDB_FAULT`.
    pub fn name(self) -> &'static str {
        match self {
            FaultPoint::WriterAfterUpload => "writer-after-upload",
            FaultPoint::WriterAfterIndex => "writer-after-index",
            FaultPoint::WriterAfterAck => "writer-after-ack",
            FaultPoint::WriterAfterForget => "writer-after-forget",
            FaultPoint::CompactorAfterUpload => "compactor-after-upload",
            FaultPoint::CompactorAfterSwap => "compactor-after-swap",
            FaultPoint::CompactorAfterGcDelete => "compactor-after-gc-delete",
            FaultPoint::CompactorAfterCheckpoint => "compactor-after-checkpoint",
        }
    }
}

/// What happens at an armed point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultAction {
    /// The process aborts (a crash: no destructor, no flush).
    Abort,
    /// The pass fails there (in-process tests).
    Fail,
}

/// One armed fault point; cheap to clone (clones share the count).
#[derive(Clone, Debug)]
pub struct Fault {
    point: FaultPoint,
    action: FaultAction,
    /// Hits left before it fires.
    left: Arc<AtomicU32>,
}

impl Fault {
    /// Fires at the `nth` time `point` is reached (1: the first).
    pub fn new(point: FaultPoint, nth: u32, action: FaultAction) -> Fault {
        Fault {
            point,
            action,
            left: Arc::new(AtomicU32::new(nth.max(1))),
        }
    }

    /// `<point>[:<n>]`, as `PROFILEDB_FAULT` holds it; the process aborts there.
    pub fn parse(spec: &str) -> std::result::Result<Fault, InvalidFault> {
        let (name, nth) = spec.split_once(':').unwrap_or((spec, "1"));
        let point = FaultPoint::ALL
            .into_iter()
            .find(|p| p.name() == name.trim())
            .ok_or_else(|| {
                let names: Vec<&str> = FaultPoint::ALL.iter().map(|p| p.name()).collect();
                InvalidFault(format!(
                    "unknown fault point {name:?}: one of {}",
                    names.join(", ")
                ))
            })?;
        let nth = nth
            .trim()
            .parse()
            .map_err(|_| InvalidFault(format!("bad count in fault {spec:?}: <point>[:<n>]")))?;
        Ok(Fault::new(point, nth, FaultAction::Abort))
    }

    /// The point it is armed at.
    pub fn point(&self) -> FaultPoint {
        self.point
    }
}

/// Reached `point`: fires `fault` if it is armed there and due.
pub(super) fn reached(fault: &Option<Fault>, point: FaultPoint) -> Result<()> {
    let Some(f) = fault else { return Ok(()) };
    if f.point != point {
        return Ok(());
    }
    let due = f
        .left
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        == Ok(1);
    if !due {
        return Ok(());
    }
    match f.action {
        FaultAction::Abort => {
            tracing::warn!(point = point.name(), "fault injected: aborting");
            if point == FaultPoint::WriterAfterAck {
                // The acknowledged writes' answers are on their way on other
                // threads: let them reach their clients, as a crash right
                // after the answers would.
                std::thread::sleep(Duration::from_millis(300));
            }
            std::process::abort()
        }
        FaultAction::Fail => Err(StorageError::Fault {
            point: point.name(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_name_a_point_and_a_count() {
        let f = Fault::parse("writer-after-ack:3").unwrap();
        assert_eq!(f.point(), FaultPoint::WriterAfterAck);
        assert!(Fault::parse("writer-after-lunch").is_err());
        let f = Some(Fault::new(
            FaultPoint::WriterAfterIndex,
            2,
            FaultAction::Fail,
        ));
        assert!(reached(&f, FaultPoint::WriterAfterUpload).is_ok());
        assert!(reached(&f, FaultPoint::WriterAfterIndex).is_ok());
        assert!(reached(&f, FaultPoint::WriterAfterIndex).is_err());
        // Fired once: later passes go through.
        assert!(reached(&f, FaultPoint::WriterAfterIndex).is_ok());
    }
}
