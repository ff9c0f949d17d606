//! Shared helpers for the storage integration tests: a tiny batch builder and an
//! independent reference aggregation to compare query answers against.
#![allow(dead_code)]

pub mod crash;

use std::collections::BTreeMap;

use profiledb_storage::{
    Batch, Function, Labels, Location, Mapping, Querier, QueryLimits, Sample, SeriesSamples, Store,
    StoreConfig, TenantId, PROFILE_TYPE_LABEL,
};

pub const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";

/// An uncached querier with the default limits: every query is computed.
pub fn querier(store: &Store) -> Querier {
    Querier::new(store, 0, QueryLimits::default())
}

/// A frame as tests describe it: a named function or an unsymbolized address in libx.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TFrame {
    Func(String),
    Addr(u64),
}

impl TFrame {
    /// The name the engine must show for this frame (independent of its code).
    pub fn display(&self) -> String {
        match self {
            TFrame::Func(n) => n.clone(),
            TFrame::Addr(a) => format!("libx.so+0x{a:x}"),
        }
    }
}

#[derive(Clone, Debug)]
pub struct TSample {
    pub labels: Vec<(String, String)>,
    pub ts: i64,
    pub stack: Vec<TFrame>,
    pub value: i64,
}

/// Builds a batch with its own symbol tables. Symbols are inserted in reverse
/// order of first use so batch ids never coincide with the head's.
pub fn build_batch(tenant: &TenantId, samples: &[TSample]) -> Batch {
    let mut b = Batch::new(tenant.clone());
    b.symbols.mappings.push(Mapping {
        file: "/usr/lib/libx.so".into(),
        build_id: "abcdef".into(),
        ..Mapping::default()
    });
    let mut frames: Vec<TFrame> = samples.iter().flat_map(|s| s.stack.clone()).collect();
    frames.sort();
    frames.dedup();
    frames.reverse();
    let mut loc_of = BTreeMap::new();
    for f in &frames {
        let loc = match f {
            TFrame::Func(n) => {
                b.symbols.functions.push(Function {
                    name: n.as_str().into(),
                    file: format!("{n}.rs").into(),
                });
                Location {
                    function: Some((b.symbols.functions.len() - 1) as u32),
                    mapping: Some(0),
                    address: 0x1000,
                    line: 7,
                }
            }
            TFrame::Addr(a) => Location {
                function: None,
                mapping: Some(0),
                address: *a,
                line: 0,
            },
        };
        b.symbols.locations.push(loc);
        loc_of.insert(f.clone(), (b.symbols.locations.len() - 1) as u32);
    }
    let mut series: BTreeMap<Vec<(String, String)>, Vec<Sample>> = BTreeMap::new();
    for s in samples {
        let locs: Vec<u32> = s.stack.iter().map(|f| loc_of[f]).collect();
        let stack = b.stacks.push(&locs);
        series.entry(s.labels.clone()).or_default().push(Sample {
            timestamp_ms: s.ts,
            stack,
            value: s.value,
        });
    }
    for (labels, samples) in series {
        let mut l = Labels::new(labels);
        if l.get(PROFILE_TYPE_LABEL).is_none() {
            l.set(PROFILE_TYPE_LABEL, CPU);
        }
        b.series.push(SeriesSamples { labels: l, samples });
    }
    b
}

/// The independent reference: what every query must answer.
#[derive(Default, Debug)]
pub struct Reference {
    /// (labels incl. profile type, step start, folded stack) → value
    pub rows: BTreeMap<(Labels, i64, String), i64>,
}

impl Reference {
    pub fn add(&mut self, samples: &[TSample], step_ms: i64) {
        for s in samples {
            if s.value == 0 {
                continue;
            }
            let mut l = Labels::new(s.labels.clone());
            if l.get(PROFILE_TYPE_LABEL).is_none() {
                l.set(PROFILE_TYPE_LABEL, CPU);
            }
            let t = s.ts.div_euclid(step_ms) * step_ms;
            let folded = if s.stack.is_empty() {
                "[unknown]".to_string()
            } else {
                s.stack
                    .iter()
                    .map(|f| f.display())
                    .collect::<Vec<_>>()
                    .join(";")
            };
            *self.rows.entry((l, t, folded)).or_insert(0) += s.value;
        }
    }

