//! Which nodes of a merge a flame graph draws, decided per chain of its
//! [`Skeleton`] instead of per node.
//!
//! Along a chain a node's total is the chain's total less the self values above
//! it, so the totals of a chain are a few runs of equal values, one per self value
//! on it. The `max_nodes`-th largest total (the threshold) is found among those
//! runs, counted with their lengths; then the drawn nodes are walked from the root.
//! A query costs its pairs and the skeleton's chains, not its nodes; the result is
//! the same [`Drawn`] as the per-node decision of [`super::shape`], which a
//! property test checks.
//!
//! Totals only fall along a chain when no value is negative; a merge with a
//! negative value (a diff of pprof deltas, say) is decided per node.

use super::drawn::{Drawn, DrawnNode, Names};
use super::skeleton::Skeleton;

/// The drawn nodes of `sides` on `skel` under `max_nodes`
/// (0 = all). `None` when a frame is not in the skeleton or a value is negative.
pub(crate) fn drawn<const K: usize>(
    skel: &Skeleton,
    names: &impl Names,
    sides: [&[(u32, i64)]; K],
    max_nodes: usize,
) -> Option<Drawn<K>> {
    let ch = skel.chains();
    let at = by_slot(skel, sides)?;
    // Each chain's total: its self values, then its child chains' totals.
    let chains = ch.len();
    let mut total = vec![[0i64; K]; chains];
    // `first[c]`: where chain c's values start in `at`.
    let mut first = vec![0u32; chains + 1];
    let mut e = 0;
    for c in 0..chains {
        first[c] = e as u32;
        while e < at.len() && at[e].0 < ch.start[c + 1] {
            add(&mut total[c], at[e].1);
            e += 1;
        }
    }
    first[chains] = e as u32;
    for c in (1..chains).rev() {
        let t = total[c];
        add(&mut total[ch.parent[c] as usize], t);
    }
    let weight = |v: [i64; K]| v.iter().sum::<i64>();
    let min_value = if max_nodes == 0 || skel.len() <= max_nodes {
        0
    } else {
        // Runs of equal totals, with their lengths.
        let mut runs: Vec<(i64, u32)> = Vec::with_capacity(at.len() + chains);
        let mut nonzero = 0u64;
        for c in 0..chains {
            let mut w = weight(total[c]);
            let (start, len) = (ch.start[c], ch.chain_len(c));
            let mut pos = 0;
            for &(slot, v) in &at[first[c] as usize..first[c + 1] as usize] {
                if w == 0 {
                    break;
                }
                let upto = slot - start + 1;
                runs.push((w, upto - pos));
                nonzero += u64::from(upto - pos);
                pos = upto;
                w -= weight(v);
            }
            if w != 0 && pos < len {
                runs.push((w, len - pos));
                nonzero += u64::from(len - pos);
            }
        }
        if nonzero < max_nodes as u64 {
            0
        } else {
            kth_largest(&mut runs, max_nodes as u64)
        }
    };
    // The drawn nodes, from the root down. A node is (chain, place in it) with
    // its total and self value.
    // A chain's values are `at[first[c]..first[c + 1]]`: searched there alone.
    let self_at = |c: usize, slot: u32| -> [i64; K] {
        let own = &at[first[c] as usize..first[c + 1] as usize];
        own.binary_search_by_key(&slot, |e| e.0)
            .map_or([0; K], |i| own[i].1)
    };
    let mut d = Drawn {
        nodes: vec![DrawnNode::new(total[0], self_at(0, 0), 0)],
    };
    let mut stack: Vec<(u32, usize, u32)> = vec![(0, 0, 0)];
    let mut below: Vec<(usize, u32, [i64; K])> = Vec::new();
    while let Some((idx, c, pos)) = stack.pop() {
        let node = &d.nodes[idx as usize];
        let (t, s) = (node.total, node.selfv);
        below.clear();
        if pos + 1 < ch.chain_len(c) {
            let mut t2 = t;
            for (x, y) in t2.iter_mut().zip(s) {
                *x -= y;
            }
            below.push((c, pos + 1, t2));
        } else {
            below.extend(
                ch.children(c)
                    .iter()
                    .map(|&c2| (c2 as usize, 0, total[c2 as usize])),
            );
        }
        for &(c2, pos2, t2) in &below {
            let w = weight(t2);
            if w == 0 {
                continue;
            }
            if w < min_value {
                d.nodes[idx as usize].add_other(t2);
                continue;
            }
            let slot = ch.start[c2] + pos2;
            let name = skel.name_id(ch.nodes[slot as usize]);
            let child = d.nodes.len() as u32;
            d.nodes.push(DrawnNode::new(t2, self_at(c2, slot), name));
            d.nodes[idx as usize].children.push(child);
            stack.push((child, c2, pos2));
        }
    }
    d.sort_children(names);
    d.bound(max_nodes);
    Some(d)
}

