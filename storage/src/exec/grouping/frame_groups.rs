//! Group-by in frame-tree space: a source's stack nodes mapped to groups once, then
//! summed by frame id, so a repeated group-by over kept parts never walks rows again.

use super::*;

/// A thread's group-by over the frame tree (see [`super::frames`]): sums per
/// (label group, stack key) across every source the thread scanned, converted to
/// rows once per query by [`FrameGroups::into_rows`].
#[derive(Default, Debug, Clone)]
pub struct FrameGroups {
    groups: Vec<Vec<String>>,
    group_ids: FxHashMap<Vec<String>, u32>,
    /// `(group, key)` → sum; the key is what the query's [`StackKey`] says: a
    /// frame id, a frame name id, or the root when no key is stack-derived.
    values: FxHashMap<(u32, u32), i64>,
    pub total: i64,
}

/// Whether a query can run over frame ids: `binary` needs each leaf's mapping,
/// which is per location, not per frame name.
pub fn frames_can_group(q: &GroupByQuery) -> bool {
    !q.keys.contains(&GroupKey::Binary) && !q.keys.contains(&GroupKey::Line)
}

/// What a frame group-by keeps of a stack, and so what the second half of a
/// [`FrameGroups`] key is. Only `function_total` needs a stack's whole path of
/// names; a leaf function needs the leaf's name alone, which is one lookup per
/// distinct function, where a path is one frame-tree lookup per stack node (most
/// of the first query's CPU after a restart, before the warm-up resolved the day).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StackKey {
    /// Label keys only: every value is keyed by [`ROOT_GID`].
    None,
    /// The leaf's frame name: keys are name ids of the query's frame tree.
    Leaf,
    /// The frame path: keys are frame-tree ids.
    Path,
}

impl StackKey {
    fn of(q: &GroupByQuery) -> StackKey {
        if q.keys.contains(&GroupKey::FunctionTotal) {
            StackKey::Path
        } else if q.keys.iter().any(GroupKey::is_stack_derived) {
            StackKey::Leaf
        } else {
            StackKey::None
        }
    }
}

impl FrameGroups {
    pub fn approx_bytes(&self) -> usize {
        self.values.len() * 24
            + self
                .groups
                .iter()
                .map(|g| 48 + g.iter().map(|s| s.len() + 24).sum::<usize>())
                .sum::<usize>()
            + 128
    }

    /// Keeps only what [`FrameGroups::add`] reads (a cached per-segment part).
    pub fn shrink_for_cache(&mut self) {
        self.group_ids = FxHashMap::default();
    }

    /// The id of the group with label values `lv`, created on first sight.
    fn group_id(&mut self, lv: &[String]) -> u32 {
        if let Some(&g) = self.group_ids.get(lv) {
            return g;
        }
        let g = self.groups.len() as u32;
        self.groups.push(lv.to_vec());
        self.group_ids.insert(lv.to_vec(), g);
        g
    }

    /// Adds another accumulator's sums (a cached per-segment part) to this one.
    pub fn add(&mut self, other: &FrameGroups) {
        self.total = self.total.saturating_add(other.total);
        let map: Vec<u32> = other.groups.iter().map(|lv| self.group_id(lv)).collect();
        for (&(g, gid), &v) in &other.values {
            let g = map.get(g as usize).copied().unwrap_or(0);
            let e = self.values.entry((g, gid)).or_insert(0);
            *e = e.saturating_add(v);
        }
    }

