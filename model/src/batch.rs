//! Write batches: what one request carries for one tenant.
//!
//! A batch mirrors the shape of a pprof profile on purpose: it carries its own small
//! symbol tables (mappings, functions, locations) and stacks refer to locations by
//! index. Decoders can then hand over a profile without materialising one string per
//! frame per sample, and the head remaps each symbol once per batch.

use serde::{Deserialize, Serialize};

use crate::labels::{Labels, PROFILE_TYPE_LABEL};
use crate::symbols::{Stacks, Symbols};
use crate::tenant::TenantId;

/// Why a batch is refused: an index that points nowhere, or a series without its
/// profile type. The message says which; the caller answers "bad input".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidBatch(pub String);

/// One observation: at `timestamp_ms` the stack was seen with `value`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// Milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    /// Index into [`Batch::stacks`].
    pub stack: u32,
    /// What the sample measured, in the unit of its profile type.
    pub value: i64,
}

/// Samples of one series (profile type + labels).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeriesSamples {
    /// Must contain [`PROFILE_TYPE_LABEL`].
    pub labels: Labels,
    /// The series' observations.
    pub samples: Vec<Sample>,
}

/// A unit of writing: everything one request carries for one tenant.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    /// Whose data this is.
    pub tenant: TenantId,
    /// Symbol tables the stacks refer to.
    pub symbols: Symbols,
    /// Stacks the samples refer to.
    pub stacks: Stacks,
    /// Samples, per series.
    pub series: Vec<SeriesSamples>,
}

impl Batch {
    /// An empty batch of `tenant`.
    pub fn new(tenant: TenantId) -> Self {
        Batch {
            tenant,
            ..Default::default()
        }
    }

    /// Number of samples across all series.
    pub fn sample_count(&self) -> usize {
        self.series.iter().map(|s| s.samples.len()).sum()
    }

    /// The frames of stack `stack`, root first, as a flame graph labels them: the
    /// function's name, or the address (`0x…`) of an unsymbolized frame. `None` when
    /// the stack or one of its references is out of range.
    pub fn frame_names(&self, stack: u32) -> Option<Vec<String>> {
        let syms = &self.symbols;
        self.stacks
            .get(stack)?
            .iter()
            .map(|&l| {
                let loc = syms.locations.get(l as usize)?;
                Some(match loc.function {
                    Some(f) => syms.functions.get(f as usize)?.name.to_string(),
                    None => format!("{:#x}", loc.address),
                })
            })
            .collect()
    }

    /// Checks every index and label rule, so the head never sees a dangling reference.
    pub fn validate(&self) -> Result<(), InvalidBatch> {
        let syms = &self.symbols;
        for (i, loc) in syms.locations.iter().enumerate() {
            if let Some(f) = loc.function {
                if f as usize >= syms.functions.len() {
                    return Err(InvalidBatch(format!(
                        "location {i} refers to missing function {f}"
                    )));
                }
            }
            if let Some(m) = loc.mapping {
                if m as usize >= syms.mappings.len() {
                    return Err(InvalidBatch(format!(
                        "location {i} refers to missing mapping {m}"
                    )));
                }
            }
        }
        self.stacks.validate(syms.locations.len() as u32)?;
        let nstacks = self.stacks.len() as u32;
        for s in &self.series {
            if s.labels.profile_type().is_none() {
                return Err(InvalidBatch(format!(
                    "series {} has no {PROFILE_TYPE_LABEL} label",
                    s.labels
                )));
            }
            if let Some(bad) = s.samples.iter().find(|x| x.stack >= nstacks) {
                return Err(InvalidBatch(format!(
                    "a sample refers to missing stack {}",
                    bad.stack
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols::Location;

    #[test]
    fn frame_names_are_functions_or_addresses_root_first() {
        let mut b = Batch::new(TenantId::default());
        b.symbols.functions.push(crate::symbols::Function {
            name: "main".into(),
            file: Default::default(),
        });
        b.symbols.locations.push(Location {
            function: Some(0),
            ..Default::default()
        });
        b.symbols.locations.push(Location {
            address: 0x4010,
            ..Default::default()
        });
        let st = b.stacks.push(&[0, 1]);
        assert_eq!(b.frame_names(st).unwrap(), ["main", "0x4010"]);
        assert_eq!(b.frame_names(st + 1), None);
        let dangling = b.stacks.push(&[2]);
        assert_eq!(b.frame_names(dangling), None);
        b.symbols.locations[0].function = Some(9);
        assert_eq!(b.frame_names(st), None);
    }

    #[test]
    fn validate_catches_dangling_indices() {
        let mut b = Batch::new(TenantId::default());
        b.symbols.locations.push(Location {
            function: Some(3),
            ..Default::default()
        });
        assert!(b.validate().unwrap_err().0.contains("missing function"));
        b.symbols.locations[0].function = None;
        let st = b.stacks.push(&[0]);
        b.series.push(SeriesSamples {
            labels: Labels::new([("service_name", "x")]),
            samples: vec![Sample {
                timestamp_ms: 0,
                stack: st,
                value: 1,
            }],
        });
        assert!(b.validate().unwrap_err().0.contains(PROFILE_TYPE_LABEL));
        b.series[0].labels.set(PROFILE_TYPE_LABEL, "a:b:c:d:e");
        b.series[0].samples[0].stack = 9;
        assert!(b.validate().unwrap_err().0.contains("missing stack"));
        b.series[0].samples[0].stack = 0;
        assert_eq!(b.validate(), Ok(()));
    }
}
