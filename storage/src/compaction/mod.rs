//! Compaction's policy: which segments a single node or a cluster's compactor merges
//! (`policy.rs`). The mechanism that re-encodes them is `crate::merger`.

mod policy;
#[cfg(test)]
mod tests;

pub(crate) use policy::{Decision, Policy, SegmentView, Skip};
