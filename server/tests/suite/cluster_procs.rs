//! What the cluster tests share: `profiledb serve` processes in roles over one
//! bucket, and pushes each of which can be told apart in a merged answer (a
//! stack of its own whose value identifies it), so every push is checked to be
//! counted once, or not at all, against what its client was answered.

#[path = "../../../storage/tests/support/moto.rs"]
pub mod moto;
#[path = "../../../storage/tests/support/proxy.rs"]
pub mod proxy;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::free_port;

pub const BIN: &str = env!("CARGO_BIN_EXE_profiledb");
pub const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";

/// One `profiledb serve` process.
pub struct Proc {
    child: Child,
    pub url: String,
    pub port: u16,
    pub dir: std::path::PathBuf,
    pub flags: Vec<String>,
}

impl Proc {
    pub fn start(dir: &Path, flags: &[String]) -> Proc {
        Self::start_on(dir, flags, free_port(), true)
    }

    pub fn start_on(dir: &Path, flags: &[String], port: u16, wait_ready: bool) -> Proc {
        Self::start_with(dir, flags, port, wait_ready, &[])
    }

    /// [`Proc::start_on`] with environment variables (a fault point armed);
    /// a restart leaves them out. The log is appended to, across restarts.
    pub fn start_with(
        dir: &Path,
        flags: &[String],
        port: u16,
        wait_ready: bool,
        env: &[(&str, &str)],
    ) -> Proc {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.with_extension("log"))
            .unwrap();
        let child = Command::new(BIN)
            .args(["serve", "--data-dir"])
            .arg(dir)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(flags)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1")
            .envs(env.iter().copied())
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

    pub fn wait_ready(&self) {
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

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether the process has exited (an armed fault aborted it).
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().is_ok_and(|s| s.is_some())
    }


    /// Starts it again on the same directory, port and flags.
    pub fn restart(&mut self) {
        self.kill9();
        let p = Proc::start_on(&self.dir, &self.flags, self.port, true);
        *self = p;
    }

    pub fn metric(&self, name: &str) -> u64 {
        let text = reqwest::blocking::get(format!("{}/metrics", self.url))
            .unwrap()
            .text()
            .unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0) as u64
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub fn role_flags(endpoint: &str, url: &str, role: &str, extra: &[&str]) -> Vec<String> {
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
pub enum Outcome {
    Status(u16),
    /// No connection: nothing was sent.
    Refused,
    /// The connection broke mid-request: it may or may not be stored.
    Broken,
}

/// One push: a unique stack whose value identifies it.
#[derive(Clone, Debug)]
pub struct Push {
    pub id: usize,
    pub service: &'static str,
    pub host: &'static str,
    pub from: u64,
}

impl Push {
    pub fn path(&self) -> String {
        format!(
            "/ingest?name={}.cpu{{host={}}}&from={}",
            self.service, self.host, self.from
        )
    }
    /// Its value in nanoseconds: `/ingest` takes samples at 100 Hz by default.
    pub fn value(&self) -> i64 {
        (self.id as i64 + 1) * 10_000_000
    }
    pub fn body(&self) -> String {
        format!("main;work;p{} {}\n", self.id, self.id + 1)
    }
    pub fn send(&self, client: &reqwest::blocking::Client, url: &str) -> Outcome {
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

pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

pub fn merged(url: &str) -> BTreeMap<String, i64> {
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

/// Pushes made, by what their clients were told.
#[derive(Default, Debug)]
pub struct Ledger {
    /// Answered 200: must be counted exactly once.
    pub acked: Vec<Push>,
    /// Refused before anything was stored (503, 429, no connection): must be
    /// absent.
    pub refused: Vec<Push>,
    /// The connection broke mid-request: once or not at all.
    pub uncertain: Vec<Push>,
    next: usize,
}

impl Ledger {
    /// A push with an id no other push of this ledger has, at `from`.
    pub fn next_push(&mut self, from: u64) -> Push {
        self.next += 1;
        Push {
            id: self.next,
            service: if self.next.is_multiple_of(2) { "alpha" } else { "beta" },
            host: ["h1", "h2", "h3"][self.next % 3],
            from,
        }
    }

    /// Sends the next push to `url` and notes what became of it.
    pub fn push(&mut self, client: &reqwest::blocking::Client, url: &str) -> Outcome {
        let p = self.next_push(now_secs() - 30);
        let o = p.send(client, url);
        self.note(p, &o);
        o
    }

    pub fn note(&mut self, p: Push, o: &Outcome) {
        match o {
            Outcome::Status(200) => self.acked.push(p),
            Outcome::Status(429 | 503) | Outcome::Refused => self.refused.push(p),
            _ => self.uncertain.push(p),
        }
    }

    /// What `url` (a querier) answers for each push, against what its client
    /// was told: (lost, doubled, refused yet present, uncertain counted wrong).
    pub fn tally(&self, url: &str) -> Tally {
        let m = merged(url);
        let seen = |p: &Push| m.get(&format!("main;work;p{}", p.id)).copied().unwrap_or(0);
        let mut t = Tally::default();
        for p in &self.acked {
            match seen(p) {
                0 => t.lost.push(p.id),
                v if v == p.value() => {}
                _ => t.doubled.push(p.id),
            }
        }
        for p in &self.refused {
            if seen(p) != 0 {
                t.refused_present.push(p.id);
            }
        }
        for p in &self.uncertain {
            let v = seen(p);
            if v != 0 && v != p.value() {
                t.doubled.push(p.id);
            }
        }
        t
    }
}

/// How a ledger's pushes were counted.
#[derive(Default, Debug, PartialEq, Eq)]
pub struct Tally {
    pub lost: Vec<usize>,
    pub doubled: Vec<usize>,
    pub refused_present: Vec<usize>,
}

impl Tally {
    pub fn clean(&self) -> bool {
        *self == Tally::default()
    }
}

/// Polls `ledger` against the querier at `url` until every push is counted as
/// its client was told, or `secs` pass (then panics with the tally).
pub fn converge(ledger: &Ledger, url: &str, secs: u64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let t = ledger.tally(url);
        if t.clean() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: pushes not counted as answered: {t:?} (acked {}, refused {}, uncertain {})",
            ledger.acked.len(),
            ledger.refused.len(),
            ledger.uncertain.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
