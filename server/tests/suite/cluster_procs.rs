//! What the cluster tests share: `profiledb serve` processes in roles over one
//! bucket, and pushes each of which can be told apart in a merged answer (a
//! stack of its own whose value identifies it), so every push is checked to be
//! counted once, or not at all, against what its client was answered.

#[path = "../../../storage/tests/support/ledger.rs"]
mod ledger;
#[path = "../../../storage/tests/support/proxy.rs"]
pub mod proxy;

pub use ledger::{merged, now_secs, Ledger, Outcome, Push, CPU};

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{free_port, metric_at};

pub const BIN: &str = env!("CARGO_BIN_EXE_profiledb");

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
        metric_at(&self.url, name).map_or(0, |v| v as u64)
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
