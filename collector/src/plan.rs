//! The plan the agent follows: what to sample, when, and within which budget.
//!
//! With `--control` the plan comes from the server (`control.v1`, see [`crate::control`]);
//! without it, or until the server first answers, the command line's settings are the
//! plan: sample all the time with the given events.

use std::time::Duration;

use profiledb_proto::control::v1 as c;

use crate::cgroups::under;
use crate::config::EventKind;

/// Where the plan in force came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The command line (no controller, or none reached yet).
    CommandLine,
    /// The server's last answer.
    Server,
}

/// Per-cgroup counting.
#[derive(Clone, Debug, PartialEq)]
pub struct CountingPlan {
    pub events: Vec<EventKind>,
    pub interval: Duration,
    pub max_fds: usize,
    pub cgroups: Vec<String>,
}

/// A plan, checked: every event is one the agent knows, frequencies are in range and
/// the window fits in the period.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub version: u64,
    pub source: Source,
    pub period_start_ms: i64,
    pub period: Duration,
    pub profile: bool,
    pub window: Duration,
    pub events: Vec<(EventKind, u64)>,
    pub cgroups: Vec<String>,
    pub processes: Vec<String>,
    pub stack_bytes: u32,
    pub max_cpu_percent: f64,
    pub counting: Option<CountingPlan>,
    pub reason: String,
}

/// What a plan says about this moment: sample these events, or not.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampling {
    pub events: Vec<(EventKind, u64)>,
    pub stack_bytes: u32,
}

impl Plan {
    /// The command line's plan: always sampling `events` at `frequency`.
    pub fn command_line(
        events: &[EventKind],
        frequency: u64,
        stack_bytes: u32,
        max_cpu_percent: f64,
    ) -> Plan {
        Plan {
            version: 0,
            source: Source::CommandLine,
            period_start_ms: 0,
            period: Duration::from_secs(60),
            profile: true,
            window: Duration::from_secs(60),
            events: events.iter().map(|&e| (e, frequency)).collect(),
            cgroups: Vec::new(),
            processes: Vec::new(),
            stack_bytes,
            max_cpu_percent,
            counting: None,
            reason: "command line".into(),
        }
    }

    /// Checks a server plan. Unknown events are dropped (a newer server may know more)
    /// and named in the returned warnings; a plan without a usable event samples
    /// cpu-clock.
    pub fn from_server(p: &c::Plan) -> (Plan, Vec<String>) {
        let mut warnings = Vec::new();
        let mut events: Vec<(EventKind, u64)> = Vec::new();
        for e in &p.events {
            match EventKind::parse(&e.event) {
                Ok(k) if !events.iter().any(|(x, _)| *x == k) => {
                    events.push((k, e.frequency_hz.clamp(1, 10_000)))
                }
                Ok(_) => {}
                Err(_) => warnings.push(format!("plan names unknown event {:?}: ignored", e.event)),
            }
        }
        if events.is_empty() {
            events.push((EventKind::CpuClock, 19));
        }
        let period = Duration::from_secs(u64::from(p.period_secs.clamp(1, 86_400)));
        let window = Duration::from_secs(u64::from(p.window_secs)).min(period);
        let stack_bytes = if p.stack_bytes.is_multiple_of(8) && p.stack_bytes <= 65_528 {
            p.stack_bytes
        } else {
            warnings.push(format!(
                "plan stack_bytes {} unusable: 16384 used",
                p.stack_bytes
            ));
            16 * 1024
        };
        let counting = p.counting.as_ref().and_then(|k| {
            let events: Vec<EventKind> = k
                .events
                .iter()
                .filter_map(|e| match EventKind::parse(e) {
                    Ok(x) => Some(x),
                    Err(_) => {
                        warnings.push(format!("counting: unknown event {e:?} ignored"));
                        None
                    }
                })
                .collect();
            (!events.is_empty()).then(|| CountingPlan {
                events,
                interval: Duration::from_secs(u64::from(k.interval_secs.max(1))),
                max_fds: (k.max_fds as usize).max(1),
                cgroups: k.cgroups.clone(),
            })
        });
        let max_cpu_percent = if p.max_cpu_percent.is_finite() && p.max_cpu_percent > 0.0 {
            p.max_cpu_percent
        } else {
            1.0
        };
        let plan = Plan {
            version: p.version,
            source: Source::Server,
            period_start_ms: p.period_start_ms,
            period,
            profile: p.profile && !window.is_zero(),
            window,
            events,
            cgroups: p.cgroups.clone(),
            processes: p.processes.clone(),
            stack_bytes,
            max_cpu_percent,
            counting,
            reason: p.reason.clone(),
        };
        (plan, warnings)
    }

