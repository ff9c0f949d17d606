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
                .is_some_and(|y| crate::bytes::eq(y, x.as_bytes()))
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
mod tests {
    use super::*;
    use crate::head::HeadPartition;
    use crate::model::{Function, Labels, Location, Mapping, Sample, SeriesSamples, TenantId};
    use proptest::prelude::*;

    /// A batch whose stacks are given as function names (root first), every
    /// function in `lib.so`; the symbol tables list the functions in `order`
    /// (so the same stack has different batch indices in different batches).
    fn batch(stacks: &[&[&str]], reversed: bool, t: i64) -> Batch {
        let mut b = Batch::new(TenantId::default());
        b.symbols.mappings.push(Mapping {
            file: "lib.so".into(),
            build_id: String::new(),
            ..Mapping::default()
        });
        let mut names: Vec<&str> = stacks.iter().flat_map(|s| s.iter().copied()).collect();
        names.sort_unstable();
        names.dedup();
        if reversed {
            names.reverse();
        }
        for (i, n) in names.iter().enumerate() {
            b.symbols.functions.push(Function {
                name: (*n).into(),
                file: "x.go".into(),
            });
            b.symbols.locations.push(Location {
                function: Some(i as u32),
                mapping: Some(0),
                address: 0,
                line: 1,
            });
        }
        let mut samples = Vec::new();
        for s in stacks {
            let path: Vec<u32> = s
                .iter()
                .map(|n| names.iter().position(|x| x == n).unwrap() as u32)
                .collect();
            let stack = b.stacks.push(&path);
            samples.push(Sample {
                timestamp_ms: t,
                stack,
                value: 1,
            });
        }
        b.series.push(SeriesSamples {
            labels: Labels::new([("__profile_type__", "cpu:samples:count:cpu:nanoseconds")]),
            samples,
        });
        b.validate().unwrap();
        b
    }

    #[test]
    fn a_stack_keeps_its_id_from_batch_to_batch() {
        let i = StackInterner::new(1 << 20);
        let a = i.intern(&batch(&[&["main", "f"], &["main", "g"]], false, 0));
        let b = i.intern(&batch(
            &[&["main", "g"], &["main"], &["main", "f"]],
            true,
            0,
        ));
        assert_eq!(a.generation, b.generation);
        assert_eq!(a.stacks, [0, 1]);
        // Same stacks, other batch indices and symbol order: same ids; `main`
        // alone is a stack of its own.
        assert_eq!(b.stacks, [1, 2, 0]);
        assert_eq!(i.stack_count(), 3);
        assert!(i.approx_bytes() > 0);
    }

    #[test]
    fn a_new_stack_twice_in_one_batch_gets_one_id() {
        // Both copies miss the probe made before either was added: the second
        // must find the first's entry, not add a second one.
        let i = StackInterner::new(1 << 20);
        let a = i.intern(&batch(
            &[&["main", "f"], &["main"], &["main", "f"], &["main"]],
            false,
            0,
        ));
        assert_eq!(a.stacks, [0, 1, 0, 1]);
        assert_eq!(i.stack_count(), 2);
        let b = i.intern(&batch(&[&["main"], &["main", "f"], &["main"]], true, 0));
        assert_eq!(b.stacks, [1, 0, 1]);
        assert_eq!(i.stack_count(), 2);
    }

    #[test]
    fn frames_that_differ_only_in_what_is_unknown_get_different_ids() {
        let i = StackInterner::new(1 << 20);
        let mut b = batch(&[&["f"]], false, 0);
        // The same address and line, once without a function, once without a
        // mapping: three different frames.
        let f = b.symbols.locations[0];
        b.symbols.locations.push(Location {
            function: None,
            ..f
        });
        b.symbols.locations.push(Location { mapping: None, ..f });
        b.stacks.push(&[1]);
        b.stacks.push(&[2]);
        let got = i.intern(&b);
        assert_eq!(got.stacks, [0, 1, 2]);
        // A function with another file is another function.
        let mut c = batch(&[&["f"]], false, 0);
        c.symbols.functions[0].file = "y.go".into();
        assert_eq!(i.intern(&c).stacks, [3]);
    }

    #[test]
    fn over_budget_it_starts_a_new_generation() {
        let i = StackInterner::new(1);
        let a = i.intern(&batch(&[&["main", "f"]], false, 0));
        let b = i.intern(&batch(&[&["main", "f"]], false, 0));
        assert_eq!((a.generation, a.stacks.as_slice()), (0, &[0][..]));
        // The first batch put it over its one byte: the tables were emptied.
        assert_eq!((b.generation, b.stacks.as_slice()), (1, &[0][..]));
        assert_eq!(i.resets(), 1);
    }

