//! The `agent` suite: the real `profiledb-agent` binary sampling the whole machine
//! while both cores are busy, pushing to an in-process server on loopback.
//!
//! The load is `collector/examples/busy.rs` (the agent tests' program) compiled
//! twice with `rustc -C opt-level=3`, without and with `-C force-frame-pointers=yes`; one copy of each runs for the
//! whole measurement, so on a 2-CPU machine both cores are busy and the stack depth
//! the agent recovers can be compared on the same code built both ways. Per sampling
//! frequency the suite reports, for the agent process: CPU (utime + stime from
//! `/proc/<pid>/stat` over the wall time, as % of one CPU; cross-checked with
//! `wait4` rusage), peak RSS (`VmHWM`, with the anonymous/file split of
//! `/proc/<pid>/status` at its highest), peak open fds (`/proc/<pid>/fd`); and from
//! the server (the ground truth of what was delivered): samples per second,
//! unsymbolized frames (names that are only an address, `0x…` or `module+0x…`)
//! overall and in the busy processes' stacks (their binary has symbols; libc may
//! not), and the average
//! stack depth and share of complete stacks (down to `_start`) of each busy binary.
//! A last, shorter run at the highest frequency with `--stack-bytes 0` shows the
//! depth frame-pointer callchains alone reach on each build. Each frequency runs
//! once per `--symbolize` mode (`host` and `server` by default): in server mode the
//! agent reads no symbol table and the busy processes' frames arrive as addresses
//! (so their unsymbolized share is ~100% and the depth of named busy leaves 0).
//!
//! When perf_event_open is not permitted the suite prints the kernel's reason and
//! exits successfully.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::server::Running;
use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};

use crate::report::{self, human_bytes};

/// Names of the two load processes (≤ 15 bytes: they are also the `comm`, which the
/// agent uses as `service_name`).
const BUSY_NOFP: &str = "pdb_busy_nofp";
const BUSY_FP: &str = "pdb_busy_fp";
/// Functions of `collector/examples/busy.rs`: samples whose leaf is one of them are pure user
/// stacks of known shape.
const BUSY_LEAVES: [&str; 5] = ["busy_alpha", "busy_beta", "level1", "level2", "level3"];

#[derive(clap::Args)]
pub struct Args {
    /// Seconds the agent runs at each frequency (the issue asks for ≥ 60).
    #[arg(long, default_value_t = 65)]
    seconds: u64,
    /// Sampling frequencies to measure (Hz per CPU, comma-separated).
    #[arg(long, default_value = "19,99", value_delimiter = ',')]
    frequencies: Vec<u64>,
    /// The agent binary; default: `profiledb-agent` built next to this bench (the
    /// suite runs `cargo build -p profiledb-agent` for the same profile first).
    #[arg(long)]
    agent: Option<PathBuf>,
    /// Seconds of one more run at the highest frequency with `--stack-bytes 0`
    /// (frame-pointer callchains only, no DWARF unwinding), to show the stack depth
    /// each build gets without DWARF; 0 skips it.
    #[arg(long, default_value_t = 20)]
    fp_only_seconds: u64,
    /// Short run for CI (5 s per frequency, 3 s frame-pointer-only, 1 s push interval).
    #[arg(long)]
    quick: bool,
    /// The agent's `--symbolize` modes to measure at each frequency (`host`: ELF
    /// symbol tables read on the host; `server`: addresses and build ids sent).
    #[arg(long, default_value = "host,server", value_delimiter = ',')]
    symbolize: Vec<String>,
}

/// What one agent run measured.
#[derive(Default)]
struct Run {
    frequency: u64,
    /// The agent's `--symbolize` mode.
    symbolize: String,
    /// `--stack-bytes 0`: frame-pointer callchains only.
    fp_only: bool,
    seconds: u64,
    wall_s: f64,
    cpu_percent_stat: f64,
    cpu_percent_rusage: f64,
    peak_rss_kib: u64,
    peak_anon_kib: u64,
    peak_file_kib: u64,
    peak_fds: u64,
    delivered_samples: u64,
    summary: String,
    all: FoldedStats,
    nofp: FoldedStats,
    fp: FoldedStats,
}

