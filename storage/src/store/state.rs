//! What the write path and the read path share: the head partitions (open and
//! being flushed) and the live segment set, under one lock.
//!
//! Every other piece of state belongs to one role (see `mod.rs`). A partition moves
//! from `head` to `flushing` when the writer seals it and from `flushing` to a
//! segment in `segments` when the flusher has made it durable, each move under the
//! write lock, so a snapshot sees every sample exactly once.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::head::{HeadPartition, SizeHint};
use crate::model::TenantId;
use crate::segment::{SegmentFile, SegmentMeta};

/// A head partition shared between the writer (applies), the flusher (encodes)
/// and queries (scan).
pub(crate) type PartitionRef = Arc<RwLock<HeadPartition>>;

/// A segment known to the store.
#[derive(Debug)]
pub(crate) struct SegmentHandle {
    /// The segment's metadata, as in the catalog.
    pub meta: SegmentMeta,
    pub(crate) file: SegmentFile,
}

/// The head and the live segment set.
#[derive(Default)]
pub(crate) struct State {
    pub head: BTreeMap<(TenantId, i64), PartitionRef>,
    /// Sealed partitions being written; still visible to queries.
    pub flushing: Vec<PartitionRef>,
    pub segments: BTreeMap<u64, Arc<SegmentHandle>>,
}

impl State {
    /// Open and flushing head partitions.
    pub fn partitions(&self) -> impl Iterator<Item = &PartitionRef> {
        self.head.values().chain(self.flushing.iter())
    }

    /// What a new partition of `tenant` starting at `start_ms` makes room for:
    /// the sizes of the tenant's newest partition in the head (open or being
    /// flushed, which includes one of the same hour sealed early for the memory
    /// budget). None for a partition older than one open already: late samples
    /// rarely fill an hour, so they start empty.
    pub fn size_hint(&self, tenant: &TenantId, start_ms: i64) -> SizeHint {
        let mut newest: Option<(i64, usize, SizeHint)> = None;
        for p in self.partitions() {
            let p = p.read();
            if &p.tenant != tenant {
                continue;
            }
            if p.start_ms > start_ms {
                return SizeHint::default();
            }
            let key = (p.start_ms, p.rows());
            if newest.is_none_or(|(s, r, _)| key > (s, r)) {
                newest = Some((key.0, key.1, p.size_hint()));
            }
        }
        newest.map_or_else(SizeHint::default, |(_, _, h)| h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Batch, Function, Labels, Location, Sample, SeriesSamples};

    const HOUR: i64 = 3_600_000;

    /// A partition of `tenant` at `start_ms` holding `stacks` one-frame stacks.
    fn partition(tenant: &str, start_ms: i64, stacks: u32) -> PartitionRef {
        let tenant = TenantId::new(tenant).unwrap();
        let mut b = Batch::new(tenant.clone());
        let mut samples = Vec::new();
        for i in 0..stacks {
            b.symbols.functions.push(Function {
                name: format!("f{i}").into(),
                file: "x.go".into(),
            });
            b.symbols.locations.push(Location {
                function: Some(i),
                mapping: None,
                address: 0,
                line: 1,
            });
            samples.push(Sample {
                timestamp_ms: start_ms,
                stack: b.stacks.push(&[i]),
                value: 1,
            });
        }
        b.series.push(SeriesSamples {
            labels: Labels::new([
                ("__profile_type__", "cpu:samples:count:cpu:nanoseconds"),
                ("service", "api"),
            ]),
            samples,
        });
        b.validate().unwrap();
        let mut p = HeadPartition::new(tenant, start_ms, HOUR, 10_000);
        p.apply(1, &b, None);
        Arc::new(RwLock::new(p))
    }

    fn key(tenant: &str, start_ms: i64) -> (TenantId, i64) {
        (TenantId::new(tenant).unwrap(), start_ms)
    }

    #[test]
    fn a_new_hour_makes_room_for_the_tenants_newest_partition() {
        let mut st = State::default();
        st.head.insert(key("a", 0), partition("a", 0, 3));
        st.head.insert(key("a", HOUR), partition("a", HOUR, 7));
        st.head
            .insert(key("b", 2 * HOUR), partition("b", 2 * HOUR, 20));
        let hint = st.size_hint(&TenantId::new("a").unwrap(), 2 * HOUR);
        assert_eq!(hint.dict.nodes, 7);
        assert_eq!(hint.dict.stacks, 7);
        assert_eq!(hint.dict.functions, 7);
        assert_eq!((hint.series, hint.rows), (1, 7));
    }

    #[test]
    fn an_hour_sealed_early_gives_its_sizes_to_its_own_successor() {
        let mut st = State::default();
        st.head.insert(key("a", 0), partition("a", 0, 3));
        st.flushing.push(partition("a", HOUR, 9));
        let hint = st.size_hint(&TenantId::new("a").unwrap(), HOUR);
        assert_eq!((hint.dict.nodes, hint.rows), (9, 9));
    }

    #[test]
    fn late_samples_and_a_tenants_first_hour_start_empty() {
        let mut st = State::default();
        st.head.insert(key("a", HOUR), partition("a", HOUR, 5));
        let a = TenantId::new("a").unwrap();
        assert_eq!(st.size_hint(&a, 0), SizeHint::default());
        assert_eq!(
            st.size_hint(&TenantId::new("new").unwrap(), HOUR),
            SizeHint::default()
        );
    }
}
