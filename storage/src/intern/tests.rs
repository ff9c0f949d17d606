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
