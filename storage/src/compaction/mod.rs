//! Compaction: which segments a single node or a cluster's compactor merges (the
//! policy, `policy.rs`), apart from how they are re-encoded into one (the mechanism,
//! `merger.rs`), as tantivy keeps its merge policy beside its merger.

mod merger;
mod policy;
#[cfg(test)]
mod tests;

pub use merger::{Merger, OutputFrame};
pub(crate) use policy::{Decision, Policy, SegmentView, Skip};