/// Figures from a folded (root;…;leaf count) profile.
#[derive(Default, Clone)]
struct FoldedStats {
    samples: u64,
    frames: u64,
    unsymbolized_frames: u64,
    /// Samples whose leaf is a busy function, their frames, and how many reach `_start`.
    busy_samples: u64,
    busy_frames: u64,
    busy_complete: u64,
}

impl FoldedStats {
    fn parse(body: &str) -> Self {
        let mut s = Self::default();
        for line in body.lines() {
            let Some((stack, v)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(n) = v.trim().parse::<u64>() else {
                continue;
            };
            let frames: Vec<&str> = stack.split(';').collect();
            s.samples += n;
            s.frames += n * frames.len() as u64;
            s.unsymbolized_frames +=
                n * frames.iter().filter(|f| is_unsymbolized(f)).count() as u64;
            let leaf = frames.last().copied().unwrap_or_default();
            if BUSY_LEAVES.iter().any(|b| leaf.ends_with(b)) {
                s.busy_samples += n;
                s.busy_frames += n * frames.len() as u64;
                if frames.first().is_some_and(|f| *f == "_start") {
                    s.busy_complete += n;
                }
            }
        }
        s
    }

    fn unsymbolized_share(&self) -> f64 {
        ratio(self.unsymbolized_frames, self.frames)
    }

    fn avg_busy_depth(&self) -> f64 {
        ratio(self.busy_frames, self.busy_samples)
    }

    fn complete_share(&self) -> f64 {
        ratio(self.busy_complete, self.busy_samples)
    }

    fn json(&self) -> Value {
        json!({
            "samples": self.samples,
            "frames": self.frames,
            "unsymbolized_frames": self.unsymbolized_frames,
            "unsymbolized_share": self.unsymbolized_share(),
            "busy_leaf_samples": self.busy_samples,
            "avg_stack_depth_busy_leaf": self.avg_busy_depth(),
            "complete_stack_share_busy_leaf": self.complete_share(),
        })
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// A frame the agent could not name: `0x…` or `module+0x…`.
fn is_unsymbolized(f: &str) -> bool {
    let hex = |s: &str| {
        s.strip_prefix("0x")
            .is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()))
    };
    hex(f)
        || f.rsplit_once('+')
            .is_some_and(|(m, off)| !m.is_empty() && hex(off))
}

/// Kills (and reaps) a child when dropped, so an error never leaves load running.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn status_kib(pid: u32, field: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// utime + stime of a process in seconds, from `/proc/<pid>/stat`.
pub(crate) fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = profiledb_agent::guard::parse_cpu_ticks(&stat)?;
    Some(ticks as f64 / crate::thread_cpu::ticks_per_second())
}

fn fd_count(pid: u32) -> Option<u64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64)
}

/// Waits for `pid` and returns its user + system CPU seconds from rusage. (Not its
/// `ru_maxrss`: Linux carries the spawning process's high-water mark over `exec`, so
/// for a child of this bench it reports the bench's own size; peak RSS is `VmHWM`.)
fn wait_rusage(pid: u32) -> anyhow::Result<f64> {
    let mut status = 0;
    // SAFETY: rusage is plain data we own; wait4 writes into it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = libc::pid_t::try_from(pid)?;
    // SAFETY: status and ru are valid for writes; pid is our own child.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    if r != pid {
        bail!("wait4: {}", std::io::Error::last_os_error());
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("the agent failed (wait status {status:#x})");
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(tv(ru.ru_utime) + tv(ru.ru_stime))
}

/// The agent binary: built with cargo for this bench's profile when run through cargo.
fn agent_binary(explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match explicit {
        Some(p) => Ok(p),
        None => crate::server::workspace_binary("profiledb-agent", "profiledb-agent"),
    }
}

