//! `bench cluster --faults`: the fault table. A writer, a querier and a
//! compactor (default flags for timeouts and staleness) reach moto through a
//! TCP proxy; a client pushes to the writer and asks the querier every 100 ms
//! throughout. Each fault kind runs for some cycles: the store refusing,
//! hanging, trickling and resetting connections (the proxy), moto killed and
//! restarted on its journal, a writer and a compactor aborted at every step of
//! an upload and a merge (`PROFILEDB_FAULT`). Per kind: pushes acknowledged,
//! lost and doubled (counted at the end through a fresh querier reading the
//! store directly), refused pushes found stored, the time from the fault to
//! the first refusal of each role (detection) and from its end to the first
//! success (recovery), and what each role answered meanwhile.

#[path = "../../../storage/tests/support/ledger.rs"]
mod ledger;
#[path = "../../../storage/tests/support/proxy.rs"]
mod proxy;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use profiledb_storage::{Bucket, FaultPoint};
use serde_json::{json, Value};

use super::moto::MotoServer;
use super::Node;
use crate::report;
use crate::server::workspace_binary;
use ledger::{Ledger, Outcome};
use proxy::{FaultProxy, Mode};

/// A fault and how it is made.
#[derive(Clone, Copy)]
enum How {
    Proxy(Mode),
    StoreRestart,
    KillWriter(FaultPoint),
    KillCompactor(FaultPoint),
}

fn name(h: How) -> String {
    match h {
        How::Proxy(Mode::Refuse) => "store refuses connections".into(),
        How::Proxy(Mode::Hang) => "store hangs (accepts, never answers)".into(),
        How::Proxy(Mode::Slow(r)) => format!("store slow ({} KB/s)", r / 1000),
        How::Proxy(Mode::ResetAfter(n)) => format!("connections reset after {n} B"),
        How::Proxy(Mode::Pass) => "none".into(),
        How::StoreRestart => "store killed, restarted on its journal".into(),
        How::KillWriter(p) | How::KillCompactor(p) => format!("kill at {}", p.name()),
    }
}

/// One answer a prober got: when, and the status (0: no connection, 1: the
/// connection broke).
type Answer = (Instant, u16);

/// The probers' record, by role.
#[derive(Default)]
struct Answers {
    writer: Vec<Answer>,
    querier: Vec<Answer>,
}

fn code(o: &Outcome) -> u16 {
    match o {
        Outcome::Status(s) => *s,
        Outcome::Refused => 0,
        Outcome::Broken => 1,
    }
}

