//! A cluster on loopback against a real S3-protocol server (moto): two writers, two
//! queriers and two compactors share one bucket while several clients write
//! through both writers. One writer is killed with SIGKILL mid-load and restarted;
//! a compactor is killed while a merge it uploaded waits to be swapped in. Then
//! every acknowledged push is counted exactly once through both queriers, and every
//! answer equals a single-node `profiledb serve` fed the same pushes; the bucket
//! holds exactly the objects its index lists once the grace period has passed.
//! Bad states: an unreachable bucket answers 503 with a message; a corrupt and a
//! missing object are quarantined and reported while the rest is served.

use crate::moto;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{free_port, wait_for};
use profiledb_storage::{Bucket, SegmentFile};

const BIN: &str = env!("CARGO_BIN_EXE_profiledb");
const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
const PREFIX: &str = "cluster-test";

/// One `profiledb serve` process.
struct Proc {
    child: Child,
    url: String,
    port: u16,
    dir: std::path::PathBuf,
    flags: Vec<String>,
}

impl Proc {
    fn start(dir: &Path, flags: &[String]) -> Proc {
        Self::start_on(dir, flags, free_port(), true)
    }

    fn start_on(dir: &Path, flags: &[String], port: u16, wait_ready: bool) -> Proc {
        let log = std::fs::File::create(dir.with_extension("log")).unwrap();
        let child = Command::new(BIN)
            .args(["serve", "--data-dir"])
            .arg(dir)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(flags)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let p = Proc {
            child,
            url: format!("http://127.0.0.1:{port}"),
            port,
            dir: dir.to_path_buf(),
            flags: flags.to_vec(),
        };
        if wait_ready {
            p.wait_ready();
        }
        p
    }

