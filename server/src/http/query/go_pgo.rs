//! `stack_trace_selector.go_pgo` of SelectMergeProfile: a profile shaped for Go's
//! profile-guided optimisation, as Pyroscope defines it.
//!
//! - `keep_locations = N > 0`: every stack keeps only its N leaf-most locations;
//!   samples whose kept locations are equal become one, their values summed.
//! - `aggregate_callees`: the leaf location's line number is ignored, so samples
//!   differing only in the line inside the callee merge. Merged profiles here are
//!   built from function names without line numbers, so this always holds; the
//!   flag is honoured by construction.
//!
//! Samples with an empty stack are dropped, and locations and functions no longer
//! referenced are removed, as Pyroscope's merge does.

use std::collections::{HashMap, HashSet};

use super::proto::pprof::{Profile, Sample};
use super::proto::types::v1 as t;

/// Applies `pgo` to a merged profile with one value per sample.
pub fn apply(mut p: Profile, pgo: &t::GoPgo) -> Profile {
    let keep = usize::try_from(pgo.keep_locations).unwrap_or(usize::MAX);
    let mut merged: Vec<Sample> = Vec::new();
    let mut index: HashMap<Vec<u64>, usize> = HashMap::new();
    for mut s in std::mem::take(&mut p.sample) {
        if s.location_id.is_empty() {
            continue;
        }
        if keep > 0 {
            s.location_id.truncate(keep);
        }
        if pgo.aggregate_callees {
            clear_leaf_line(&mut p, s.location_id[0]);
        }
        match index.get(&s.location_id) {
            Some(&i) => {
                for (dst, v) in merged[i].value.iter_mut().zip(&s.value) {
                    *dst = dst.saturating_add(*v);
                }
            }
            None => {
                index.insert(s.location_id.clone(), merged.len());
                merged.push(s);
            }
        }
    }
    p.sample = merged;
    let used: HashSet<u64> = p
        .sample
        .iter()
        .flat_map(|s| s.location_id.iter().copied())
        .collect();
    p.location.retain(|l| used.contains(&l.id));
    let functions: HashSet<u64> = p
        .location
        .iter()
        .flat_map(|l| l.line.iter().map(|line| line.function_id))
        .collect();
    p.function.retain(|f| functions.contains(&f.id));
    p
}

fn clear_leaf_line(p: &mut Profile, location_id: u64) {
    if let Some(line) = p
        .location
        .iter_mut()
        .find(|l| l.id == location_id)
        .and_then(|l| l.line.first_mut())
    {
        line.line = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::query::proto::pprof::{Function, Line, Location};

    /// Functions 1..=4 at locations 1..=4 (location n has line 10·n); samples are
    /// leaf-first location lists with one value.
    fn profile(samples: &[(&[u64], i64)]) -> Profile {
        Profile {
            function: (1..=4)
                .map(|id| Function {
                    id,
                    name: id as i64,
                    ..Default::default()
                })
                .collect(),
            location: (1..=4)
                .map(|id| Location {
                    id,
                    line: vec![Line {
                        function_id: id,
                        line: 10 * id as i64,
                        column: 0,
                    }],
                    ..Default::default()
                })
                .collect(),
            sample: samples
                .iter()
                .map(|(locs, v)| Sample {
                    location_id: locs.to_vec(),
                    value: vec![*v],
                    label: vec![],
                })
                .collect(),
            ..Default::default()
        }
    }

    fn samples(p: &Profile) -> Vec<(Vec<u64>, i64)> {
        p.sample
            .iter()
            .map(|s| (s.location_id.clone(), s.value[0]))
            .collect()
    }

    #[test]
    fn keeps_the_leaf_most_locations_and_sums_equal_stacks() {
        let p = profile(&[(&[1, 2, 3], 5), (&[1, 2, 4], 7), (&[2, 3], 1), (&[], 9)]);
        let pgo = t::GoPgo {
            keep_locations: 2,
            aggregate_callees: false,
        };
        let out = apply(p, &pgo);
        assert_eq!(samples(&out), vec![(vec![1, 2], 12), (vec![2, 3], 1)]);
        // Location 4 is no longer referenced, nor its function.
        assert_eq!(
            out.location.iter().map(|l| l.id).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert_eq!(
            out.function.iter().map(|f| f.id).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert_eq!(out.location[0].line[0].line, 10);
    }

    #[test]
    fn zero_keeps_whole_stacks_and_aggregate_callees_clears_leaf_lines() {
        let p = profile(&[(&[1, 2, 3], 5), (&[1, 2, 3], 2), (&[3, 4], 1)]);
        let pgo = t::GoPgo {
            keep_locations: 0,
            aggregate_callees: true,
        };
        let out = apply(p, &pgo);
        assert_eq!(samples(&out), vec![(vec![1, 2, 3], 7), (vec![3, 4], 1)]);
        let lines: Vec<i64> = out.location.iter().map(|l| l.line[0].line).collect();
        // Leaves (locations 1 and 3) lose their line; callers keep theirs.
        assert_eq!(lines, [0, 20, 0, 40]);
    }
}