/// Compiles the load program without and with frame pointers.
fn build_busy(dir: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    let src = dir.join("agent_busy.rs");
    std::fs::write(&src, include_str!("../../collector/examples/busy.rs"))?;
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let build = |name: &str, fp: bool| -> anyhow::Result<PathBuf> {
        let out = dir.join(name);
        let mut cmd = Command::new(&rustc);
        cmd.args([
            "--edition",
            "2021",
            "-C",
            "opt-level=3",
            "-C",
            "debuginfo=0",
        ]);
        if fp {
            cmd.args(["-C", "force-frame-pointers=yes"]);
        }
        let st = cmd
            .arg("-o")
            .arg(&out)
            .arg(&src)
            .status()
            .with_context(|| format!("running {rustc}"))?;
        if !st.success() {
            bail!("rustc failed on the busy program (collector/examples/busy.rs)");
        }
        Ok(out)
    };
    Ok((build(BUSY_NOFP, false)?, build(BUSY_FP, true)?))
}

fn folded(
    client: &reqwest::blocking::Client,
    url: &str,
    selector: &str,
) -> anyhow::Result<FoldedStats> {
    let r = client
        .get(format!("{url}/api/v1/merge"))
        .query(&[
            (
                "query",
                format!("process_cpu:samples:count:cpu:nanoseconds{{{selector}}}").as_str(),
            ),
            ("from", "0"),
            ("until", "now+1d"),
            ("format", "folded"),
        ])
        .send()?;
    let status = r.status();
    let body = r.text()?;
    if !status.is_success() {
        bail!("query {selector} failed: {status} {body}");
    }
    Ok(FoldedStats::parse(&body))
}

/// What every run shares.
struct Setup<'a> {
    agent: &'a Path,
    url: &'a str,
    busy: &'a (PathBuf, PathBuf),
    push_interval: &'a str,
    dir: &'a Path,
}

fn measure(
    setup: &Setup<'_>,
    (frequency, symbolize): (u64, &str),
    fp_only: bool,
    seconds: u64,
) -> anyhow::Result<Run> {
    let Setup {
        agent,
        url,
        busy,
        push_interval,
        dir,
    } = *setup;
    // The load outlives the agent by a margin so both cores stay busy throughout.
    let load_secs = (seconds + 10).to_string();
    let _nofp = Kill(
        Command::new(&busy.0)
            .arg(&load_secs)
            .stdout(Stdio::null())
            .spawn()?,
    );
    let _fp = Kill(
        Command::new(&busy.1)
            .arg(&load_secs)
            .stdout(Stdio::null())
            .spawn()?,
    );
    std::thread::sleep(Duration::from_millis(300));
    let run_label = format!(
        "f{frequency}-{symbolize}{}",
        if fp_only { "-fp-only" } else { "" }
    );
    let log_path = dir.join(format!("agent-{run_label}.log"));
    let log = std::fs::File::create(&log_path)?;
    let t0 = Instant::now();
    let child = Command::new(agent)
        .args(["--server", url, "--frequency", &frequency.to_string()])
        .args(["--duration", &format!("{seconds}s")])
        .args(["--push-interval", push_interval])
        .args(["--stack-bytes", if fp_only { "0" } else { "16384" }])
        .args(["--tag", &format!("bench_run={run_label}")])
        // The suite measures overhead; the guard must not cut the run short.
        .args(["--max-cpu-percent", "50"])
        .args(["--symbolize", symbolize])
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .context("starting the agent")?;
    let pid = child.id();
    // Reaped by wait4 below (for rusage), not by Child::wait.
    std::mem::forget(child);
    let pb = ProgressBar::new(seconds).with_style(
        ProgressStyle::with_template(&format!(
            "agent {frequency:>3} Hz {symbolize}{} [{{bar:40}}] {{pos}}/{{len}} s {{msg}}",
            if fp_only { " FP only" } else { "" }
        ))?
        .progress_chars("=> "),
    );
    let mut run = Run {
        frequency,
        symbolize: symbolize.to_string(),
        fp_only,
        seconds,
        ..Default::default()
    };
    let mut last_cpu = (0.0, 0.0);
    loop {
        // An exited (zombie, not yet reaped) agent still shows its final CPU times.
        if let Some(c) = cpu_seconds(pid) {
            last_cpu = (c, t0.elapsed().as_secs_f64());
        }
        let alive =
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "));
        if !alive {
            break;
        }
        let hwm = status_kib(pid, "VmHWM:").unwrap_or(0);
        run.peak_rss_kib = run.peak_rss_kib.max(hwm);
        run.peak_anon_kib = run
            .peak_anon_kib
            .max(status_kib(pid, "RssAnon:").unwrap_or(0));
        run.peak_file_kib = run
            .peak_file_kib
            .max(status_kib(pid, "RssFile:").unwrap_or(0));
        run.peak_fds = run.peak_fds.max(fd_count(pid).unwrap_or(0));
        pb.set_position(t0.elapsed().as_secs().min(seconds));
        pb.set_message(format!("peak RSS {}", human_bytes((hwm * 1024) as f64)));
        // VmHWM is gone once the agent exits: poll often enough to see the end.
        std::thread::sleep(Duration::from_millis(100));
    }
    let cpu_total = wait_rusage(pid)?;
    run.wall_s = t0.elapsed().as_secs_f64();
    pb.finish();
    run.cpu_percent_stat = 100.0 * last_cpu.0 / last_cpu.1.max(1e-9);
    run.cpu_percent_rusage = 100.0 * cpu_total / run.wall_s;
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    run.summary = log
        .lines()
        .rfind(|l| l.contains("done:"))
        .unwrap_or_default()
        .to_string();
    let client = reqwest::blocking::Client::new();
    let sel = format!("bench_run=\"{run_label}\"");
    run.all = folded(&client, url, &sel)?;
    run.nofp = folded(&client, url, &format!("{sel},service_name=\"{BUSY_NOFP}\""))?;
    run.fp = folded(&client, url, &format!("{sel},service_name=\"{BUSY_FP}\""))?;
    run.delivered_samples = run.all.samples;
    Ok(run)
}

