//! Segments written on a symbol base (`base.rs`, `rebase.rs`, the writer's
//! codec 3) against the same segments written whole.

use std::borrow::Cow;
use std::path::Path;

use super::writer::{write_segment_on, BaseChoice};
use super::*;
use crate::dict::{Dict, DictBuilder, LocationRec};
use crate::model::Labels;

const STACKS: u32 = 1500;

/// A dictionary of `STACKS` stacks twelve frames deep over 60 functions, built
/// in `order` (so two segments number the same stacks differently).
fn dict_of(order: impl Iterator<Item = u32>) -> (Dict, Vec<(u32, u32)>) {
    let mut b = DictBuilder::new();
    let mut leaves = Vec::new();
    for i in order {
        let locs: Vec<u32> = (0..12u32)
            .map(|k| {
                let f = (i.wrapping_mul(7) + k * 13 + (i >> (k % 8))) % 60;
                let function = Some(b.function(&format!("fn_{f}"), "lib.rs"));
                b.location(LocationRec {
                    function,
                    mapping: None,
                    address: u64::from(f),
                    line: k,
                })
            })
            .collect();
        leaves.push((i, b.stack(&locs)));
    }
    (b.finish(), leaves)
}

/// The segment of stacks `from..to`: two series, a row per stack at a few steps.
fn input(id: u64, from: u32, to: u32, rev: bool) -> SegmentInput<'static> {
    let order: Vec<u32> = match rev {
        false => (from..to).collect(),
        true => (from..to).rev().collect(),
    };
    let (dict, leaves) = dict_of(order.into_iter());
    let series = ["a", "b"]
        .iter()
        .map(|s| {
            let rows = leaves
                .iter()
                .flat_map(|&(i, stack)| {
                    (0..3u32).map(move |t| Row {
                        t,
                        stack,
                        value: i64::from(i % 17 + t + 1),
                    })
                })
                .collect();
            (
                Labels::new([("__profile_type__", "a:b:c:d:e"), ("service_name", s)]),
                rows,
            )
        })
        .collect();
    SegmentInput {
        meta: SegmentMeta::for_test(id, 86_400_000 * id as i64, 86_400_000),
        dict: Cow::Owned(dict),
        series,
    }
}

/// Every row as (series, step, the stack's function names root first, value).
fn rows(file: &SegmentFile) -> Vec<(u32, u32, Vec<String>, i64)> {
    let seg = file.load().unwrap();
    let d = seg.dict().unwrap();
    let mut out = Vec::new();
    for s in 0..seg.series.len() as u32 {
        seg.for_each_row(s, |t, stack, v| {
            let names = d
                .stack(stack)
                .into_iter()
                .map(|l| {
                    let f = d.locations[l as usize].function.unwrap();
                    d.str(d.functions[f as usize].name).to_owned()
                })
                .collect();
            out.push((s, t, names, v));
        })
        .unwrap();
    }
    out.sort();
    out
}

fn stored(file: &SegmentFile, kind: SectionKind) -> u64 {
    file.sections()
        .iter()
        .find(|s| s.kind == kind)
        .map_or(0, |s| s.stored_bytes)
}

fn write(dir: &Path, input: SegmentInput<'_>, choice: BaseChoice<'_>) -> SegmentFile {
    let (meta, _) = write_segment_on(dir, input, 3, choice).unwrap();
    SegmentFile::open(&dir.join(meta.file)).unwrap()
}

/// A tenant's first block: no base to go on, so it cuts base `new_id` from its own tables.
fn write_first(dir: &Path, input: SegmentInput<'_>, new_id: u64) -> SegmentFile {
    let always = |_: &BaseFit| BaseDecision::Use;
    write(
        dir,
        input,
        BaseChoice::Shared {
            current: None,
            new_id,
            decide: &always,
        },
    )
}

