//! The budgets every query runs under: wall-clock time, merged-tree nodes and
//! group-by rows. Exceeding one is a [`QueryError`], never a partial answer.

use std::time::{Duration, Instant};

use crate::error::{QueryError, Result};

/// Limits every query runs under.
#[derive(Clone, Debug)]
pub struct QueryLimits {
    /// Wall-clock budget of one query.
    pub timeout: Duration,
    /// Most nodes a merged call tree may have (memory budget of merges).
    pub max_tree_nodes: usize,
    /// Most distinct rows a group-by may hold (memory budget of group-bys).
    pub max_groups: usize,
}

impl Default for QueryLimits {
    fn default() -> Self {
        QueryLimits {
            timeout: Duration::from_secs(60),
            max_tree_nodes: 4_000_000,
            max_groups: 1_000_000,
        }
    }
}

/// When a query must give up; checked between sources and inside long loops.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadline(Instant);

impl Deadline {
    pub fn after(d: Duration) -> Self {
        Deadline(Instant::now() + d)
    }

    pub fn check(&self) -> Result<()> {
        if Instant::now() > self.0 {
            Err(QueryError::Timeout.into())
        } else {
            Ok(())
        }
    }
}