/// `(slot, value per side)` of `sides` on `skel`, sorted by slot, without zeros:
/// chain by chain, top to bottom. `None` when a frame is not in the skeleton or
/// a value is negative.
///
/// The sides (each sorted by gid) are merged by gid first, so a frame summed on
/// both sides is looked up once: the lookups are reads spread over the skeleton's
/// arrays, and a diff's two halves share most frames (up to half the
/// lookups). Slots mostly follow gids (a chain's
/// nodes are usually consecutive gids), so the rows are sorted by slot only when
/// they are not already.
fn by_slot<const K: usize>(
    skel: &Skeleton,
    sides: [&[(u32, i64)]; K],
) -> Option<Vec<(u32, [i64; K])>> {
    let ch = skel.chains();
    let mut rows: Vec<(u32, [i64; K])> = Vec::new();
    for (k, pairs) in sides.iter().enumerate() {
        if pairs.iter().any(|p| p.1 < 0) {
            return None;
        }
        rows = merge_side(rows, pairs, k);
    }
    let mut sorted = true;
    let mut last = None;
    for row in &mut rows {
        let slot = *ch.slot.get(skel.local(row.0)?)?;
        sorted &= last.is_none_or(|l| l < slot);
        last = Some(slot);
        row.0 = slot;
    }
    if !sorted {
        rows.sort_unstable_by_key(|e| e.0);
        // A side not sorted by gid leaves a frame in two rows: summed into one.
        rows.dedup_by(|b, a| {
            let same = a.0 == b.0;
            if same {
                add(&mut a.1, b.1);
            }
            same
        });
    }
    Some(rows)
}

/// `at` (sorted by key) with `side` (sorted by key) added in column `k`; a zero
/// of `side` adds no row.
///
/// Rows are built whole (`with`), not written at `[k]` and then copied: a row
/// read back right after an 8-byte store into it stalled on store forwarding
/// (figures: docs/perf-log/2026-11-29-figures-from-code-comments.md).
fn merge_side<const K: usize>(
    at: Vec<(u32, [i64; K])>,
    side: &[(u32, i64)],
    k: usize,
) -> Vec<(u32, [i64; K])> {
    let with = |row: [i64; K], v: i64| -> [i64; K] {
        std::array::from_fn(|i| {
            if i == k {
                row[i].saturating_add(v)
            } else {
                row[i]
            }
        })
    };
    let mut out = Vec::with_capacity(at.len() + side.len());
    let (mut i, mut j) = (0, 0);
    while i < at.len() || j < side.len() {
        match (at.get(i), side.get(j)) {
            (Some(a), Some(b)) if a.0 < b.0 => {
                out.push(*a);
                i += 1;
            }
            (Some(a), Some(b)) if a.0 == b.0 => {
                out.push((a.0, with(a.1, b.1)));
                i += 1;
                j += 1;
            }
            (_, Some(b)) => {
                if b.1 != 0 {
                    out.push((b.0, with([0; K], b.1)));
                }
                j += 1;
            }
            (Some(a), None) => {
                out.push(*a);
                i += 1;
            }
            (None, None) => break,
        }
    }
    out
}

fn add<const K: usize>(to: &mut [i64; K], v: [i64; K]) {
    for (x, y) in to.iter_mut().zip(v) {
        *x = x.saturating_add(y);
    }
}

