//! The agent's main loop: drain perf buffers, aggregate, flush and push.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use perf_event::data::Record as PerfRecord;
use thiserror::Error;

use crate::aggregate::{is_kernel_addr, RawKey, Window};
use crate::config::EventKind;
use crate::guard::{CpuGuard, GuardError};
use crate::perf::{self, EventFd, PerfError, PerfOptions, Target, MISC_COMM_EXEC};
use crate::pprof::{self, LabelConfig, LabeledStack, Labels};
use crate::procs::{MmapInfo, ProcessTable};
use crate::push::{HttpTransport, PushStats, Pusher, RetryPolicy};
use crate::symbolize::{Batch, Frame, HostSymbolizer, SymbolStats, SymbolizerThread};
use crate::unwind::DwarfUnwinder;
use profiledb_proto::push::v1::PushRequest;

/// `PERF_CONTEXT_MAX`: callchain entries at or above are context markers.
const PERF_CONTEXT_MAX: u64 = (-4095i64) as u64;
/// Deepest stack kept.
pub const MAX_FRAMES: usize = 256;

#[derive(Debug, Error)]
pub enum AgentError {
    #[error(transparent)]
    Perf(#[from] PerfError),
    #[error(transparent)]
    Guard(#[from] GuardError),
    #[error("starting the symbolizer thread: {0}")]
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
        }
    }
}

/// What happened during a run.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub events: Vec<EventKind>,
    pub fds: usize,
    pub samples: u64,
    pub idle_samples: u64,
    pub lost_samples: u64,
    pub dropped_stack_samples: u64,
    pub windows: u64,
    pub push: PushStats,
    pub symbols: SymbolStats,
    pub user_frames_fp: u64,
    pub user_frames_dwarf: u64,
    pub user_stacks: u64,
    pub cpu_percent: f64,
    pub guard_tripped: Option<f64>,
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

/// Maps cgroup ids to paths (cgroup v2: the id is the directory's inode number).
#[derive(Default)]
struct CgroupNames {
    names: HashMap<u64, String>,
    scanned: Option<Instant>,
}

impl CgroupNames {
    fn scan(&mut self) {
        if self
            .scanned
            .is_some_and(|t| t.elapsed() < Duration::from_secs(30))
        {
            return;
        }
        self.scanned = Some(Instant::now());
        let Some(root) = cgroup2_root() else {
            return;
        };
        let root = root.as_path();
        let mut stack = vec![root.to_path_buf()];
        let mut seen = 0usize;
        while let Some(dir) = stack.pop() {
            seen += 1;
            if seen > 100_000 || self.names.len() > 100_000 {
                break;
            }
            if let Ok(md) = std::fs::metadata(&dir) {
                use std::os::unix::fs::MetadataExt;
                let rel = dir
                    .strip_prefix(root)
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                self.names.insert(md.ino(), format!("/{rel}"));
            }
            if let Ok(rd) = std::fs::read_dir(&dir) {
                for e in rd.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        stack.push(e.path());
                    }
                }
            }
        }
    }

    fn get(&mut self, id: u64) -> Option<String> {
        if id == 0 {
            return None;
        }
        if !self.names.contains_key(&id) {
            self.scan();
        }
        self.names.get(&id).cloned()
    }
}

/// The cgroup v2 hierarchy: `/sys/fs/cgroup` (unified) or `/sys/fs/cgroup/unified`
/// (hybrid systems). Sample cgroup ids are inode numbers in it.
fn cgroup2_root() -> Option<std::path::PathBuf> {
    const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
    for p in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
        let Ok(c) = std::ffi::CString::new(p) else {
            continue;
        };
        // SAFETY: statfs writes into a zeroed struct we own; the path is NUL-terminated.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::statfs(c.as_ptr(), &mut st) } == 0
            && st.f_type as i64 == CGROUP2_SUPER_MAGIC
        {
            return Some(p.into());
        }
    }
    None
}

struct State {
    cfg: AgentConfig,
    procs: ProcessTable,
    window: Window,
    symbolizer: SymbolizerThread<WindowJob>,
    unwinder: DwarfUnwinder,
    cgroups: CgroupNames,
    summary: Summary,
    frames: Vec<u64>,
    user: Vec<u64>,
}

