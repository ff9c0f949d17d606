//! Turning a policy, the overrides and what agents reported into one agent's plan.
//!
//! Everything here is a pure function of its inputs (the seed, the period, the host),
//! so a test can tell exactly which machines are chosen, and two servers with the same
//! seed choose the same machines.

use profiledb_proto::control::v1 as c;
use prost::Message;

use super::overrides::Override;
use super::policy::{EventSpec, Policy};

/// What the planner knows of the asking agent.
#[derive(Clone, Debug)]
pub struct AgentFacts<'a> {
    pub host: &'a str,
    /// The agent's declared service.
    pub service: Option<&'a str>,
    /// Services it reported samples for (used for sample targets when it declares none).
    pub services_seen: &'a [String],
    /// Events it can open; empty: not reported (assume all).
    pub available_events: &'a [String],
}

/// The fleet-wide inputs of one decision.
#[derive(Clone, Copy, Debug)]
pub struct Moment<'a> {
    pub tenant: &'a str,
    pub seed: u64,
    pub now_ms: i64,
}

impl Moment<'_> {
    pub fn period_ms(&self, policy: &Policy) -> i64 {
        i64::from(policy.period_secs) * 1000
    }

    pub fn period_index(&self, policy: &Policy) -> i64 {
        self.now_ms.div_euclid(self.period_ms(policy))
    }
}

/// FNV-1a over the parts, then a SplitMix64 finaliser: stable across builds and
/// platforms (unlike `std`'s hasher), and well spread for consecutive periods.
fn stable_hash(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// A host's draw for a period, uniform in [0, 1).
pub fn score(m: &Moment<'_>, period: i64, host: &str) -> f64 {
    let h = stable_hash(&[
        &m.seed.to_le_bytes(),
        m.tenant.as_bytes(),
        &period.to_le_bytes(),
        host.as_bytes(),
    ]);
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// Under a fleet budget of `max` machines: the highest draw still chosen this period,
/// among `fleet` (host, service) of live agents whose draw is under their fraction.
/// `None`: no budget, or fewer candidates than the budget.
pub fn budget_threshold(
    policy: &Policy,
    m: &Moment<'_>,
    fleet: &[(String, Option<String>)],
) -> Option<(f64, String)> {
    let max = policy.max_machines?;
    let period = m.period_index(policy);
    let mut chosen: Vec<(f64, &str)> = fleet
        .iter()
        .filter_map(|(host, service)| {
            let s = score(m, period, host);
            (s < policy.effective(service.as_deref()).machine_fraction)
                .then_some((s, host.as_str()))
        })
        .collect();
    if chosen.len() <= max {
        return None;
    }
    chosen.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(b.1)));
    chosen.get(max - 1).map(|(s, h)| (*s, h.to_string()))
}

/// Hz an event needs for a service to reach its target, from the fleet's samples per
/// hour per Hz for that service.
pub fn target_hz(samples_per_hour: u64, rate_per_hz: f64, min_hz: u64, max_hz: u64) -> u64 {
    if rate_per_hz <= 0.0 || !rate_per_hz.is_finite() {
        return max_hz;
    }
    let hz = (samples_per_hour as f64 / rate_per_hz).round();
    (hz.max(0.0) as u64).clamp(min_hz, max_hz)
}

