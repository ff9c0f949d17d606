//! One kill-9 harness for the crash tests: the test binary re-executes itself as a
//! child (selected by an environment variable), the child prints `ACK <id>` after
//! each acknowledged batch and any other progress line it likes, and the parent
//! kills it with SIGKILL when its own rule says so. Every acknowledgement read
//! before end of file counts, including those already in the pipe at the kill.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};

/// How a crash test's child is found and started.
pub struct CrashChild {
    /// The test's own name, run with `--exact` in the child.
    pub test: &'static str,
    /// Set to the store's directory in the child; its presence selects child mode.
    pub dir_env: &'static str,
}

/// What one child run left behind.
pub struct Round {
    /// The highest id acknowledged in this round (or the start when none was).
    pub max_id: u64,
    /// Whether the parent's rule killed the child (rather than the child exiting).
    pub killed: bool,
    /// The child's exit status.
    pub status: ExitStatus,
    /// Lines after the kill, in order: progress the child made before dying.
    pub after_kill: Vec<String>,
}

const START_ENV: &str = "PROFILEDB_CRASH_START";

impl CrashChild {
    /// In the child: the store's directory and the first batch id to write.
    pub fn child_args(&self) -> Option<(String, u64)> {
        let dir = std::env::var(self.dir_env).ok()?;
        let start = std::env::var(START_ENV)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        Some((dir, start))
    }

    /// In the parent: runs the child from batch `start`, adds its acknowledgements to
    /// `acked`, and kills it as soon as `kill_now(line, acks_this_round)` says so.
    pub fn round(
        &self,
        dir: &Path,
        start: u64,
        acked: &mut BTreeSet<u64>,
        mut kill_now: impl FnMut(&str, usize) -> bool,
    ) -> Round {
        let exe = std::env::current_exe().expect("test binary path");
        let mut child = Command::new(exe)
            .args(["--exact", self.test, "--nocapture", "--test-threads=1"])
            .env(self.dir_env, dir)
            .env(START_ENV, start.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the crash child");
        let out = BufReader::new(child.stdout.take().expect("child stdout"));
        let mut round_acks = 0;
        let mut max_id = start;
        let mut killed = false;
        let mut after_kill = Vec::new();
        for line in out.lines() {
            let Ok(line) = line else { break };
            if let Some(id) = line.strip_prefix("ACK ") {
                let id: u64 = id.trim().parse().expect("ACK <id>");
                acked.insert(id);
                max_id = max_id.max(id);
                round_acks += 1;
            }
            if killed {
                after_kill.push(line);
            } else if kill_now(&line, round_acks) {
                child.kill().expect("SIGKILL the child");
                killed = true;
            }
        }
        let status = child.wait().expect("reap the child");
        Round {
            max_id,
            killed,
            status,
            after_kill,
        }
    }
}

/// A xorshift step: fixed seeds keep failures reproducible while kill points still
/// vary with timing.
pub fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}
