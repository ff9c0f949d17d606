//! The order a segment stores its stack tree in.
//!
//! A head or a merge numbers stack nodes as they are first seen, so a stack that
//! branches off an old one gets a parent far behind it, and nodes no row uses any
//! more (a merge's sources, zero sums) are carried along. The writer renumbers
//! the nodes rows reach, and only those, depth first with each node's children
//! ordered by location. Most parents are then the node just before, and sibling
//! subtrees are stored as runs, which zstd compresses far better
//! (docs/perf-log/2026-11-25-round-01-bytes-same-rows-day-blocks.md). Readers need
//! nothing new:
//! parents still precede their children.

use crate::dict::{Dict, NO_PARENT};
use crate::error::{Result, StorageError};
use crate::model::Labels;

use super::Row;

/// A renumbered stack tree: parent (or [`NO_PARENT`]) and location per node.
pub(super) struct OrderedTree {
    pub parents: Vec<u32>,
    pub node_locations: Vec<u32>,
}

const UNSEEN: u32 = u32::MAX;

/// Renumbers `dict`'s stack nodes that `series` reference (and their ancestors)
/// depth first, siblings by location then by old id, and rewrites every row's
/// stack to its new number. Fails on a row that names a node `dict` lacks.
pub(super) fn preorder(dict: &Dict, series: &mut [(Labels, Vec<Row>)]) -> Result<OrderedTree> {
    let n = dict.parents.len();
    // Which nodes the rows reach: each row's node and its ancestors. The climb
    // stops at the first node already marked, so each node is visited once.
    let mut live = vec![false; n];
    for (_, rows) in series.iter() {
        for r in rows {
            let mut node = r.stack as usize;
            if node >= n {
                return Err(StorageError::Invalid(format!(
                    "segment row refers to stack node {} of {n}",
                    r.stack
                )));
            }
            while !live[node] {
                live[node] = true;
                match dict.parents[node] {
                    NO_PARENT => break,
                    // A dictionary's parents precede their children (checked when
                    // decoded, by construction when built), so this ends.
                    p => node = p as usize,
                }
            }
        }
    }
    let location = |node: u32| dict.node_locations.get(node as usize).copied().unwrap_or(0);

    // Children of each live node, in compressed-sparse-row form, and the roots.
    let mut first_child = vec![0u32; n + 1];
    let mut roots = Vec::new();
    for (node, &p) in dict.parents.iter().enumerate() {
        if !live[node] {
            continue;
        }
        if p == NO_PARENT {
            roots.push(node as u32);
        } else {
            first_child[p as usize + 1] += 1;
        }
    }
    for i in 0..n {
        first_child[i + 1] += first_child[i];
    }
    let mut fill = first_child.clone();
    let mut children = vec![0u32; first_child[n] as usize];
    for (node, &p) in dict.parents.iter().enumerate() {
        if live[node] && p != NO_PARENT {
            let slot = &mut fill[p as usize];
            children[*slot as usize] = node as u32;
            *slot += 1;
        }
    }
    let by_location = |a: &u32, b: &u32| (location(*a), *a).cmp(&(location(*b), *b));
    roots.sort_unstable_by(by_location);
    for p in 0..n {
        children[first_child[p] as usize..first_child[p + 1] as usize]
            .sort_unstable_by(by_location);
    }

    // Depth-first numbering.
    let mut new_id = vec![UNSEEN; n];
    let mut parents = Vec::with_capacity(children.len() + roots.len());
    let mut node_locations = Vec::with_capacity(parents.capacity());
    let mut todo: Vec<u32> = roots.iter().rev().copied().collect();
    while let Some(node) = todo.pop() {
        let id = parents.len() as u32;
        new_id[node as usize] = id;
        parents.push(match dict.parents[node as usize] {
            NO_PARENT => NO_PARENT,
            p => new_id[p as usize],
        });
        node_locations.push(location(node));
        let kids =
            &children[first_child[node as usize] as usize..first_child[node as usize + 1] as usize];
        todo.extend(kids.iter().rev());
    }
    for (_, rows) in series.iter_mut() {
        for r in rows.iter_mut() {
            r.stack = new_id[r.stack as usize];
        }
    }
    Ok(OrderedTree {
        parents,
        node_locations,
    })
}

