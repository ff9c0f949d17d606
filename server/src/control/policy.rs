//! What a tenant asks of its fleet: which machines sample, which events, how often.
//!
//! A [`Policy`] is set per tenant through `PUT /api/v1/admin/agents/policy`, with
//! optional per-service parts that replace the tenant's values for agents of that
//! service. The default policy is what an agent without a controller does today:
//! every machine, all the time, cpu-clock at 19 Hz.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ControlError;

/// Events an agent knows how to open.
pub const EVENTS: &[&str] = &[
    "cpu-clock",
    "cycles",
    "instructions",
    "cache-references",
    "cache-misses",
    "branch-instructions",
    "branch-misses",
];

/// Highest sampling frequency a plan may ask for, per CPU.
pub const MAX_HZ: u64 = 10_000;
/// Shortest and longest period an agent may be asked to check in at.
pub const MIN_PERIOD_SECS: u32 = 1;
pub const MAX_PERIOD_SECS: u32 = 24 * 3600;

/// One event at a sampling frequency.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventSpec {
    pub event: String,
    pub frequency_hz: u64,
}

/// Per-cgroup counting every `interval_secs`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CountingSpec {
    pub events: Vec<String>,
    #[serde(default = "default_counting_interval")]
    pub interval_secs: u32,
    /// perf fds the counters may hold on one machine.
    #[serde(default = "default_counting_fds")]
    pub max_fds: u32,
    /// Only cgroups under these paths; empty: all.
    #[serde(default)]
    pub cgroups: Vec<String>,
}

fn default_counting_interval() -> u32 {
    300
}

fn default_counting_fds() -> u32 {
    256
}

/// GWP's per-service sample target: frequencies are set so that the service's
/// agents together send about `samples_per_hour`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SampleTarget {
    pub samples_per_hour: u64,
    #[serde(default = "default_min_hz")]
    pub min_hz: u64,
    #[serde(default = "default_max_hz")]
    pub max_hz: u64,
}

fn default_min_hz() -> u64 {
    1
}

fn default_max_hz() -> u64 {
    99
}

/// The values a service may replace; absent fields keep the tenant's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServicePolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_fraction: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_secs: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<EventSpec>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_target: Option<SampleTarget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroups: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cpu_percent: Option<f64>,
}

/// A tenant's sampling policy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Policy {
    /// Agents check in (and plans change) once per period.
    pub period_secs: u32,
    /// GWP machine sampling: the fraction of machines profiled in each period.
    pub machine_fraction: f64,
    /// Fleet-wide budget: at most this many machines profile in one period.
    pub max_machines: Option<usize>,
    /// A selected machine samples this long from the start of the period.
    pub window_secs: u32,
    pub events: Vec<EventSpec>,
    pub sample_target: Option<SampleTarget>,
    /// Process names (comm) to keep; empty: all.
    pub processes: Vec<String>,
    /// cgroup path prefixes to keep; empty: all.
    pub cgroups: Vec<String>,
    pub stack_bytes: u32,
    /// Per-machine overhead budget, % of one CPU.
    pub max_cpu_percent: f64,
    pub counting: Option<CountingSpec>,
    /// An agent silent for this many periods is shown as silent.
    pub silent_after_periods: u32,
    pub services: BTreeMap<String, ServicePolicy>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            period_secs: 60,
            machine_fraction: 1.0,
            max_machines: None,
            window_secs: 60,
            events: vec![EventSpec {
                event: "cpu-clock".into(),
                frequency_hz: 19,
            }],
            sample_target: None,
            processes: Vec::new(),
            cgroups: Vec::new(),
            stack_bytes: 16 * 1024,
            max_cpu_percent: 1.0,
            counting: None,
            silent_after_periods: 3,
            services: BTreeMap::new(),
        }
    }
}

/// A policy with a service's parts applied: what the planner reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Effective {
    pub machine_fraction: f64,
    pub window_secs: u32,
    pub events: Vec<EventSpec>,
    pub sample_target: Option<SampleTarget>,
    pub processes: Vec<String>,
    pub cgroups: Vec<String>,
    pub max_cpu_percent: f64,
}