/// The `k`-th largest value of `runs` counting each `(value, count)` `count`
/// times (`k` ≥ 1, at most the counts' sum). A quickselect: expected linear time.
fn kth_largest(runs: &mut [(i64, u32)], mut k: u64) -> i64 {
    let mut s = runs;
    loop {
        if s.len() <= 16 {
            s.sort_unstable_by_key(|r| std::cmp::Reverse(r.0));
            for &(w, c) in s.iter() {
                if k <= u64::from(c) {
                    return w;
                }
                k -= u64::from(c);
            }
            return s.last().map_or(0, |r| r.0);
        }
        let mut three = [s[0].0, s[s.len() / 2].0, s[s.len() - 1].0];
        three.sort_unstable();
        let pivot = three[1];
        // Three-way partition: greater, equal, smaller.
        let (mut lt, mut i, mut gt) = (0, 0, s.len());
        while i < gt {
            if s[i].0 > pivot {
                s.swap(i, lt);
                lt += 1;
                i += 1;
            } else if s[i].0 < pivot {
                gt -= 1;
                s.swap(i, gt);
            } else {
                i += 1;
            }
        }
        let count = |r: &[(i64, u32)]| r.iter().map(|x| u64::from(x.1)).sum::<u64>();
        let greater = count(&s[..lt]);
        if k <= greater {
            s = &mut s[..lt];
            continue;
        }
        let equal = count(&s[lt..gt]);
        if k <= greater + equal {
            return pivot;
        }
        k -= greater + equal;
        s = &mut s[gt..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::frames::{Frames, ROOT_GID};
    use crate::exec::shape::Shape;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn kth_largest_counts_runs(
            runs in prop::collection::vec((0i64..40, 1u32..5), 1..60),
            pick in any::<prop::sample::Index>(),
        ) {
            let mut all: Vec<i64> = runs
                .iter()
                .flat_map(|&(w, c)| std::iter::repeat_n(w, c as usize))
                .collect();
            all.sort_unstable_by(|a, b| b.cmp(a));
            let k = pick.index(all.len()) + 1;
            let mut r = runs.clone();
            prop_assert_eq!(kth_largest(&mut r, k as u64), all[k - 1]);
        }

        /// Deciding per chain draws exactly what deciding per node draws, on
        /// skeletons holding more frames than the values touch, for one side and
        /// for two.
        #[test]
        fn chains_draw_what_nodes_draw(
            paths in prop::collection::vec(prop::collection::vec(0u8..3, 1..7), 1..25),
            a in prop::collection::vec((any::<prop::sample::Index>(), 0i64..20), 0..15),
            b in prop::collection::vec((any::<prop::sample::Index>(), 0i64..20), 0..15),
            extra in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
            max_nodes in 0usize..14,
        ) {
            let frames = Frames::new(1 << 20).for_query();
            {
                let mut t = frames.write();
                for p in &paths {
                    let mut g = ROOT_GID;
                    for &n in p {
                        g = t.child_named(g, &((b'a' + n) as char).to_string());
                    }
                }
            }
            let t = frames.read();
            let side = |v: &[(prop::sample::Index, i64)]| {
                let mut m = std::collections::BTreeMap::new();
                for (i, x) in v {
                    *m.entry(i.index(t.len()) as u32).or_insert(0) += x;
                }
                m.into_iter().filter(|e| e.1 != 0).collect::<Vec<(u32, i64)>>()
            };
            let (sa, sb) = (side(&a), side(&b));
            let more: Vec<(u32, i64)> = {
                let mut g: Vec<u32> = extra.iter().map(|i| i.index(t.len()) as u32).collect();
                g.sort_unstable();
                g.dedup();
                g.into_iter().map(|g| (g, 1)).collect()
            };
            let skel = Skeleton::build(&t, None, &[&sa, &sb, &more]);
            let view = skel.view(&t);
            let per_node = |selfs| Shape::new(&view, selfs);
            let mut one = vec![[0i64; 1]; skel.len()];
            prop_assert!(skel.add(&sa, 0, &mut one));
            prop_assert_eq!(
                drawn(&skel, &view, [&sa[..]], max_nodes).map(|d| d.flamegraph(&view)),
                Some(per_node(one).drawn(max_nodes).flamegraph(&view))
            );
            let mut two = vec![[0i64; 2]; skel.len()];
            prop_assert!(skel.add(&sa, 0, &mut two) && skel.add(&sb, 1, &mut two));
            prop_assert_eq!(
                drawn(&skel, &view, [&sa[..], &sb[..]], max_nodes).map(|d| d.flamegraph_diff(&view)),
                Some(Shape::new(&view, two).drawn(max_nodes).flamegraph_diff(&view))
            );
            // Sides out of gid order draw the same (sorted by slot, each frame once).
            let (ra, rb): (Vec<_>, Vec<_>) = (sa.iter().rev().copied().collect(), sb.iter().rev().copied().collect());
            prop_assert_eq!(
                drawn(&skel, &view, [&ra[..], &rb[..]], max_nodes).map(|d| d.flamegraph_diff(&view)),
                drawn(&skel, &view, [&sa[..], &sb[..]], max_nodes).map(|d| d.flamegraph_diff(&view))
            );
            // A frame the skeleton lacks, or a negative value: not decided here.
            let lacking = Skeleton::build(&t, None, &[]);
            prop_assert!(sa.iter().all(|p| p.0 == ROOT_GID) || drawn(&lacking, &view, [&sa[..]], max_nodes).is_none());
            if let Some(&(g, _)) = sa.first() {
                prop_assert!(drawn(&skel, &view, [&[(g, -1)][..]], max_nodes).is_none());
            }
        }
    }
}
