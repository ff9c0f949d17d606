//! A recording made by the JDK's own Flight Recorder, and what the JDK's `jfr` tool
//! says is in it: the oracle for JFR ingest.
//!
//! A small Java program (two threads spinning in known methods, one of them through
//! a lambda) runs for a few seconds under `java -XX:StartFlightRecording` with the
//! JDK's `default` settings; `jfr print --json` lists its execution samples, and the
//! JDK's own `default.jfc` says the sampling period. The recording is made once per
//! test binary. Without `java`, `javac` or `jfr` on the PATH the callers skip, or
//! fail when `PROFILEDB_REQUIRE_EXTERNAL=1` (CI) says they must run.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

const PROGRAM: &str = r#"
public class HotApp {
    static volatile long sink;
    static long spin(int n) { long x = 0; for (int i = 0; i < n; i++) { x += i * 31L ^ (x >>> 3); } return x; }
    static long hashWork() { return spin(200_000); }
    static long sortWork() { return spin(100_000); }
    public static void main(String[] args) throws Exception {
        long end = System.currentTimeMillis() + Long.parseLong(args[0]);
        Thread t = new Thread(() -> { while (System.currentTimeMillis() < end) sink += hashWork(); }, "worker");
        t.start();
        while (System.currentTimeMillis() < end) sink += sortWork();
        t.join();
    }
}
"#;

/// One `jdk.ExecutionSample` as `jfr print` shows it.
#[derive(Clone, Debug)]
pub struct Sample {
    /// `startTime`, ms since the epoch.
    pub time_ms: i64,
    pub state: String,
    /// Frames leaf first, as `class.method` with `/`-separated class names; hidden
    /// lambda classes are named as profiledb documents it (`Cls$$Lambda_`).
    pub frames: Vec<String>,
    /// The raw class names of hidden frames (`Cls$$Lambda$88+0x…/123`).
    pub hidden: Vec<String>,
}

/// A recording and its oracle.
#[derive(Debug)]
pub struct Recording {
    pub path: PathBuf,
    pub samples: Vec<Sample>,
    /// `jdk.ExecutionSample`'s period in the JDK's `default.jfc`, in ms.
    pub period_ms: i64,
    _dir: tempfile::TempDir,
}

fn on_path(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.is_file())
}

/// The recording, made on first use; `None` (after a message) without a JDK.
pub fn recording() -> Option<&'static Recording> {
    static REC: OnceLock<Option<Recording>> = OnceLock::new();
    REC.get_or_init(|| {
        for tool in ["java", "javac", "jfr"] {
            if on_path(tool).is_none() {
                crate::external::missing(
                    tool,
                    "not on the PATH: install a JDK (Debian openjdk-17-jdk-headless; .ci/run does)",
                );
                return None;
            }
        }
        Some(record())
    })
    .as_ref()
}