impl Policy {
    /// The policy for an agent of `service` (the tenant's when it has no part).
    pub fn effective(&self, service: Option<&str>) -> Effective {
        let s = service.and_then(|s| self.services.get(s));
        let pick = |f: fn(&ServicePolicy) -> Option<f64>, d: f64| s.and_then(f).unwrap_or(d);
        Effective {
            machine_fraction: pick(|s| s.machine_fraction, self.machine_fraction),
            window_secs: s
                .and_then(|s| s.window_secs)
                .unwrap_or(self.window_secs)
                .min(self.period_secs),
            events: s
                .and_then(|s| s.events.clone())
                .unwrap_or_else(|| self.events.clone()),
            sample_target: s
                .and_then(|s| s.sample_target.clone())
                .or_else(|| self.sample_target.clone()),
            processes: s
                .and_then(|s| s.processes.clone())
                .unwrap_or_else(|| self.processes.clone()),
            cgroups: s
                .and_then(|s| s.cgroups.clone())
                .unwrap_or_else(|| self.cgroups.clone()),
            max_cpu_percent: pick(|s| s.max_cpu_percent, self.max_cpu_percent),
        }
    }

    /// Refuses a policy an agent could not follow, naming the field.
    pub fn validate(&self) -> Result<(), ControlError> {
        let bad = |m: String| Err(ControlError::Invalid(m));
        if !(MIN_PERIOD_SECS..=MAX_PERIOD_SECS).contains(&self.period_secs) {
            return bad(format!(
                "period_secs must be between {MIN_PERIOD_SECS} and {MAX_PERIOD_SECS}, got {}",
                self.period_secs
            ));
        }
        if self.window_secs == 0 || self.window_secs > self.period_secs {
            return bad(format!(
                "window_secs must be between 1 and period_secs ({}), got {}",
                self.period_secs, self.window_secs
            ));
        }
        if !self.stack_bytes.is_multiple_of(8) || self.stack_bytes > 65_528 {
            return bad("stack_bytes must be a multiple of 8 and at most 65528".into());
        }
        if self.silent_after_periods == 0 {
            return bad("silent_after_periods must be at least 1".into());
        }
        check_fraction("machine_fraction", self.machine_fraction)?;
        check_budget("max_cpu_percent", self.max_cpu_percent)?;
        check_events("events", &self.events)?;
        if let Some(t) = &self.sample_target {
            check_target("sample_target", t)?;
        }
        if let Some(c) = &self.counting {
            if c.events.is_empty() {
                return bad("counting.events must name at least one event".into());
            }
            for e in &c.events {
                check_event_name("counting.events", e)?;
            }
            if c.interval_secs == 0 {
                return bad("counting.interval_secs must be at least 1".into());
            }
            if c.max_fds == 0 {
                return bad("counting.max_fds must be at least 1".into());
            }
        }
        if self.max_machines == Some(0) {
            return bad("max_machines must be at least 1 (or absent: no budget)".into());
        }
        for (name, s) in &self.services {
            if name.is_empty() {
                return bad("services: a service name is empty".into());
            }
            let at = |f: &str| format!("services.{name}.{f}");
            if let Some(f) = s.machine_fraction {
                check_fraction(&at("machine_fraction"), f)?;
            }
            if let Some(w) = s.window_secs {
                if w == 0 {
                    return bad(format!("{} must be at least 1", at("window_secs")));
                }
            }
            if let Some(e) = &s.events {
                check_events(&at("events"), e)?;
            }
            if let Some(t) = &s.sample_target {
                check_target(&at("sample_target"), t)?;
            }
            if let Some(b) = s.max_cpu_percent {
                check_budget(&at("max_cpu_percent"), b)?;
            }
        }
        Ok(())
    }
}

fn check_fraction(field: &str, f: f64) -> Result<(), ControlError> {
    if (0.0..=1.0).contains(&f) {
        Ok(())
    } else {
        Err(ControlError::Invalid(format!(
            "{field} must be between 0 and 1, got {f}"
        )))
    }
}

