//! Opening perf_event fds (perf-event2) and draining their ring buffers.
//!
//! System-wide mode opens one fd per event per online CPU (`pid = -1`); `--pid` mode
//! opens one fd per event per thread of the chosen processes per CPU, with `inherit`
//! so that threads and children created later are followed.
//!
//! Process tracking (`mmap2`, `comm` with `comm_exec`, `task` fork/exit and `cgroup`
//! records, `sample_id_all`) rides on a separate dummy event per CPU/thread
//! ([`open_tracking`]), opened before the agent scans `/proc` and kept for the agent's
//! whole life: a process started during the scan, or while no sampling window is
//! open, still has its mappings recorded, and sampling fds can be closed and reopened
//! with other events or frequencies without losing a record.

use std::io;

use perf_event::events::{Hardware, Software};
use perf_event::{Builder, SampleFlag, Sampler};
use thiserror::Error;

use crate::config::EventKind;

/// x86_64 `PERF_REG_X86_{BP,SP,IP}`: the registers the DWARF unwinder needs.
#[cfg(target_arch = "x86_64")]
pub const USER_REGS_MASK: u64 = (1 << 6) | (1 << 7) | (1 << 8);
/// Unwinding from copied stacks is only implemented for x86_64.
#[cfg(not(target_arch = "x86_64"))]
pub const USER_REGS_MASK: u64 = 0;

/// `PERF_RECORD_MISC_COMM_EXEC` (COMM records) / `PERF_RECORD_MISC_MMAP_DATA`.
pub const MISC_COMM_EXEC: u16 = 1 << 13;

#[derive(Debug, Error)]
pub enum PerfError {
    #[error("perf_event_open({event}) failed: {source}{hint}")]
    Open {
        event: &'static str,
        source: io::Error,
        hint: String,
    },
    #[error("mmap of the perf ring buffer failed: {0}")]
    Mmap(io::Error),
    #[error("enabling the counter failed: {0}")]
    Enable(io::Error),
}

/// Explains the common `perf_event_open` refusals.
pub fn explain(err: &io::Error) -> String {
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    match err.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => format!(
            " (kernel.perf_event_paranoid = {paranoid}; system-wide sampling needs root or CAP_PERFMON, \
             or perf_event_paranoid <= 0; inside containers seccomp may block perf_event_open)"
        ),
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
            " (this event is not supported here: no hardware PMU, e.g. in a VM)".into()
        }
        Some(libc::EMFILE) => " (too many open files: raise the fd limit)".into(),
        _ => String::new(),
    }
}

/// How to open the fds.
#[derive(Clone, Debug)]
pub struct PerfOptions {
    pub frequency: u64,
    /// Also kernel frames (falls back to user-only when not permitted).
    pub kernel: bool,
    /// Copy this many bytes of user stack + user registers for DWARF unwinding.
    pub stack_bytes: u32,
    /// Ring buffer pages (a power of two) per fd.
    pub pages: usize,
}

impl Default for PerfOptions {
    fn default() -> Self {
        Self {
            frequency: 19,
            kernel: true,
            stack_bytes: 0,
            pages: 32,
        }
    }
}

/// What to observe.
#[derive(Clone, Debug)]
pub enum Target {
    /// All processes on these CPUs.
    System { cpus: Vec<usize> },
    /// These threads (and what they create later) on these CPUs.
    Threads { tids: Vec<u32>, cpus: Vec<usize> },
}

/// One opened, enabled fd.
pub struct EventFd {
    /// Index into the agent's event list.
    pub event: u8,
    pub sampler: Sampler,
    pub tracking: bool,
}

/// Online CPUs from `/sys/devices/system/cpu/online` (`0-3,5`).
pub fn online_cpus() -> Vec<usize> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut cpus = parse_cpu_list(&s);
    if cpus.is_empty() {
        let n = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        cpus = (0..n).collect();
    }
    cpus
}

/// Parses a kernel CPU list such as `0-3,5`.
pub fn parse_cpu_list(s: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
                    out.extend(a..=b.min(a + 4096));
                }
            }
            None => {
                if let Ok(c) = part.parse() {
                    out.push(c);
                }
            }
        }
    }
    out
}

/// Threads of a process from `/proc/PID/task`.
pub fn threads_of(pid: u32) -> Vec<u32> {
    let mut v: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

fn builder_for(event: EventKind) -> Builder<'static> {
    match event {
        EventKind::CpuClock => Builder::new(Software::CPU_CLOCK),
        EventKind::Cycles => Builder::new(Hardware::CPU_CYCLES),
        EventKind::Instructions => Builder::new(Hardware::INSTRUCTIONS),
        EventKind::CacheReferences => Builder::new(Hardware::CACHE_REFERENCES),
        EventKind::CacheMisses => Builder::new(Hardware::CACHE_MISSES),
        EventKind::BranchInstructions => Builder::new(Hardware::BRANCH_INSTRUCTIONS),
        EventKind::BranchMisses => Builder::new(Hardware::BRANCH_MISSES),
    }
}