fn run(cmd: &mut Command) -> Vec<u8> {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn record() -> Recording {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("HotApp.java"), PROGRAM).expect("write the program");
    run(Command::new("javac")
        .arg("HotApp.java")
        .current_dir(dir.path()));
    let path = dir.path().join("rec.jfr");
    run(Command::new("java")
        .arg(format!(
            "-XX:StartFlightRecording=filename={},settings=default",
            path.display()
        ))
        .args(["-Xlog:disable", "HotApp", "3000"])
        .current_dir(dir.path()));
    let json = run(Command::new("jfr")
        .args([
            "print",
            "--json",
            "--stack-depth",
            "64",
            "--events",
            "jdk.ExecutionSample",
        ])
        .arg(&path));
    let v: Value = serde_json::from_slice(&json).expect("jfr print --json answers JSON");
    let samples = v["recording"]["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(sample)
        .collect();
    Recording {
        path,
        samples,
        period_ms: default_period_ms(),
        _dir: dir,
    }
}

fn sample(e: &Value) -> Sample {
    let v = &e["values"];
    let time = v["startTime"].as_str().expect("startTime");
    let time_ms = chrono_ms(time);
    let mut frames = Vec::new();
    let mut hidden = Vec::new();
    for f in v["stackTrace"]["frames"].as_array().into_iter().flatten() {
        let class = f["method"]["type"]["name"].as_str().unwrap_or_default();
        let method = f["method"]["name"].as_str().unwrap_or_default();
        let is_hidden = f["method"]["type"]["hidden"].as_bool() == Some(true);
        let class = match class.find("$$Lambda") {
            Some(i) if is_hidden => {
                hidden.push(class.to_string());
                format!("{}$$Lambda_", &class[..i])
            }
            _ => class.to_string(),
        };
        frames.push(format!("{class}.{method}"));
    }
    Sample {
        time_ms,
        state: v["state"].as_str().unwrap_or_default().to_string(),
        frames,
        hidden,
    }
}

/// `2026-11-29T07:16:05.038034134Z` → ms since the epoch.
fn chrono_ms(t: &str) -> i64 {
    let (date, rest) = t.split_once('T').expect("a date");
    let d: Vec<i64> = date.split('-').map(|x| x.parse().unwrap()).collect();
    let rest = rest.trim_end_matches('Z');
    let (hms, frac) = rest.split_once('.').unwrap_or((rest, "0"));
    let t: Vec<i64> = hms.split(':').map(|x| x.parse().unwrap()).collect();
    let ms: i64 = format!("{frac:0<3}")[..3].parse().unwrap();
    // Days since the epoch (civil from days, Howard Hinnant's algorithm inverted).
    let (y, m) = if d[1] <= 2 {
        (d[0] - 1, d[1] + 9)
    } else {
        (d[0], d[1] - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d[2] - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    ((days * 24 + t[0]) * 60 + t[1]) * 60_000 + t[2] * 1000 + ms
}

/// The `period` of `jdk.ExecutionSample` in the JDK's own `default.jfc`, in ms.
fn default_period_ms() -> i64 {
    let java = std::fs::canonicalize(on_path("java").expect("java")).expect("java's path");
    let home = java.parent().and_then(Path::parent).expect("JAVA_HOME");
    let jfc = std::fs::read_to_string(home.join("lib/jfr/default.jfc")).expect("default.jfc");
    let at = jfc
        .find("<event name=\"jdk.ExecutionSample\">")
        .expect("the ExecutionSample settings");
    let block = &jfc[at..at + jfc[at..].find("</event>").expect("its end")];
    let period = block
        .split("<setting name=\"period\"")
        .nth(1)
        .and_then(|s| s.split('>').nth(1))
        .and_then(|s| s.split('<').next())
        .expect("a period");
    let (n, unit) = period.trim().split_once(' ').expect("`20 ms`");
    assert_eq!(unit, "ms", "{period}");
    n.parse().expect("a number")
}

impl Recording {
    /// Samples counted as CPU time (profiledb's rule: a known state, not sleeping).
    pub fn cpu_samples(&self) -> impl Iterator<Item = &Sample> {
        self.samples
            .iter()
            .filter(|s| !s.state.is_empty() && s.state != "STATE_SLEEPING")
    }

    /// CPU nanoseconds per leaf function.
    pub fn self_ns(&self) -> std::collections::BTreeMap<String, i64> {
        let mut out = std::collections::BTreeMap::new();
        for s in self.cpu_samples() {
            if let Some(leaf) = s.frames.first() {
                *out.entry(leaf.clone()).or_insert(0) += self.period_ms * 1_000_000;
            }
        }
        out
    }

    pub fn bytes(&self) -> Vec<u8> {
        std::fs::read(&self.path).expect("the recording")
    }
}

#[test]
fn civil_times_read_as_epoch_ms() {
    assert_eq!(chrono_ms("1970-01-01T00:00:00Z"), 0);
    assert_eq!(
        chrono_ms("2026-11-29T07:16:05.038034134Z"),
        1_795_936_565_038
    );
    assert_eq!(chrono_ms("2000-03-01T00:00:01.5Z"), 951_868_801_500);
}