/// `dict` with every node kept and renumbered depth first, as a segment stores it.
#[cfg(test)]
pub(crate) fn depth_first_for_tests(dict: &Dict) -> Dict {
    let rows = (0..dict.node_count() as u32)
        .map(|stack| Row {
            t: 0,
            stack,
            value: 1,
        })
        .collect();
    let mut series = vec![(Labels::default(), rows)];
    let t = preorder(dict, &mut series).expect("every row names a node");
    Dict {
        parents: t.parents,
        node_locations: t.node_locations,
        ..dict.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dict::{DictBuilder, LocationRec};

    fn loc(b: &mut DictBuilder, name: &str) -> u32 {
        let f = b.function(name, "");
        b.location(LocationRec {
            function: Some(f),
            mapping: None,
            address: 0,
            line: 0,
        })
    }

    /// The names on the path from the root to `node` of a renumbered tree.
    fn path(dict: &Dict, t: &OrderedTree, mut node: u32) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            let l = t.node_locations[node as usize];
            let f = dict.locations[l as usize].function.unwrap();
            out.push(dict.str(dict.functions[f as usize].name).to_string());
            match t.parents[node as usize] {
                NO_PARENT => break,
                p => node = p,
            }
        }
        out.reverse();
        out
    }

    #[test]
    fn keeps_what_rows_reach_depth_first_and_rows_follow() {
        let mut b = DictBuilder::new();
        let [main, z, a, m, dead] = ["main", "z", "a", "m", "dead"].map(|n| loc(&mut b, n));
        // Insertion order: main>z, main>dead, main>z>m, main>a.
        let mz = b.stack(&[main, z]);
        let _unused = b.stack(&[main, dead]);
        let mzm = b.stack(&[main, z, m]);
        let ma = b.stack(&[main, a]);
        let dict = b.finish();
        let mut series = vec![(
            Labels::new([("s", "1")]),
            vec![
                Row {
                    t: 0,
                    stack: mzm,
                    value: 5,
                },
                Row {
                    t: 0,
                    stack: ma,
                    value: 7,
                },
                Row {
                    t: 1,
                    stack: mz,
                    value: 9,
                },
            ],
        )];
        let t = preorder(&dict, &mut series).unwrap();
        // main, then its children by location id (z was interned before a), each
        // subtree whole; "dead" is gone.
        assert_eq!(t.parents.len(), 4);
        let names: Vec<Vec<String>> = (0..4).map(|i| path(&dict, &t, i)).collect();
        assert_eq!(
            names,
            [
                vec!["main"],
                vec!["main", "z"],
                vec!["main", "z", "m"],
                vec!["main", "a"]
            ]
        );
        assert_eq!(t.parents, [NO_PARENT, 0, 1, 0]);
        let rows = &series[0].1;
        assert_eq!(path(&dict, &t, rows[0].stack), ["main", "z", "m"]);
        assert_eq!(path(&dict, &t, rows[1].stack), ["main", "a"]);
        assert_eq!(path(&dict, &t, rows[2].stack), ["main", "z"]);
    }

    #[test]
    fn a_row_naming_a_missing_node_is_refused() {
        let mut b = DictBuilder::new();
        let l = loc(&mut b, "f");
        b.stack(&[l]);
        let dict = b.finish();
        let mut series = vec![(
            Labels::new([("s", "1")]),
            vec![Row {
                t: 0,
                stack: 1,
                value: 1,
            }],
        )];
        assert!(matches!(
            preorder(&dict, &mut series),
            Err(StorageError::Invalid(_))
        ));
    }
}
