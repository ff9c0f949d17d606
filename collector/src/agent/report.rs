//! What a run reports: the summary at its end and the check-ins on the way.

use super::*;

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

pub(super) struct Reporter {
    pub(super) last: (Instant, f64),
    pub(super) errors: Vec<String>,
    pub(super) guard: String,
}

impl Reporter {
    pub(super) fn note_error(&mut self, e: String) {
        if self.errors.last() != Some(&e) {
            self.errors.push(e);
        }
        let extra = self.errors.len().saturating_sub(8);
        self.errors.drain(..extra);
    }

    /// The report of the next check-in: totals since the start, CPU since the last.
    pub(super) fn report(
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
