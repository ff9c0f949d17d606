//! [`BatchBuilder`]: one batch filled by several profiles, so a request carrying
//! many (a Push with many series) becomes one [`Batch`].
//!
//! Each profile is decoded straight into the request's batch, its indices placed
//! after what earlier profiles put there. Decoding each into a batch of its own and
//! appending that copied every name, location and stack a second time and grew the
//! request's vectors again (docs/perf-log/2026-11-27-round-21-id-wal-records.md).

use std::collections::HashMap;

use profiledb_model::{Batch, Labels, Sample, SeriesSamples, TenantId};

/// A batch being filled, with its series found by labels.
#[derive(Debug, Default)]
pub struct BatchBuilder {
    batch: Batch,
    /// Position in `batch.series` of each labels.
    series: HashMap<Labels, usize>,
}

impl BatchBuilder {
    /// An empty batch of `tenant`.
    pub fn new(tenant: TenantId) -> Self {
        BatchBuilder {
            batch: Batch::new(tenant),
            series: HashMap::new(),
        }
    }

    /// The batch, for a decoder to append symbols and stacks to. Series go through
    /// [`BatchBuilder::add_series`].
    pub(crate) fn batch_mut(&mut self) -> &mut Batch {
        &mut self.batch
    }

    /// Adds `samples` to the series of `labels`: one series per distinct labels.
    pub(crate) fn add_series(&mut self, labels: Labels, samples: Vec<Sample>) {
        match self.series.get(&labels) {
            Some(&i) => {
                if let Some(s) = self.batch.series.get_mut(i) {
                    s.samples.extend(samples);
                }
            }
            None => {
                self.series.insert(labels.clone(), self.batch.series.len());
                self.batch.series.push(SeriesSamples { labels, samples });
            }
        }
    }

    /// The batch.
    pub fn finish(self) -> Batch {
        self.batch
    }
}
