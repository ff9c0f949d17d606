//! Crash safety with a real child process: the child writes batches and reports each
//! acknowledged one; the parent kills it with SIGKILL at random points, reopens the
//! store and checks that every acknowledged batch is present exactly once.
//!
//! The child is this same test binary, re-executed by `common::crash`.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::crash::{xorshift, CrashChild};
use common::*;
use profiledb_storage::{Store, StoreConfig, TenantId};

fn crash_config() -> StoreConfig {
    StoreConfig {
        // Small partitions and an eager background flusher, so segments are being
        // written and the WAL truncated while the child is killed.
        partition_ms: 60_000,
        step_ms: 1_000,
        flush_grace: Duration::ZERO,
        head_max_bytes: 256 << 10,
        background_flush: true,
        query_threads: 2,
        ..StoreConfig::default()
    }
}

/// Deterministic content of batch `i`: its own series, spread over past partitions.
fn batch_samples(i: u64) -> Vec<TSample> {
    let base = 1_600_000_000_000i64;
    (0..20)
        .map(|j| TSample {
            labels: vec![
                ("batch".into(), i.to_string()),
                ("service_name".into(), format!("svc{}", i % 3)),
            ],
            ts: base + (i as i64) * 7_000 + j * 900,
            stack: vec![
                TFrame::Func("main".into()),
                TFrame::Func(format!("work{}", j % 4)),
                TFrame::Addr(0x40 + (i % 5)),
            ],
            value: (i as i64 % 13) + j + 1,
        })
        .collect()
}

fn expected_total(i: u64) -> i64 {
    batch_samples(i).iter().map(|s| s.value).sum()
}

const CHILD: CrashChild = CrashChild {
    test: "sigkill_at_random_points_loses_no_acknowledged_write",
    dir_env: "PROFILEDB_CRASH_CHILD",
};

/// Child mode: write batches from two threads until killed.
fn run_child(dir: &str, start: u64) {
    let store = std::sync::Arc::new(Store::open(dir, crash_config()).unwrap());
    let tenant = TenantId::default();
    let threads: Vec<_> = (0..2u64)
        .map(|k| {
            let store = store.clone();
            let tenant = tenant.clone();
            std::thread::spawn(move || {
                let mut i = start + k;
                loop {
                    store
                        .write(build_batch(&tenant, &batch_samples(i)))
                        .unwrap();
                    println!("ACK {i}");
                    i += 2;
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}

#[test]
fn sigkill_at_random_points_loses_no_acknowledged_write() {
    if let Some((dir, start)) = CHILD.child_args() {
        run_child(&dir, start);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut acked: BTreeSet<u64> = BTreeSet::new();
    let mut next_start = 0u64;
    let mut rng = 0x2545F4914F6CDD1Du64;
    for round in 0..12 {
        let kill_after = 3 + xorshift(&mut rng) as usize % 60;
        let r = CHILD.round(dir.path(), next_start, &mut acked, |_, acks| {
            acks >= kill_after
        });
        assert!(
            r.killed,
            "round {round}: child exited on its own ({})",
            r.status
        );
        // Batches in flight when killed may or may not be stored; never reuse their ids.
        next_start = r.max_id + 3;
    }

    let store = Store::open(dir.path(), crash_config()).unwrap();
    let stored = check_acknowledged(&store, &acked, next_start, expected_total);
    eprintln!(
        "crash test: {} acknowledged batches, {} stored, {} segments",
        acked.len(),
        stored,
        store.segments().len()
    );
}
