//! The agent's main loop: follow the plan, drain perf buffers, flush, push, report.
//!
//! Each tick (100 ms) the loop drains the tracking fds (process records) and the
//! sampling fds, then asks the plan what should be sampled now. When that differs
//! from what is open (a window starts or ends, the server switched events or
//! frequencies, the overhead guard acted) the open window is flushed and the sampling
//! fds are reopened: the agent never restarts, and the tracking fds stay open, so no
//! process record is missed in between.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use profiledb_proto::control::v1 as c;
use thiserror::Error;

use crate::cgroups::CgroupNames;
use crate::config::EventKind;
use crate::control::{ControlClient, ControlStats, Identity};
use crate::counting::{self, Counting};
use crate::guard::{self, CpuGuard, GuardError};
use crate::perf::{self, EventFd, PerfError, PerfOptions, Target};
use crate::plan::{Plan, Sampling};
use crate::pprof::{self, LabelConfig};
use crate::procs::ProcessTable;
use crate::push::{HttpTransport, PushStats, Pusher, RetryPolicy};
use crate::sampler::{drain, Encoder, State};
use crate::symbolize::{HostSymbolizer, SymbolStats, SymbolizeMode, SymbolizerThread};

/// Deepest stack kept.
pub const MAX_FRAMES: usize = 256;

#[derive(Debug, Error)]
pub enum AgentError {
    #[error(transparent)]
    Perf(#[from] PerfError),
    #[error(transparent)]
    Guard(#[from] GuardError),
    #[error("starting a thread: {0}")]
    Thread(std::io::Error),
    #[error("none of the processes {0:?} exist")]
    NoProcess(Vec<u32>),
}

/// Everything the agent needs to run.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub server: String,
    pub pids: Vec<u32>,
    pub duration: Option<Duration>,
    pub push_interval: Duration,
    pub frequency: u64,
    pub events: Vec<EventKind>,
    pub labels: LabelConfig,
    pub max_cpu_percent: f64,
    /// Window over which the CPU guard averages.
    pub guard_window: Duration,
    /// Bytes of user stack copied per sample for DWARF unwinding (0 = off).
    pub stack_bytes: u32,
    /// Distinct stacks kept per window.
    pub max_stacks: usize,
    /// Windows waiting to be pushed.
    pub max_queue: usize,
    pub retry: RetryPolicy,
    pub verbose: bool,
    /// Follow the server's sampling plans (`--control`); the settings above are the
    /// plan until the server first answers.
    pub control: bool,
    /// Track process records with a dummy event opened before the `/proc` scan
    /// (off only to measure what it saves).
    pub mmap_tracking: bool,
    /// Where user frames are named (`--symbolize host|server`).
    pub symbolize: SymbolizeMode,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            server: "http://127.0.0.1:4040".into(),
            pids: Vec::new(),
            duration: None,
            push_interval: Duration::from_secs(10),
            frequency: 19,
            events: vec![EventKind::CpuClock],
            labels: LabelConfig::default(),
            max_cpu_percent: 1.0,
            guard_window: Duration::from_secs(60),
            stack_bytes: 16 * 1024,
            max_stacks: 20_000,
            max_queue: 6,
            retry: RetryPolicy::default(),
            verbose: false,
            control: false,
            mmap_tracking: true,
            symbolize: SymbolizeMode::Host,
        }
    }
}

