//! Fleet analyses straight on a store: the hottest shared code on a hand-built
//! fleet (exact values) and against a brute-force ranking of the raw samples, and
//! the noise model fitted from hosts.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{build_batch, querier, test_config, TFrame, TSample, CPU};
use profiledb_storage::analysis::hottest::HotDimension;
use profiledb_storage::{Selector, Store, TenantId, TimeRange};
use proptest::prelude::*;

fn sample(svc: &str, host: &str, stack: &[&str], value: i64) -> TSample {
    TSample {
        labels: vec![
            ("__profile_type__".into(), CPU.into()),
            ("service_name".into(), svc.into()),
            ("host".into(), host.into()),
        ],
        ts: 1_000,
        stack: stack.iter().map(|f| TFrame::Func(f.to_string())).collect(),
        value,
    }
}

fn store_with(samples: &[TSample]) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), test_config()).unwrap();
    store
        .write(build_batch(&TenantId::default(), samples))
        .unwrap();
    (dir, store)
}

fn cpu() -> Selector {
    Selector::parse(&format!("{CPU}{{}}")).unwrap()
}

const RANGE: TimeRange = TimeRange {
    start_ms: 0,
    end_ms: 10_000,
};

#[test]
fn zlib_is_the_hottest_shared_function() {
    let (_dir, store) = store_with(&[
        sample("api", "h1", &["main", "zlib"], 30),
        sample("api", "h1", &["main", "api"], 40),
        sample("db", "h2", &["main", "zlib"], 20),
        sample("db", "h2", &["main", "db"], 10),
        sample("web", "h3", &["main", "zlib"], 10),
        sample("web", "h3", &["main", "web"], 90),
    ]);
    let q = querier(&store);
    let t = TenantId::default();
    let h = q
        .fleet_hottest(&t, &cpu(), RANGE, HotDimension::Function, "service_name", 0)
        .unwrap();
    let got: Vec<(&str, i64, f64, usize)> = h
        .entries
        .iter()
        .map(|e| (e.name.as_str(), e.value, e.share, e.services))
        .collect();
    assert_eq!(
        got,
        vec![
            ("web", 90, 0.45, 1),
            ("zlib", 60, 0.3, 3),
            ("api", 40, 0.2, 1),
            ("db", 10, 0.05, 1),
        ]
    );
    assert_eq!((h.total, h.services), (200, 3));
    // Inclusive: `main` is on every stack of every service.
    let h = q
        .fleet_hottest(
            &t,
            &cpu(),
            RANGE,
            HotDimension::FunctionTotal,
            "service_name",
            1,
        )
        .unwrap();
    assert_eq!(h.entries[0].name, "main");
    assert_eq!((h.entries[0].value, h.entries[0].services), (200, 3));
    assert_eq!(h.entries[0].share, 1.0);
    // Every frame of the test batches lives in one mapping.
    let h = q
        .fleet_hottest(&t, &cpu(), RANGE, HotDimension::Binary, "service_name", 0)
        .unwrap();
    assert_eq!(h.entries.len(), 1);
    assert_eq!(h.entries[0].name, "/usr/lib/libx.so");
    assert_eq!((h.entries[0].value, h.entries[0].services), (200, 3));
}

#[test]
fn noise_constant_from_two_hosts() {
    // Split {h1} | {h2}: M = 0.4 at 100 a side, so C = 0.4 · √100 = 4.
    let (_dir, store) = store_with(&[
        sample("app", "h1", &["main", "a"], 60),
        sample("app", "h1", &["main", "b"], 40),
        sample("app", "h2", &["main", "a"], 40),
        sample("app", "h2", &["main", "b"], 60),
    ]);
    let q = querier(&store);
    let t = TenantId::default();
    let m = q
        .noise_model(&t, &cpu(), RANGE, "host", 10, 4)
        .unwrap()
        .unwrap();
    assert!((m.c - 4.0).abs() < 1e-12, "{}", m.c);
    assert_eq!(m.hosts, 2);
    assert_eq!(
        q.noise_model(&t, &cpu(), RANGE, "zone", 10, 4).unwrap(),
        None,
        "no zone label: one (empty) value, nothing to split"
    );
}

const SERVICES: [&str; 3] = ["a", "b", "c"];
const FUNCS: [&str; 5] = ["main", "zlib", "hash", "io", "idle"];

fn fleet() -> impl Strategy<Value = Vec<(usize, Vec<usize>, i64)>> {
    prop::collection::vec(
        (
            0..SERVICES.len(),
            prop::collection::vec(0..FUNCS.len(), 1..5),
            1..50i64,
        ),
        1..40,
    )
}