pub fn run(mut args: Args) -> anyhow::Result<()> {
    if let Err(reason) = profiledb_agent::perf::probe_system_wide() {
        // The kernel's refusal, not a missing install: skipped even under
        // PROFILEDB_REQUIRE_EXTERNAL=1, with the reason printed.
        println!("agent suite: SKIPPED: perf_event_open is not permitted here: {reason}");
        return Ok(());
    }
    let push_interval = if args.quick {
        args.seconds = 5;
        args.fp_only_seconds = args.fp_only_seconds.min(3);
        "1s"
    } else {
        "10s"
    };
    let agent = agent_binary(args.agent.take())?;
    let dir = tempfile::tempdir()?;
    let busy = build_busy(dir.path())?;

    // One runtime thread: the server should take little from the cores the agent
    // is measured on.
    let server = Running::start(&dir.path().join("data"), 1)?;
    let url = server.url.clone();

    let setup = Setup {
        agent: &agent,
        url: &url,
        busy: &busy,
        push_interval,
        dir: dir.path(),
    };
    let mut runs = Vec::new();
    for &f in &args.frequencies {
        for mode in &args.symbolize {
            runs.push(measure(&setup, (f, mode), false, args.seconds)?);
        }
    }
    if let Some(&f) = args
        .frequencies
        .iter()
        .max()
        .filter(|_| args.fp_only_seconds > 0)
    {
        runs.push(measure(&setup, (f, "host"), true, args.fp_only_seconds)?);
    }
    server.stop()?;

    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    println!();
    println!(
        "agent suite: {} ({}), system-wide, both cores busy with {BUSY_NOFP} + {BUSY_FP}, {} s per frequency, push every {push_interval}",
        agent.display(),
        if cfg!(debug_assertions) { "dev profile" } else { "release" },
        args.seconds
    );
    println!(
        "  {:>14} | {:>8} {:>8} | {:>9} {:>9} {:>9} | {:>4} | {:>9} {:>8} | {:>7} {:>7} | {:>14} {:>14}",
        "Hz",
        "CPU%stat",
        "CPU%ru",
        "peak RSS",
        "anon",
        "file",
        "fds",
        "samples/s",
        "expected",
        "unsym%",
        "busy%",
        "depth no-FP",
        "depth FP"
    );
    let mut figures = BTreeMap::new();
    for r in &runs {
        let per_s = r.delivered_samples as f64 / r.seconds as f64;
        let label = format!(
            "{} {}{}",
            r.frequency,
            r.symbolize,
            if r.fp_only { " FP" } else { "" }
        );
        let busy_unsym = ratio(
            r.nofp.unsymbolized_frames + r.fp.unsymbolized_frames,
            r.nofp.frames + r.fp.frames,
        );
        println!(
            "  {:>14} | {:>7.3}% {:>7.3}% | {:>9} {:>9} {:>9} | {:>4} | {:>9.1} {:>8} | {:>6.2}% {:>6.2}% | {:>5.1} ({:>3.0}%) {:>6.1} ({:>3.0}%)",
            label,
            r.cpu_percent_stat,
            r.cpu_percent_rusage,
            human_bytes((r.peak_rss_kib * 1024) as f64),
            human_bytes((r.peak_anon_kib * 1024) as f64),
            human_bytes((r.peak_file_kib * 1024) as f64),
            r.peak_fds,
            per_s,
            cpus * r.frequency,
            100.0 * r.all.unsymbolized_share(),
            100.0 * busy_unsym,
            r.nofp.avg_busy_depth(),
            100.0 * r.nofp.complete_share(),
            r.fp.avg_busy_depth(),
            100.0 * r.fp.complete_share(),
        );
        figures.insert(
            format!(
                "hz_{}_{}{}",
                r.frequency,
                r.symbolize,
                if r.fp_only { "_fp_only" } else { "" }
            ),
            json!({
                "frequency_hz": r.frequency,
                "symbolize": r.symbolize,
                "stack_bytes": if r.fp_only { 0 } else { 16384 },
                "seconds": r.seconds,
                "wall_seconds": r.wall_s,
                "cpu_percent_of_one_cpu_proc_stat": r.cpu_percent_stat,
                "cpu_percent_of_one_cpu_rusage": r.cpu_percent_rusage,
                "peak_rss_bytes_vmhwm": r.peak_rss_kib * 1024,
                "peak_rss_anon_bytes": r.peak_anon_kib * 1024,
                "peak_rss_file_bytes": r.peak_file_kib * 1024,
                "peak_fds": r.peak_fds,
                "delivered_samples": r.delivered_samples,
                "delivered_samples_per_second": per_s,
                "expected_samples_per_second": cpus * r.frequency,
                "unsymbolized_share_all": r.all.unsymbolized_share(),
                "unsymbolized_share_busy_binaries": busy_unsym,
                "no_frame_pointers": r.nofp.json(),
                "frame_pointers": r.fp.json(),
                "agent_summary": r.summary,
            }),
        );
    }
    println!("  (CPU%stat: utime+stime from /proc/<pid>/stat over the wall time; CPU%ru: wait4 rusage, whole lifetime;");
    println!("   unsym%: frames named only by address, all processes; busy%: the same in the two busy processes' stacks;");
    println!("   depth: average frames of samples whose leaf is a busy function, (share reaching _start);");
    println!("   FP-only: --stack-bytes 0, the kernel's frame-pointer callchains without DWARF unwinding)");
    for r in &runs {
        println!(
            "  agent {} Hz --symbolize {}{}: {}",
            r.frequency,
            r.symbolize,
            if r.fp_only { " --stack-bytes 0" } else { "" },
            r.summary
        );
    }
    let path = report::write(
        "agent",
        json!({
            "agent_binary": agent.display().to_string(),
            "push_interval": push_interval,
            "quick": args.quick,
            "runs": figures,
        }),
    )?;
    println!("  results {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folded_figures() {
        let body =
            "_start;main;level1;busy_alpha 3\nfoo;0x7f00 1\nbar;libc.so.6+0x1a2b;busy_beta 2\n";
        let s = FoldedStats::parse(body);
        assert_eq!(s.samples, 6);
        assert_eq!(s.frames, 3 * 4 + 2 + 2 * 3);
        assert_eq!(s.unsymbolized_frames, 1 + 2);
        assert_eq!(s.busy_samples, 5);
        assert!((s.avg_busy_depth() - 18.0 / 5.0).abs() < 1e-9);
        assert!((s.complete_share() - 0.6).abs() < 1e-9);
        assert!(!is_unsymbolized("std::rt::lang_start"));
        assert!(!is_unsymbolized("operator+"));
    }
}