/// What happened during a run.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Every event sampled at some point.
    pub events: Vec<EventKind>,
    /// Most perf fds open at once (tracking, sampling and counting).
    pub fds: usize,
    pub samples: u64,
    pub idle_samples: u64,
    pub lost_samples: u64,
    pub dropped_stack_samples: u64,
    /// Samples whose leaf user address lay in no known mapping (a missed mmap).
    pub unsymbolized_samples: u64,
    /// Samples of a task neither a record nor `/proc` knew (exited unseen).
    pub unattributed_samples: u64,
    /// Samples outside the plan's processes or cgroups.
    pub filtered_samples: u64,
    pub windows: u64,
    pub push: PushStats,
    pub symbols: SymbolStats,
    pub user_frames_fp: u64,
    pub user_frames_dwarf: u64,
    pub user_stacks: u64,
    pub cpu_percent: f64,
    /// Without `--control`: the CPU % at which the guard stopped the agent.
    pub guard_tripped: Option<f64>,
    /// With `--control`: what the guard did, in order.
    pub guard_actions: Vec<String>,
    /// Plans followed (versions switched to), the command line's included.
    pub plans_followed: u64,
    pub control: ControlStats,
    pub counting_rounds: u64,
    pub warnings: Vec<String>,
}

impl Summary {
    /// Average user stack depth per sample as kept (DWARF where it went deeper).
    pub fn avg_user_depth(&self) -> f64 {
        if self.user_stacks == 0 {
            0.0
        } else {
            self.user_frames_dwarf as f64 / self.user_stacks as f64
        }
    }

    /// Average user stack depth of the kernel's frame-pointer callchains alone.
    pub fn avg_fp_depth(&self) -> f64 {
        if self.user_stacks == 0 {
            0.0
        } else {
            self.user_frames_fp as f64 / self.user_stacks as f64
        }
    }
}

/// Ring buffer pages per fd: room for 8 drain ticks (100 ms each) of samples at
/// `frequency` with `stack_bytes` of copied stack (+ ~1 KiB of callchain and header),
/// as a power of two between 16 (64 KiB) and 256 (1 MiB). With the default 16 KiB
/// stacks that is 64 pages (256 KiB) per CPU at 19 Hz and 256 at 99 Hz. This memory
/// is the kernel's (locked, outside the agent's RSS), so it is sized, not maximised.
fn ring_pages(frequency: u64, stack_bytes: u32) -> usize {
    let per_tick = frequency.saturating_mul(u64::from(stack_bytes) + 1024) / 10;
    let pages = (per_tick.saturating_mul(8) / 4096).max(16);
    (pages.next_power_of_two() as usize).min(256)
}

/// Ring pages of each tracking fd: bursts of mmap records when processes start.
const TRACKING_PAGES: usize = 32;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The open sampling fds and what they sample.
struct Session {
    fds: Vec<EventFd>,
    spec: Sampling,
}

/// The overhead guard under a plan: halve the frequencies once, then stop the window.
struct PlanGuard {
    guard: CpuGuard,
    budget: f64,
    window: Duration,
    halved: bool,
    /// The period whose window the guard stopped.
    stopped_period: Option<i64>,
}

impl PlanGuard {
    fn new(plan: &Plan, cfg: &AgentConfig) -> Result<PlanGuard, GuardError> {
        let window = if cfg.control {
            Duration::from_secs_f64(
                (plan.period.as_secs_f64() / 4.0)
                    .clamp(1.0, cfg.guard_window.as_secs_f64().max(1.0)),
            )
        } else {
            cfg.guard_window
        };
        Ok(PlanGuard {
            guard: CpuGuard::new(plan.max_cpu_percent, window)?,
            budget: plan.max_cpu_percent,
            window,
            halved: false,
            stopped_period: None,
        })
    }

    /// What to sample now under `plan`, after the guard's cuts.
    fn apply(&self, plan: &Plan, now_ms: i64) -> Option<Sampling> {
        if self.stopped_period == Some(plan.period_start_at(now_ms)) {
            return None;
        }
        let mut s = plan.sampling_at(now_ms)?;
        if self.halved {
            for (_, hz) in &mut s.events {
                *hz = (*hz / 2).max(1);
            }
        }
        Some(s)
    }
}

/// The agent's resident set from `/proc/self/statm`.
fn rss_bytes() -> u64 {
    let pages: u64 = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}

