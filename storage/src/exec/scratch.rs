//! Per-thread scratch space of a query: dense arrays indexed by stack node (or
//! location) that are allocated once per query thread and reset only where a source
//! touched them.
//!
//! A segment holds the stacks of every service of its tenant and hour, so anything
//! sized by the segment's node count per query (a `vec![0; nodes]`, a pass over all
//! nodes) makes a query over one service pay for all of them. With these arrays a
//! source costs what its selected rows and their stacks cost.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Grows `v` to `n` zeroed slots. A first allocation goes through `alloc_zeroed`,
/// whose fresh pages the OS maps lazily: only the pages a query touches cost anything.
fn grow_zeroed<T: Copy + Default>(v: &mut Vec<T>, n: usize) {
    if v.len() >= n {
        return;
    }
    if v.is_empty() {
        *v = vec![T::default(); n];
    } else {
        v.resize(n, T::default());
    }
}

/// Writes every page of `v`, so that the kernel maps them now (a store of zero
/// into fresh zeroed memory would otherwise be proven redundant and dropped).
fn touch<T: Copy + Default>(v: &mut [T]) {
    let step = (4096 / std::mem::size_of::<T>().max(1)).max(1);
    for i in (0..v.len()).step_by(step) {
        v[i] = std::hint::black_box(T::default());
    }
}

/// Sums of values per stack node, with the list of nodes touched.
#[derive(Default)]
pub struct NodeValues {
    values: Vec<i64>,
    /// Nodes whose slot went from zero to non-zero (a node may appear twice when its
    /// sum returned to zero in between; [`NodeValues::drain`] dedups).
    touched: Vec<u32>,
}

impl NodeValues {
    /// Makes room for `nodes` slots. Every slot is zero between sources.
    pub fn prepare(&mut self, nodes: usize) {
        grow_zeroed(&mut self.values, nodes);
    }

    /// Adds `v` to `node`; out-of-range nodes are ignored (the caller validated them).
    #[inline]
    pub fn add(&mut self, node: u32, v: i64) {
        if let Some(slot) = self.values.get_mut(node as usize) {
            if *slot == 0 {
                self.touched.push(node);
            }
            *slot = slot.saturating_add(v);
        }
    }

    /// [`NodeValues::add`] of a frame id read from a segment's shared memo: another
    /// query thread may have added that frame to the tree (and the memo) after this
    /// accumulator was prepared, so the slots grow to `len()` first instead of the
    /// value being dropped as out of range.
    #[inline]
    pub fn add_growing(&mut self, node: u32, v: i64, len: impl FnOnce() -> usize) {
        if node as usize >= self.values.len() {
            grow_zeroed(&mut self.values, len());
        }
        self.add(node, v);
    }

    /// The non-zero `(node, sum)` pairs in node order (parents before children), and
    /// every slot back to zero.
    pub fn drain(&mut self, out: &mut Vec<(u32, i64)>) {
        out.clear();
        self.touched.sort_unstable();
        self.touched.dedup();
        for &n in &self.touched {
            if let Some(slot) = self.values.get_mut(n as usize) {
                if *slot != 0 {
                    out.push((n, *slot));
                }
                *slot = 0;
            }
        }
        self.touched.clear();
    }
}

/// A memo `index → u32` that resets in time proportional to the entries set.
/// Slots hold `value + 1` so that zero, the state of fresh pages, means "unset".
#[derive(Default)]
pub struct Memo {
    slots: Vec<u32>,
    set: Vec<u32>,
}

impl Memo {
    pub fn prepare(&mut self, n: usize) {
        grow_zeroed(&mut self.slots, n);
    }

    #[inline]
    pub fn get(&self, i: u32) -> Option<u32> {
        match self.slots.get(i as usize) {
            Some(&v) if v != 0 => Some(v - 1),
            _ => None,
        }
    }

    /// Sets slot `i` to `v` (`v < u32::MAX`; larger values are not stored).
    #[inline]
    pub fn set(&mut self, i: u32, v: u32) {
        let Some(stored) = v.checked_add(1) else {
            return;
        };
        if let Some(slot) = self.slots.get_mut(i as usize) {
            if *slot == 0 {
                self.set.push(i);
            }
            *slot = stored;
        }
    }

    /// Forgets every entry.
    pub fn reset(&mut self) {
        for &i in &self.set {
            if let Some(slot) = self.slots.get_mut(i as usize) {
                *slot = 0;
            }
        }
        self.set.clear();
    }
}

/// Everything a query thread reuses from one source to the next.
#[derive(Default)]
pub struct Scratch {
    pub values: NodeValues,
    /// Sums by frame-tree id across the sources a thread merged.
    pub gids: NodeValues,
    /// A second frame-id accumulator, for one source's part on its own.
    pub spare: NodeValues,
    /// Stack node → node of the tree being built (or any per-node derived id).
    pub nodes: Memo,
    /// Location → interned frame name of the tree being built.
    pub names: Memo,
    /// Stack node → filter verdict (0 = drop, 1 = keep), for function filters.
    pub keep: Memo,
    /// Stack node → depth, while a segment's nodes are resolved into the frame
    /// tree (clean between uses).
    pub depth: Memo,
    pub pairs: Vec<(u32, i64)>,
    pub path: Vec<u32>,
}