#[test]
fn blocks_on_a_base_read_back_as_whole_ones_and_store_only_what_they_add() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The first block has no base to go on: it cuts one from its own tables.
    let first = write_first(d, input(1, 0, STACKS, false), 100);
    let want = first.meta.base.expect("a base was cut");
    assert_eq!(want.id, 100);
    let whole_first = write(d, input(2, 0, STACKS, false), BaseChoice::None);
    assert_eq!(rows(&first), rows(&whole_first));
    let base = base::load(&first.path, want).unwrap();
    let first_stacks = stored(&first, SectionKind::Stacks);
    let whole_stacks = stored(&whole_first, SectionKind::Stacks);
    // Its own tables went into the base: the block holds a reference to them.
    assert!(
        first_stacks * 10 < whole_stacks,
        "{first_stacks} vs {whole_stacks}"
    );

    // The next block: 5 % new stacks, the rest numbered otherwise by its head.
    let fitted = std::cell::Cell::new(None);
    let record = |f: &BaseFit| {
        fitted.set(Some(*f));
        BaseDecision::Use
    };
    let on = write(
        d,
        input(3, 75, STACKS + 75, true),
        BaseChoice::Shared {
            current: Some(&base),
            new_id: 101,
            decide: &record,
        },
    );
    let whole = write(d, input(4, 75, STACKS + 75, true), BaseChoice::None);
    assert_eq!(on.meta.base, Some(want));
    assert_eq!(rows(&on), rows(&whole));
    on.verify().unwrap();
    let fit = fitted.get().unwrap();
    assert!(
        fit.added_nodes > 0 && fit.added_nodes * 10 < fit.segment_nodes,
        "{fit:?}"
    );
    let (on_stacks, whole_stacks) = (
        stored(&on, SectionKind::Stacks),
        stored(&whole, SectionKind::Stacks),
    );
    assert!(
        on_stacks * 5 < whole_stacks,
        "{on_stacks} vs {whole_stacks}"
    );

    // Grown: a new base holding the old one and what the block adds, which
    // the block then stores nothing of.
    let grown = write(
        d,
        input(5, 75, STACKS + 75, true),
        BaseChoice::Shared {
            current: Some(&base),
            new_id: 102,
            decide: &|_: &BaseFit| BaseDecision::Grow,
        },
    );
    let grown_ref = grown.meta.base.unwrap();
    assert_eq!(grown_ref.id, 102);
    assert_eq!(rows(&grown), rows(&whole));
    let next = base::load(&grown.path, grown_ref).unwrap();
    let (old, new) = (base.dict().unwrap(), next.dict().unwrap());
    assert_eq!(new.parents[..old.parents.len()], old.parents[..]);
    assert_eq!(new.parents.len(), old.parents.len() + fit.added_nodes);
    assert!(stored(&grown, SectionKind::Stacks) * 10 < on_stacks);
    // Fresh: the block's own tables alone.
    let fresh = write(
        d,
        input(6, 75, STACKS + 75, true),
        BaseChoice::Shared {
            current: Some(&base),
            new_id: 103,
            decide: &|_: &BaseFit| BaseDecision::Fresh,
        },
    );
    assert_eq!(fresh.meta.base.map(|b| b.id), Some(103));
    assert_eq!(rows(&fresh), rows(&whole));
    let own = base::load(&fresh.path, fresh.meta.base.unwrap()).unwrap();
    assert_eq!(own.dict().unwrap().parents.len(), fit.segment_nodes);
}

#[test]
fn a_block_whose_base_is_gone_or_damaged_is_refused_as_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let seg = write_first(d, input(1, 0, 200, false), 50);
    let want = seg.meta.base.unwrap();
    let path = base_path(&seg.path, want.id);
    let bytes = std::fs::read(&path).unwrap();

    std::fs::remove_file(&path).unwrap();
    base::forget(&path);
    let err = seg.load().unwrap_err();
    assert!(
        matches!(err, crate::StorageError::MissingBase { .. }) && err.is_corruption(),
        "{err}"
    );
    assert!(seg.verify().unwrap_err().is_corruption());

    let mut bad = bytes.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 1;
    std::fs::write(&path, &bad).unwrap();
    let err = seg.load().unwrap_err();
    assert!(err.is_corruption(), "{err}");

    // The same base again reads.
    std::fs::write(&path, &bytes).unwrap();
    assert_eq!(rows(&seg).len(), 2 * 200 * 3);
}