/// Events this machine can open (probed once at start for the controller).
fn available_events(target: &Target) -> Vec<String> {
    let opts = PerfOptions {
        kernel: false,
        pages: 1,
        stack_bytes: 0,
        frequency: 1,
    };
    EventKind::ALL
        .iter()
        .filter(|&&e| {
            let one = match target {
                Target::System { cpus } => Target::System {
                    cpus: cpus.iter().take(1).copied().collect(),
                },
                Target::Threads { tids, cpus } => Target::Threads {
                    tids: tids.iter().take(1).copied().collect(),
                    cpus: cpus.iter().take(1).copied().collect(),
                },
            };
            perf::open_all(&[(e, 1)], &one, &opts)
                .map(|o| o.events.first().map(|x| x.0) == Some(e))
                .unwrap_or(false)
        })
        .map(|e| e.name().to_string())
        .collect()
}

struct Reporter {
    last: (Instant, f64),
    errors: Vec<String>,
    guard: String,
}

impl Reporter {
    fn note_error(&mut self, e: String) {
        if self.errors.last() != Some(&e) {
            self.errors.push(e);
        }
        let extra = self.errors.len().saturating_sub(8);
        self.errors.drain(..extra);
    }

    /// The report of the next check-in: totals since the start, CPU since the last.
    fn report(
        &mut self,
        state: &State,
        pusher: &Pusher,
        fds: usize,
        counted_cgroups: u64,
    ) -> c::AgentReport {
        let now = (
            Instant::now(),
            guard::self_cpu_seconds().unwrap_or(self.last.1),
        );
        let dt = now.0.duration_since(self.last.0).as_secs_f64();
        let cpu = if dt > 0.0 {
            100.0 * (now.1 - self.last.1) / dt
        } else {
            0.0
        };
        self.last = now;
        let s = &state.summary;
        let p = pusher.stats();
        c::AgentReport {
            cpu_percent: cpu,
            rss_bytes: rss_bytes(),
            samples: s.samples,
            lost_samples: s.lost_samples,
            unsymbolized_samples: s.unsymbolized_samples,
            unattributed_samples: s.unattributed_samples,
            windows_pushed: p.pushed_windows,
            windows_dropped: p.dropped(),
            errors: self.errors.clone(),
            guard: self.guard.clone(),
            services: state
                .services
                .iter()
                .map(|(k, v)| c::ServiceSamples {
                    service: k.clone(),
                    samples: *v,
                })
                .collect(),
            perf_fds: fds as u64,
            events: state
                .window_events
                .iter()
                .map(|(e, _)| e.name().to_string())
                .collect(),
            counting_rounds: s.counting_rounds,
            counted_cgroups,
        }
    }
}

