//! Counting mode: how many events each cgroup's tasks caused, round after round.
//!
//! The Borg use case of Google's fleet perf work: no stacks, just counts per cgroup
//! every few minutes, cheap enough to run everywhere. Each round opens one counting
//! fd per (event, CPU, cgroup) with `PERF_FLAG_PID_CGROUP`, lets them count for the
//! round, then reads, scales for multiplexing and closes them.
//!
//! File descriptors are bounded by the plan's `max_fds`. The kernel only offers
//! events × CPUs × cgroups fds here (counting all cgroups with events × CPUs fds
//! needs BPF, as `perf stat --bpf-counters --for-each-cgroup` does), so when the
//! cgroups do not fit, each round counts the next `max_fds / (events × CPUs)` of them
//! in turn and the rest wait for a later round.
//!
//! Each round is pushed as one profile per event, `cgroup:<event>:<unit>`, one sample
//! per cgroup whose stack is the cgroup path (root outermost) and whose `cgroup`
//! label makes it a time series per cgroup.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use profiledb_proto::push::v1::PushRequest;
use profiledb_proto::ProfileBuilder;

use crate::cgroups::{cgroup2_root, CgroupNames};
use crate::config::EventKind;
use crate::perf::{explain, open_cgroup_counter};
use crate::plan::CountingPlan;
use crate::pprof::{self, LabelConfig};

/// The profile name of counting series.
pub const COUNTING_PROFILE: &str = "cgroup";

/// One cgroup's counts over a round, per event (scaled for multiplexing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupCounts {
    pub cgroup: String,
    pub counts: Vec<(EventKind, u64)>,
}

/// A finished round.
#[derive(Clone, Debug)]
pub struct Readings {
    pub start: SystemTime,
    pub end: SystemTime,
    pub cgroups: Vec<CgroupCounts>,
}

struct Open {
    cgroup: String,
    /// Per event, its per-CPU counters.
    counters: Vec<(EventKind, Vec<perf_event::Counter>)>,
}

struct Round {
    start: SystemTime,
    due: Instant,
    open: Vec<Open>,
}

/// What counting did, for the agent's report.
#[derive(Clone, Debug, Default)]
pub struct CountingStats {
    pub rounds: u64,
    /// cgroups counted in the last round.
    pub counted: u64,
    /// cgroups known when the last round started.
    pub known: u64,
    pub fds: usize,
    /// Why counting could not run or was cut short, once per cause.
    pub warnings: Vec<String>,
}

/// The counting-mode state of the agent.
pub struct Counting {
    plan: CountingPlan,
    cpus: Vec<usize>,
    root: Option<PathBuf>,
    cursor: usize,
    round: Option<Round>,
    pub stats: CountingStats,
}

impl Counting {
    pub fn new(plan: CountingPlan, cpus: Vec<usize>) -> Counting {
        let mut stats = CountingStats::default();
        let root = cgroup2_root();
        if root.is_none() {
            stats
                .warnings
                .push("no cgroup v2 hierarchy mounted: counting mode is off".into());
        }
        Counting {
            plan,
            cpus,
            root,
            cursor: 0,
            round: None,
            stats,
        }
    }

    pub fn plan(&self) -> &CountingPlan {
        &self.plan
    }

    /// cgroups one round may count within `max_fds`.
    pub fn per_round(&self) -> usize {
        let per_cgroup = (self.plan.events.len() * self.cpus.len()).max(1);
        self.plan.max_fds / per_cgroup
    }

    /// Called every tick: when the round is due, reads and closes it (returning its
    /// counts) and opens the next one.
    pub fn tick(&mut self, now: Instant, names: &mut CgroupNames) -> Option<Readings> {
        let readings = match &self.round {
            Some(r) if now < r.due => return None,
            Some(_) => self.round.take().map(read_round),
            None => None,
        };
        self.start_round(now, names);
        readings.filter(|r| !r.cgroups.is_empty())
    }