impl State {
    fn handle(&mut self, event: u8, misc: u16, rec: &PerfRecord<'_>) {
        match rec {
            PerfRecord::Sample(s) => self.on_sample(event, s),
            PerfRecord::Mmap2(m) => {
                let path = String::from_utf8_lossy(&m.filename);
                let dev = perf_devnum(m.maj(), m.min());
                if m.prot & libc::PROT_EXEC as u32 != 0 {
                    self.procs.on_mmap(
                        m.pid,
                        &MmapInfo {
                            start: m.addr,
                            len: m.len,
                            pgoff: m.pgoff,
                            path: &path,
                            dev,
                            ino: m.ino().unwrap_or(0),
                        },
                    );
                }
            }
            PerfRecord::Mmap(m) => {
                // Plain MMAP records only come for executable mappings here.
                let path = String::from_utf8_lossy(&m.filename);
                self.procs.on_mmap(
                    m.pid,
                    &MmapInfo {
                        start: m.addr,
                        len: m.len,
                        pgoff: m.pgoff,
                        path: &path,
                        dev: 0,
                        ino: 0,
                    },
                );
            }
            PerfRecord::Comm(c) => {
                let comm = String::from_utf8_lossy(&c.comm);
                self.procs
                    .on_comm(c.pid, c.tid, &comm, misc & MISC_COMM_EXEC != 0);
            }
            PerfRecord::Fork(f) => self.procs.on_fork(f.pid, f.ppid, f.tid),
            PerfRecord::Exit(e) => self.procs.on_exit(e.pid, e.tid),
            PerfRecord::Lost(l) => self.summary.lost_samples += l.lost,
            PerfRecord::CGroup(c) => {
                let path = String::from_utf8_lossy(&c.path).into_owned();
                self.cgroups.names.insert(c.id, path);
            }
            _ => {}
        }
    }

    fn on_sample(&mut self, event: u8, s: &perf_event::data::Sample<'_>) {
        self.summary.samples += 1;
        let pid = s.pid().unwrap_or(0);
        if pid == 0 {
            self.summary.idle_samples += 1;
            return;
        }
        if self.procs.get(pid).is_none() {
            self.procs.load_from_proc(pid);
        }
        self.frames.clear();
        self.user.clear();
        let mut in_kernel = false;
        let mut saw_marker = false;
        if let Some(chain) = s.callchain() {
            for &ip in chain {
                if ip >= PERF_CONTEXT_MAX {
                    saw_marker = true;
                    in_kernel = ip == (-128i64) as u64; // PERF_CONTEXT_KERNEL
                    continue;
                }
                if in_kernel || (!saw_marker && is_kernel_addr(ip)) {
                    if self.frames.len() < MAX_FRAMES {
                        self.frames.push(ip);
                    }
                } else if self.user.len() < MAX_FRAMES {
                    self.user.push(ip);
                }
            }
        }
        if self.frames.is_empty() && self.user.is_empty() {
            if let Some(ip) = s.ip() {
                if is_kernel_addr(ip) {
                    self.frames.push(ip);
                } else {
                    self.user.push(ip);
                }
            }
        }
        // The kernel walks frame pointers even through code built without them and
        // then reads garbage: cut the chain at the first return address outside every
        // executable mapping of the process (the leaf is kept: it may be JIT code).
        if let Some(p) = self.procs.get(pid) {
            let keep = self
                .user
                .iter()
                .skip(1)
                .position(|&a| p.lookup(a.saturating_sub(1)).is_none())
                .map_or(self.user.len(), |i| i + 1);
            self.user.truncate(keep);
        }
        // DWARF: unwind the copied user stack; keep it if it goes deeper.
        let fp_user = self.user.len();
        let mut dwarf_user = 0;
        if let (Some(regs), Some(stack)) = (s.regs_user(), s.stack_user()) {
            if !stack.is_empty() {
                let mut d = Vec::with_capacity(32);
                self.unwinder
                    .unwind(&self.procs, pid, &regs.regs, stack, &mut d);
                dwarf_user = d.len();
                if d.len() > self.user.len() {
                    d.truncate(MAX_FRAMES);
                    self.user = d;
                }
            }
        }
        if fp_user > 0 || dwarf_user > 0 {
            self.summary.user_stacks += 1;
            self.summary.user_frames_fp += fp_user as u64;
            self.summary.user_frames_dwarf += dwarf_user.max(fp_user) as u64;
        }
        let room = MAX_FRAMES.saturating_sub(self.frames.len());
        self.frames.extend(self.user.iter().take(room));
        let key = RawKey {
            event,
            pid,
            cgroup: s.cgroup().unwrap_or(0),
            frames: self.frames.as_slice().into(),
        };
        self.window.add(key, 1);
    }