fn check_budget(field: &str, b: f64) -> Result<(), ControlError> {
    if b.is_finite() && b > 0.0 && b <= 100.0 {
        Ok(())
    } else {
        Err(ControlError::Invalid(format!(
            "{field} must be above 0 and at most 100 (% of one CPU), got {b}"
        )))
    }
}

pub(crate) fn check_event_name(field: &str, e: &str) -> Result<(), ControlError> {
    if EVENTS.contains(&e) {
        Ok(())
    } else {
        Err(ControlError::Invalid(format!(
            "{field}: unknown event {e:?}; known: {}",
            EVENTS.join(", ")
        )))
    }
}

pub(crate) fn check_hz(field: &str, hz: u64) -> Result<(), ControlError> {
    if (1..=MAX_HZ).contains(&hz) {
        Ok(())
    } else {
        Err(ControlError::Invalid(format!(
            "{field}: frequency_hz must be between 1 and {MAX_HZ}, got {hz}"
        )))
    }
}

fn check_events(field: &str, events: &[EventSpec]) -> Result<(), ControlError> {
    if events.is_empty() {
        return Err(ControlError::Invalid(format!(
            "{field} must name at least one event"
        )));
    }
    for (i, e) in events.iter().enumerate() {
        check_event_name(field, &e.event)?;
        check_hz(field, e.frequency_hz)?;
        if events[..i].iter().any(|o| o.event == e.event) {
            return Err(ControlError::Invalid(format!(
                "{field}: event {:?} is listed twice",
                e.event
            )));
        }
    }
    Ok(())
}

fn check_target(field: &str, t: &SampleTarget) -> Result<(), ControlError> {
    if t.samples_per_hour == 0 {
        return Err(ControlError::Invalid(format!(
            "{field}.samples_per_hour must be at least 1"
        )));
    }
    check_hz(&format!("{field}.min_hz"), t.min_hz)?;
    check_hz(&format!("{field}.max_hz"), t.max_hz)?;
    if t.min_hz > t.max_hz {
        return Err(ControlError::Invalid(format!(
            "{field}: min_hz {} is above max_hz {}",
            t.min_hz, t.max_hz
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_policy_is_valid_and_service_parts_replace_fields() {
        let mut p = Policy::default();
        p.validate().expect("default is valid");
        p.services.insert(
            "api".into(),
            ServicePolicy {
                machine_fraction: Some(0.5),
                window_secs: Some(600),
                ..Default::default()
            },
        );
        let e = p.effective(Some("api"));
        assert_eq!(e.machine_fraction, 0.5);
        assert_eq!(e.window_secs, 60, "a window never outlasts the period");
        assert_eq!(p.effective(Some("other")).machine_fraction, 1.0);
        assert_eq!(p.effective(None).events, Policy::default().events);
    }

    #[test]
    fn invalid_policies_name_the_field() {
        let cases: Vec<(Policy, &str)> = vec![
            (
                Policy {
                    machine_fraction: 1.5,
                    ..Default::default()
                },
                "machine_fraction",
            ),
            (
                Policy {
                    window_secs: 120,
                    ..Default::default()
                },
                "window_secs",
            ),
            (
                Policy {
                    events: vec![EventSpec {
                        event: "bogus".into(),
                        frequency_hz: 19,
                    }],
                    ..Default::default()
                },
                "unknown event",
            ),
            (
                Policy {
                    events: vec![],
                    ..Default::default()
                },
                "at least one event",
            ),
            (
                Policy {
                    sample_target: Some(SampleTarget {
                        samples_per_hour: 10,
                        min_hz: 50,
                        max_hz: 10,
                    }),
                    ..Default::default()
                },
                "min_hz",
            ),
        ];
        for (p, want) in cases {
            let err = p.validate().expect_err("invalid").to_string();
            assert!(err.contains(want), "{err} lacks {want}");
        }
    }
}