    /// Folded stacks → value for the series accepted by `keep` in `[start, end)`.
    pub fn folded(
        &self,
        keep: impl Fn(&Labels) -> bool,
        start: i64,
        end: i64,
    ) -> BTreeMap<String, i64> {
        let mut out = BTreeMap::new();
        for ((l, t, f), v) in &self.rows {
            if keep(l) && *t >= start && *t < end {
                *out.entry(f.clone()).or_insert(0) += v;
            }
        }
        out.retain(|_, v| *v != 0);
        out
    }

    /// Per-series totals per step.
    pub fn series_totals(
        &self,
        keep: impl Fn(&Labels) -> bool,
        start: i64,
        end: i64,
    ) -> BTreeMap<Labels, BTreeMap<i64, i64>> {
        let mut out: BTreeMap<Labels, BTreeMap<i64, i64>> = BTreeMap::new();
        for ((l, t, _), v) in &self.rows {
            if keep(l) && *t >= start && *t < end {
                *out.entry(l.clone()).or_default().entry(*t).or_insert(0) += v;
            }
        }
        for m in out.values_mut() {
            m.retain(|_, v| *v != 0);
        }
        out.retain(|_, m| !m.is_empty());
        out
    }
}

/// A configuration for tests: small partitions, no background clock.
pub fn test_config() -> StoreConfig {
    StoreConfig {
        partition_ms: 3_600_000,
        step_ms: 10_000,
        background_flush: false,
        query_threads: 2,
        // Deterministic cache statistics: the tests that need the background
        // warm-up turn it on.
        warm_segment_cache: false,
        ..StoreConfig::default()
    }
}

/// The crash tests' verdict: every acknowledged batch (series label `batch=<id>`) is
/// stored with exactly `expected(id)`, any other stored batch is complete and below
/// `next_start` (in flight at a kill), and the merged tree agrees. Returns the number
/// of batches stored.
pub fn check_acknowledged(
    store: &Store,
    acked: &std::collections::BTreeSet<u64>,
    next_start: u64,
    expected: impl Fn(u64) -> i64,
) -> usize {
    use profiledb_storage::{Selector, TimeRange};
    let tenant = TenantId::default();
    let totals = querier(store)
        .series_totals(&tenant, &Selector::default(), TimeRange::all())
        .unwrap();
    let mut stored: BTreeMap<u64, i64> = BTreeMap::new();
    for (labels, pts) in &totals {
        let id: u64 = labels.get("batch").unwrap().parse().unwrap();
        *stored.entry(id).or_insert(0) += pts.values().sum::<i64>();
    }
    for id in acked {
        assert_eq!(
            stored.get(id).copied(),
            Some(expected(*id)),
            "acknowledged batch {id}"
        );
    }
    for (id, total) in &stored {
        assert!(*id < next_start, "unknown batch {id}");
        assert_eq!(
            *total,
            expected(*id),
            "batch {id} partially stored, lost or double counted"
        );
    }
    let tree = querier(store)
        .merge_tree(&tenant, &Selector::default(), TimeRange::all())
        .unwrap();
    assert_eq!(tree.total(), stored.values().sum::<i64>());
    stored.len()
}

/// Files on disk are exactly the live segments, and the symbol bases beside
/// them exactly those the live segments name: none orphaned, none missing.
pub fn assert_files_are_live(store: &Store) {
    let dir = store.dir();
    let (mut segments, mut bases) = (Vec::new(), std::collections::BTreeSet::new());
    let relative =
        |p: &std::path::Path| p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
    if let Ok(tenants) = std::fs::read_dir(dir.join("segments")) {
        for t in tenants {
            for f in std::fs::read_dir(t.unwrap().path()).unwrap() {
                let p = f.unwrap().path();
                if p.is_dir() {
                    for b in std::fs::read_dir(&p).unwrap() {
                        bases.insert(relative(&b.unwrap().path()));
                    }
                } else {
                    segments.push(relative(&p));
                }
            }
        }
    }
    segments.sort();
    let live = store.segments();
    let mut files: Vec<String> = live.iter().map(|m| m.file.clone()).collect();
    files.sort();
    assert_eq!(segments, files, "segment files vs live set");
    let named: std::collections::BTreeSet<String> = live
        .iter()
        .filter_map(|m| {
            let b = m.base?;
            let base = std::path::Path::new(&m.file).parent()?.join("bases");
            Some(
                base.join(format!("{:016x}.base", b.id))
                    .to_string_lossy()
                    .into_owned(),
            )
        })
        .collect();
    assert_eq!(
        bases, named,
        "symbol base files vs the bases live segments name"
    );
}
