//! Compaction crash safety with a real child process: the child writes batches,
//! flushes and compacts in a loop (downsampling too); the parent kills it with
//! SIGKILL at random points — mostly right after it announces a compaction — then
//! reopens the store and checks every acknowledged batch is present exactly once,
//! and that no orphan segment files remain.
//!
//! The child is this same test binary, re-executed by `common::crash`.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::crash::{xorshift, CrashChild};
use common::*;
use profiledb_storage::{DownsampleRule, Store, StoreConfig, TenantId};

const CHILD: CrashChild = CrashChild {
    test: "sigkill_during_compaction_keeps_data_exactly_once",
    dir_env: "PROFILEDB_COMPACT_CHILD",
};

fn config() -> StoreConfig {
    StoreConfig {
        partition_ms: 60_000,
        step_ms: 1_000,
        flush_grace: Duration::ZERO,
        background_flush: false,
        query_threads: 2,
        // Everything is years old: outputs are downsampled to 10 s steps.
        downsample: vec![DownsampleRule {
            after: Duration::from_secs(86_400),
            step_ms: 10_000,
        }],
        ..StoreConfig::default()
    }
}

fn batch_samples(i: u64) -> Vec<TSample> {
    let base = 1_600_000_000_000i64;
    (0..30)
        .map(|j| TSample {
            labels: vec![
                ("batch".into(), i.to_string()),
                ("service_name".into(), format!("svc{}", i % 3)),
            ],
            ts: base + ((i as i64) * 13 + j * 7) % 600 * 1_000,
            stack: vec![
                TFrame::Func("main".into()),
                TFrame::Func(format!("work{}", (i as i64 + j) % 6)),
                TFrame::Addr(0x40 + (j as u64 % 5)),
            ],
            value: (i as i64 % 13) + j + 1,
        })
        .collect()
}

fn expected_total(i: u64) -> i64 {
    batch_samples(i).iter().map(|s| s.value).sum()
}

fn run_child(dir: &str, start: u64) {
    let store = Store::open(dir, config()).unwrap();
    let tenant = TenantId::default();
    let mut i = start;
    loop {
        for _ in 0..3 {
            store
                .write(build_batch(&tenant, &batch_samples(i)))
                .unwrap();
            println!("ACK {i}");
            i += 1;
        }
        store.flush().unwrap();
        println!("COMPACT");
        store.compact(None, None, &|_| {}).unwrap();
        println!("DONE");
    }
}

fn check(store: &Store, acked: &BTreeSet<u64>, next_start: u64) -> usize {
    let stored = check_acknowledged(store, acked, next_start, expected_total);
    // No orphans: the files are exactly the live segments, none replaced by another
    // (a kill between a base and its segment leaves a base, which the open deletes).
    assert_files_are_live(store);
    let segs = store.segments();
    let ids: BTreeSet<u64> = segs.iter().map(|m| m.id).collect();
    for m in &segs {
        assert!(
            m.sources.iter().all(|s| !ids.contains(s)),
            "both old and new live"
        );
    }
    stored
}

#[test]
fn sigkill_during_compaction_keeps_data_exactly_once() {
    if let Some((dir, start)) = CHILD.child_args() {
        run_child(&dir, start);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut acked: BTreeSet<u64> = BTreeSet::new();
    let mut next_start = 0u64;
    let mut rng = 0x9E3779B97F4A7C15u64;
    let mut kills = 0;
    let mut kills_mid_compaction = 0;
    for round in 0..12 {
        let r = xorshift(&mut rng);
        // Kill after the k-th compaction announcement plus a random delay.
        let kill_at_compaction = 1 + r % 4;
        let delay_us = (r >> 8) % 40_000;
        let mut compactions = 0;
        let round_run = CHILD.round(dir.path(), next_start, &mut acked, |line, _| {
            if !line.starts_with("COMPACT") {
                return false;
            }
            compactions += 1;
            if compactions < kill_at_compaction {
                return false;
            }
            std::thread::sleep(Duration::from_micros(delay_us));
            true
        });
        assert!(
            round_run.killed,
            "round {round}: child exited on its own ({})",
            round_run.status
        );
        kills += 1;
        if !round_run.after_kill.iter().any(|l| l.starts_with("DONE")) {
            kills_mid_compaction += 1;
        }
        next_start = round_run.max_id + 4;
    }
    let store = Store::open(dir.path(), config()).unwrap();
    let stored = check(&store, &acked, next_start);
    // And once more after a clean compaction.
    store.compact(None, None, &|_| {}).unwrap();
    check(&store, &acked, next_start);
    eprintln!(
        "compaction crash test: {kills} kills ({kills_mid_compaction} before the compaction finished), {} acknowledged, {stored} stored, {} segments",
        acked.len(),
        store.segments().len()
    );
}