    #[test]
    fn a_pair_matches_only_its_own_split() {
        let (mut table, mut arena) = (Table::default(), Vec::new());
        let h = pair_hash("ab", "c");
        assert_eq!(names(&mut table, &mut arena, h, "ab", "c"), 0);
        assert_eq!(names(&mut table, &mut arena, h, "ab", "c"), 0);
        // Same hash, other split or other bytes: no id, never the first pair's.
        for (a, b) in [("a", "bc"), ("abc", ""), ("ab", "cd"), ("", "abc")] {
            assert_eq!(
                names(&mut table, &mut arena, h, a, b),
                NOT_INTERNED,
                "{a:?} {b:?}"
            );
        }
        let e = pair_hash("", "");
        assert_eq!(names(&mut table, &mut arena, e, "", ""), 1);
        assert_eq!(names(&mut table, &mut arena, e, "", ""), 1);
        assert_eq!(arena, b"abc");
    }

    #[test]
    fn paths_share_one_arena_and_keep_their_ids() {
        let mut t = Tables::default();
        let a = t.stack(&[1, 2, 3]);
        let b = t.stack(&[1, 2]);
        let c = t.stack(&[]);
        assert_eq!((a, b, c), (0, 1, 2));
        assert_eq!(
            (t.stack(&[1, 2]), t.stack(&[1, 2, 3]), t.stack(&[])),
            (1, 0, 2)
        );
        assert_eq!(t.paths, [1, 2, 3, 1, 2]);
    }

    #[test]
    fn with_no_budget_no_stack_gets_an_id() {
        let i = StackInterner::new(0);
        let got = i.intern(&batch(&[&["main"], &["f"]], false, 0));
        assert_eq!(got.stacks, [NOT_INTERNED, NOT_INTERNED]);
        assert_eq!(i.stack_count(), 0);
    }

    const NAMES: [&str; 5] = ["main", "run", "parse", "alloc", "write"];

    fn stacks_strategy() -> impl Strategy<Value = Vec<Vec<usize>>> {
        prop::collection::vec(prop::collection::vec(0..NAMES.len(), 0..5), 1..6)
    }

    proptest! {
        /// What the writer builds with interned ids is exactly what it builds from
        /// the frames alone: the same dictionary (node for node) and the same rows,
        /// whatever the budget (resets), and with batches applied in another order
        /// than they were interned (a decoder's batch of an older generation
        /// arriving after a newer one).
        #[test]
        fn interned_ids_change_nothing_the_head_holds(
            batches in prop::collection::vec((stacks_strategy(), any::<bool>()), 1..12),
            budget in prop_oneof![Just(0usize), Just(1usize), Just(300usize), Just(1usize << 20)],
            order_seed in any::<u64>(),
        ) {
            let interner = StackInterner::new(budget);
            let built: Vec<(Batch, Interned)> = batches
                .iter()
                .enumerate()
                .map(|(n, (stacks, reversed))| {
                    let names: Vec<Vec<&str>> = stacks
                        .iter()
                        .map(|s| s.iter().map(|&i| NAMES[i]).collect())
                        .collect();
                    let refs: Vec<&[&str]> = names.iter().map(|s| s.as_slice()).collect();
                    let b = batch(&refs, *reversed, n as i64 * 1000);
                    let ids = interner.intern(&b);
                    (b, ids)
                })
                .collect();
            let mut order: Vec<usize> = (0..built.len()).collect();
            let mut x = order_seed | 1;
            for i in (1..order.len()).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                order.swap(i, (x % (i as u64 + 1)) as usize);
            }
            let mut with = HeadPartition::new(TenantId::default(), 0, 3_600_000, 1000);
            let mut without = HeadPartition::new(TenantId::default(), 0, 3_600_000, 1000);
            for (lsn, &k) in order.iter().enumerate() {
                let (b, ids) = &built[k];
                let a = with.apply(lsn as u64 + 1, b, Some(ids));
                let c = without.apply(lsn as u64 + 1, b, None);
                prop_assert_eq!(a, c);
            }
            prop_assert_eq!(with.dict(), without.dict());
            let rows = |p: &HeadPartition| {
                let mut v = Vec::new();
                p.for_each_row(0, &mut |t, s, x| v.push((t, s, x))).unwrap();
                v.sort_unstable();
                v
            };
            prop_assert_eq!(rows(&with), rows(&without));
        }
    }
}
