//! The cluster through faults, with real processes over a real S3-protocol
//! server (moto; skipped with a message where it is absent, failed with
//! PROFILEDB_REQUIRE_EXTERNAL=1):
//! - a writer and a compactor killed (abort, as `kill -9`) at every step of an
//!   upload (upload → index → acknowledgement → local forget) and of a merge
//!   (upload → index swap → garbage deletion → checkpoint), the writer killed
//!   right after its acknowledgement restarted only once the compactor has
//!   merged and deleted what it uploaded (issue #50's double count);
//! - the store behind a TCP proxy refusing, hanging, slowing and resetting:
//!   every role says so (503 with the reason and `Retry-After`, `/ready`, the
//!   reachability gauge) and recovers without a restart;
//! - the store itself killed and restarted on its journal.
//!
//! After each, every push is counted through a fresh querier as its client was
//! answered: acknowledged ones exactly once, refused ones not at all.
//! Timings are measured by `bench cluster --faults`, not asserted here.

use std::time::Duration;

use crate::cluster_procs::proxy::{FaultProxy, Mode};
use crate::cluster_procs::{converge, role_flags, Ledger, Outcome, Proc};
use crate::common::{free_port, wait_for};
use crate::moto::MotoServer;
use profiledb_storage::{Bucket, FaultPoint};

/// Flags of a role for these tests: `role_flags`' fast passes and short grace,
/// and request timeouts of a second so a hung store is noticed in about two.
fn flags(endpoint: &str, url: &str, role: &str) -> Vec<String> {
    role_flags(
        endpoint,
        url,
        role,
        &[
            "--merge-settle-secs",
            "1",
            "--s3-timeout-ms",
            "1000",
            "--s3-retries",
            "1",
            "--max-sync-age-secs",
            "5",
        ],
    )
}