    /// Start of the period containing `now_ms` (a plan repeats each period while the
    /// server cannot be reached).
    pub fn period_start_at(&self, now_ms: i64) -> i64 {
        let p = self.period.as_millis().max(1) as i64;
        now_ms - (now_ms - self.period_start_ms).rem_euclid(p)
    }

    /// What to sample at `now_ms`: the events while inside the period's window.
    pub fn sampling_at(&self, now_ms: i64) -> Option<Sampling> {
        if !self.profile {
            return None;
        }
        let into = now_ms - self.period_start_at(now_ms);
        (into < self.window.as_millis() as i64).then(|| Sampling {
            events: self.events.clone(),
            stack_bytes: self.stack_bytes,
        })
    }

    /// Whether a sample of process `comm` in cgroup `cgroup` is kept.
    pub fn keeps(&self, comm: &str, cgroup: Option<&str>) -> bool {
        (self.processes.is_empty() || self.processes.iter().any(|p| p == comm))
            && (self.cgroups.is_empty()
                || cgroup.is_some_and(|c| self.cgroups.iter().any(|p| under(c, p))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_plan() -> c::Plan {
        c::Plan {
            version: 7,
            period_start_ms: 60_000,
            period_secs: 60,
            profile: true,
            window_secs: 10,
            events: vec![
                c::EventPlan {
                    event: "cycles".into(),
                    frequency_hz: 99,
                },
                c::EventPlan {
                    event: "future-event".into(),
                    frequency_hz: 5,
                },
            ],
            stack_bytes: 8192,
            max_cpu_percent: 2.0,
            ..Default::default()
        }
    }

    #[test]
    fn windows_repeat_each_period() {
        let (p, warnings) = Plan::from_server(&server_plan());
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert_eq!(p.events, vec![(EventKind::Cycles, 99)]);
        assert!(p.sampling_at(60_000).is_some());
        assert!(p.sampling_at(69_999).is_some());
        assert!(p.sampling_at(70_000).is_none());
        assert!(p.sampling_at(125_000).is_some(), "next period, same plan");
        assert_eq!(p.period_start_at(125_000), 120_000);
        assert!(p.sampling_at(5_000).is_some(), "the period before");
        assert!(p.sampling_at(59_000).is_none());
    }

    #[test]
    fn filters_and_fallbacks() {
        let mut sp = server_plan();
        sp.events.clear();
        sp.stack_bytes = 7;
        sp.cgroups = vec!["/system.slice".into()];
        sp.processes = vec!["api".into()];
        let (p, w) = Plan::from_server(&sp);
        assert_eq!(p.events, vec![(EventKind::CpuClock, 19)]);
        assert_eq!(p.stack_bytes, 16384);
        assert_eq!(w.len(), 1);
        assert!(p.keeps("api", Some("/system.slice/api.service")));
        assert!(!p.keeps("api", Some("/user.slice")));
        assert!(!p.keeps("db", Some("/system.slice/db.service")));
        assert!(!p.keeps("api", None));
        let cli = Plan::command_line(&[EventKind::CpuClock], 19, 0, 1.0);
        assert!(cli.keeps("x", None));
        assert!(cli.sampling_at(123_456_789).is_some());
    }
}
