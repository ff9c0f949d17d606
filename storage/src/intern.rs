//! The stack interner: ids for stacks that stay the same from one batch to the next.
//!
//! Every push repeats its profile's symbol table, and a head partition interned
//! each stack of each batch by its frames: names hashed, then the partition's stack
//! tree walked node by node to confirm the hit (one cache miss a frame). That ran on
//! the single writer thread. Now the callers' threads (the decoders, in parallel)
//! give each stack a store-wide id here, confirmed against a contiguous copy of its
//! path, and the writer maps that id to its partition's stack node with one lookup
//! of an integer. Only a stack the partition has not seen yet takes the old way.
//!
//! Bounded by bytes: past its budget the interner starts a new *generation* with
//! empty tables. An id means the same stack for the whole of its generation, and a
//! partition drops its id map when the generation changes, so no id is ever read
//! with another generation's meaning. Ids are not persisted: replay gives an id
//! record's stacks and locations ids of a generation of its own (`store::symlog`),
//! and a full record takes the old way.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use rustc_hash::{FxHashMap, FxHasher};

use crate::model::{Batch, Stacks};

/// A stack the interner left without an id (a hash collision, or interning off).
pub const NOT_INTERNED: u32 = u32::MAX;

/// What [`StackInterner::intern`] gives a batch: a store-wide id per batch stack.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Interned {
    /// The interner's generation the ids belong to.
    pub generation: u64,
    /// Indexed by the batch's stack index; [`NOT_INTERNED`] where there is none.
    pub stacks: Vec<u32>,
    /// The ids of the batch's functions, indexed like its table ([`NOT_INTERNED`]
    /// where there is none). With the two below, what a WAL record that names
    /// stacks by id needs to define them (`store::symlog`).
    pub functions: Vec<u32>,
    /// The ids of the batch's mappings.
    pub mappings: Vec<u32>,
    /// The ids of the batch's locations.
    pub locations: Vec<u32>,
}

impl Interned {
    /// Whether every stack of the batch has an id.
    pub fn is_complete(&self) -> bool {
        !self.stacks.contains(&NOT_INTERNED)
    }
}

/// Store-wide ids for functions, mappings, locations and stacks (see the module
/// docs). Shared by every thread that writes.
pub struct StackInterner {
    tables: Mutex<Tables>,
    max_bytes: usize,
    /// Approximate bytes held, for `/metrics`.
    bytes: AtomicU64,
    stacks: AtomicU64,
    resets: AtomicU64,
}

/// Items found by a 64-bit hash and confirmed by comparison. Two different items
/// with one hash: the later one gets no id (its stacks take the slow way, as they
/// did before the interner), so a collision costs speed, never a wrong id.
struct Table<K> {
    by_hash: FxHashMap<u64, u32>,
    items: Vec<K>,
}

impl<K> Default for Table<K> {
    fn default() -> Self {
        Table {
            by_hash: FxHashMap::default(),
            items: Vec::new(),
        }
    }
}

impl<K> Table<K> {
    /// What each of `hashes` finds, probed in one pass so that the cache misses
    /// of the independent probes overlap (see [`Tables::stacks_of`]).
    fn probe(&self, hashes: &[u64]) -> Vec<Option<u32>> {
        hashes
            .iter()
            .map(|h| self.by_hash.get(h).copied())
            .collect()
    }

