//! What the lifecycle suite checks and reports after each pass: the answers that must
//! not change, the segments on disk, a reopen, and the long-range queries.

use super::*;

/// The CPU profile type the long-range queries read.
pub(super) const CPU_NS: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";

/// Queries over the whole week on a freshly opened store: the first (which
/// decodes the segments it reads) and the p50 of `runs` more, each a result-cache
/// miss as in the query suite (the range starts a few ms earlier every run, where
/// no data lives; per-segment parts such as function indexes stay cached). Each
/// query: a merge of one service, a group-by of service and leaf function keeping
/// stacks through `deflate`, per-series totals (a timeline).
pub(super) fn long_range(
    dir: &Path,
    start: i64,
    end: i64,
    service: &str,
    runs: usize,
) -> anyhow::Result<Value> {
    let store = Store::open(dir, config(true))?;
    let q = Querier::new(&store, 256 << 20, QueryLimits::default());
    let t = TenantId::default();
    let shift = std::cell::Cell::new(0i64);
    let range = || TimeRange::new(start - shift.get(), end);
    let one = Selector::parse(&format!("{CPU_NS}{{service_name=\"{service}\"}}"))?;
    let all = Selector::parse(&format!("{CPU_NS}{{}}"))?;
    let group = GroupByQuery {
        keys: vec![GroupKey::Label("service_name".into()), GroupKey::Function],
        include: Some(regex::Regex::new(crate::fleet::FILTER_FUNCTION)?),
        exclude: None,
        max_groups: 0,
    };
    let mut out = serde_json::Map::new();
    let queries: [(&str, &dyn Fn() -> anyhow::Result<i64>); 3] = [
        ("merge one service", &|| {
            Ok(q.merge_tree(&t, &one, range())?.total())
        }),
        ("group-by service,function + deflate", &|| {
            Ok(q.group_by(&t, &all, range(), &group)?.total)
        }),
        ("timeline per series", &|| {
            Ok(q.series_totals(&t, &all, range())?
                .values()
                .flat_map(|m| m.values())
                .sum())
        }),
    ];
    for (name, run) in queries {
        let c = Instant::now();
        let total = run()?;
        let first_ms = c.elapsed().as_secs_f64() * 1e3;
        let mut times = Vec::with_capacity(runs);
        for _ in 0..runs {
            shift.set(shift.get() + 1);
            let c = Instant::now();
            ensure!(run()? == total, "{name}: the answer changed between runs");
            times.push(c.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        let p50 = crate::query_specs::percentile(&times, 50.0);
        out.insert(
            name.into(),
            json!({"first_ms": first_ms, "p50_ms": p50, "total": total}),
        );
    }
    store.shutdown()?;
    Ok(Value::Object(out))
}

/// What must not change: per profile type, the merge total and the merged value of
/// every stack.
#[derive(PartialEq)]
pub(super) struct Answers {
    pub(super) totals: BTreeMap<&'static str, i64>,
    pub(super) folded: BTreeMap<&'static str, BTreeMap<String, i64>>,
}

pub(super) fn answers(store: &Store) -> anyhow::Result<Answers> {
    let t = TenantId::default();
    let mut a = Answers {
        totals: BTreeMap::new(),
        folded: BTreeMap::new(),
    };
    let querier = Querier::new(store, 0, QueryLimits::default());
    for ptype in all_types() {
        let tree = querier.merge_tree(
            &t,
            &Selector::parse(&format!("{ptype}{{}}"))?,
            TimeRange::all(),
        )?;
        a.totals.insert(ptype, tree.total());
        a.folded.insert(ptype, tree.folded());
    }
    Ok(a)
}

/// Fails with the first difference between `before` and `after`.
pub(super) fn same_answers(step: &str, before: &Answers, after: &Answers) -> anyhow::Result<()> {
    if before == after {
        return Ok(());
    }
    for ptype in all_types() {
        let (b, a) = (before.totals[ptype], after.totals[ptype]);
        ensure!(
            a == b,
            "{step}: merge total of {ptype} changed from {b} to {a}"
        );
        let (fb, fa) = (&before.folded[ptype], &after.folded[ptype]);
        ensure!(
            fb.len() == fa.len(),
            "{step}: {ptype} has {} stacks, {} before",
            fa.len(),
            fb.len()
        );
        if let Some((k, v)) = fb.iter().find(|(k, v)| fa.get(*k) != Some(*v)) {
            bail!(
                "{step}: {ptype} stack {k} was {v}, now {:?}",
                fa.get(k).copied()
            );
        }
    }
    bail!("{step}: answers changed")
}

pub(super) struct Disk {
    pub(super) segments: usize,
    pub(super) bytes: u64,
    pub(super) rows: u64,
    pub(super) series: u64,
    pub(super) levels: BTreeMap<u32, usize>,
    pub(super) steps: BTreeMap<i64, usize>,
    pub(super) max_per_partition: usize,
    pub(super) min_per_partition: usize,
}

pub(super) fn disk(segs: &[SegmentMeta]) -> Disk {
    let mut per_partition: BTreeMap<i64, usize> = BTreeMap::new();
    let mut d = Disk {
        segments: segs.len(),
        bytes: segs.iter().map(|s| s.size_bytes).sum(),
        rows: segs.iter().map(|s| s.rows).sum(),
        series: segs.iter().map(|s| s.series).sum(),
        levels: BTreeMap::new(),
        steps: BTreeMap::new(),
        max_per_partition: 0,
        min_per_partition: 0,
    };
    for s in segs {
        *d.levels.entry(s.level).or_default() += 1;
        *d.steps.entry(s.step_ms).or_default() += 1;
        *per_partition.entry(s.partition_start_ms).or_default() += 1;
    }
    d.max_per_partition = per_partition.values().copied().max().unwrap_or(0);
    d.min_per_partition = per_partition.values().copied().min().unwrap_or(0);
    d
}

pub(super) fn disk_json(d: &Disk) -> Value {
    json!({
        "segments": d.segments,
        "bytes": d.bytes,
        "rows": d.rows,
        "series_in_segments": d.series,
        "segments_per_level": d.levels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "segments_per_step_ms": d.steps.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "segments_per_partition_min": d.min_per_partition,
        "segments_per_partition_max": d.max_per_partition,
    })
}

/// Reopens the store and checks that the segment files on disk are exactly the live
/// segments (no orphan left by the step), returning the bytes on disk (segments
/// and their symbol bases).
pub(super) fn reopen_checked(dir: &Path) -> anyhow::Result<(Store, u64)> {
    let store = Store::open(dir, config(true))?;
    let live: u64 = store.segments().iter().map(|s| s.size_bytes).sum();
    let mut files = 0usize;
    let seg_dir = dir.join("segments");
    for t in std::fs::read_dir(&seg_dir).with_context(|| seg_dir.display().to_string())? {
        for f in std::fs::read_dir(t?.path())? {
            if f?.path().extension().is_some_and(|x| x == "seg") {
                files += 1;
            }
        }
    }
    let seg_bytes = dir_bytes(&seg_dir, "seg");
    ensure!(
        files == store.segments().len() && seg_bytes == live,
        "{files} segment files ({seg_bytes} bytes) on disk, {} live segments ({live} bytes)",
        store.segments().len()
    );
    // What the step left on disk: the segments and the symbol bases they name.
    Ok((store, stored_bytes(&seg_dir)))
}