/// One agent's plan for the period containing `m.now_ms`.
///
/// `threshold` is [`budget_threshold`] for this period (computed once per period by
/// the caller); `rate` gives a service's samples per hour per Hz when known.
pub fn plan(
    policy: &Policy,
    overrides: &[Override],
    threshold: Option<&(f64, String)>,
    rate: &dyn Fn(&str) -> Option<f64>,
    agent: &AgentFacts<'_>,
    m: &Moment<'_>,
) -> c::Plan {
    let eff = policy.effective(agent.service);
    let period = m.period_index(policy);
    let period_ms = m.period_ms(policy);
    let mut notes: Vec<String> = Vec::new();

    let draw = score(m, period, agent.host);
    let mut profile = draw < eff.machine_fraction;
    if !profile {
        notes.push(format!(
            "not chosen this period (machine fraction {})",
            eff.machine_fraction
        ));
    } else if let Some((t, t_host)) = threshold {
        if (draw, agent.host) > (*t, t_host.as_str()) {
            profile = false;
            notes.push(format!(
                "chosen but over the fleet budget of {} machines",
                policy.max_machines.unwrap_or_default()
            ));
        }
    }
    if profile {
        notes.push(if eff.machine_fraction >= 1.0 {
            "every machine profiles".to_string()
        } else {
            format!(
                "chosen by machine sampling (fraction {})",
                eff.machine_fraction
            )
        });
    }
    let mut window_secs = eff.window_secs;
    let mut events = eff.events.clone();

    if let Some(target) = &eff.sample_target {
        let services: Vec<&str> = match agent.service {
            Some(s) => vec![s],
            None => agent.services_seen.iter().map(String::as_str).collect(),
        };
        let needed = services
            .iter()
            .filter_map(|s| {
                rate(s).map(|r| {
                    (
                        s,
                        target_hz(target.samples_per_hour, r, target.min_hz, target.max_hz),
                    )
                })
            })
            .max_by_key(|(_, hz)| *hz);
        match needed {
            Some((s, hz)) => {
                for e in &mut events {
                    e.frequency_hz = hz;
                }
                notes.push(format!(
                    "{hz} Hz for {} samples/hour of {s}",
                    target.samples_per_hour
                ));
            }
            None => notes.push("sample target: no samples seen yet".into()),
        }
    }

    let mut active: Vec<&Override> = overrides
        .iter()
        .filter(|o| o.active(m.now_ms) && o.matches(agent.host, agent.service))
        .collect();
    active.sort_by_key(|o| o.id);
    for o in active {
        notes.push(o.describe());
        if !o.spec.profile {
            profile = false;
            continue;
        }
        profile = true;
        window_secs = policy.period_secs;
        let base_hz = events.first().map_or(19, |e| e.frequency_hz);
        match (&o.spec.event, o.spec.frequency_hz) {
            (Some(ev), hz) => match events.iter_mut().find(|e| &e.event == ev) {
                Some(e) => e.frequency_hz = hz.unwrap_or(e.frequency_hz),
                None => events.push(EventSpec {
                    event: ev.clone(),
                    frequency_hz: hz.unwrap_or(base_hz),
                }),
            },
            (None, Some(hz)) => events.iter_mut().for_each(|e| e.frequency_hz = hz),
            (None, None) => {}
        }
    }

    if !agent.available_events.is_empty() {
        let before = events.len();
        let fallback_hz = events.first().map_or(19, |e| e.frequency_hz);
        let missing: Vec<String> = events
            .iter()
            .filter(|e| !agent.available_events.contains(&e.event))
            .map(|e| e.event.clone())
            .collect();
        events.retain(|e| agent.available_events.contains(&e.event));
        if events.len() < before {
            notes.push(format!(
                "not available on this host: {}",
                missing.join(", ")
            ));
        }
        if events.is_empty() {
            events.push(EventSpec {
                event: "cpu-clock".into(),
                frequency_hz: fallback_hz,
            });
        }
    }

    let mut p = c::Plan {
        version: 0,
        period_start_ms: period * period_ms,
        period_secs: policy.period_secs,
        profile,
        window_secs: if profile { window_secs } else { 0 },
        events: events
            .into_iter()
            .map(|e| c::EventPlan {
                event: e.event,
                frequency_hz: e.frequency_hz,
            })
            .collect(),
        cgroups: eff.cgroups,
        processes: eff.processes,
        stack_bytes: policy.stack_bytes,
        max_cpu_percent: eff.max_cpu_percent,
        counting: policy.counting.as_ref().map(|k| c::CountingPlan {
            events: k.events.clone(),
            interval_secs: k.interval_secs,
            max_fds: k.max_fds,
            cgroups: k.cgroups.clone(),
        }),
        reason: String::new(),
    };
    p.version = version_of(&p);
    p.reason = notes.join("; ");
    p
}

/// A plan's version: a hash of everything an agent acts on (not the period start or
/// the reason), never 0 (0 means "no plan").
pub fn version_of(p: &c::Plan) -> u64 {
    let body = c::Plan {
        version: 0,
        period_start_ms: 0,
        reason: String::new(),
        ..p.clone()
    }
    .encode_to_vec();
    stable_hash(&[&body]).max(1)
}

#[cfg(test)]
mod tests {
    use super::super::overrides::OverrideSpec;
    use super::super::policy::SampleTarget;
    use super::*;