    /// Rows of all threads' accumulators, keyed by strings in `q.keys` order.
    pub fn into_rows(
        accs: Vec<FrameGroups>,
        tree: &FrameTree,
        q: &GroupByQuery,
    ) -> Result<GroupAcc> {
        let mut out = GroupAcc::default();
        let stack_key = StackKey::of(q);
        let mut path_names: FxHashMap<u32, Vec<u32>> = FxHashMap::default();
        for acc in accs {
            out.total = out.total.saturating_add(acc.total);
            for ((g, gid), v) in acc.values {
                // With path keys every value sits on a frame; the root has no name.
                if stack_key == StackKey::Path && gid == ROOT_GID {
                    continue;
                }
                let labels = acc.groups.get(g as usize).map_or(&[][..], |l| &l[..]);
                let mut choices: Vec<Vec<String>> = Vec::with_capacity(q.keys.len());
                let mut li = 0;
                for k in &q.keys {
                    match k {
                        GroupKey::Label(_) => {
                            choices.push(vec![labels.get(li).cloned().unwrap_or_default()]);
                            li += 1;
                        }
                        GroupKey::Function | GroupKey::Binary | GroupKey::Line => {
                            let name = match stack_key {
                                StackKey::Leaf => gid,
                                _ => tree.name_of(gid),
                            };
                            choices.push(vec![tree.name(name).to_string()]);
                        }
                        GroupKey::FunctionTotal => {
                            let names = path_names.entry(gid).or_insert_with(|| {
                                let mut names = Vec::new();
                                let mut g = gid;
                                while g != ROOT_GID {
                                    let n = tree.name_of(g);
                                    if !names.contains(&n) {
                                        names.push(n);
                                    }
                                    let p = tree.parent(g);
                                    g = if p < g { p } else { ROOT_GID };
                                }
                                names
                            });
                            choices.push(names.iter().map(|&n| tree.name(n).to_string()).collect());
                        }
                    }
                }
                for_each_product(&choices, |key| {
                    let e = out.rows.entry(key).or_insert(0);
                    *e = e.saturating_add(v);
                });
                if q.max_groups > 0 && out.rows.len() > q.max_groups {
                    return Err(too_many_groups(q.max_groups));
                }
            }
        }
        Ok(out)
    }
}

/// What grouping one source needs whatever step range is read: its selected
/// series split by label group, and the function filter over its stack nodes.
/// Built once per source and query, so a block read as several hours (see
/// `exec::shares`) resolves its filter and splits its series once.
pub struct SourceGroups {
    /// Label values of each group and its series.
    members: Vec<(Vec<String>, RoaringBitmap)>,
    filter: NodeFilter,
    stack_key: StackKey,
    max_groups: usize,
}

impl SourceGroups {
    /// `None` when `sel` selects no series of `src` or the filter keeps none of
    /// its stacks.
    pub fn new(
        src: &dyn Source,
        sel: &Selector,
        q: &GroupByQuery,
        resolve: &dyn Fn(&dyn Source, &Regex) -> Result<RoaringBitmap>,
    ) -> Result<Option<SourceGroups>> {
        let series = src.index().select(&sel.matchers);
        if series.is_empty() {
            return Ok(None);
        }
        // The function filters are applied to this source's stack nodes before
        // they are resolved to frame ids: only the stacks a filtered query keeps
        // are added to the frame tree (the first query after a restart resolves
        // far fewer).
        let filter = NodeFilter::new(src, q.include.as_ref(), q.exclude.as_ref(), resolve)?;
        if filter.passes_nothing() {
            return Ok(None);
        }
        Ok(Some(SourceGroups {
            members: by_label_values(src, &series, &q.label_keys()),
            filter,
            stack_key: StackKey::of(q),
            max_groups: q.max_groups,
        }))
    }

    /// Whether a function filter is set: only then is [`SourceGroups::nodes`] worth
    /// caching apart from the filtered part.
    pub fn filtered(&self) -> bool {
        !matches!(self.filter, NodeFilter::All)
    }

    /// The samples of `src` in steps `[lo, hi)` per label group and stack node,
    /// without the function filter (see [`GroupNodes`]).
    pub fn nodes(
        &self,
        src: &dyn Source,
        (lo, hi): (u32, u32),
        scratch: &mut Scratch,
    ) -> Result<GroupNodes> {
        let mut groups = Vec::with_capacity(self.members.len());
        let result = (|| -> Result<()> {
            for (values, set) in &self.members {
                node_values(src, set, lo, hi, scratch)?;
                if !scratch.pairs.is_empty() {
                    groups.push((values.clone(), scratch.pairs.clone()));
                }
            }
            Ok(())
        })();
        scratch.end_source();
        result?;
        Ok(GroupNodes { groups })
    }

    /// Adds the samples of `src` in steps `[lo, hi)` to `acc` by (label group,
    /// frame id).
    pub fn add(
        &mut self,
        src: &dyn Source,
        (lo, hi): (u32, u32),
        tree: &RwLock<FrameTree>,
        acc: &mut FrameGroups,
        scratch: &mut Scratch,
    ) -> Result<()> {
        if lo >= hi {
            return Ok(());
        }
        let to_frames = ToFrames::new(src, tree);
        let result = (|| -> Result<()> {
            for (values, set) in &self.members {
                self.filter.node_values(src, set, lo, hi, scratch)?;
                let g = acc.group_id(values);
                self.sum_frames(g, &to_frames, tree, acc, scratch)?;
            }
            Ok(())
        })();
        scratch.end_source();
        result?;
        self.check_groups(acc)
    }