    /// Closes the window: captures each stack's mappings and labels (cheap; the
    /// process table lives here) and queues it for the symbolizer thread, which
    /// builds and pushes the pprof. Exited processes can be dropped right after.
    /// `last`: the final window at shutdown waits for room in the queue instead of
    /// being dropped (sampling has stopped, nothing is lost by waiting).
    fn flush(&mut self, last: bool) {
        let now = SystemTime::now();
        let start = self.window.start;
        self.summary.dropped_stack_samples += self.window.dropped_samples;
        let raw = self.window.take(now);
        self.summary.windows += 1;
        if !raw.is_empty() {
            let mut batch = Batch::default();
            let mut samples = Vec::with_capacity(raw.len());
            let mut labels: HashMap<(u32, u64), Labels> = HashMap::new();
            for (key, count) in &raw {
                batch.push(&self.procs, key.pid, &key.frames);
                let l = labels
                    .entry((key.pid, key.cgroup))
                    .or_insert_with(|| {
                        let comm = self
                            .procs
                            .get(key.pid)
                            .map(|p| p.comm.as_str())
                            .unwrap_or_default();
                        let cgroup = self.cgroups.get(key.cgroup);
                        self.cfg
                            .labels
                            .sample_labels(key.pid, comm, cgroup.as_deref())
                    })
                    .clone();
                samples.push((key.event, l, *count));
            }
            drop(raw);
            let job = WindowJob {
                samples,
                start,
                end: now,
            };
            let queued = if last {
                self.symbolizer.submit_wait(job, batch)
            } else {
                self.symbolizer.submit(job, batch)
            };
            if !queued {
                eprintln!(
                    "profiledb-agent: the symbolizer is still busy with earlier windows: window dropped"
                );
            }
        }
        self.procs.gc();
        self.unwinder.retain(&self.procs);
    }
}

/// A captured window waiting for symbols: per stack (same order as the batch's
/// stacks) its event, sample labels and count.
struct WindowJob {
    samples: Vec<(u8, Labels, u64)>,
    start: SystemTime,
    end: SystemTime,
}

/// What the symbolizer thread needs to turn symbolized windows into pushes.
struct Encoder {
    labels: LabelConfig,
    events: Vec<EventKind>,
    frequency: u64,
    pusher: Arc<Pusher>,
    verbose: bool,
}