    fn facts(host: &str) -> AgentFacts<'_> {
        AgentFacts {
            host,
            service: None,
            services_seen: &[],
            available_events: &[],
        }
    }

    fn moment(now_ms: i64) -> Moment<'static> {
        Moment {
            tenant: "t",
            seed: 42,
            now_ms,
        }
    }

    fn no_rate(_: &str) -> Option<f64> {
        None
    }

    #[test]
    fn machine_sampling_chooses_about_the_fraction_and_is_seeded() {
        let policy = Policy {
            machine_fraction: 0.1,
            ..Default::default()
        };
        let hosts: Vec<String> = (0..2000).map(|i| format!("host-{i}")).collect();
        let chosen = |seed: u64, now: i64| -> Vec<&str> {
            let m = Moment {
                seed,
                ..moment(now)
            };
            hosts
                .iter()
                .filter(|h| plan(&policy, &[], None, &no_rate, &facts(h), &m).profile)
                .map(String::as_str)
                .collect()
        };
        let a = chosen(42, 0);
        // 10 % of 2000, binomial sd ≈ 13.4: within 4 sd.
        assert!((146..=254).contains(&a.len()), "{}", a.len());
        assert_eq!(a, chosen(42, 59_999), "same period, same machines");
        assert_ne!(a, chosen(42, 60_000), "next period, other machines");
        assert_ne!(a, chosen(7, 0), "another seed, other machines");
    }

    #[test]
    fn fleet_budget_caps_the_machines_profiling() {
        let policy = Policy {
            machine_fraction: 0.5,
            max_machines: Some(10),
            ..Default::default()
        };
        let fleet: Vec<(String, Option<String>)> =
            (0..100).map(|i| (format!("h{i}"), None)).collect();
        let m = moment(0);
        let t = budget_threshold(&policy, &m, &fleet).expect("more candidates than budget");
        let n = fleet
            .iter()
            .filter(|(h, _)| plan(&policy, &[], Some(&t), &no_rate, &facts(h), &m).profile)
            .count();
        assert_eq!(n, 10);
    }

    #[test]
    fn sample_target_raises_and_lowers_frequency() {
        assert_eq!(target_hz(36_000, 3600.0, 1, 99), 10);
        assert_eq!(target_hz(36_000, 100.0, 1, 99), 99, "clamped to max");
        assert_eq!(target_hz(36, 3600.0, 1, 99), 1, "clamped to min");
        let policy = Policy {
            sample_target: Some(SampleTarget {
                samples_per_hour: 36_000,
                min_hz: 1,
                max_hz: 99,
            }),
            ..Default::default()
        };
        let seen = vec!["api".to_string()];
        let agent = AgentFacts {
            services_seen: &seen,
            ..facts("h")
        };
        let rare = |_: &str| Some(720.0);
        let hot = |_: &str| Some(7200.0);
        let p = plan(&policy, &[], None, &rare, &agent, &moment(0));
        assert_eq!(p.events[0].frequency_hz, 50, "rarely seen: raised from 19");
        let p = plan(&policy, &[], None, &hot, &agent, &moment(0));
        assert_eq!(p.events[0].frequency_hz, 5, "hot: lowered from 19");
    }

    #[test]
    fn overrides_win_then_expire() {
        let policy = Policy {
            machine_fraction: 0.0,
            ..Default::default()
        };
        let o = Override {
            id: 1,
            created_ms: 0,
            spec: OverrideSpec {
                host: Some("h".into()),
                service: None,
                event: Some("cycles".into()),
                frequency_hz: Some(99),
                profile: true,
                until_ms: 120_000,
                reason: None,
            },
        };
        let p = plan(
            &policy,
            std::slice::from_ref(&o),
            None,
            &no_rate,
            &facts("h"),
            &moment(1000),
        );
        assert!(p.profile);
        assert_eq!(p.window_secs, 60);
        assert_eq!(
            p.events
                .iter()
                .map(|e| (e.event.as_str(), e.frequency_hz))
                .collect::<Vec<_>>(),
            vec![("cpu-clock", 19), ("cycles", 99)]
        );
        assert!(p.reason.contains("override 1"), "{}", p.reason);
        let other = plan(
            &policy,
            std::slice::from_ref(&o),
            None,
            &no_rate,
            &facts("g"),
            &moment(1000),
        );
        assert!(!other.profile);
        let later = plan(&policy, &[o], None, &no_rate, &facts("h"), &moment(120_000));
        assert!(!later.profile, "expired");
        assert_ne!(p.version, later.version);
    }

    #[test]
    fn unavailable_events_fall_back_to_cpu_clock() {
        let policy = Policy {
            events: vec![EventSpec {
                event: "cycles".into(),
                frequency_hz: 49,
            }],
            ..Default::default()
        };
        let avail = vec!["cpu-clock".to_string()];
        let agent = AgentFacts {
            available_events: &avail,
            ..facts("h")
        };
        let p = plan(&policy, &[], None, &no_rate, &agent, &moment(0));
        assert_eq!(p.events.len(), 1);
        assert_eq!(p.events[0].event, "cpu-clock");
        assert_eq!(p.events[0].frequency_hz, 49);
        assert!(p.reason.contains("not available on this host: cycles"));
    }

    #[test]
    fn version_ignores_period_start_and_reason() {
        let a = plan(
            &Policy::default(),
            &[],
            None,
            &no_rate,
            &facts("h"),
            &moment(0),
        );
        let b = plan(
            &Policy::default(),
            &[],
            None,
            &no_rate,
            &facts("h"),
            &moment(600_000),
        );
        assert_ne!(a.period_start_ms, b.period_start_ms);
        assert_eq!(a.version, b.version);
        assert_ne!(a.version, 0);
    }
}