    /// Reads what the open round has counted so far and closes it (at shutdown or on
    /// a plan change).
    pub fn finish(&mut self) -> Option<Readings> {
        self.stats.fds = 0;
        self.round
            .take()
            .map(read_round)
            .filter(|r| !r.cgroups.is_empty())
    }

    fn warn_once(&mut self, w: String) {
        if !self.stats.warnings.contains(&w) {
            self.stats.warnings.push(w);
        }
    }

    fn start_round(&mut self, now: Instant, names: &mut CgroupNames) {
        self.stats.fds = 0;
        let Some(root) = self.root.clone() else {
            return;
        };
        let k = self.per_round();
        if k == 0 {
            self.warn_once(format!(
                "counting: max_fds {} is below events × CPUs = {}: nothing counted",
                self.plan.max_fds,
                self.plan.events.len() * self.cpus.len()
            ));
            return;
        }
        let all = names.paths(&self.plan.cgroups);
        self.stats.known = all.len() as u64;
        let mut open = Vec::new();
        let n = all.len();
        let mut tried = 0;
        while open.len() < k && tried < n {
            let path = &all[(self.cursor + tried) % n];
            tried += 1;
            match self.open_cgroup(&root, path) {
                Ok(o) => open.push(o),
                Err(w) => self.warn_once(w),
            }
        }
        if n > 0 {
            self.cursor = (self.cursor + tried) % n;
        }
        if n > k {
            self.warn_once(format!(
                "counting: {n} cgroups but room for {k} per round (max_fds {}): cgroups take turns",
                self.plan.max_fds
            ));
        }
        self.stats.rounds += 1;
        self.stats.counted = open.len() as u64;
        self.stats.fds = open
            .iter()
            .map(|o| o.counters.iter().map(|(_, c)| c.len()).sum::<usize>())
            .sum();
        self.round = Some(Round {
            start: SystemTime::now(),
            due: now + self.plan.interval,
            open,
        });
    }

    fn open_cgroup(&self, root: &Path, path: &str) -> Result<Open, String> {
        let dir = root.join(path.trim_start_matches('/'));
        let f = File::open(&dir)
            .map_err(|e| format!("counting: cannot open {}: {e}", dir.display()))?;
        let mut counters = Vec::with_capacity(self.plan.events.len());
        for &event in &self.plan.events {
            let mut per_cpu = Vec::with_capacity(self.cpus.len());
            for &cpu in &self.cpus {
                let c = open_cgroup_counter(event, &f, cpu).map_err(|e| {
                    format!(
                        "counting: perf_event_open({}, cgroup {path}) failed: {e}{}",
                        event.name(),
                        explain(&e)
                    )
                })?;
                per_cpu.push(c);
            }
            counters.push((event, per_cpu));
        }
        Ok(Open {
            cgroup: path.to_string(),
            counters,
        })
    }
}

/// Reads every counter of a round, scaled by enabled/running time (multiplexing).
fn read_round(r: Round) -> Readings {
    let cgroups = r
        .open
        .into_iter()
        .map(|mut o| CgroupCounts {
            cgroup: o.cgroup,
            counts: o
                .counters
                .iter_mut()
                .map(|(e, cs)| {
                    let total = cs
                        .iter_mut()
                        .filter_map(|c| c.read_count_and_time().ok())
                        .map(|t| scale(t.count, t.time_enabled, t.time_running))
                        .sum();
                    (*e, total)
                })
                .collect(),
        })
        .collect();
    Readings {
        start: r.start,
        end: SystemTime::now(),
        cgroups,
    }
}

/// A multiplexed counter's estimate: count × enabled / running.
pub fn scale(count: u64, enabled: u64, running: u64) -> u64 {
    if running == 0 {
        return 0;
    }
    if running >= enabled {
        return count;
    }
    (u128::from(count) * u128::from(enabled) / u128::from(running)).min(u128::from(u64::MAX)) as u64
}

/// The unit of an event's counts.
fn unit(e: EventKind) -> &'static str {
    if e == EventKind::CpuClock {
        "nanoseconds"
    } else {
        "count"
    }
}