impl Encoder {
    /// Builds one pprof per event from a symbolized window and queues the push.
    fn encode(&mut self, job: WindowJob, frames: Vec<Vec<Frame>>) {
        let mut per_event: Vec<Vec<LabeledStack>> = vec![Vec::new(); self.events.len()];
        for ((event, labels, count), frames) in job.samples.into_iter().zip(frames) {
            if let Some(v) = per_event.get_mut(event as usize) {
                v.push(LabeledStack {
                    labels,
                    frames,
                    count,
                });
            }
        }
        let period_ns = (1_000_000_000u64 / self.frequency.max(1)) as i64;
        let time_nanos = nanos_since_epoch(job.start);
        let duration = job
            .end
            .duration_since(job.start)
            .unwrap_or_default()
            .as_nanos() as i64;
        let mut req = PushRequest::default();
        for (i, stacks) in per_event.into_iter().enumerate() {
            if stacks.is_empty() {
                continue;
            }
            let merged = pprof::merge_stacks(stacks);
            let profile = pprof::build_profile(&merged, period_ns, time_nanos, duration);
            let name = self.events.get(i).map(|e| e.name()).unwrap_or("cpu-clock");
            req.series.push(pprof::push_series(
                &self.labels.series_labels(name),
                &profile,
            ));
        }
        match pprof::encode_push_body(&req) {
            Ok(b) => self.pusher.submit(b),
            Err(e) => eprintln!("profiledb-agent: encoding the window failed: {e}"),
        }
        if self.verbose {
            let p = self.pusher.stats();
            eprintln!(
                "profiledb-agent: window queued for push; {} windows pushed, {} dropped",
                p.pushed_windows,
                p.dropped()
            );
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

fn perf_devnum(maj: Option<u32>, min: Option<u32>) -> u64 {
    match (maj, min) {
        (Some(a), Some(b)) => crate::procs::makedev(a as u64, b as u64),
        _ => 0,
    }
}

fn nanos_since_epoch(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

fn drain(fds: &mut [EventFd], state: &mut State) {
    for f in fds.iter_mut() {
        // Bound the work per round so one busy fd cannot starve the others.
        for _ in 0..100_000 {
            let Some(rec) = f.sampler.next_record() else {
                break;
            };
            let misc = rec.misc();
            let event = f.event;
            if let Ok(r) = rec.parse_record() {
                state.handle(event, misc, &r);
            };
        }
    }
}

/// Runs the agent until `stop` is set, the duration passes or the CPU guard trips.
pub fn run(cfg: AgentConfig, stop: &AtomicBool) -> Result<Summary, AgentError> {
    let mut procs = ProcessTable::new();
    let cpus = perf::online_cpus();
    let target = if cfg.pids.is_empty() {
        procs.load_all();
        Target::System { cpus }
    } else {
        let mut tids = Vec::new();
        for &p in &cfg.pids {
            if procs.load_from_proc(p) {
                tids.extend(perf::threads_of(p));
            }
        }
        if tids.is_empty() {
            return Err(AgentError::NoProcess(cfg.pids.clone()));
        }
        Target::Threads { tids, cpus }
    };
    let opts = PerfOptions {
        frequency: cfg.frequency,
        kernel: true,
        stack_bytes: cfg.stack_bytes,
        pages: ring_pages(cfg.frequency, cfg.stack_bytes),
    };
    let perf::Opened {
        mut fds,
        events,
        warnings,
    } = perf::open_all(&cfg.events, &target, &opts)?;
    for w in &warnings {
        eprintln!("profiledb-agent: {w}");
    }
    let mut summary = Summary {
        events: events.clone(),
        fds: fds.len(),
        warnings,
        ..Default::default()
    };
    eprintln!(
        "profiledb-agent: sampling {} at {} Hz with {} fd(s), events {:?}, pushing every {:?} to {}",
        if cfg.pids.is_empty() {
            "the whole machine".to_string()
        } else {
            format!("pids {:?}", cfg.pids)
        },
        cfg.frequency,
        fds.len(),
        events.iter().map(|e| e.name()).collect::<Vec<_>>(),
        cfg.push_interval,
        cfg.server
    );
    let pusher = Arc::new(Pusher::spawn(
        HttpTransport::new(&cfg.server, Duration::from_secs(10)),
        cfg.retry,
        cfg.max_queue,
    ));
    let mut guard = CpuGuard::new(cfg.max_cpu_percent, cfg.guard_window)?;
    if !HostSymbolizer::kallsyms_readable() {
        summary
            .warnings
            .push("/proc/kallsyms unreadable: kernel frames stay unsymbolized".to_string());
    }
    let mut encoder = Encoder {
        labels: cfg.labels.clone(),
        events: events.clone(),
        frequency: cfg.frequency,
        pusher: pusher.clone(),
        verbose: cfg.verbose,
    };
    // Two windows may wait for symbols: 20 s at the default push interval.
    let symbolizer = SymbolizerThread::spawn(2, move |job, frames| encoder.encode(job, frames))
        .map_err(AgentError::Thread)?;
    let mut cgroups = CgroupNames::default();
    cgroups.scan();
    let mut state = State {
        window: Window::new(cfg.max_stacks),
        cfg: cfg.clone(),
        procs,
        symbolizer,
        unwinder: DwarfUnwinder::new(),
        cgroups,
        summary,
        frames: Vec::new(),
        user: Vec::new(),
    };
    let started = Instant::now();
    let mut next_flush = started + cfg.push_interval;
    let mut next_guard = started + Duration::from_secs(1);
    let tick = Duration::from_millis(if cfg.stack_bytes > 0 { 100 } else { 250 });
    loop {
        std::thread::sleep(tick);
        drain(&mut fds, &mut state);
        let now = Instant::now();
        let done = stop.load(Ordering::Relaxed)
            || cfg
                .duration
                .is_some_and(|d| now.duration_since(started) >= d);
        if done {
            break;
        }
        if now >= next_flush {
            next_flush = now + cfg.push_interval;
            state.flush(false);
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
            // of other processes' big binaries (rustc, test binaries) to add ~15 MB
            // of file-backed RSS; one madvise per cached file costs microseconds.
            state.unwinder.release_pages();
            if let Some(pct) = guard.check()? {
                eprintln!(
                    "profiledb-agent: own CPU use {pct:.2}% over the last {:?} exceeds --max-cpu-percent {}: stopping sampling",
                    cfg.guard_window, cfg.max_cpu_percent
                );
                state.summary.guard_tripped = Some(pct);
                break;
            }
        }
    }
    for f in fds.iter_mut() {
        let _ = f.sampler.disable();
    }
    drain(&mut fds, &mut state);
    drop(fds);
    state.flush(true);
    let mut summary = state.summary;
    // Symbolizes what is queued; then the encoder (the pusher's other owner) is gone.
    summary.symbols = state.symbolizer.finish();
    summary.push = match Arc::try_unwrap(pusher) {
        Ok(p) => p.finish(Duration::from_secs(15)),
        Err(p) => p.stats(),
    };
    summary.cpu_percent = guard.average_percent();
    Ok(summary)
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