    /// Adds a share's unfiltered sums to `acc` through this query's function
    /// filter: the same sums [`SourceGroups::add`] gives for the share's steps.
    pub fn add_nodes(
        &mut self,
        src: &dyn Source,
        nodes: &GroupNodes,
        tree: &RwLock<FrameTree>,
        acc: &mut FrameGroups,
        scratch: &mut Scratch,
    ) -> Result<()> {
        let to_frames = ToFrames::new(src, tree);
        let lookups = nodes.groups.iter().map(|(_, pairs)| pairs.len()).sum();
        let result = (|| -> Result<()> {
            self.filter.expect_lookups(src, lookups)?;
            for (values, pairs) in &nodes.groups {
                scratch.pairs.clear();
                scratch.pairs.extend_from_slice(pairs);
                self.filter.retain_pairs(src, scratch)?;
                let g = acc.group_id(values);
                self.sum_frames(g, &to_frames, tree, acc, scratch)?;
            }
            Ok(())
        })();
        scratch.end_source();
        result?;
        self.check_groups(acc)
    }

    /// Adds `scratch.pairs` (stack node sums of group `g`) to `acc` by frame id.
    fn sum_frames(
        &self,
        g: u32,
        to_frames: &ToFrames<'_>,
        tree: &RwLock<FrameTree>,
        acc: &mut FrameGroups,
        scratch: &mut Scratch,
    ) -> Result<()> {
        let (src, slots) = (to_frames.src, to_frames.slots.as_deref());
        match self.stack_key {
            StackKey::Path => {
                scratch.pairs_to_frames(tree, || src.dict(), slots)?;
                // The node pairs are spent: their buffer takes the frame pairs.
                scratch.gids.drain(&mut scratch.pairs);
            }
            StackKey::Leaf => scratch.pairs_to_names(tree, || src.dict(), slots)?,
            StackKey::None => {}
        }
        acc.values.reserve(scratch.pairs.len());
        for &(key, v) in &scratch.pairs {
            acc.total = acc.total.saturating_add(v);
            let key = (
                g,
                if self.stack_key == StackKey::None {
                    ROOT_GID
                } else {
                    key
                },
            );
            let e = acc.values.entry(key).or_insert(0);
            *e = e.saturating_add(v);
        }
        Ok(())
    }

    fn check_groups(&self, acc: &FrameGroups) -> Result<()> {
        if self.max_groups > 0 && acc.values.len() > self.max_groups.saturating_mul(64) {
            return Err(too_many_groups(self.max_groups));
        }
        Ok(())
    }
}

/// What turns one source's `(stack node, value)` sums into frame ids: its memo,
/// and its tables for the nodes the memo lacks.
struct ToFrames<'s> {
    src: &'s dyn Source,
    slots: Option<std::sync::Arc<GidSlots>>,
}

impl<'s> ToFrames<'s> {
    fn new(src: &'s dyn Source, tree: &RwLock<FrameTree>) -> Self {
        let generation = tree.read().generation();
        ToFrames {
            src,
            slots: src
                .gid_memo()
                .map(|m| m.slots(generation, src.node_count())),
        }
    }
}

/// One source's samples in a step range, summed per stack node for each label group
/// of a selection, with no function filter. A filtered group-by caches this per
/// segment share beside its own filtered part: a filter never asked before is then
/// applied to each distinct stack of the share (thousands) instead of to each row
/// (millions), and only the first filter after a segment appears reads its rows.
#[derive(Debug, Default)]
pub struct GroupNodes {
    /// Label values, and `(stack node, value)` sorted by node, without zeros.
    groups: Vec<(Vec<String>, NodeSums)>,
}

/// `(stack node, value)` pairs of one source.
type NodeSums = Vec<(u32, i64)>;

impl GroupNodes {
    pub fn approx_bytes(&self) -> usize {
        self.groups
            .iter()
            .map(|(lv, p)| 64 + lv.iter().map(|s| s.len() + 24).sum::<usize>() + p.len() * 16)
            .sum::<usize>()
            + 64
    }
}