/// The push of a round: one series per event, one sample per cgroup.
pub fn to_push(r: &Readings, labels: &LabelConfig) -> PushRequest {
    let nanos = |t: SystemTime| {
        t.duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as i64)
            .unwrap_or(0)
    };
    let start = nanos(r.start);
    let duration = (nanos(r.end) - start).max(0);
    let mut events: Vec<EventKind> = Vec::new();
    for c in &r.cgroups {
        for (e, _) in &c.counts {
            if !events.contains(e) {
                events.push(*e);
            }
        }
    }
    let mut req = PushRequest::default();
    for e in events {
        let mut b = ProfileBuilder::new();
        b.add_sample_type(e.name(), unit(e));
        b.set_period(e.name(), unit(e), 0);
        b.set_time(start, duration);
        for c in &r.cgroups {
            let Some(&(_, v)) = c.counts.iter().find(|(x, _)| *x == e) else {
                continue;
            };
            // Leaf first: the cgroup itself, then its parents, then the root.
            let mut frames: Vec<u64> = c
                .cgroup
                .split('/')
                .filter(|s| !s.is_empty())
                .rev()
                .map(|name| {
                    let f = b.function(name);
                    b.location(0, 0, Some(f))
                })
                .collect();
            let root = b.function("/");
            frames.push(b.location(0, 0, Some(root)));
            b.add_sample(
                frames,
                vec![i64::try_from(v).unwrap_or(i64::MAX)],
                [("cgroup", c.cgroup.as_str())],
            );
        }
        let mut series = labels.series_labels(e.name());
        for (k, v) in series.iter_mut() {
            if k == "__name__" {
                *v = COUNTING_PROFILE.to_string();
            }
        }
        req.series.push(pprof::push_series(&series, &b.finish()));
    }
    req
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn scaling() {
        assert_eq!(scale(100, 10, 10), 100);
        assert_eq!(scale(100, 20, 10), 200);
        assert_eq!(scale(100, 20, 0), 0);
        assert_eq!(scale(u64::MAX, 2, 1), u64::MAX, "saturates");
    }

    #[test]
    fn rounds_become_one_profile_per_event() {
        let r = Readings {
            start: UNIX_EPOCH + std::time::Duration::from_secs(10),
            end: UNIX_EPOCH + std::time::Duration::from_secs(70),
            cgroups: vec![
                CgroupCounts {
                    cgroup: "/system.slice/a.service".into(),
                    counts: vec![(EventKind::CpuClock, 5_000), (EventKind::Cycles, 7)],
                },
                CgroupCounts {
                    cgroup: "/".into(),
                    counts: vec![(EventKind::CpuClock, 9_000), (EventKind::Cycles, 11)],
                },
            ],
        };
        let req = to_push(&r, &LabelConfig::default());
        assert_eq!(req.series.len(), 2);
        let names: Vec<String> = req
            .series
            .iter()
            .map(|s| {
                let name = s
                    .labels
                    .iter()
                    .find(|l| l.name == "__name__")
                    .map(|l| l.value.clone());
                let event = s
                    .labels
                    .iter()
                    .find(|l| l.name == "event")
                    .map(|l| l.value.clone());
                format!("{}/{}", name.unwrap_or_default(), event.unwrap_or_default())
            })
            .collect();
        assert_eq!(names, vec!["cgroup/cpu-clock", "cgroup/cycles"]);
        let p = profiledb_proto::pprof::Profile::decode(&req.series[1].samples[0].raw_profile[..])
            .expect("decodes");
        let s = |i: i64| {
            std::str::from_utf8(&p.string_table[i as usize])
                .unwrap()
                .to_string()
        };
        assert_eq!(s(p.sample_type[0].r#type), "cycles");
        assert_eq!(p.sample[0].value, vec![7]);
        assert_eq!(p.sample[1].value, vec![11]);
        assert_eq!(
            p.sample[0].location_id.len(),
            3,
            "a.service, system.slice, /"
        );
        assert_eq!(p.sample[1].location_id.len(), 1, "the root alone");
        assert_eq!(p.duration_nanos, 60_000_000_000);
    }
}
