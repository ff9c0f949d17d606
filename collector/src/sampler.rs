//! The sampling state: perf records in, per-window stacks out.
//!
//! [`State`] owns the process table, the open window and the symbolizer queue. Perf
//! records update the process table (from the tracking fds) or add a sample to the
//! window; [`State::flush`] closes the window and hands it to the symbolizer thread,
//! whose [`Encoder`] builds one pprof per event and queues the push.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use perf_event::data::Record as PerfRecord;
use profiledb_proto::push::v1::PushRequest;

use crate::agent::{Summary, MAX_FRAMES};
use crate::aggregate::{is_kernel_addr, RawKey, Window};
use crate::cgroups::CgroupNames;
use crate::config::EventKind;
use crate::perf::{EventFd, MISC_COMM_EXEC};
use crate::plan::Plan;
use crate::pprof::{self, LabelConfig, LabeledStack, Labels, Measure};
use crate::procs::{MmapInfo, ProcessTable};
use crate::push::Pusher;
use crate::symbolize::{Batch, Frame, SymbolizerThread};
use crate::unwind::DwarfUnwinder;

/// `PERF_CONTEXT_MAX`: callchain entries at or above are context markers.
const PERF_CONTEXT_MAX: u64 = (-4095i64) as u64;

pub struct State {
    pub labels: LabelConfig,
    pub procs: ProcessTable,
    pub window: Window,
    /// Events (and Hz) of the sampling fds feeding the open window.
    pub window_events: Vec<(EventKind, u64)>,
    pub symbolizer: SymbolizerThread<WindowJob>,
    pub unwinder: DwarfUnwinder,
    pub cgroups: CgroupNames,
    pub summary: Summary,
    /// The plan in force, and whether it filters processes or cgroups.
    pub plan: Arc<Plan>,
    pub filtering: bool,
    /// Samples per service (`service_name` as pushed) since the start.
    pub services: BTreeMap<String, u64>,
    frames: Vec<u64>,
    user: Vec<u64>,
}

impl State {
    pub fn new(
        labels: LabelConfig,
        procs: ProcessTable,
        max_stacks: usize,
        symbolizer: SymbolizerThread<WindowJob>,
        cgroups: CgroupNames,
        summary: Summary,
        plan: Arc<Plan>,
    ) -> State {
        State {
            labels,
            procs,
            window: Window::new(max_stacks),
            window_events: Vec::new(),
            symbolizer,
            unwinder: DwarfUnwinder::new(),
            cgroups,
            summary,
            filtering: !plan.processes.is_empty() || !plan.cgroups.is_empty(),
            plan,
            services: BTreeMap::new(),
            frames: Vec::new(),
            user: Vec::new(),
        }
    }

    pub fn set_plan(&mut self, plan: Arc<Plan>) {
        self.filtering = !plan.processes.is_empty() || !plan.cgroups.is_empty();
        self.plan = plan;
    }

    pub fn handle(&mut self, event: u8, misc: u16, rec: &PerfRecord<'_>) {
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
        let known = self.procs.get(pid).is_some();
        if !known {
            // Neither a record nor /proc knew the task: it ran and exited unseen.
            self.summary.unattributed_samples += 1;
        }
        if self.filtering {
            let comm = self
                .procs
                .get(pid)
                .map(|p| p.comm.clone())
                .unwrap_or_default();
            let cgroup = self.cgroups.get(s.cgroup().unwrap_or(0));
            if !self.plan.keeps(&comm, cgroup.as_deref()) {
                self.summary.filtered_samples += 1;
                return;
            }
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
        if let Some(&leaf) = self.user.first() {
            if self.procs.get(pid).is_none_or(|p| p.lookup(leaf).is_none()) {
                // A user address in no known mapping: its mmap was missed.
                self.summary.unsymbolized_samples += 1;
            }
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
        self.window.add(key, 1, s.period().unwrap_or(0));
    }

    /// Closes the window: captures each stack's mappings and labels (cheap; the
    /// process table lives here) and queues it for the symbolizer thread, which
    /// builds and pushes the pprof. Exited processes can be dropped right after.
    /// `last`: the final window at shutdown waits for room in the queue instead of
    /// being dropped (sampling has stopped, nothing is lost by waiting).
    pub fn flush(&mut self, last: bool) {
        let now = SystemTime::now();
        let start = self.window.start;
        self.summary.dropped_stack_samples += self.window.dropped_samples;
        let raw = self.window.take(now);
        self.summary.windows += 1;
        if !raw.is_empty() {
            let mut batch = Batch::default();
            let mut samples = Vec::with_capacity(raw.len());
            let mut labels: HashMap<(u32, u64), Labels> = HashMap::new();
            for (key, tally) in &raw {
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
                        self.labels.sample_labels(key.pid, comm, cgroup.as_deref())
                    })
                    .clone();
                if let Some((_, svc)) = l.iter().find(|(k, _)| k == "service_name") {
                    *self.services.entry(svc.clone()).or_default() += tally.count;
                }
                samples.push((key.event, l, tally.count, tally.weight));
            }
            drop(raw);
            let job = WindowJob {
                samples,
                events: self.window_events.clone(),
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

fn perf_devnum(maj: Option<u32>, min: Option<u32>) -> u64 {
    match (maj, min) {
        (Some(a), Some(b)) => crate::procs::makedev(a as u64, b as u64),
        _ => 0,
    }
}

/// Drains the ring buffers of `fds` into the state, bounded per fd and round.
pub fn drain(fds: &mut [EventFd], state: &mut State) {
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

/// A captured window waiting for symbols: per stack (same order as the batch's
/// stacks) its event index, sample labels, count and summed periods.
pub struct WindowJob {
    samples: Vec<(u8, Labels, u64, u64)>,
    /// The events the indexes refer to, with their Hz.
    events: Vec<(EventKind, u64)>,
    start: SystemTime,
    end: SystemTime,
}

/// What the symbolizer thread needs to turn symbolized windows into pushes.
pub struct Encoder {
    pub labels: LabelConfig,
    pub pusher: Arc<Pusher>,
    pub verbose: bool,
}

fn nanos_since_epoch(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

impl Encoder {
    /// Builds one pprof per event from a symbolized window and queues the push.
    pub fn encode(&mut self, job: WindowJob, frames: Vec<Vec<Frame>>) {
        let mut per_event: Vec<Vec<LabeledStack>> = vec![Vec::new(); job.events.len()];
        for ((event, labels, count, weight), frames) in job.samples.into_iter().zip(frames) {
            if let Some(v) = per_event.get_mut(event as usize) {
                v.push(LabeledStack {
                    labels,
                    frames,
                    count,
                    weight,
                });
            }
        }
        let time_nanos = nanos_since_epoch(job.start);
        let duration = job
            .end
            .duration_since(job.start)
            .unwrap_or_default()
            .as_nanos() as i64;
        let mut req = PushRequest::default();
        for (stacks, &(event, hz)) in per_event.into_iter().zip(&job.events) {
            if stacks.is_empty() {
                continue;
            }
            let merged = pprof::merge_stacks(stacks);
            let measure = if event.is_hardware() {
                Measure::Event { name: event.name() }
            } else {
                Measure::Cpu {
                    period_ns: (1_000_000_000u64 / hz.max(1)) as i64,
                }
            };
            let profile = pprof::build_profile(&merged, measure, time_nanos, duration);
            req.series.push(pprof::push_series(
                &self.labels.series_labels(event.name()),
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
