//! A loaded segment's memo of stack node → frame-tree id (gid).
//!
//! The memo lives with the decoded segment (it is valid as long as the segment is
//! immutable and cached) but its meaning belongs to the query layer's frame tree
//! (`exec::frames`): this module only stores numbers, so the segment layer needs
//! nothing from above it.
//!
//! Segments written on one symbol base (`base.rs`) number the base's stack nodes
//! alike: node `n` below the base's node count is the same stack in each of them.
//! Their memos share one for those nodes (the base's), so a stack resolved through
//! one block is resolved for every block on the base: the warm-up resolves the
//! last day, whose day block is on the tenant's current base, and a first query
//! over the weeks before finds their shared stacks resolved.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

/// Slots per page: 4 KiB of memo.
const PAGE: usize = 1024;

type Page = Box<[AtomicU32; PAGE]>;

/// The persistent node → gid memo of an immutable segment, for one generation of
/// the frame tree. Slots hold `gid + 1`; zero means "not resolved yet".
///
/// Slots come in pages allocated when a node in them is first set: a segment
/// holds the stacks of every service while a query resolves one service's, whose
/// nodes are neighbours (the stack tree is depth first), so most pages are never
/// allocated. Zeroing a slot per node up front was a tenth of a first query after
/// a restart, most of it the kernel handing out fresh pages.
pub struct GidSlots {
    generation: u64,
    nodes: usize,
    /// The shared slots of nodes `0..shared.1` (a base's), if any.
    shared: Option<(Arc<GidSlots>, usize)>,
    pages: Box<[OnceLock<Page>]>,
}

impl GidSlots {
    fn new(generation: u64, nodes: usize, shared: Option<(Arc<GidSlots>, usize)>) -> Self {
        GidSlots {
            generation,
            nodes,
            shared,
            pages: (0..nodes.div_ceil(PAGE)).map(|_| OnceLock::new()).collect(),
        }
    }

    /// The gid memoized for stack node `node`, if any.
    #[inline]
    pub fn get(&self, node: u32) -> Option<u32> {
        if let Some((s, below)) = &self.shared {
            if (node as usize) < *below {
                return s.get(node);
            }
        }
        let n = node as usize;
        let page = self.pages.get(n / PAGE)?.get()?;
        match page[n % PAGE].load(Ordering::Relaxed) {
            0 => None,
            v => Some(v - 1),
        }
    }

    /// Remembers `gid` for stack node `node` (ignored when out of range).
    #[inline]
    pub fn set(&self, node: u32, gid: u32) {
        if let Some((s, below)) = &self.shared {
            if (node as usize) < *below {
                return s.set(node, gid);
            }
        }
        let n = node as usize;
        let (true, Some(cell), Some(v)) =
            (n < self.nodes, self.pages.get(n / PAGE), gid.checked_add(1))
        else {
            return;
        };
        let page = cell.get_or_init(|| Box::new(std::array::from_fn(|_| AtomicU32::new(0))));
        page[n % PAGE].store(v, Ordering::Relaxed);
    }
}

/// Held by a loaded segment: its gid slots for the current generation.
#[derive(Default)]
pub struct GidMemo {
    current: Mutex<Option<Arc<GidSlots>>>,
    /// The memo of the base the segment was written on, and the base's node
    /// count: its nodes are memoised there.
    shared: Option<(Arc<GidMemo>, usize)>,
}

impl std::fmt::Debug for GidMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GidMemo")
    }
}

impl GidMemo {
    /// A memo whose nodes `0..below` are memoised in `shared` (a base's memo,
    /// which every segment on the base shares).
    pub fn sharing(shared: Arc<GidMemo>, below: usize) -> Self {
        GidMemo {
            current: Mutex::default(),
            shared: Some((shared, below)),
        }
    }

    /// The slots of `generation` for a dictionary of `nodes` stack nodes.
    pub fn slots(&self, generation: u64, nodes: usize) -> Arc<GidSlots> {
        let mut cur = self.current.lock();
        match &*cur {
            Some(s) if s.generation == generation && s.nodes == nodes => s.clone(),
            _ => {
                // A dictionary smaller than the base's is no segment of it: its
                // nodes are its own.
                let shared = self
                    .shared
                    .as_ref()
                    .filter(|(_, below)| *below <= nodes)
                    .map(|(m, below)| (m.slots(generation, *below), *below));
                let s = Arc::new(GidSlots::new(generation, nodes, shared));
                *cur = Some(s.clone());
                s
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slots read back what was set, across pages; unset and out-of-range nodes
    /// read as unresolved, and only the pages set into are allocated.
    #[test]
    fn slots_remember_gids_in_pages_allocated_on_first_set() {
        let memo = GidMemo::default();
        let nodes = PAGE * 3 + 5;
        let s = memo.slots(7, nodes);
        assert_eq!(s.get(0), None);
        s.set(0, 0);
        s.set(PAGE as u32 * 3 + 4, 41);
        s.set(nodes as u32, 9);
        s.set(5, u32::MAX);
        assert_eq!(s.get(0), Some(0));
        assert_eq!(s.get(PAGE as u32 * 3 + 4), Some(41));
        assert_eq!(s.get(1), None);
        assert_eq!(s.get(nodes as u32), None);
        assert_eq!(s.get(5), None);
        let allocated = s.pages.iter().filter(|p| p.get().is_some()).count();
        assert_eq!(allocated, 2);
        // The same generation and size share the slots; another generation starts over.
        assert_eq!(memo.slots(7, nodes).get(0), Some(0));
        assert_eq!(memo.slots(8, nodes).get(0), None);
    }

    /// Two memos sharing a base's: a node below the base's count set through one
    /// reads back through the other; their own nodes stay apart.
    #[test]
    fn memos_on_one_base_share_its_nodes() {
        let base = Arc::new(GidMemo::default());
        let below = PAGE + 3;
        let (a, b) = (
            GidMemo::sharing(base.clone(), below),
            GidMemo::sharing(base.clone(), below),
        );
        let (sa, sb) = (a.slots(4, below + 10), b.slots(4, below + 20));
        sa.set(2, 11);
        sa.set(below as u32 - 1, 12);
        sa.set(below as u32, 13);
        assert_eq!(sb.get(2), Some(11));
        assert_eq!(sb.get(below as u32 - 1), Some(12));
        assert_eq!(sb.get(below as u32), None);
        assert_eq!(base.slots(4, below).get(2), Some(11));
        // Another generation starts the base's memo over too.
        assert_eq!(b.slots(5, below + 20).get(2), None);
        assert_eq!(a.slots(5, below + 10).get(2), None);
    }
}