/// Scratch spaces of finished queries, kept so the next query's threads start with
/// arrays already sized and faulted in. Only clean scratch (every source ended) is
/// returned; a query that failed half-way drops its own.
static POOL: Mutex<Vec<Scratch>> = Mutex::new(Vec::new());

/// Heap bytes of the pooled scratch spaces (for `/metrics`).
static POOLED_BYTES: AtomicU64 = AtomicU64::new(0);

/// At most this many pooled scratch spaces (one per query thread of a few
/// concurrent queries); the rest are freed.
const POOL_MAX: usize = 4;

impl Scratch {
    /// Forgets the per-source memos (they are keyed by this source's ids).
    pub fn end_source(&mut self) {
        self.nodes.reset();
        self.names.reset();
        self.keep.reset();
    }

    /// A clean scratch space, from the pool when one is there.
    pub fn take() -> Scratch {
        let s = POOL.lock().ok().and_then(|mut p| p.pop());
        if let Some(s) = &s {
            POOLED_BYTES.fetch_sub(s.bytes() as u64, Ordering::Relaxed);
        }
        s.unwrap_or_default()
    }

    /// Returns a clean scratch space to the pool.
    pub fn give_back(self) {
        if let Ok(mut p) = POOL.lock() {
            if p.len() < POOL_MAX {
                POOLED_BYTES.fetch_add(self.bytes() as u64, Ordering::Relaxed);
                p.push(self);
            }
        }
    }

    /// Heap bytes of the scratch spaces waiting in the pool.
    pub fn pooled_bytes() -> u64 {
        POOLED_BYTES.load(Ordering::Relaxed)
    }

    /// Heap bytes this scratch space holds.
    fn bytes(&self) -> usize {
        let n = |v: &NodeValues| v.values.capacity() * 8 + v.touched.capacity() * 4;
        let m = |m: &Memo| (m.slots.capacity() + m.set.capacity()) * 4;
        n(&self.values)
            + n(&self.gids)
            + n(&self.spare)
            + m(&self.nodes)
            + m(&self.names)
            + m(&self.keep)
            + m(&self.depth)
            + self.pairs.capacity() * 16
            + self.path.capacity() * 4
    }

    /// Sizes the per-node arrays for sources of up to `nodes` stack nodes and
    /// `names` functions and locations, and the per-frame ones for a frame tree of
    /// `frames` nodes, and has the kernel map every page now. The first query after
    /// a restart paid for those pages (tens of megabytes a query thread) in page
    /// faults; the warm-up pays instead.
    pub fn prefault(&mut self, nodes: usize, frames: usize, names: usize) {
        self.values.prepare(nodes);
        touch(&mut self.values.values);
        for v in [&mut self.gids, &mut self.spare] {
            v.prepare(frames);
            touch(&mut v.values);
        }
        for (m, n) in [
            (&mut self.nodes, nodes),
            (&mut self.keep, nodes),
            (&mut self.depth, nodes),
            (&mut self.names, names),
        ] {
            m.prepare(n);
            touch(&mut m.slots);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drain_returns_sorted_nonzero_sums_and_resets() {
        let mut v = NodeValues::default();
        v.prepare(10);
        v.add(7, 3);
        v.add(2, 5);
        v.add(7, -3); // back to zero: dropped
        v.add(7, 4); // touched twice
        v.add(99, 1); // out of range: ignored
        let mut out = Vec::new();
        v.drain(&mut out);
        assert_eq!(out, vec![(2, 5), (7, 4)]);
        v.drain(&mut out);
        assert!(out.is_empty());
        assert!(v.values.iter().all(|&x| x == 0));
    }

    /// A prefaulted space has every per-node and per-frame array at the asked
    /// size, still zero (clean), and counts them in its bytes.
    #[test]
    fn prefault_sizes_every_array_and_leaves_it_clean() {
        let mut s = Scratch::default();
        s.prefault(5000, 7000, 300);
        assert_eq!(s.values.values.len(), 5000);
        assert_eq!((s.gids.values.len(), s.spare.values.len()), (7000, 7000));
        for m in [&s.nodes, &s.keep, &s.depth] {
            assert_eq!(m.slots.len(), 5000);
        }
        assert_eq!(s.names.slots.len(), 300);
        assert!(s.values.values.iter().all(|&v| v == 0));
        assert!(s.nodes.slots.iter().all(|&v| v == 0));
        assert!(s.bytes() >= 5000 * 8 + 2 * 7000 * 8 + 3 * 5000 * 4 + 300 * 4);
        // Growing is all a prefault does: a smaller ask shrinks nothing.
        s.prefault(10, 10, 10);
        assert_eq!(s.values.values.len(), 5000);
    }

    #[test]
    fn memo_resets_only_what_was_set() {
        let mut m = Memo::default();
        m.prepare(5);
        m.set(1, 10);
        m.set(1, 11);
        m.set(4, 0);
        assert_eq!(m.get(1), Some(11));
        assert_eq!(m.get(4), Some(0));
        assert_eq!(m.get(2), None);
        assert_eq!(m.set.len(), 2);
        m.reset();
        assert!((0..5).all(|i| m.get(i).is_none()));
    }
}