/// Flags that may be refused by older kernels and are retried without.
#[derive(Clone, Copy, Debug)]
struct Extras {
    cgroup: bool,
    kernel: bool,
}

fn open_one(
    event: EventKind,
    frequency: u64,
    cpu: usize,
    tid: Option<u32>,
    opts: &PerfOptions,
    extras: Extras,
) -> io::Result<Sampler> {
    let mut b = builder_for(event);
    let mut flags = SampleFlag::IP
        | SampleFlag::TID
        | SampleFlag::TIME
        | SampleFlag::CPU
        | SampleFlag::PERIOD
        | SampleFlag::CALLCHAIN;
    if extras.cgroup {
        flags |= SampleFlag::CGROUP;
    }
    if opts.stack_bytes > 0 && USER_REGS_MASK != 0 {
        flags |= SampleFlag::REGS_USER | SampleFlag::STACK_USER;
        b.sample_regs_user(USER_REGS_MASK);
        b.sample_stack_user(opts.stack_bytes);
    }
    b.sample(flags)
        .sample_frequency(frequency.max(1))
        .one_cpu(cpu)
        .exclude_kernel(!extras.kernel)
        .exclude_hv(true)
        .sample_id_all(true)
        .enabled(false)
        .wakeup_watermark(opts.pages * 4096 / 4);
    observe(&mut b, tid);
    let counter = b.build()?;
    counter.sampled(opts.pages * 4096)
}

fn observe(b: &mut Builder<'_>, tid: Option<u32>) {
    match tid {
        Some(t) => {
            b.observe_pid(t as libc::pid_t).inherit(true);
        }
        None => {
            b.any_pid();
        }
    }
}

/// The CPUs (and threads) fds are opened on.
fn units(target: &Target) -> Vec<(usize, Option<u32>)> {
    match target {
        Target::System { cpus } => cpus.iter().map(|&c| (c, None)).collect(),
        Target::Threads { tids, cpus } => tids
            .iter()
            .flat_map(|&t| cpus.iter().map(move |&c| (c, Some(t))))
            .collect(),
    }
}

fn open_dummy(cpu: usize, tid: Option<u32>, pages: usize, cgroup: bool) -> io::Result<Sampler> {
    let mut b = Builder::new(Software::DUMMY);
    b.sample(SampleFlag::TID | SampleFlag::TIME | SampleFlag::CPU)
        .sample_period(1)
        .one_cpu(cpu)
        .exclude_hv(true)
        .sample_id_all(true)
        .enabled(false)
        .mmap(true)
        .mmap2(true)
        .comm(true)
        .comm_exec(true)
        .task(true)
        .cgroup(cgroup)
        .wakeup_watermark(pages * 4096 / 4);
    observe(&mut b, tid);
    b.build()?.sampled(pages * 4096)
}

/// Opens and enables the dummy tracking fds (one per CPU, or per thread and CPU).
/// Returns them with the fallbacks taken.
pub fn open_tracking(
    target: &Target,
    pages: usize,
) -> Result<(Vec<EventFd>, Vec<String>), PerfError> {
    let mut cgroup = true;
    let mut warnings = Vec::new();
    let mut fds = Vec::new();
    for (cpu, tid) in units(target) {
        let mut res = open_dummy(cpu, tid, pages, cgroup);
        if cgroup && matches!(&res, Err(e) if e.raw_os_error() == Some(libc::EINVAL)) {
            cgroup = false;
            res = open_dummy(cpu, tid, pages, false);
            warnings.push(
                "kernel has no cgroup records: cgroup paths come from scanning /sys/fs/cgroup"
                    .into(),
            );
        }
        match res {
            Ok(sampler) => fds.push(EventFd {
                event: 0,
                sampler,
                tracking: true,
            }),
            Err(e) if tid.is_some() && e.raw_os_error() == Some(libc::ESRCH) => continue,
            Err(e) => {
                let hint = explain(&e);
                return Err(PerfError::Open {
                    event: "dummy (process tracking)",
                    source: e,
                    hint,
                });
            }
        }
    }
    for f in &mut fds {
        f.sampler.enable().map_err(PerfError::Enable)?;
    }
    Ok((fds, warnings))
}

/// The result of [`open_all`].
pub struct Opened {
    pub fds: Vec<EventFd>,
    /// Events actually sampled, with their frequencies; `EventFd::event` indexes this.
    pub events: Vec<(EventKind, u64)>,
    /// Fallbacks taken, to be logged.
    pub warnings: Vec<String>,
}

