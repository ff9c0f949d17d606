//! The per-window aggregation of raw samples: `(event, pid, cgroup, stack) → (count,
//! summed periods)`.
//!
//! Samples are aggregated raw (addresses) while the window is open and symbolized only
//! when it closes, so the hot path is one hash-map update. The number of distinct keys
//! is bounded: samples that would add a key past the bound are counted as dropped.

use std::collections::HashMap;
use std::time::SystemTime;

/// Addresses at or above this are kernel addresses (x86_64 and aarch64 split).
pub const KERNEL_START: u64 = 1 << 63;

/// Whether an address lies in the kernel half of the address space.
pub fn is_kernel_addr(addr: u64) -> bool {
    addr >= KERNEL_START
}

/// What one raw stack is aggregated by.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RawKey {
    /// Index into the agent's event list.
    pub event: u8,
    pub pid: u32,
    /// cgroup id (0 when unknown).
    pub cgroup: u64,
    /// Instruction addresses, leaf first; kernel frames before user frames.
    pub frames: Box<[u64]>,
}

/// Samples of one key: how many, and the sum of their periods (events counted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Tally {
    pub count: u64,
    pub weight: u64,
}

/// One push window of raw samples.
#[derive(Debug)]
pub struct Window {
    counts: HashMap<RawKey, Tally>,
    max_keys: usize,
    /// Samples that did not fit because of `max_keys`.
    pub dropped_samples: u64,
    /// Samples added (kept or not).
    pub total_samples: u64,
    pub start: SystemTime,
}

impl Window {
    /// A window that keeps at most `max_keys` distinct stacks.
    pub fn new(max_keys: usize) -> Self {
        Self {
            counts: HashMap::new(),
            max_keys,
            dropped_samples: 0,
            total_samples: 0,
            start: SystemTime::now(),
        }
    }

    /// Adds `count` samples of `key` whose periods sum to `weight`. Returns false if
    /// it was dropped for the bound.
    pub fn add(&mut self, key: RawKey, count: u64, weight: u64) -> bool {
        self.total_samples += count;
        if let Some(c) = self.counts.get_mut(&key) {
            c.count += count;
            c.weight += weight;
            return true;
        }
        if self.counts.len() >= self.max_keys {
            self.dropped_samples += count;
            return false;
        }
        self.counts.insert(key, Tally { count, weight });
        true
    }

    pub fn len(&self) -> usize {
        self.counts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Takes the window's contents (sorted, for reproducible output), leaving it empty
    /// and restarted at `now`.
    pub fn take(&mut self, now: SystemTime) -> Vec<(RawKey, Tally)> {
        let mut v: Vec<_> = self.counts.drain().collect();
        v.sort_unstable();
        self.start = now;
        self.dropped_samples = 0;
        self.total_samples = 0;
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(event: u8, pid: u32, frames: &[u64]) -> RawKey {
        RawKey {
            event,
            pid,
            cgroup: 0,
            frames: frames.into(),
        }
    }

    #[test]
    fn counts_and_bound() {
        let mut w = Window::new(2);
        assert!(w.add(key(0, 1, &[1, 2]), 1, 10));
        assert!(w.add(key(0, 1, &[1, 2]), 2, 20));
        assert!(w.add(key(1, 1, &[1, 2]), 1, 7));
        // third distinct key is over the bound
        assert!(!w.add(key(0, 2, &[1, 2]), 5, 50));
        // but existing keys still count
        assert!(w.add(key(0, 1, &[1, 2]), 1, 10));
        assert_eq!(w.len(), 2);
        assert_eq!(w.dropped_samples, 5);
        assert_eq!(w.total_samples, 10);
        let taken = w.take(SystemTime::now());
        assert_eq!(
            taken,
            vec![
                (
                    key(0, 1, &[1, 2]),
                    Tally {
                        count: 4,
                        weight: 40
                    }
                ),
                (
                    key(1, 1, &[1, 2]),
                    Tally {
                        count: 1,
                        weight: 7
                    }
                )
            ]
        );
        assert!(w.is_empty());
        assert_eq!(w.dropped_samples, 0);
    }

    #[test]
    fn kernel_split() {
        assert!(is_kernel_addr(0xffff_ffff_8100_0000));
        assert!(!is_kernel_addr(0x5555_5555_0000));
    }
}
