//! The frame tree's child map: `(parent gid, name id) → child gid`.
//!
//! It holds every frame of a tenant (millions of entries, tens of megabytes), so
//! nearly every lookup misses the processor's caches. A general hash map gives no
//! way to ask for a key's memory before it is needed; this one is open addressing
//! with linear probing over 16-byte slots, so [`ChildMap::prefetch`] can start
//! loading a key's slot while earlier keys are being looked up (resolving a day's
//! stacks after a restart looks up millions of keys whose parents are known in
//! advance, see `FrameTree::resolve_by_depth`).

/// One slot: a packed `(parent, name)` key and the child's gid; gid 0 (the root,
/// which is nobody's child) marks an empty slot.
#[derive(Clone, Copy, Default)]
struct Slot {
    key: u64,
    gid: u32,
}

/// `(parent gid, name id) → child gid`; see the module docs.
#[derive(Default)]
pub(super) struct ChildMap {
    /// A power of two long (or empty).
    slots: Vec<Slot>,
    len: usize,
}

/// At most this share of slots is used (linear probing slows down sharply past it).
const MAX_LOAD: (usize, usize) = (3, 4);

fn key(parent: u32, name: u32) -> u64 {
    (u64::from(parent) << 32) | u64::from(name)
}

impl ChildMap {
    #[cfg(test)]
    fn len(&self) -> usize {
        self.len
    }

    /// Heap bytes held.
    pub(super) fn bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
    }

    /// The slot a key's probe starts at (Fibonacci hashing: the product's top bits).
    fn home(&self, key: u64) -> usize {
        let bits = self.slots.len().trailing_zeros();
        if bits == 0 {
            return 0;
        }
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits)) as usize
    }

    /// The child of `parent` named `name`, if there is one.
    pub(super) fn get(&self, parent: u32, name: u32) -> Option<u32> {
        if self.slots.is_empty() {
            return None;
        }
        let (k, mask) = (key(parent, name), self.slots.len() - 1);
        let mut i = self.home(k);
        loop {
            let s = self.slots[i];
            if s.gid == 0 {
                return None;
            }
            if s.key == k {
                return Some(s.gid);
            }
            i = (i + 1) & mask;
        }
    }

    /// The child of `parent` named `name`, or `next` once recorded as that child
    /// (`next` must not be 0). The bool says whether it was inserted.
    pub(super) fn get_or_insert(&mut self, parent: u32, name: u32, next: u32) -> (u32, bool) {
        debug_assert_ne!(next, 0, "gid 0 marks an empty slot");
        if (self.len + 1) * MAX_LOAD.1 > self.slots.len() * MAX_LOAD.0 {
            self.grow();
        }
        let (k, mask) = (key(parent, name), self.slots.len() - 1);
        let mut i = self.home(k);
        loop {
            let s = self.slots[i];
            if s.gid == 0 {
                self.slots[i] = Slot { key: k, gid: next };
                self.len += 1;
                return (next, true);
            }
            if s.key == k {
                return (s.gid, false);
            }
            i = (i + 1) & mask;
        }
    }

    /// Starts loading the slot where `(parent, name)`'s probe begins.
    #[inline]
    pub(super) fn prefetch(&self, parent: u32, name: u32) {
        if let Some(slot) = self.slots.get(self.home(key(parent, name))) {
            prefetch(slot);
        }
    }

    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(16);
        let old = std::mem::replace(&mut self.slots, vec![Slot::default(); size]);
        let mask = size - 1;
        for s in old.into_iter().filter(|s| s.gid != 0) {
            let mut i = self.home(s.key);
            while self.slots[i].gid != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = s;
        }
    }
}

/// Asks the processor to bring `p`'s cache line in; nothing waits for it.
#[inline]
fn prefetch<T>(p: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it reads nothing the program sees, and the
    // address comes from a reference, so it is valid besides.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((p as *const T).cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    proptest! {
        /// Against a `HashMap`: the first insert of a key wins, later ones read
        /// it back, and every key reads back after the map grew past it.
        #[test]
        fn behaves_like_a_hash_map(keys in proptest::collection::vec((0u32..64, 0u32..64), 0..400)) {
            let mut m = ChildMap::default();
            let mut want: HashMap<(u32, u32), u32> = HashMap::new();
            for (i, &(p, n)) in keys.iter().enumerate() {
                let next = i as u32 + 1;
                let expect = *want.entry((p, n)).or_insert(next);
                m.prefetch(p, n);
                prop_assert_eq!(m.get_or_insert(p, n, next), (expect, expect == next));
            }
            prop_assert_eq!(m.len(), want.len());
            for (&(p, n), &g) in &want {
                prop_assert_eq!(m.get(p, n), Some(g));
            }
            prop_assert_eq!(m.get(999, 0), None);
        }
    }
}