    fn wait_ready(&self) {
        let client = reqwest::blocking::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !client
            .get(format!("{}/ready", self.url))
            .send()
            .is_ok_and(|r| r.status() == 200)
        {
            assert!(
                Instant::now() < deadline,
                "{} did not become ready; log: {}",
                self.url,
                std::fs::read_to_string(self.dir.with_extension("log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts it again on the same directory, port and flags.
    fn restart(&mut self) {
        self.kill9();
        let p = Proc::start_on(&self.dir, &self.flags, self.port, true);
        *self = p;
    }

    fn metric(&self, name: &str) -> u64 {
        let text = reqwest::blocking::get(format!("{}/metrics", self.url))
            .unwrap()
            .text()
            .unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn role_flags(endpoint: &str, url: &str, role: &str, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "--storage",
        url,
        "--s3-endpoint",
        endpoint,
        "--role",
        role,
        "--upload-interval-ms",
        "200",
        "--sync-interval-ms",
        "200",
        "--bucket-compaction-interval-secs",
        "1",
        "--merge-min-segments",
        "3",
        "--gc-grace-secs",
        "3",
        "--lease-ttl-secs",
        "8",
        "--memory-mb",
        "256",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// What became of a push.
#[derive(Debug, PartialEq)]
enum Outcome {
    Status(u16),
    /// No connection: nothing was sent.
    Refused,
    /// The connection broke mid-request: it may or may not be stored.
    Broken,
}

/// One push: a unique stack whose value identifies it.
#[derive(Clone, Debug)]
struct Push {
    id: usize,
    service: &'static str,
    host: &'static str,
    from: u64,
}

impl Push {
    fn path(&self) -> String {
        format!(
            "/ingest?name={}.cpu{{host={}}}&from={}",
            self.service, self.host, self.from
        )
    }
    /// Its value in nanoseconds: `/ingest` takes samples at 100 Hz by default.
    fn value(&self) -> i64 {
        (self.id as i64 + 1) * 10_000_000
    }
    fn body(&self) -> String {
        format!("main;work;p{} {}\n", self.id, self.id + 1)
    }
    fn send(&self, client: &reqwest::blocking::Client, url: &str) -> Outcome {
        match client
            .post(format!("{url}{}", self.path()))
            .body(self.body())
            .timeout(Duration::from_secs(30))
            .send()
        {
            Ok(r) => Outcome::Status(r.status().as_u16()),
            Err(e) if e.is_connect() => Outcome::Refused,
            Err(_) => Outcome::Broken,
        }
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn merged(url: &str) -> BTreeMap<String, i64> {
    let resp = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/merge"))
        .query(&[
            ("query", format!("{CPU}{{}}").as_str()),
            ("from", "0"),
            ("until", "now+1d"),
            ("format", "folded"),
        ])
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200, "merge at {url}");
    resp.text()
        .unwrap()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// Every query kind the issue lists, as (what, answer).
fn answers(url: &str, t0: u64) -> Vec<(String, serde_json::Value)> {
    let c = reqwest::blocking::Client::new();
    let mut out = Vec::new();
    let get = |path: &str, q: &[(&str, String)]| -> serde_json::Value {
        let r = c.get(format!("{url}{path}")).query(q).send().unwrap();
        assert_eq!(r.status(), 200, "{path} at {url}");
        r.json().unwrap()
    };
    let post = |path: &str, body: serde_json::Value| -> serde_json::Value {
        let r = c.post(format!("{url}{path}")).json(&body).send().unwrap();
        assert_eq!(r.status(), 200, "{path} at {url}");
        r.json().unwrap()
    };
    let sel = format!("{CPU}{{}}");
    let (lo, hi) = (t0 - 300, t0 + 300);
    out.push(("merge".into(), serde_json::to_value(merged(url)).unwrap()));
    out.push((
        "group-by".into(),
        post(
            "/api/v1/query",
            serde_json::json!({"profile_type": CPU, "selector": "{}",
                "start": lo * 1000, "end": hi * 1000,
                "group_by": ["service_name", "host"], "limit": 100}),
        ),
    ));
    out.push((
        "time series".into(),
        get(
            "/api/v1/timeseries",
            &[
                ("query", sel.clone()),
                ("from", lo.to_string()),
                ("until", hi.to_string()),
                ("step", "10s".into()),
                ("group_by", "service_name".into()),
            ],
        ),
    ));
    let diff = post(
        "/api/v1/diff",
        serde_json::json!({"profile_type": CPU, "selector": "{}",
            "base": {"start": lo.to_string(), "end": (t0 - 20).to_string()},
            "compare": {"start": (t0 - 20).to_string(), "end": hi.to_string()},
            "max_nodes": 64, "top": 5}),
    );
    // The flame graph's name table is in the order frames were first met, which
    // differs with segment layout; what it says is compared: ticks, stats, top.
    let fg = &diff["flamegraph"];
    let mut top = diff["top"].as_array().cloned().unwrap_or_default();
    top.sort_by_key(|t| t.to_string());
    // Entropies are sums of floats in frame order: equal to 1e-9, not to the bit.
    out.push((
        "diff".into(),
        rounded(
            serde_json::json!({"left": fg["leftTicks"], "right": fg["rightTicks"],
            "total": fg["total"], "stats": diff["stats"], "top": top}),
        ),
    ));
    out.push(("labels".into(), get("/api/v1/labels", &[])));
    out.push((
        "label values".into(),
        get("/api/v1/label_values", &[("name", "host".into())]),
    ));
    out
}

/// `v` with every float rounded to 9 decimals.
fn rounded(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(0.0);
            serde_json::json!((f * 1e9).round() / 1e9)
        }
        Value::Array(a) => Value::Array(a.into_iter().map(rounded).collect()),
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (k, rounded(v))).collect()),
        other => other,
    }
}

/// Segment object keys in the bucket, and the keys its index lists (live,
/// retired, quarantined).
fn bucket_state(bucket: &Bucket) -> (BTreeSet<String>, BTreeSet<String>, usize) {
    let objects: BTreeSet<String> = bucket
        .list("tenants/")
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .filter(|k| k.contains("/segments/"))
        .collect();
    let mut listed = BTreeSet::new();
    let mut retired = 0;
    for t in bucket.tenants().unwrap() {
        let view = bucket.load_index(&t, None).unwrap().unwrap();
        listed.extend(view.index.segments.iter().map(|e| e.key.clone()));
        listed.extend(view.index.quarantined.iter().map(|e| e.key.clone()));
        retired += view.index.retired.len();
    }
    (objects, listed, retired)
}

#[test]
fn cluster_counts_every_acknowledged_push_once_and_answers_like_one_node() {
    let Some(s3) = moto::MotoServer::start() else {
        return;
    };
    let cfg = s3.config(PREFIX);
    let (endpoint, url) = (s3.endpoint(), cfg.url.clone());
    let bucket = Bucket::open(&cfg).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    // PROFILEDB_KEEP_TEST_DIR keeps the processes' logs for a post-mortem.
    let (root, _guard) = if std::env::var_os("PROFILEDB_KEEP_TEST_DIR").is_some() {
        let kept = tmp.keep();
        eprintln!("cluster test directory kept: {}", kept.display());
        (kept, None)
    } else {
        (tmp.path().to_path_buf(), Some(tmp))
    };
    let d = |n: &str| root.join(n);
    let flags = |role: &str, extra: &[&str]| role_flags(&endpoint, &url, role, extra);

    let single = Proc::start(&d("single"), &["--memory-mb".into(), "256".into()]);
    let w1 = Arc::new(Mutex::new(Proc::start(&d("w1"), &flags("writer", &[]))));
    let w2 = Proc::start(&d("w2"), &flags("writer", &[]));
    let q1 = Proc::start(&d("q1"), &flags("querier", &[]));
    let q2 = Proc::start(&d("q2"), &flags("querier", &[]));
    // c1 pauses between uploading a merge and swapping it in: it is killed there.
    let mut c1 = Proc::start(
        &d("c1"),
        &flags("compactor", &["--fault-compactor-pause-ms", "4000"]),
    );

    // Wrong roles are told so, not answered from partial data.
    let r = reqwest::blocking::get(format!("{}/api/v1/labels", w2.url)).unwrap();
    assert_eq!(r.status(), 421);
    assert!(r.text().unwrap().contains("--role writer"));
    let r = reqwest::blocking::Client::new()
        .post(format!("{}/ingest?name=x.cpu", q1.url))
        .body("main 1\n")
        .send()
        .unwrap();
    assert_eq!(r.status(), 421);
    // A querier's local copies are a cache: local compaction is refused.
    let r = reqwest::blocking::Client::new()
        .post(format!("{}/api/v1/admin/compact", q1.url))
        .send()
        .unwrap();
    assert_eq!(r.status(), 409);
    assert!(r.text().unwrap().contains("compactor role"));

    let t0 = now_secs();
    let pushes: Vec<Push> = (0..120)
        .map(|id| Push {
            id,
            service: if id % 2 == 0 { "alpha" } else { "beta" },
            host: ["h1", "h2", "h3"][id % 3],
            from: t0 - 60 + (id as u64 % 50),
        })
        .collect();
    let acked = Arc::new(Mutex::new(Vec::<Push>::new()));
    let uncertain = Arc::new(Mutex::new(Vec::<Push>::new()));
    let next = Arc::new(AtomicUsize::new(0));
    let w2_url = w2.url.clone();
    let w1_url = w1.lock().unwrap().url.clone();
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let (pushes, acked, uncertain, next) = (
                pushes.clone(),
                acked.clone(),
                uncertain.clone(),
                next.clone(),
            );
            let urls = [w1_url.clone(), w2_url.clone()];
            std::thread::spawn(move || {
                let client = reqwest::blocking::Client::new();
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(p) = pushes.get(i) else { return };
                    // A writer that is down, or refuses before storing (429, 503),
                    // sends the push to the other writer; one that broke the
                    // connection mid-request may have stored it.
                    let mut outcome = Outcome::Refused;
                    for attempt in 0..20 {
                        outcome = p.send(&client, &urls[(i + c + attempt) % 2]);
                        match outcome {
                            Outcome::Status(200) | Outcome::Broken => break,
                            _ => std::thread::sleep(Duration::from_millis(100)),
                        }
                    }
                    match outcome {
                        Outcome::Status(200) => acked.lock().unwrap().push(p.clone()),
                        Outcome::Broken => uncertain.lock().unwrap().push(p.clone()),
                        other => panic!("push {} never stored: {other:?}", p.id),
                    }
                }
            })
        })
        .collect();

    // Mid-load: SIGKILL the first writer and bring it back on the same disk.
    wait_for(30, "a third of the pushes", || {
        (acked.lock().unwrap().len() >= 40).then_some(())
    });
    w1.lock().unwrap().kill9();
    std::thread::sleep(Duration::from_millis(500));
    w1.lock().unwrap().restart();
    // Kill the compactor while it holds an uploaded merge not yet swapped in.
    wait_for(60, "c1 to upload a merge", || {
        (c1.metric("profiledb_bucket_merge_uploads_total") > 0).then_some(())
    });
    assert_eq!(
        c1.metric("profiledb_bucket_merges_total"),
        0,
        "c1 swapped before it was killed"
    );
    c1.kill9();
    for c in clients {
        c.join().unwrap();
    }
    let c2 = Proc::start(&d("c2"), &flags("compactor", &[]));

    let acked = acked.lock().unwrap().clone();
    let uncertain = uncertain.lock().unwrap().clone();
    assert!(
        acked.len() >= 100,
        "only {} pushes acknowledged",
        acked.len()
    );
    for p in &acked {
        assert_eq!(
            p.send(&reqwest::blocking::Client::new(), &single.url),
            Outcome::Status(200)
        );
    }
    let expected: i64 = acked.iter().map(|p| p.value()).sum();

    // Both queriers converge on every acknowledged push, each counted once.
    for q in [&q1, &q2] {
        let deadline = Instant::now() + Duration::from_secs(60);
        let m = loop {
            let m = merged(&q.url);
            let missing: Vec<(usize, i64)> = acked
                .iter()
                .filter_map(|p| {
                    let v = m.get(&format!("main;work;p{}", p.id)).copied().unwrap_or(0);
                    (v != p.value()).then_some((p.id, v))
                })
                .collect();
            if missing.is_empty() {
                break m;
            }
            assert!(
                Instant::now() < deadline,
                "{}: acknowledged pushes (id, value seen) not counted once: {missing:?}",
                q.url
            );
            std::thread::sleep(Duration::from_millis(200));
        };
        for p in &acked {
            assert_eq!(
                m[&format!("main;work;p{}", p.id)],
                p.value(),
                "push {}",
                p.id
            );
        }
        // An unacknowledged push is there once or not at all.
        for p in &uncertain {
            let v = m.get(&format!("main;work;p{}", p.id)).copied().unwrap_or(0);
            assert!(v == 0 || v == p.value(), "push {} counted {v}", p.id);
        }
    }
    // Uncertain pushes the cluster did store go to the single node too.
    let m = merged(&q1.url);
    for p in &uncertain {
        if m.contains_key(&format!("main;work;p{}", p.id)) {
            assert_eq!(
                p.send(&reqwest::blocking::Client::new(), &single.url),
                Outcome::Status(200)
            );
        }
    }
    // Let the compactor merge; answers must not change through it.
    wait_for(60, "a merge to be swapped in", || {
        (c2.metric("profiledb_bucket_merges_total") > 0).then_some(())
    });
    let want = answers(&single.url, t0);
    for q in [&q1, &q2] {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = answers(&q.url, t0);
            let differ: Vec<_> = got
                .iter()
                .zip(&want)
                .filter(|(g, w)| g != w)
                .map(|(g, w)| format!("{}:\n  cluster {}\n  single  {}", g.0, g.1, w.1))
                .collect();
            if differ.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} answers differ:\n{}",
                q.url,
                differ.join("\n")
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    // No orphan survives the grace period: the killed compactor's upload and
    // every replaced source are deleted; the bucket holds what the index lists.
    wait_for(60, "garbage collection to finish", || {
        let (objects, listed, retired) = bucket_state(&bucket);
        (retired == 0 && objects == listed).then_some(())
    });

    // A corrupt object and a missing one: a fresh querier quarantines both,
    // reports them and serves the rest.
    // Stop compaction first, so the index stays as read below; two more pushes,
    // each acknowledged once in the bucket, make two more segments.
    drop(c2);
    let late: Vec<Push> = (1000..1002)
        .map(|id| Push {
            id,
            service: "alpha",
            host: "h1",
            from: t0,
        })
        .collect();
    for p in &late {
        assert_eq!(
            p.send(&reqwest::blocking::Client::new(), &w2.url),
            Outcome::Status(200)
        );
    }
    let keys: Vec<String> = bucket
        .tenants()
        .unwrap()
        .iter()
        .flat_map(|t| bucket.load_index(t, None).unwrap().unwrap().index.segments)
        .map(|e| e.key)
        .collect();
    assert!(keys.len() >= 2, "need two segments, have {keys:?}");
    let mut lost = 0i64;
    for key in &keys[..2] {
        let bytes = bucket.get(key).unwrap();
        let f = root.join("probe.seg");
        std::fs::write(&f, &bytes).unwrap();
        lost += SegmentFile::open(&f).unwrap().meta.value_total;
    }
    let mut garbage = bucket.get(&keys[0]).unwrap().to_vec();
    let mid = garbage.len() / 2;
    garbage[mid] ^= 0xff;
    bucket.put(&keys[0], garbage.into()).unwrap();
    bucket.delete(&keys[1]).unwrap();
    let q3 = Proc::start(&d("q3"), &flags("querier", &[]));
    let total: i64 = expected
        + late.iter().map(|p| p.value()).sum::<i64>()
        + uncertain
            .iter()
            .filter(|p| m.contains_key(&format!("main;work;p{}", p.id)))
            .map(|p| p.value())
            .sum::<i64>();
    wait_for(30, "the fresh querier to serve the rest", || {
        (merged(&q3.url).values().sum::<i64>() == total - lost).then_some(())
    });
    // Whichever querier met a bad object first quarantined it for all of them;
    // the others (q1 and q2 may meet a late segment at the same moment) find it
    // already out and do not count it again.
    let reported: u64 = [&q1, &q2, &q3]
        .iter()
        .map(|q| q.metric("profiledb_mirror_quarantined_total"))
        .sum();
    assert_eq!(
        reported,
        2,
        "keys {keys:?}; q3 log: {}",
        std::fs::read_to_string(d("q3").with_extension("log")).unwrap_or_default()
    );
    let quarantined: Vec<String> = bucket
        .tenants()
        .unwrap()
        .iter()
        .flat_map(|t| {
            bucket
                .load_index(t, None)
                .unwrap()
                .unwrap()
                .index
                .quarantined
        })
        .map(|q| q.key)
        .collect();
    // Each exactly once: a sorted list, not a set, so a duplicate would show.
    let mut quarantined = quarantined;
    quarantined.sort();
    let mut bad = keys[..2].to_vec();
    bad.sort();
    assert_eq!(quarantined, bad);
    drop((q1, q2, w2, single));
    drop(w1);
}

#[test]
fn unreachable_bucket_answers_503_with_a_message_and_stores_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dead = format!("http://127.0.0.1:{}", free_port());
    let flags = role_flags(&dead, "s3://nowhere/p", "writer,querier", &[]);
    let p = Proc::start_on(&tmp.path().join("n"), &flags, free_port(), false);
    let client = reqwest::blocking::Client::new();
    let write = wait_for(60, "writes to be refused", || {
        let r = client
            .post(format!("{}/ingest?name=x.cpu&from={}", p.url, now_secs()))
            .body("main 1\n")
            .send()
            .ok()?;
        let text = r.text().unwrap();
        (text.contains("object store")).then_some(text)
    });
    assert!(write.contains("object store is unreachable"), "{write}");
    let body = wait_for(60, "queries to be refused with the reason", || {
        let r = client.get(format!("{}/api/v1/labels", p.url)).send().ok()?;
        assert_eq!(r.status(), 503);
        let text = r.text().unwrap();
        text.contains("unreachable").then_some(text)
    });
    assert!(
        body.contains("http://127.0.0.1"),
        "names the endpoint: {body}"
    );
}