fn temp_root() -> (std::path::PathBuf, Option<tempfile::TempDir>) {
    let tmp = tempfile::tempdir().unwrap();
    // PROFILEDB_KEEP_TEST_DIR keeps the processes' logs for a post-mortem.
    if std::env::var_os("PROFILEDB_KEEP_TEST_DIR").is_some() {
        let kept = tmp.keep();
        eprintln!("cluster fault test directory kept: {}", kept.display());
        (kept, None)
    } else {
        (tmp.path().to_path_buf(), Some(tmp))
    }
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Whether nothing the writer whose data directory is `dir` uploaded is left:
/// no object, and no live or retired entry in the index (merged, deleted and
/// forgotten).
fn merged_away(bucket: &Bucket, dir: &std::path::Path) -> bool {
    let node = std::fs::read_to_string(dir.join("NODE_ID")).unwrap_or_default();
    let mine = format!("/segments/{}-", node.trim());
    bucket.tenants().unwrap().iter().all(|t| {
        let idx = bucket.load_index(t).unwrap();
        let objects = bucket.list(&format!("tenants/{t}/segments/")).unwrap();
        idx.retired.iter().all(|r| !r.key.contains(&mine))
            && idx.segments.iter().all(|e| !e.key.contains(&mine))
            && objects.iter().all(|o| !o.key.contains(&mine))
    })
}

#[test]
fn a_role_killed_at_any_step_loses_and_doubles_nothing() {
    let Some(s3) = MotoServer::start() else {
        return;
    };
    let cfg = s3.config("kills");
    let (endpoint, url) = (s3.endpoint(), cfg.url.clone());
    let bucket = Bucket::open(&cfg).unwrap();
    let (root, _guard) = temp_root();
    let f = |role: &str| flags(&endpoint, &url, role);
    let c = client();
    let mut ledger = Ledger::default();

    let steady = Proc::start(&root.join("w-steady"), &f("writer"));
    let mut compactor = Some(Proc::start(&root.join("c-steady"), &f("compactor")));
    let mut writers = Vec::new();
    for point in &FaultPoint::ALL[..4] {
        let dir = root.join(point.name());
        // The second upload: the first pass then has a partition to merge.
        let fault = format!("{}:2", point.name());
        let port = free_port();
        let mut w = Proc::start_with(
            &dir,
            &f("writer"),
            port,
            true,
            &[("PROFILEDB_FAULT", &fault)],
        );
        wait_for(
            60,
            &format!("the writer to die at {}", point.name()),
            || {
                ledger.push(&c, &w.url);
                ledger.push(&c, &steady.url);
                w.exited().then_some(())
            },
        );
        if *point == FaultPoint::WriterAfterAck {
            // Issue #50: back only after its upload was merged, and the merged
            // sources deleted and forgotten.
            wait_for(60, "the dead writer's uploads to be merged away", || {
                ledger.push(&c, &steady.url);
                merged_away(&bucket, &dir).then_some(())
            });
        }
        w = Proc::start_on(&dir, &f("writer"), port, true);
        // A 503 (the store slower than the 1 s timeout on a loaded machine) is a
        // refusal the ledger checks is absent; the writer must come to 200.
        for _ in 0..3 {
            wait_for(60, "the restarted writer to acknowledge", || {
                (ledger.push(&c, &w.url) == Outcome::Status(200)).then_some(())
            });
        }
        writers.push(w);
    }
    for point in &FaultPoint::ALL[4..] {
        drop(compactor.take());
        let dir = root.join(point.name());
        let port = free_port();
        let mut k = Proc::start_with(
            &dir,
            &f("compactor"),
            port,
            true,
            &[("PROFILEDB_FAULT", point.name())],
        );
        wait_for(
            90,
            &format!("the compactor to die at {}", point.name()),
            || {
                ledger.push(&c, &steady.url);
                std::thread::sleep(Duration::from_millis(100));
                k.exited().then_some(())
            },
        );
        compactor = Some(Proc::start_on(&dir, &f("compactor"), port, true));
    }
    // A fresh querier counts every push as it was answered; no role that was
    // not killed was restarted.
    let q = Proc::start(&root.join("q"), &f("querier"));
    converge(&ledger, &q.url, 60, "after kills at every step");
    assert!(
        ledger.acked.len() >= 40,
        "{} pushes acknowledged",
        ledger.acked.len()
    );
    // The compactors keep working: the bucket ends with what its index lists.
    drop((writers, steady));
}

/// A push sent while the store fails: what it was answered, and whether the
/// answer said to come back later.
fn push_checked(ledger: &mut Ledger, c: &reqwest::blocking::Client, url: &str) -> Option<u16> {
    let p = ledger.next_push(crate::cluster_procs::now_secs() - 30);
    let r = c.post(format!("{url}{}", p.path())).body(p.body()).send();
    match r {
        Ok(r) => {
            let status = r.status().as_u16();
            if status == 503 {
                assert!(
                    r.headers().contains_key("retry-after"),
                    "503 without Retry-After"
                );
                let body = r.text().unwrap_or_default();
                assert!(body.contains("object store"), "503 says why: {body}");
            }
            ledger.note(p, &Outcome::Status(status));
            Some(status)
        }
        Err(e) if e.is_connect() => {
            ledger.note(p, &Outcome::Refused);
            None
        }
        Err(_) => {
            ledger.note(p, &Outcome::Broken);
            None
        }
    }
}

/// `/ready` of `p`: the status code and the JSON status field.
fn ready(c: &reqwest::blocking::Client, p: &Proc) -> (u16, String) {
    let r = c.get(format!("{}/ready", p.url)).send().unwrap();
    let code = r.status().as_u16();
    let status = r
        .json::<serde_json::Value>()
        .ok()
        .and_then(|v| v["status"].as_str().map(str::to_string))
        .unwrap_or_default();
    (code, status)
}

/// A query's status and whether a 503 carried `Retry-After` and a reason.
fn query(c: &reqwest::blocking::Client, q: &Proc) -> u16 {
    let r = c.get(format!("{}/api/v1/labels", q.url)).send().unwrap();
    let code = r.status().as_u16();
    if code == 503 {
        assert!(r.headers().contains_key("retry-after"));
        let body = r.text().unwrap_or_default();
        assert!(
            body.contains("object store") || body.contains("sync"),
            "503 says why: {body}"
        );
    }
    code
}

fn gauge(p: &Proc, role: &str) -> u64 {
    p.metric(&format!("profiledb_bucket_reachable{{role=\"{role}\"}}"))
}

#[test]
fn a_store_that_refuses_hangs_slows_or_resets_is_ridden_out() {
    let Some(s3) = MotoServer::start() else {
        return;
    };
    let proxy = FaultProxy::start(s3.port());
    let cfg = s3.config("proxy");
    let url = cfg.url.clone();
    let (root, _guard) = temp_root();
    let via = |role: &str| flags(&proxy.endpoint(), &url, role);
    let c = client();
    let mut ledger = Ledger::default();
    let w = Proc::start(&root.join("w"), &via("writer"));
    let q = Proc::start(&root.join("q"), &via("querier"));
    let k = Proc::start(&root.join("c"), &via("compactor"));
    for _ in 0..5 {
        assert_eq!(ledger.push(&c, &w.url), Outcome::Status(200));
    }
    for mode in [Mode::Refuse, Mode::Hang] {
        proxy.set(mode);
        // Every role notices, says so, and points clients at later.
        wait_for(60, &format!("writes refused ({mode:?})"), || {
            (push_checked(&mut ledger, &c, &w.url) == Some(503)).then_some(())
        });
        wait_for(60, &format!("queries refused ({mode:?})"), || {
            (query(&c, &q) == 503).then_some(())
        });
        wait_for(60, &format!("/ready to say so ({mode:?})"), || {
            let (wc, ws) = ready(&c, &w);
            let (qc, qs) = ready(&c, &q);
            let (kc, ks) = ready(&c, &k);
            (wc == 503
                && ws == "store_unreachable"
                && qc == 503
                && kc == 503
                && ks == "store_unreachable"
                && (qs == "store_unreachable" || qs == "stale"))
                .then_some(())
        });
        assert_eq!(gauge(&w, "writer"), 0);
        // Counted as unreachability of the kinds the fault makes (a refused
        // connect, or a pooled connection cut; a request with no answer), not
        // as damage.
        let kinds: &[&str] = if mode == Mode::Refuse {
            &["connect", "broken"]
        } else {
            &["timed_out"]
        };
        for p in [&w, &q, &k] {
            let n: u64 = kinds
                .iter()
                .map(|kind| {
                    p.metric(&format!(
                        "profiledb_bucket_unreachable_total{{kind=\"{kind}\"}}"
                    ))
                })
                .sum();
            assert!(n > 0, "{} counted no {kinds:?} request ({mode:?})", p.url);
            let damaged = p.metric("profiledb_bucket_quarantined_total{role=\"querier\"}")
                + p.metric("profiledb_bucket_quarantined_total{role=\"compactor\"}");
            assert_eq!(damaged, 0, "an outage quarantines nothing ({mode:?})");
        }
        proxy.set(Mode::Pass);
        // Back without a restart.
        wait_for(60, &format!("every role back ({mode:?})"), || {
            (ready(&c, &w).0 == 200 && ready(&c, &q).0 == 200 && ready(&c, &k).0 == 200)
                .then_some(())
        });
        assert_eq!(gauge(&w, "writer"), 1);
        assert_eq!(ledger.push(&c, &w.url), Outcome::Status(200));
        assert_eq!(query(&c, &q), 200);
    }
    // Slow but answering is not an outage.
    proxy.set(Mode::Slow(200_000));
    for _ in 0..3 {
        assert_eq!(ledger.push(&c, &w.url), Outcome::Status(200));
    }
    assert_eq!(query(&c, &q), 200);
    // Connections reset mid-answer: whatever the clients were told holds.
    proxy.set(Mode::ResetAfter(300));
    for _ in 0..5 {
        push_checked(&mut ledger, &c, &w.url);
    }
    proxy.set(Mode::Pass);
    wait_for(60, "every role back after the resets", || {
        (ready(&c, &w).0 == 200 && ready(&c, &q).0 == 200).then_some(())
    });
    let fresh = Proc::start(
        &root.join("q-fresh"),
        &flags(&s3.endpoint(), &url, "querier"),
    );
    converge(&ledger, &fresh.url, 60, "after the proxy's faults");
    converge(&ledger, &q.url, 60, "the querier that rode them out");
    assert!(!ledger.refused.is_empty(), "the outages refused writes");
}

#[test]
fn a_store_restarted_on_its_journal_loses_nothing_and_no_role_restarts() {
    let (root, _guard) = temp_root();
    let Some(mut s3) = MotoServer::start_persistent(&root.join("s3.journal")) else {
        return;
    };
    let cfg = s3.config("restart");
    let (endpoint, url) = (s3.endpoint(), cfg.url.clone());
    let f = |role: &str| flags(&endpoint, &url, role);
    let c = client();
    let mut ledger = Ledger::default();
    let w = Proc::start(&root.join("w"), &f("writer"));
    let q = Proc::start(&root.join("q"), &f("querier"));
    let _k = Proc::start(&root.join("c"), &f("compactor"));
    for _ in 0..8 {
        assert_eq!(ledger.push(&c, &w.url), Outcome::Status(200));
    }
    s3.kill9();
    wait_for(60, "writes refused while the store is down", || {
        (push_checked(&mut ledger, &c, &w.url) == Some(503)).then_some(())
    });
    wait_for(60, "queries refused while the store is down", || {
        (query(&c, &q) == 503).then_some(())
    });
    s3.restart();
    wait_for(60, "the writer and querier back", || {
        (ready(&c, &w).0 == 200 && ready(&c, &q).0 == 200).then_some(())
    });
    for _ in 0..8 {
        assert_eq!(ledger.push(&c, &w.url), Outcome::Status(200));
    }
    let fresh = Proc::start(&root.join("q-fresh"), &f("querier"));
    converge(&ledger, &fresh.url, 60, "after the store's restart");
    converge(&ledger, &q.url, 60, "the querier that rode it out");
}