/// Opens and enables the sampling fds of `events`, each at its frequency. Hardware
/// events that fail are reported in the returned warnings and skipped; if nothing
/// could be opened the last error is returned. The returned event list holds the
/// events actually sampled (index = `EventFd::event`).
pub fn open_all(
    events: &[(EventKind, u64)],
    target: &Target,
    opts: &PerfOptions,
) -> Result<Opened, PerfError> {
    let mut warnings = Vec::new();
    let mut extras = Extras {
        cgroup: true,
        kernel: opts.kernel,
    };
    let mut fds: Vec<EventFd> = Vec::new();
    let mut opened: Vec<(EventKind, u64)> = Vec::new();
    let units = units(target);
    let mut last_err: Option<PerfError> = None;
    let mut want: Vec<(EventKind, u64)> = events.to_vec();
    // cpu-clock is the fallback when no hardware event can be opened.
    if !want.iter().any(|(e, _)| *e == EventKind::CpuClock) {
        let hz = events.first().map_or(opts.frequency, |e| e.1);
        want.push((EventKind::CpuClock, hz));
    }
    for (i, &(event, hz)) in want.iter().enumerate() {
        let is_fallback = i >= events.len();
        if is_fallback && !opened.is_empty() {
            break;
        }
        let idx = opened.len() as u8;
        let mut these: Vec<EventFd> = Vec::new();
        let mut failed: Option<io::Error> = None;
        for &(cpu, tid) in &units {
            let mut res = open_one(event, hz, cpu, tid, opts, extras);
            // Older kernels: no PERF_SAMPLE_CGROUP / cgroup records.
            if matches!(&res, Err(e) if e.raw_os_error() == Some(libc::EINVAL)) && extras.cgroup {
                extras.cgroup = false;
                res = open_one(event, hz, cpu, tid, opts, extras);
                if res.is_ok() {
                    warnings.push(
                        "kernel does not report cgroup ids with samples: no cgroup label".into(),
                    );
                }
            }
            // Not allowed to see kernel stacks: user only.
            if matches!(&res, Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)))
                && extras.kernel
            {
                extras.kernel = false;
                res = open_one(event, hz, cpu, tid, opts, extras);
                if res.is_ok() {
                    warnings.push("kernel frames not permitted (perf_event_paranoid): sampling user stacks only".into());
                }
            }
            match res {
                Ok(s) => these.push(EventFd {
                    event: idx,
                    sampler: s,
                    tracking: false,
                }),
                // A thread that exited between listing and opening.
                Err(e) if tid.is_some() && e.raw_os_error() == Some(libc::ESRCH) => continue,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        match failed {
            None if !these.is_empty() => {
                fds.extend(these);
                opened.push((event, hz));
            }
            None => {}
            Some(e) => {
                let hint = explain(&e);
                if event.is_hardware() {
                    warnings.push(format!(
                        "event {} unavailable: {e}{hint}; {}",
                        event.name(),
                        if events.iter().any(|(e, _)| !e.is_hardware()) {
                            "skipping it"
                        } else {
                            "falling back to cpu-clock if nothing else opens"
                        }
                    ));
                }
                last_err = Some(PerfError::Open {
                    event: event.name(),
                    source: e,
                    hint,
                });
            }
        }
    }
    if fds.is_empty() {
        return Err(last_err.unwrap_or_else(|| PerfError::Open {
            event: "cpu-clock",
            source: io::Error::new(io::ErrorKind::NotFound, "no CPU or thread to observe"),
            hint: String::new(),
        }));
    }
    for f in &mut fds {
        f.sampler.enable().map_err(PerfError::Enable)?;
    }
    Ok(Opened {
        fds,
        events: opened,
        warnings,
    })
}

/// Opens an enabled counting fd of `event` for the tasks of one cgroup on one CPU
/// (`PERF_FLAG_PID_CGROUP`: the kernel only counts while a task of the cgroup runs
/// there). `cgroup` is an open directory of the cgroup v2 hierarchy.
pub fn open_cgroup_counter(
    event: EventKind,
    cgroup: &std::fs::File,
    cpu: usize,
) -> io::Result<perf_event::Counter> {
    let mut b = builder_for(event);
    b.observe_cgroup(cgroup)
        .one_cpu(cpu)
        .exclude_hv(true)
        .enabled(true);
    b.build()
}

/// The kernel refused a system-wide cpu-clock event; the message says what to
/// change (`perf_event_paranoid`, `CAP_PERFMON`).
#[derive(Debug, thiserror::Error)]
#[error("perf_event_open(cpu-clock, cpu 0, all pids): {source}{}", explain(.source))]
pub struct PerfRefused {
    #[source]
    pub source: io::Error,
}

/// Checks whether this process may sample the whole machine with cpu-clock.
/// Returns the kernel's refusal otherwise.
pub fn probe_system_wide() -> Result<(), PerfRefused> {
    let opts = PerfOptions {
        kernel: false,
        pages: 1,
        ..Default::default()
    };
    open_one(
        EventKind::CpuClock,
        opts.frequency,
        0,
        None,
        &opts,
        Extras {
            cgroup: false,
            kernel: false,
        },
    )
    .map(|_| ())
    .map_err(|source| PerfRefused { source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,5\n"), vec![0, 1, 2, 3, 5]);
        assert_eq!(parse_cpu_list("0"), vec![0]);
        assert!(parse_cpu_list("").is_empty());
        assert!(!online_cpus().is_empty());
    }
}