    fn id(&mut self, hash: u64, is: impl FnOnce(&K) -> bool, make: impl FnOnce() -> K) -> u32 {
        match self.by_hash.get(&hash) {
            Some(&id) => {
                if is(&self.items[id as usize]) {
                    id
                } else {
                    NOT_INTERNED
                }
            }
            None => {
                let id = self.items.len() as u32;
                self.items.push(make());
                self.by_hash.insert(hash, id);
                id
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct LocationKey {
    function: u32,
    mapping: u32,
    address: u64,
    line: u32,
}

#[derive(Default)]
struct Tables {
    generation: u64,
    /// Pairs of names as spans of `names` (see [`Pair`]).
    functions: Table<Pair>,
    /// A mapping's file and build id; [`Tables::mappings`] adds its range.
    mapping_names: Table<Pair>,
    /// A mapping: its names' id and its address range. Processes map one binary
    /// at different addresses, and the range is what turns an address into a
    /// place in the file: one id per range, or a replayed WAL would read one
    /// process's addresses through another's range.
    mappings: Table<(u32, [u64; 3])>,
    locations: Table<LocationKey>,
    /// Each stack's path as `(start, len)` in `paths`.
    stacks: Table<(u32, u32)>,
    /// Every stack's location ids, root first, end to end: no allocation per stack.
    paths: Vec<u32>,
    /// Every pair's two names, end to end: no allocation per pair.
    names: Vec<u8>,
}

/// Bytes per entry of each table: the item, its hash-map slot and slack (names and
/// paths are counted in their arenas).
const FUNCTION_BYTES: usize = 32;
const LOCATION_BYTES: usize = 48;
const STACK_BYTES: usize = 48;

impl Tables {
    fn approx_bytes(&self) -> usize {
        self.names.capacity()
            + (self.functions.items.len()
                + self.mapping_names.items.len()
                + self.mappings.items.len())
                * FUNCTION_BYTES
            + self.locations.items.len() * LOCATION_BYTES
            + self.stacks.items.len() * STACK_BYTES
            + self.paths.capacity() * 4
    }

    fn clear(&mut self) {
        *self = Tables {
            generation: self.generation + 1,
            ..Tables::default()
        };
    }

    fn stack(&mut self, path: &[u32]) -> u32 {
        let (Ok(start), Ok(len)) = (u32::try_from(self.paths.len()), u32::try_from(path.len()))
        else {
            return NOT_INTERNED;
        };
        if start.checked_add(len).is_none() {
            return NOT_INTERNED;
        }
        let hash = path_hash(path);
        let before = self.stacks.items.len();
        let paths = &self.paths;
        let id = self.stacks.id(
            hash,
            |&(s, l)| paths.get(s as usize..(s + l) as usize) == Some(path),
            || (start, len),
        );
        if self.stacks.items.len() > before {
            self.paths.extend_from_slice(path);
        }
        id
    }

    /// Ids for a batch's stacks, given its locations' ids. In passes over every
    /// stack, each doing one kind of lookup, so the cache misses of a pass overlap
    /// instead of waiting on each other: the tables outgrow the caches with the
    /// fleet's stacks, and a stack's probe, its entry and its stored path are one
    /// miss each (a fifth of the decoders' time when looked up one stack at a time).
    fn stacks_of(&mut self, stacks: &Stacks, locations: &[u32]) -> Vec<u32> {
        // Each stack's path in interned location ids, end to end; `None` for a
        // stack with a location the interner has no id for.
        let mut paths: Vec<u32> = Vec::new();
        let spans: Vec<Option<(usize, usize)>> = stacks
            .iter()
            .map(|s| {
                let start = paths.len();
                for &l in s {
                    match locations.get(l as usize) {
                        Some(&g) if g != NOT_INTERNED => paths.push(g),
                        _ => {
                            paths.truncate(start);
                            return None;
                        }
                    }
                }
                Some((start, paths.len()))
            })
            .collect();
        let hashes: Vec<u64> = spans
            .iter()
            .map(|span| span.map_or(0, |(a, b)| path_hash(&paths[a..b])))
            .collect();
        let found = self.stacks.probe(&hashes);
        let stored: Vec<Option<(u32, u32)>> = found
            .iter()
            .map(|f| f.and_then(|id| self.stacks.items.get(id as usize).copied()))
            .collect();
        let mut ids = Vec::with_capacity(spans.len());
        for ((span, id), at) in spans.into_iter().zip(found).zip(stored) {
            let Some((a, b)) = span else {
                ids.push(NOT_INTERNED);
                continue;
            };
            let path = &paths[a..b];
            ids.push(match (id, at) {
                (Some(id), Some((s, l))) => {
                    let kept = self.paths.get(s as usize..s as usize + l as usize);
                    if kept == Some(path) {
                        id
                    } else {
                        NOT_INTERNED
                    }
                }
                // New here, or added by a stack before it in this batch: the
                // one-at-a-time way, which probes again.
                _ => self.stack(path),
            });
        }
        ids
    }
}

fn path_hash(path: &[u32]) -> u64 {
    hash_of(|h| path.hash(h))
}

/// Two names (a function's name and file, a mapping's file and build id) as a
/// span of [`Tables::names`]: `a` is `len_a` bytes from `start`, `b` follows.
#[derive(Clone, Copy)]
struct Pair {
    start: u32,
    len_a: u32,
    len_b: u32,
}

impl Pair {
    fn is(self, names: &[u8], a: &str, b: &str) -> bool {
        let (s, la, lb) = (
            self.start as usize,
            self.len_a as usize,
            self.len_b as usize,
        );
        let matches = |from: usize, len: usize, x: &str| {
            names
                .get(from..from + len)
                .is_some_and(|y| crate::byte_eq::eq(y, x.as_bytes()))
        };
        matches(s, la, a) && matches(s + la, lb, b)
    }
}

/// The id of the pair `a`, `b` in `table`, its names kept in `names`. A pair whose
/// span would not fit in `u32`s (the decoders' limits refuse names that long
/// long before) gets no id: a miss, never a wrong id.
fn names(table: &mut Table<Pair>, names: &mut Vec<u8>, hash: u64, a: &str, b: &str) -> u32 {
    let span = (
        u32::try_from(names.len()),
        u32::try_from(a.len()),
        u32::try_from(b.len()),
    );
    let (Ok(start), Ok(len_a), Ok(len_b)) = span else {
        return NOT_INTERNED;
    };
    if start
        .checked_add(len_a)
        .and_then(|e| e.checked_add(len_b))
        .is_none()
    {
        return NOT_INTERNED;
    }
    let before = table.items.len();
    let id = table.id(
        hash,
        |k| k.is(names, a, b),
        || Pair {
            start,
            len_a,
            len_b,
        },
    );
    if table.items.len() > before {
        names.extend_from_slice(a.as_bytes());
        names.extend_from_slice(b.as_bytes());
    }
    id
}

fn pair_hash(a: &str, b: &str) -> u64 {
    hash_of(|h| {
        a.hash(h);
        b.hash(h);
    })
}

fn hash_of(f: impl FnOnce(&mut FxHasher)) -> u64 {
    let mut h = FxHasher::default();
    f(&mut h);
    h.finish()
}

impl StackInterner {
    /// An interner holding at most about `max_bytes` (0: interning off, every
    /// stack takes the slow way).
    pub fn new(max_bytes: usize) -> Self {
        StackInterner {
            tables: Mutex::new(Tables::default()),
            max_bytes,
            bytes: AtomicU64::new(0),
            stacks: AtomicU64::new(0),
            resets: AtomicU64::new(0),
        }
    }

    /// Ids for every stack of `batch` (which passed [`Batch::validate`]).
    pub fn intern(&self, batch: &Batch) -> Interned {
        if self.max_bytes == 0 {
            return Interned {
                generation: 0,
                stacks: vec![NOT_INTERNED; batch.stacks.len()],
                ..Interned::default()
            };
        }
        let syms = &batch.symbols;
        // Names are hashed before the lock: the other decoders need it meanwhile.
        let function_hashes: Vec<u64> = syms
            .functions
            .iter()
            .map(|f| pair_hash(&f.name, &f.file))
            .collect();
        let mut guard = self.tables.lock();
        let t = &mut *guard;
        // Checked before the batch, so all its ids are of one generation; one
        // batch can overshoot the budget by its own size, which its decoder limits.
        if t.approx_bytes() > self.max_bytes {
            t.clear();
            self.resets.fetch_add(1, Ordering::Relaxed);
        }
        let functions: Vec<u32> = syms
            .functions
            .iter()
            .zip(&function_hashes)
            .map(|(f, &h)| names(&mut t.functions, &mut t.names, h, &f.name, &f.file))
            .collect();
        let mappings: Vec<u32> = syms
            .mappings
            .iter()
            .map(|m| {
                let h = pair_hash(&m.file, &m.build_id);
                let pair = names(&mut t.mapping_names, &mut t.names, h, &m.file, &m.build_id);
                if pair == NOT_INTERNED {
                    return NOT_INTERNED;
                }
                let key = (pair, [m.start, m.limit, m.offset]);
                t.mappings
                    .id(hash_of(|h| key.hash(h)), |k| *k == key, || key)
            })
            .collect();
        // A location's function or mapping as a key: 0 for none, id + 1 for one;
        // `None` when it has one without an id (then the location has none).
        let opt = |v: Option<u32>, ids: &[u32]| match v {
            None => Some(0),
            Some(i) => ids
                .get(i as usize)
                .copied()
                .filter(|&x| x != NOT_INTERNED)
                .map(|x| x + 1),
        };
        let locations: Vec<u32> = syms
            .locations
            .iter()
            .map(|l| {
                let (Some(function), Some(mapping)) =
                    (opt(l.function, &functions), opt(l.mapping, &mappings))
                else {
                    return NOT_INTERNED;
                };
                let key = LocationKey {
                    function,
                    mapping,
                    address: l.address,
                    line: l.line,
                };
                t.locations
                    .id(hash_of(|h| key.hash(h)), |k| *k == key, || key)
            })
            .collect();
        let stacks = t.stacks_of(&batch.stacks, &locations);
        self.bytes.store(t.approx_bytes() as u64, Ordering::Relaxed);
        self.stacks
            .store(t.stacks.items.len() as u64, Ordering::Relaxed);
        Interned {
            generation: t.generation,
            stacks,
            functions,
            mappings,
            locations,
        }
    }

    /// Approximate bytes held.
    pub fn approx_bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Stacks with an id in the current generation.
    pub fn stack_count(&self) -> u64 {
        self.stacks.load(Ordering::Relaxed)
    }

    /// Times the tables were emptied for being over budget.
    pub fn resets(&self) -> u64 {
        self.resets.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests;