/// "200×12 503×30" of the answers in `[from, to]`.
fn summary(answers: &[Answer], from: Instant, to: Instant) -> String {
    let mut by: BTreeMap<u16, usize> = BTreeMap::new();
    for (at, s) in answers {
        if *at >= from && *at <= to {
            *by.entry(*s).or_default() += 1;
        }
    }
    by.iter()
        .map(|(s, n)| match s {
            0 => format!("refused×{n}"),
            1 => format!("broken×{n}"),
            s => format!("{s}×{n}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The first answer at or after `from` that `pred` picks.
fn first(answers: &[Answer], from: Instant, pred: impl Fn(u16) -> bool) -> Option<Instant> {
    answers
        .iter()
        .find(|(at, s)| *at >= from && pred(*s))
        .map(|(at, _)| *at)
}

/// The running cluster and its probers.
struct Rig {
    bin: PathBuf,
    dir: PathBuf,
    s3: MotoServer,
    proxy: FaultProxy,
    url: String,
    writer: Node,
    querier: Node,
    compactor: Option<Node>,
    /// Where the write prober pushes.
    target: Arc<Mutex<String>>,
    ledger: Arc<Mutex<Ledger>>,
    answers: Arc<Mutex<Answers>>,
    stop: Arc<AtomicBool>,
    probers: Vec<std::thread::JoinHandle<()>>,
    runs: usize,
}

/// A role's flags: the cluster bench's, merging sooner and collecting garbage
/// after 2 s; default timeouts.
fn role_flags(url: &str, endpoint: &str, role: &str) -> Vec<String> {
    let mut v = super::role_flags(url, endpoint, role);
    for (flag, value) in [
        ("--bucket-compaction-interval-secs", "1"),
        ("--merge-min-segments", "3"),
        ("--merge-settle-secs", "1"),
        ("--gc-grace-secs", "2"),
        ("--lease-ttl-secs", "8"),
    ] {
        match v.iter().position(|f| f == flag) {
            Some(i) => v[i + 1] = value.to_string(),
            None => v.extend([flag.to_string(), value.to_string()]),
        }
    }
    v
}

impl Rig {
    fn flags(&self, role: &str, direct: bool) -> Vec<String> {
        let endpoint = if direct {
            self.s3.endpoint()
        } else {
            self.proxy.endpoint()
        };
        role_flags(&self.url, &endpoint, role)
    }

    fn node(&mut self, role: &str, env: &[(&str, &str)]) -> anyhow::Result<Node> {
        self.runs += 1;
        let dir = self.dir.join(format!("{role}-{}", self.runs));
        Node::start_env(&self.bin, &dir, &self.flags(role, false), env)
    }

    fn start_probers(&mut self) {
        let (target, ledger, answers, stop) = (
            self.target.clone(),
            self.ledger.clone(),
            self.answers.clone(),
            self.stop.clone(),
        );
        self.probers.push(std::thread::spawn(move || {
            let c = client();
            while !stop.load(Ordering::Relaxed) {
                let url = target.lock().unwrap().clone();
                let p = ledger.lock().unwrap().next_push(ledger::now_secs() - 30);
                let o = p.send(&c, &url);
                answers
                    .lock()
                    .unwrap()
                    .writer
                    .push((Instant::now(), code(&o)));
                ledger.lock().unwrap().note(p, &o);
                std::thread::sleep(Duration::from_millis(100));
            }
        }));
        let (q, answers, stop) = (
            self.querier.url.clone(),
            self.answers.clone(),
            self.stop.clone(),
        );
        self.probers.push(std::thread::spawn(move || {
            let c = client();
            while !stop.load(Ordering::Relaxed) {
                let status = match c.get(format!("{q}/api/v1/labels")).send() {
                    Ok(r) => r.status().as_u16(),
                    Err(e) if e.is_connect() => 0,
                    Err(_) => 1,
                };
                answers
                    .lock()
                    .unwrap()
                    .querier
                    .push((Instant::now(), status));
                std::thread::sleep(Duration::from_millis(100));
            }
        }));
    }

    /// Waits until both probers got `pred` after `from`; when each did.
    fn wait_both(
        &self,
        from: Instant,
        limit: Duration,
        pred: impl Fn(u16) -> bool + Copy,
    ) -> (Option<Instant>, Option<Instant>) {
        loop {
            let (w, q) = {
                let a = self.answers.lock().unwrap();
                (first(&a.writer, from, pred), first(&a.querier, from, pred))
            };
            if (w.is_some() && q.is_some()) || from.elapsed() > limit {
                return (w, q);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap_or_default()
}

/// One cycle's figures: (detect writer, detect querier, recover, writer
/// answers, querier answers), times in seconds.
struct Cycle {
    detect: [Option<f64>; 2],
    recover: Option<f64>,
    writer: String,
    querier: String,
}

fn secs(a: Option<Instant>, from: Instant) -> Option<f64> {
    a.map(|a| a.duration_since(from).as_secs_f64())
}

fn cycle(rig: &mut Rig, how: How) -> anyhow::Result<Cycle> {
    let t0 = Instant::now();
    let limit = Duration::from_secs(60);
    let ok = |s: u16| s == 200;
    let refused = |s: u16| s != 200;
    let (detect, t1) = match how {
        How::Proxy(mode) => {
            rig.proxy.set(mode);
            let d = if matches!(mode, Mode::Slow(_)) {
                std::thread::sleep(Duration::from_secs(5));
                (None, None)
            } else {
                rig.wait_both(t0, limit, refused)
            };
            std::thread::sleep(Duration::from_secs(2));
            rig.proxy.set(Mode::Pass);
            (d, Instant::now())
        }
        How::StoreRestart => {
            rig.s3.kill9();
            let d = rig.wait_both(t0, limit, refused);
            std::thread::sleep(Duration::from_secs(2));
            rig.s3.restart();
            (d, Instant::now())
        }
        How::KillWriter(point) => {
            let fault = format!("{}:2", point.name());
            let mut w = rig.node("writer", &[("PROFILEDB_FAULT", &fault)])?;
            let dir = rig.dir.join(format!("writer-{}", rig.runs));
            *rig.target.lock().unwrap() = w.url.clone();
            while !w.exited() {
                if t0.elapsed() > limit {
                    bail!("the writer did not reach {}", point.name());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let died = Instant::now();
            if point == FaultPoint::WriterAfterAck {
                // Issue #50: back only once its uploads are merged away.
                let bucket = Bucket::open(&rig.s3.config("faults"))?;
                let node = std::fs::read_to_string(dir.join("NODE_ID"))?;
                while !merged_away(&bucket, node.trim())? {
                    if died.elapsed() > limit {
                        bail!("the dead writer's uploads were not merged away");
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
            let t1 = Instant::now();
            let w = Node::start(&rig.bin, &dir, &rig.flags("writer", false))?;
            *rig.target.lock().unwrap() = w.url.clone();
            let back = rig.wait_both(t1, limit, ok).0;
            *rig.target.lock().unwrap() = rig.writer.url.clone();
            drop(w);
            let a = rig.answers.lock().unwrap();
            return Ok(Cycle {
                detect: [None, None],
                recover: secs(back, t1),
                writer: summary(&a.writer, t0, Instant::now()),
                querier: summary(&a.querier, t0, Instant::now()),
            });
        }
        How::KillCompactor(point) => {
            drop(rig.compactor.take());
            let mut c = rig.node("compactor", &[("PROFILEDB_FAULT", point.name())])?;
            let dir = rig.dir.join(format!("compactor-{}", rig.runs));
            while !c.exited() {
                if t0.elapsed() > Duration::from_secs(120) {
                    bail!("the compactor did not reach {}", point.name());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let t1 = Instant::now();
            rig.compactor = Some(Node::start(&rig.bin, &dir, &rig.flags("compactor", false))?);
            let back = Instant::now();
            let a = rig.answers.lock().unwrap();
            return Ok(Cycle {
                detect: [None, None],
                recover: secs(Some(back), t1),
                writer: summary(&a.writer, t0, back),
                querier: summary(&a.querier, t0, back),
            });
        }
    };
    let (bw, bq) = rig.wait_both(t1, limit, ok);
    let back = bw.max(bq).unwrap_or_else(Instant::now);
    let a = rig.answers.lock().unwrap();
    Ok(Cycle {
        detect: [secs(detect.0, t0), secs(detect.1, t0)],
        recover: bw.and(bq).map(|_| back.duration_since(t1).as_secs_f64()),
        writer: summary(&a.writer, t0, back),
        querier: summary(&a.querier, t0, back),
    })
}

/// Nothing of writer `node` left in the bucket: no object, no index entry.
fn merged_away(bucket: &Bucket, node: &str) -> anyhow::Result<bool> {
    let mine = format!("/segments/{node}-");
    for t in bucket.tenants()? {
        let idx = bucket.load_index(&t)?;
        let objects = bucket.list(&format!("tenants/{t}/segments/"))?;
        if idx.retired.iter().any(|r| r.key.contains(&mine))
            || idx.segments.iter().any(|e| e.key.contains(&mine))
            || objects.iter().any(|o| o.key.contains(&mine))
        {
            return Ok(false);
        }
    }
    Ok(true)
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

fn fmt_s(v: Option<f64>) -> String {
    v.map_or("—".into(), |s| format!("{s:.1} s"))
}

pub(super) fn run(cycles: usize, quick: bool) -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let Some(s3) = MotoServer::start_persistent(&tmp.path().join("s3.journal")) else {
        println!("cluster fault suite skipped: no S3-protocol server (moto) to run against");
        return Ok(());
    };
    let bin = workspace_binary("profiledb", "profiledb")?;
    let proxy = FaultProxy::start(s3.port());
    let url = s3.config("faults").url;
    let kinds: Vec<How> = if quick {
        vec![
            How::Proxy(Mode::Refuse),
            How::Proxy(Mode::Hang),
            How::StoreRestart,
            How::KillWriter(FaultPoint::WriterAfterAck),
            How::KillCompactor(FaultPoint::CompactorAfterSwap),
        ]
    } else {
        let mut k = vec![
            How::Proxy(Mode::Refuse),
            How::Proxy(Mode::Hang),
            How::Proxy(Mode::Slow(50_000)),
            How::Proxy(Mode::ResetAfter(2_000)),
            How::StoreRestart,
        ];
        k.extend(FaultPoint::ALL[..4].iter().map(|p| How::KillWriter(*p)));
        k.extend(FaultPoint::ALL[4..].iter().map(|p| How::KillCompactor(*p)));
        k
    };
    let dir = tmp.path();
    let start = |role: &str| {
        let flags = role_flags(&url, &proxy.endpoint(), role);
        Node::start(&bin, &dir.join(format!("{role}-0")), &flags)
    };
    let (writer, querier, compactor) = (start("writer")?, start("querier")?, start("compactor")?);
    let mut rig = Rig {
        bin: bin.clone(),
        dir: dir.to_path_buf(),
        s3,
        proxy,
        url,
        writer,
        querier,
        compactor: Some(compactor),
        target: Arc::default(),
        ledger: Arc::default(),
        answers: Arc::default(),
        stop: Arc::default(),
        probers: Vec::new(),
        runs: 0,
    };
    *rig.target.lock().unwrap() = rig.writer.url.clone();
    rig.start_probers();
    std::thread::sleep(Duration::from_secs(2));
    let mut results = Vec::new();
    for (k, how) in kinds.iter().enumerate() {
        rig.ledger.lock().unwrap().tag = k + 1;
        let mut done = Vec::new();
        for i in 0..cycles {
            eprintln!(
                "cluster faults: {} (cycle {} of {cycles})",
                name(*how),
                i + 1
            );
            done.push(cycle(&mut rig, *how).with_context(|| name(*how))?);
            std::thread::sleep(Duration::from_secs(1));
        }
        results.push(done);
    }
    rig.ledger.lock().unwrap().tag = 0;
    std::thread::sleep(Duration::from_secs(3));
    rig.stop.store(true, Ordering::Relaxed);
    for p in rig.probers.drain(..) {
        let _ = p.join();
    }
    // A fresh querier reading the store directly counts every push.
    let fresh = Node::start(
        &bin,
        &tmp.path().join("q-fresh"),
        &rig.flags("querier", true),
    )?;
    let ledger = rig.ledger.lock().unwrap();
    let mut m = ledger::merged(&fresh.url);
    // Uploads acknowledged last may need a sync or two.
    for _ in 0..40 {
        if ledger.tally_of(&m, |_| true).lost.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
        m = ledger::merged(&fresh.url);
    }
    let seg_bytes = rig.writer.metric("profiledb_upload_bytes_total")?;
    let idx_bytes = rig
        .writer
        .metric("profiledb_bucket_index_written_bytes_total")?;
    println!(
        "cluster fault suite: {cycles} cycle(s) per fault; a push and a query every 100 ms throughout; moto behind a TCP proxy; default --s3-timeout-ms (2000), --s3-retries (1), --max-sync-age-secs (10)"
    );
    println!("| fault | cycles | acknowledged | lost | doubled | refused yet stored | detected: writer / querier (median) | recovered (median) | writer answered meanwhile (last cycle) | querier answered meanwhile (last cycle) |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut rows = Vec::new();
    for (k, (how, done)) in kinds.iter().zip(&results).enumerate() {
        let tag = k + 1;
        let t = ledger.tally_of(&m, |p| p.tag == tag);
        let acked = ledger.acked.iter().filter(|p| p.tag == tag).count();
        let dw = median(done.iter().filter_map(|c| c.detect[0]).collect());
        let dq = median(done.iter().filter_map(|c| c.detect[1]).collect());
        let rec = median(done.iter().filter_map(|c| c.recover).collect());
        let last = done.last();
        println!(
            "| {} | {} | {acked} | {} | {} | {} | {} / {} | {} | {} | {} |",
            name(*how),
            done.len(),
            t.lost.len(),
            t.doubled.len(),
            t.refused_present.len(),
            fmt_s(dw),
            fmt_s(dq),
            fmt_s(rec),
            last.map_or("", |c| c.writer.as_str()),
            last.map_or("", |c| c.querier.as_str()),
        );
        rows.push(json!({
            "fault": name(*how), "cycles": done.len(), "acknowledged": acked,
            "lost": t.lost.len(), "doubled": t.doubled.len(), "refused_present": t.refused_present.len(),
            "detect_writer_s": dw, "detect_querier_s": dq, "recover_s": rec,
        }));
    }
    let all = ledger.tally_of(&m, |_| true);
    println!(
        "\nall pushes: {} acknowledged, {} refused, {} uncertain; lost {}, doubled {}, refused yet stored {}",
        ledger.acked.len(),
        ledger.refused.len(),
        ledger.uncertain.len(),
        all.lost.len(),
        all.doubled.len(),
        all.refused_present.len()
    );
    println!(
        "the steady writer: {} of segments uploaded, {} of index log entries written ({:.3} index bytes per segment byte)",
        report::human_bytes(seg_bytes),
        report::human_bytes(idx_bytes),
        idx_bytes / seg_bytes.max(1.0)
    );
    let figures: Value = json!({
        "cycles": cycles, "faults": rows,
        "acknowledged": ledger.acked.len(), "refused": ledger.refused.len(),
        "uncertain": ledger.uncertain.len(), "lost": all.lost.len(), "doubled": all.doubled.len(),
        "refused_present": all.refused_present.len(),
        "segment_bytes_uploaded": seg_bytes, "index_bytes_written": idx_bytes,
    });
    let path = report::write("cluster-faults", figures)?;
    println!("figures written to {}", path.display());
    if !all.clean() {
        bail!("pushes not counted as answered: {all:?}");
    }
    Ok(())
}
