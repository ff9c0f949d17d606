//! A loaded segment's memo of stack node → frame-tree id (gid).
//!
//! The memo lives with the decoded segment (it is valid as long as the segment is
//! immutable and cached) but its meaning belongs to the query layer's frame tree
//! (`query::frames`): this module only stores numbers, so the segment layer needs
//! nothing from above it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// The persistent node → gid memo of an immutable segment, for one generation of
/// the frame tree. Slots hold `gid + 1`; zero means "not resolved yet".
pub struct GidSlots {
    generation: u64,
    slots: Box<[AtomicU32]>,
}

impl GidSlots {
    /// The gid memoized for stack node `node`, if any.
    #[inline]
    pub fn get(&self, node: u32) -> Option<u32> {
        match self
            .slots
            .get(node as usize)
            .map(|s| s.load(Ordering::Relaxed))
        {
            Some(v) if v != 0 => Some(v - 1),
            _ => None,
        }
    }

    /// Remembers `gid` for stack node `node` (ignored when out of range).
    #[inline]
    pub fn set(&self, node: u32, gid: u32) {
        if let (Some(s), Some(v)) = (self.slots.get(node as usize), gid.checked_add(1)) {
            s.store(v, Ordering::Relaxed);
        }
    }
}

/// Held by a loaded segment: its gid slots for the current generation.
#[derive(Default)]
pub struct GidMemo {
    current: Mutex<Option<Arc<GidSlots>>>,
}

impl std::fmt::Debug for GidMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GidMemo")
    }
}

impl GidMemo {
    /// The slots of `generation` for a dictionary of `nodes` stack nodes.
    pub fn slots(&self, generation: u64, nodes: usize) -> Arc<GidSlots> {
        let mut cur = self.current.lock();
        match &*cur {
            Some(s) if s.generation == generation && s.slots.len() == nodes => s.clone(),
            _ => {
                let s = Arc::new(GidSlots {
                    generation,
                    slots: (0..nodes).map(|_| AtomicU32::new(0)).collect(),
                });
                *cur = Some(s.clone());
                s
            }
        }
    }
}