/// The ranking computed directly from the samples: name → (value, services).
fn brute_force(
    rows: &[(usize, Vec<usize>, i64)],
    inclusive: bool,
) -> BTreeMap<String, (i64, usize)> {
    let mut acc: BTreeMap<String, (i64, BTreeSet<usize>)> = BTreeMap::new();
    for (svc, stack, v) in rows {
        let names: BTreeSet<usize> = if inclusive {
            stack.iter().copied().collect()
        } else {
            stack.last().copied().into_iter().collect()
        };
        for f in names {
            let e = acc.entry(FUNCS[f].to_string()).or_default();
            e.0 += v;
            e.1.insert(*svc);
        }
    }
    acc.into_iter()
        .map(|(k, (v, s))| (k, (v, s.len())))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn hottest_matches_brute_force(rows in fleet(), flush in any::<bool>()) {
        let samples: Vec<TSample> = rows
            .iter()
            .map(|(s, stack, v)| {
                let names: Vec<&str> = stack.iter().map(|&f| FUNCS[f]).collect();
                sample(SERVICES[*s], "h", &names, *v)
            })
            .collect();
        let (_dir, store) = store_with(&samples);
        if flush {
            store.flush().unwrap();
        }
        let q = querier(&store);
        let total: i64 = rows.iter().map(|r| r.2).sum();
        for (dim, inclusive) in [(HotDimension::Function, false), (HotDimension::FunctionTotal, true)] {
            let h = q
                .fleet_hottest(&TenantId::default(), &cpu(), RANGE, dim, "service_name", 0)
                .unwrap();
            prop_assert_eq!(h.total, total);
            let got: BTreeMap<String, (i64, usize)> = h
                .entries
                .iter()
                .map(|e| (e.name.clone(), (e.value, e.services)))
                .collect();
            prop_assert_eq!(&got, &brute_force(&rows, inclusive));
            for e in &h.entries {
                prop_assert_eq!(e.share, e.value as f64 / total as f64);
            }
            prop_assert!(h.entries.windows(2).all(|w| w[0].value >= w[1].value));
        }
    }
}

// ---- CPI and the platform assignment (GWP Table 1) -------------------------------

use profiledb_storage::analysis::assign::{assign, cycles_of, Placement};
use profiledb_storage::analysis::cpi::{CpiCell, CYCLES_TYPE, INSTRUCTIONS_TYPE};
use profiledb_storage::GroupKey;

fn hw(ty: &str, svc: &str, platform: &str, leaf: &str, value: i64) -> TSample {
    TSample {
        labels: vec![
            ("__profile_type__".into(), ty.into()),
            ("service_name".into(), svc.into()),
            ("platform".into(), platform.into()),
            ("clock_ghz".into(), "2".into()),
        ],
        ts: 1_000,
        stack: vec![TFrame::Func("main".into()), TFrame::Func(leaf.into())],
        value,
    }
}

/// NumCrunch runs at CPI 1 everywhere; MemBench at CPI 1 on p1 and 2 on p2, all of
/// the difference in `memcpy` (CPI 3 on p2, 1 on p1). 200 instructions each,
/// spread evenly today.
fn gwp_fleet() -> Vec<TSample> {
    let (c, i) = (CYCLES_TYPE, INSTRUCTIONS_TYPE);
    let mut s = Vec::new();
    for p in ["p1", "p2"] {
        s.push(hw(c, "numcrunch", p, "crunch", 100));
        s.push(hw(i, "numcrunch", p, "crunch", 100));
        s.push(hw(i, "membench", p, "memcpy", 50));
        s.push(hw(i, "membench", p, "compute", 50));
        s.push(hw(c, "membench", p, "compute", 50));
    }
    s.push(hw(c, "membench", "p1", "memcpy", 50));
    s.push(hw(c, "membench", "p2", "memcpy", 150));
    s
}

fn sel_of(ty: &str) -> Selector {
    Selector::parse(&format!("{ty}{{}}")).unwrap()
}

