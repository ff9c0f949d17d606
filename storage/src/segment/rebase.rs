//! Numbering a segment's symbols and stack nodes as a symbol base does
//! (`base.rs`): the base's tables unchanged, then what the segment adds.
//!
//! The writer first orders the segment's own tree (`tree_order.rs`); its live
//! nodes are then looked up in the base by `(parent, location)`, root first, and
//! those the base lacks are appended in that depth-first order, so the added
//! part keeps the runs that compress well. Every base node stays, used or not:
//! the sections are then the base's bytes followed by the added ones, which
//! zstd, given the base's section as a prefix, stores in a few bytes.
//! [`tables_for`] applies the lifecycle's decision (use the base, grow it, or
//! cut a fresh one) to the writer's tables.

use std::borrow::Cow;

use super::base::SymbolBase;
use super::tree_order::OrderedTree;
use super::writer::{BaseChoice, Row};
use crate::dict::{Dict, DictBuilder, FunctionRec, LocationRec, MappingRec, NO_PARENT};
use crate::error::{Result, StorageError};
use crate::model::Labels;

/// Where a segment's dictionary sections come from.
#[derive(Clone, Copy)]
pub(super) enum On<'b> {
    /// Its own tables, whole.
    Own,
    /// A base's tables, then its additions.
    Base(&'b SymbolBase),
    /// Its own tables, which become base `id`.
    Cut(u64),
}

/// The tables a segment is written with, and on what, as `choice` says
/// (before version 6, and without a choice, its own tables whole). On a base,
/// or on a base grown from it, the rows' stacks are renumbered to match.
pub(super) fn tables_for<'d, 'b>(
    choice: BaseChoice<'b>,
    dict: Cow<'d, Dict>,
    tree: OrderedTree,
    series: &mut [(Labels, Vec<Row>)],
    version: u16,
) -> Result<(Cow<'d, Dict>, OrderedTree, On<'b>)> {
    let BaseChoice::Shared {
        current,
        new_id,
        decide,
    } = choice
    else {
        return Ok((dict, tree, On::Own));
    };
    let Some(base) = current.filter(|_| version >= 6) else {
        return Ok(match version {
            6.. => (dict, tree, On::Cut(new_id)),
            _ => (dict, tree, On::Own),
        });
    };
    let r = onto(base.dict()?, &dict, &tree)?;
    let on = match decide(&r.fit) {
        BaseDecision::Fresh => return Ok((dict, tree, On::Cut(new_id))),
        BaseDecision::Use => On::Base(base),
        BaseDecision::Grow => On::Cut(new_id),
    };
    for (_, rows) in series.iter_mut() {
        for row in rows.iter_mut() {
            // `preorder` numbered every row's node below the tree's length.
            row.stack = r.node_map[row.stack as usize];
        }
    }
    let mut d = r.dict;
    let tree = OrderedTree {
        parents: std::mem::take(&mut d.parents),
        node_locations: std::mem::take(&mut d.node_locations),
    };
    Ok((Cow::Owned(d), tree, on))
}

/// A segment's tables on a base, and how well the base fitted it.
struct Rebased {
    /// The base's tables followed by the segment's additions, the stack tree
    /// included.
    pub dict: Dict,
    /// The new number of each of the segment's ordered tree nodes.
    pub node_map: Vec<u32>,
    pub fit: BaseFit,
}

/// How a segment's stack tree fits a base: what a policy decides on whether to
/// write the segment on it or cut a new base.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BaseFit {
    /// Nodes the segment's rows reach (with their ancestors).
    pub segment_nodes: usize,
    /// Of those, nodes the base lacks: stored in the segment.
    pub added_nodes: usize,
    /// Nodes in the base: decoded with every segment written on it.
    pub base_nodes: usize,
}

/// What a segment is written on, given how it fits the current base.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BaseDecision {
    /// The current base: the segment stores what it adds.
    Use,
    /// A new base of the current one and what the segment adds (the segment's
    /// tables as numbered on the current base), which the segment is written on.
    Grow,
    /// A new base of the segment's own tables alone.
    Fresh,
}

fn out_of_range(what: &str) -> StorageError {
    StorageError::Invalid(format!("segment dictionary: {what} out of range"))
}