/// Runs the agent until `stop` is set, the duration passes or (without `--control`)
/// the CPU guard trips.
pub fn run(cfg: AgentConfig, stop: &AtomicBool) -> Result<Summary, AgentError> {
    let mut procs = ProcessTable::new();
    let cpus = perf::online_cpus();
    let target = if cfg.pids.is_empty() {
        Target::System { cpus: cpus.clone() }
    } else {
        let mut tids = Vec::new();
        for &p in &cfg.pids {
            tids.extend(perf::threads_of(p));
        }
        if tids.is_empty() {
            return Err(AgentError::NoProcess(cfg.pids.clone()));
        }
        Target::Threads {
            tids,
            cpus: cpus.clone(),
        }
    };
    // Tracking first, then the /proc scan: a process started during the scan is
    // in the records even if the scan missed it.
    let (mut tracking, mut warnings) = if cfg.mmap_tracking {
        perf::open_tracking(&target, TRACKING_PAGES)?
    } else {
        (
            Vec::new(),
            vec!["mmap tracking off: processes are known only from /proc reads".to_string()],
        )
    };
    if cfg.pids.is_empty() {
        procs.load_all();
    } else {
        for &p in &cfg.pids {
            procs.load_from_proc(p);
        }
    }
    let fallback = Arc::new(Plan::command_line(
        &cfg.events,
        cfg.frequency,
        cfg.stack_bytes,
        cfg.max_cpu_percent,
    ));
    let pusher = Arc::new(Pusher::spawn(
        HttpTransport::new(&cfg.server, Duration::from_secs(10)),
        cfg.retry,
        cfg.max_queue,
    ));
    let control = if cfg.control {
        let identity = Identity {
            agent_id: format!("{}-{}-{}", cfg.labels.host, std::process::id(), now_ms()),
            host: cfg.labels.host.clone(),
            service: cfg.labels.service.clone(),
            platform: cfg.labels.platform.clone(),
            available_events: available_events(&target),
        };
        if !identity.available_events.iter().any(|e| e != "cpu-clock") {
            warnings.push(
                "no hardware PMU here: only cpu-clock can be sampled (plans asking for hardware events get cpu-clock)"
                    .into(),
            );
        }
        Some(
            ControlClient::spawn(&cfg.server, identity, Duration::from_secs(5))
                .map_err(AgentError::Thread)?,
        )
    } else {
        None
    };
    if !HostSymbolizer::kallsyms_readable() {
        warnings.push("/proc/kallsyms unreadable: kernel frames stay unsymbolized".to_string());
    }
    for w in &warnings {
        eprintln!("profiledb-agent: {w}");
    }
    let mut encoder = Encoder {
        labels: cfg.labels.clone(),
        pusher: pusher.clone(),
        verbose: cfg.verbose,
    };
    // Two windows may wait for symbols: 20 s at the default push interval.
    let symbolizer = SymbolizerThread::spawn_with(2, cfg.symbolize, move |job, frames| {
        encoder.encode(job, frames)
    })
    .map_err(AgentError::Thread)?;
    let mut cgroups = CgroupNames::default();
    cgroups.scan();
    let summary = Summary {
        warnings,
        ..Default::default()
    };
    let mut state = State::new(
        cfg.labels.clone(),
        procs,
        cfg.max_stacks,
        symbolizer,
        cgroups,
        summary,
        fallback.clone(),
    );
    state.summary.plans_followed = 1;
    eprintln!(
        "profiledb-agent: {} {}, pushing every {:?} to {}",
        if cfg.control {
            "following the server's plans for"
        } else {
            "sampling"
        },
        if cfg.pids.is_empty() {
            "the whole machine".to_string()
        } else {
            format!("pids {:?}", cfg.pids)
        },
        cfg.push_interval,
        cfg.server
    );
    let mut plan_guard = PlanGuard::new(&fallback, &cfg)?;
    let mut reporter = Reporter {
        last: (Instant::now(), guard::self_cpu_seconds().unwrap_or(0.0)),
        errors: Vec::new(),
        guard: String::new(),
    };
    let mut session: Option<Session> = None;
    // A sampling spec that failed to open is not retried until the plan changes.
    let mut failed_spec: Option<Sampling> = None;
    let mut counting: Option<Counting> = None;
    let started = Instant::now();
    let cpu_at_start = guard::self_cpu_seconds()?;
    let mut next_flush = started + cfg.push_interval;
    let mut next_guard = started + Duration::from_secs(1);
    let tick = Duration::from_millis(if cfg.stack_bytes > 0 { 100 } else { 250 });
    loop {
        std::thread::sleep(tick);
        drain(&mut tracking, &mut state);
        if let Some(s) = &mut session {
            drain(&mut s.fds, &mut state);
        }
        let now = Instant::now();
        let done = stop.load(Ordering::Relaxed)
            || cfg
                .duration
                .is_some_and(|d| now.duration_since(started) >= d);
        if done {
            break;
        }

        // The plan in force: the server's newest, else the command line's.
        let plan = control
            .as_ref()
            .and_then(ControlClient::plan)
            .unwrap_or_else(|| fallback.clone());
        if let Some(c) = &control {
            for w in c.take_warnings() {
                eprintln!("profiledb-agent: {w}");
                reporter.note_error(w);
            }
        }
        if plan.version != state.plan.version || plan.source != state.plan.source {
            eprintln!(
                "profiledb-agent: following plan {} ({:?}): {}",
                plan.version, plan.source, plan.reason
            );
            state.summary.plans_followed += 1;
            plan_guard = PlanGuard::new(&plan, &cfg)?;
            failed_spec = None;
            state.set_plan(plan.clone());
        }

        // Open, switch or close the sampling fds to match the plan.
        let want = plan_guard.apply(&plan, now_ms());
        let have = session.as_ref().map(|s| &s.spec);
        if want.as_ref() != have && (want.is_none() || want != failed_spec) {
            if let Some(mut s) = session.take() {
                for f in s.fds.iter_mut() {
                    let _ = f.sampler.disable();
                }
                drain(&mut s.fds, &mut state);
                state.flush(false);
                next_flush = now + cfg.push_interval;
                if cfg.verbose || cfg.control {
                    eprintln!("profiledb-agent: sampling window closed");
                }
            }
            if let Some(spec) = want {
                let opts = PerfOptions {
                    frequency: spec.events.first().map_or(19, |e| e.1),
                    kernel: true,
                    stack_bytes: spec.stack_bytes,
                    pages: ring_pages(
                        spec.events.iter().map(|e| e.1).max().unwrap_or(19),
                        spec.stack_bytes,
                    ),
                };
                match perf::open_all(&spec.events, &target, &opts) {
                    Ok(opened) => {
                        for w in &opened.warnings {
                            if !state.summary.warnings.contains(w) {
                                eprintln!("profiledb-agent: {w}");
                                state.summary.warnings.push(w.clone());
                            }
                        }
                        for (e, _) in &opened.events {
                            if !state.summary.events.contains(e) {
                                state.summary.events.push(*e);
                            }
                        }
                        if cfg.verbose || cfg.control {
                            eprintln!(
                                "profiledb-agent: sampling {:?} with {} fd(s)",
                                opened
                                    .events
                                    .iter()
                                    .map(|(e, hz)| format!("{}@{hz}Hz", e.name()))
                                    .collect::<Vec<_>>(),
                                opened.fds.len()
                            );
                        }
                        state.window_events = opened.events;
                        state.window.start = SystemTime::now();
                        session = Some(Session {
                            fds: opened.fds,
                            spec,
                        });
                        failed_spec = None;
                    }
                    Err(e) if cfg.control => {
                        eprintln!("profiledb-agent: {e}");
                        reporter.note_error(e.to_string());
                        failed_spec = Some(spec);
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }

        // Counting mode follows the plan too.
        if counting.as_ref().map(|c| c.plan()) != plan.counting.as_ref() {
            if let Some(r) = counting.as_mut().and_then(Counting::finish) {
                push_counts(&r, &cfg.labels, &pusher);
            }
            counting = plan
                .counting
                .clone()
                .map(|p| Counting::new(p, cpus.clone()));
        }
        if let Some(cn) = &mut counting {
            if let Some(r) = cn.tick(now, &mut state.cgroups) {
                push_counts(&r, &cfg.labels, &pusher);
            }
            state.summary.counting_rounds = cn.stats.rounds;
            for w in std::mem::take(&mut cn.stats.warnings) {
                eprintln!("profiledb-agent: {w}");
                reporter.note_error(w);
            }
        }

        let fds = tracking.len()
            + session.as_ref().map_or(0, |s| s.fds.len())
            + counting.as_ref().map_or(0, |c| c.stats.fds);
        state.summary.fds = state.summary.fds.max(fds);

        if now >= next_flush {
            next_flush = now + cfg.push_interval;
            state.flush(false);
            if let Some(c) = &control {
                let counted = counting.as_ref().map_or(0, |c| c.stats.counted);
                c.set_report(reporter.report(&state, &pusher, fds, counted));
            }
            if cfg.verbose {
                eprintln!(
                    "profiledb-agent: window {}: {} samples so far, {} lost",
                    state.summary.windows, state.summary.samples, state.summary.lost_samples
                );
            }
        }
        if now >= next_guard {
            next_guard = now + Duration::from_secs(1);
            // Every second, not every window: in 10 s the unwinder touches enough
            // of other processes' big binaries (rustc, test binaries) to add
            // megabytes of file-backed RSS; one madvise per cached file costs
            // microseconds.
            state.unwinder.release_pages();
            if let Some(pct) = plan_guard.guard.check()? {
                if !cfg.control {
                    eprintln!(
                        "profiledb-agent: own CPU use {pct:.2}% over the last {:?} exceeds --max-cpu-percent {}: stopping sampling",
                        cfg.guard_window, cfg.max_cpu_percent
                    );
                    state.summary.guard_tripped = Some(pct);
                    break;
                }
                if session.is_some() {
                    let action = if plan_guard.halved {
                        plan_guard.stopped_period = Some(plan.period_start_at(now_ms()));
                        format!(
                            "stopped the window: CPU {pct:.2}% over {:?} still above the plan's budget {}% at half frequency",
                            plan_guard.window, plan_guard.budget
                        )
                    } else {
                        plan_guard.halved = true;
                        format!(
                            "halved the frequencies: CPU {pct:.2}% over {:?} above the plan's budget {}%",
                            plan_guard.window, plan_guard.budget
                        )
                    };
                    eprintln!("profiledb-agent: {action}");
                    reporter.guard = action.clone();
                    state.summary.guard_actions.push(action);
                    // Measure afresh at the new rate.
                    plan_guard.guard = CpuGuard::new(plan_guard.budget, plan_guard.window)?;
                }
            }
        }
    }
    if let Some(mut s) = session.take() {
        for f in s.fds.iter_mut() {
            let _ = f.sampler.disable();
        }
        drain(&mut s.fds, &mut state);
    }
    if let Some(r) = counting.as_mut().and_then(Counting::finish) {
        push_counts(&r, &cfg.labels, &pusher);
    }
    drain(&mut tracking, &mut state);
    drop(tracking);
    state.flush(true);
    let final_report = control
        .as_ref()
        .map(|_| reporter.report(&state, &pusher, 0, 0));
    let mut summary = std::mem::take(&mut state.summary);
    if let Some(c) = control {
        if let Some(r) = final_report {
            c.set_report(r);
        }
        summary.control = c.stop();
    }
    // Symbolizes what is queued; then the encoder (the pusher's other owner) is gone.
    summary.symbols = state.symbolizer.finish();
    summary.push = match Arc::try_unwrap(pusher) {
        Ok(p) => p.finish(Duration::from_secs(15)),
        Err(p) => p.stats(),
    };
    let elapsed = started.elapsed().as_secs_f64();
    summary.cpu_percent = if elapsed > 0.0 {
        100.0 * (guard::self_cpu_seconds().unwrap_or(cpu_at_start) - cpu_at_start) / elapsed
    } else {
        0.0
    };
    Ok(summary)
}

fn push_counts(r: &counting::Readings, labels: &LabelConfig, pusher: &Pusher) {
    match pprof::encode_push_body(&counting::to_push(r, labels)) {
        Ok(b) => pusher.submit(b),
        Err(e) => eprintln!("profiledb-agent: encoding counts failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_sizes() {
        assert_eq!(ring_pages(19, 16 * 1024), 64);
        assert_eq!(ring_pages(99, 16 * 1024), 256);
        assert_eq!(ring_pages(19, 0), 16);
        assert_eq!(ring_pages(10_000, 65_528), 256);
    }
}