#[test]
fn cpi_per_service_platform_and_function() {
    let (_dir, store) = store_with(&gwp_fleet());
    let q = querier(&store);
    let t = TenantId::default();
    let sels = (&sel_of(CYCLES_TYPE), &sel_of(INSTRUCTIONS_TYPE));
    let keys = [
        GroupKey::Label("service_name".into()),
        GroupKey::Label("platform".into()),
        GroupKey::Label("clock_ghz".into()),
    ];
    let cells = q.fleet_cpi(&t, sels, RANGE, &keys, Some(2)).unwrap();
    let cell = |svc: &str, platform: &str, cycles, instructions, cpi: f64| CpiCell {
        key: vec![svc.to_string(), platform.to_string(), "2".to_string()],
        cycles,
        instructions,
        cpi: Some(cpi),
        ns_per_instruction: Some(cpi / 2.0),
    };
    assert_eq!(
        cells,
        vec![
            cell("membench", "p1", 100, 100, 1.0),
            cell("membench", "p2", 200, 100, 2.0),
            cell("numcrunch", "p1", 100, 100, 1.0),
            cell("numcrunch", "p2", 100, 100, 1.0),
        ]
    );
    // The function hot on one platform only.
    let keys = [
        GroupKey::Label("service_name".into()),
        GroupKey::Label("platform".into()),
        GroupKey::Function,
    ];
    let cells = q.fleet_cpi(&t, sels, RANGE, &keys, None).unwrap();
    let memcpy: Vec<(&str, Option<f64>)> = cells
        .iter()
        .filter(|c| c.key[2] == "memcpy")
        .map(|c| (c.key[1].as_str(), c.cpi))
        .collect();
    assert_eq!(memcpy, vec![("p1", Some(1.0)), ("p2", Some(3.0))]);
}

#[test]
fn gwp_assignment_saves_a_fifth_of_the_cycles() {
    let (_dir, store) = store_with(&gwp_fleet());
    let q = querier(&store);
    let sels = (&sel_of(CYCLES_TYPE), &sel_of(INSTRUCTIONS_TYPE));
    let keys = [
        GroupKey::Label("service_name".into()),
        GroupKey::Label("platform".into()),
    ];
    let cells = q
        .fleet_cpi(&TenantId::default(), sels, RANGE, &keys, None)
        .unwrap();
    let p = Placement::from_cells(&cells);
    assert_eq!(p.apps, ["membench", "numcrunch"]);
    assert_eq!(p.platforms, ["p1", "p2"]);
    assert_eq!(p.problem.capacities, [200.0, 300.0]);
    assert_eq!(p.problem.loads, [200.0, 200.0]);
    assert_eq!(cycles_of(&p.problem.cpi, &p.today), 500.0);
    let a = assign(&p.problem).unwrap();
    assert!((a.cycles - 400.0).abs() < 1e-6, "{}", a.cycles);
    // MemBench all on p1, NumCrunch all on p2.
    let rounded: Vec<Vec<i64>> = a
        .load
        .iter()
        .map(|r| r.iter().map(|v| v.round() as i64).collect())
        .collect();
    assert_eq!(rounded, vec![vec![200, 0], vec![0, 200]]);
}

// ---- Variance hunting ------------------------------------------------------------

#[test]
fn group_with_one_slow_host_ranks_first_and_is_explained() {
    let mut samples = Vec::new();
    for h in ["h1", "h2", "h3", "h4"] {
        samples.push(sample("api", h, &["main", "serve"], 100));
        samples.push(sample("api", h, &["main", "gc"], 10));
    }
    samples.push(sample("api", "h4", &["main", "lock"], 200));
    samples.push(sample("db", "h5", &["main", "query"], 90));
    samples.push(sample("db", "h6", &["main", "query"], 110));
    let (_dir, store) = store_with(&samples);
    let q = querier(&store);
    let t = TenantId::default();
    let labels = vec!["service_name".to_string()];
    let g = q
        .fleet_variance(&t, &cpu(), RANGE, &labels, "host")
        .unwrap();
    assert_eq!(g.len(), 2);
    // api: 110, 110, 110, 310 → mean 160, σ = √((3·50² + 150²)/4) = √7500.
    assert_eq!(g[0].group, ["api"]);
    assert_eq!((g[0].units, g[0].mean), (4, 160.0));
    assert!((g[0].cov - 7500f64.sqrt() / 160.0).abs() < 1e-12);
    assert_eq!(g[0].max_unit, ("h4".to_string(), 310));
    // db: 90, 110 → σ 10 of mean 100.
    assert!((g[1].cov - 0.1).abs() < 1e-12);
    let e = q
        .fleet_variance_explain(&t, &cpu(), RANGE, &labels, &g[0].group, "host", 1)
        .unwrap();
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].function, "lock");
    assert!((e[0].high_share - 200.0 / 310.0).abs() < 1e-12 && e[0].low_share == 0.0);
}