/// `dict`'s tables and `tree` numbered on `base` (its decoded tables).
fn onto(base: Dict, dict: &Dict, tree: &OrderedTree) -> Result<Rebased> {
    let base_nodes = base.parents.len();
    let mut b = DictBuilder::from_dict(base);
    let strings: Vec<u32> = dict.strings.iter().map(|s| b.intern(s)).collect();
    let string = |id: u32| {
        strings
            .get(id as usize)
            .copied()
            .ok_or_else(|| out_of_range("string"))
    };
    let mut mappings = Vec::with_capacity(dict.mappings.len());
    for m in &dict.mappings {
        mappings.push(b.mapping_rec(MappingRec {
            file: string(m.file)?,
            build_id: string(m.build_id)?,
            range: m.range,
        }));
    }
    let mut functions = Vec::with_capacity(dict.functions.len());
    for f in &dict.functions {
        functions.push(b.function_rec(FunctionRec {
            name: string(f.name)?,
            file: string(f.file)?,
        }));
    }
    let mut locations = Vec::with_capacity(dict.locations.len());
    for l in &dict.locations {
        let function = match l.function {
            None => None,
            Some(f) => Some(
                *functions
                    .get(f as usize)
                    .ok_or_else(|| out_of_range("function"))?,
            ),
        };
        let mapping = match l.mapping {
            None => None,
            Some(m) => Some(
                *mappings
                    .get(m as usize)
                    .ok_or_else(|| out_of_range("mapping"))?,
            ),
        };
        locations.push(b.location(LocationRec {
            function,
            mapping,
            address: l.address,
            line: l.line,
        }));
    }
    let mut node_map = Vec::with_capacity(tree.parents.len());
    for (&p, &l) in tree.parents.iter().zip(&tree.node_locations) {
        let parent = match p {
            NO_PARENT => NO_PARENT,
            // The ordered tree's parents precede their children.
            p => *node_map
                .get(p as usize)
                .ok_or_else(|| out_of_range("parent"))?,
        };
        let location = *locations
            .get(l as usize)
            .ok_or_else(|| out_of_range("location"))?;
        node_map.push(b.child(parent, location));
    }
    let dict = b.finish();
    let fit = BaseFit {
        segment_nodes: tree.parents.len(),
        added_nodes: dict.parents.len() - base_nodes,
        base_nodes,
    };
    Ok(Rebased {
        dict,
        node_map,
        fit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dict::DictBuilder;

    fn ordered(d: &Dict) -> OrderedTree {
        OrderedTree {
            parents: d.parents.clone(),
            node_locations: d.node_locations.clone(),
        }
    }

    #[test]
    fn shared_stacks_take_the_base_numbers_and_new_ones_come_after() {
        let mut base = DictBuilder::new();
        let ab = base.letter_stack(&[0, 1], 1);
        let base = base.finish();
        // The segment sees `a b` again (its own numbering differs: `x` first)
        // and `a c`, which the base lacks.
        let mut seg = DictBuilder::new();
        let x = seg.letter_stack(&[23], 1);
        let ac = seg.letter_stack(&[0, 2], 1);
        let seg_ab = seg.letter_stack(&[0, 1], 1);
        let seg = seg.finish();
        let r = onto(base.clone(), &seg, &ordered(&seg)).unwrap();
        // The base's tables are a prefix of the result.
        assert_eq!(r.dict.strings[..base.strings.len()], base.strings[..]);
        assert_eq!(r.dict.parents[..base.parents.len()], base.parents[..]);
        assert_eq!(r.node_map[seg_ab as usize], ab);
        assert_eq!(r.fit.base_nodes, 2);
        assert_eq!(r.fit.segment_nodes, 4);
        // `x` and `c` are new: `a` is shared with the base.
        assert_eq!(r.fit.added_nodes, 2);
        let names = |d: &Dict, leaf: u32| -> Vec<String> {
            d.stack(leaf)
                .into_iter()
                .map(|l| {
                    let f = d.locations[l as usize].function.unwrap();
                    d.strings[d.functions[f as usize].name as usize].clone()
                })
                .collect()
        };
        for leaf in [x, ac, seg_ab] {
            assert_eq!(names(&r.dict, r.node_map[leaf as usize]), names(&seg, leaf));
        }
    }
}
