//! The agents the controller has heard from, and the samples each service sent.
//!
//! One entry per (tenant, host): a host runs one agent, and a restarted agent (new
//! `agent_id`) replaces its predecessor's entry instead of leaving a silent ghost.
//! Reports are totals since the agent started; the registry keeps the previous one
//! to take differences, so a lost report loses nothing.

use std::collections::{BTreeMap, HashMap, VecDeque};

use profiledb_proto::control::v1 as c;

/// An hour of per-service sample history drives the sample targets.
const RATE_WINDOW_MS: i64 = 3600 * 1000;
/// Report differences kept per service (oldest dropped beyond).
const MAX_RATE_POINTS: usize = 4096;
/// Errors kept per agent.
const MAX_ERRORS: usize = 8;

/// What is known of one agent.
#[derive(Clone, Debug)]
pub struct AgentEntry {
    pub agent_id: String,
    pub host: String,
    pub service: Option<String>,
    pub platform: String,
    pub available_events: Vec<String>,
    pub first_seen_ms: i64,
    pub last_contact_ms: i64,
    pub report: c::AgentReport,
    /// The plan last sent.
    pub plan: c::Plan,
    /// Services seen in the latest report, most samples first.
    pub services_seen: Vec<String>,
}

impl AgentEntry {
    /// Whether the agent missed its check-ins for `periods` periods of its plan.
    pub fn silent(&self, now_ms: i64, periods: u32) -> bool {
        let period_ms = i64::from(self.plan.period_secs.max(1)) * 1000;
        now_ms - self.last_contact_ms > period_ms * i64::from(periods.max(1))
    }
}

/// One report difference of a service: samples divided by the Hz they were taken at.
#[derive(Clone, Copy, Debug)]
struct RatePoint {
    from_ms: i64,
    to_ms: i64,
    samples_per_hz: f64,
}

/// The registry of one tenant.
#[derive(Debug, Default)]
pub struct TenantAgents {
    pub agents: HashMap<String, AgentEntry>,
    rates: HashMap<String, VecDeque<RatePoint>>,
}

/// Why a check-in was not taken.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    Full { max: usize },
}

impl TenantAgents {
    /// Records a check-in: the report's differences feed the service rates, then
    /// the entry is replaced. Returns the entry, with the new plan still to be set.
    pub fn check_in(
        &mut self,
        req: &c::GetPlanRequest,
        now_ms: i64,
        room: bool,
        max: usize,
    ) -> Result<&mut AgentEntry, Refusal> {
        let report = req.report.clone().unwrap_or_default();
        let prev = self.agents.get(&req.host);
        if prev.is_none() && !room {
            return Err(Refusal::Full { max });
        }
        let first_seen_ms = match prev {
            Some(p) if p.agent_id == req.agent_id => {
                add_rates(&mut self.rates, p, &report, now_ms);
                p.first_seen_ms
            }
            _ => now_ms,
        };
        let mut services: Vec<&c::ServiceSamples> = report.services.iter().collect();
        services.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.service.cmp(&b.service)));
        let services_seen = services
            .iter()
            .take(16)
            .map(|s| s.service.clone())
            .collect();
        let mut report = report;
        let keep_from = report.errors.len().saturating_sub(MAX_ERRORS);
        report.errors.drain(..keep_from);
        let plan = prev.map(|p| p.plan.clone()).unwrap_or_default();
        let entry = AgentEntry {
            agent_id: req.agent_id.clone(),
            host: req.host.clone(),
            service: Some(req.service.clone()).filter(|s| !s.is_empty()),
            platform: req.platform.clone(),
            available_events: req.available_events.clone(),
            first_seen_ms,
            last_contact_ms: now_ms,
            report,
            plan,
            services_seen,
        };
        self.agents.insert(req.host.clone(), entry);
        self.agents.get_mut(&req.host).ok_or(Refusal::Full { max })
    }

    /// A service's samples per hour per Hz over the last hour, all its agents
    /// together; `None` before any report difference.
    pub fn rate_per_hz(&self, service: &str, now_ms: i64) -> Option<f64> {
        let points = self.rates.get(service)?;
        let from = now_ms - RATE_WINDOW_MS;
        let live: Vec<&RatePoint> = points.iter().filter(|p| p.to_ms > from).collect();
        let start = live.iter().map(|p| p.from_ms.max(from)).min()?;
        let end = live.iter().map(|p| p.to_ms).max()?;
        let covered = (end - start).max(1) as f64;
        let total: f64 = live.iter().map(|p| p.samples_per_hz).sum();
        Some(total * RATE_WINDOW_MS as f64 / covered)
    }

    /// Drops rate points older than the window and agents silent for a day.
    pub fn prune(&mut self, now_ms: i64) {
        let from = now_ms - RATE_WINDOW_MS;
        self.rates.retain(|_, p| {
            while p.front().is_some_and(|x| x.to_ms <= from) {
                p.pop_front();
            }
            !p.is_empty()
        });
        self.agents
            .retain(|_, a| now_ms - a.last_contact_ms < 24 * 3600 * 1000);
    }

    /// (host, service) of agents not silent, for the fleet budget.
    pub fn live_fleet(&self, now_ms: i64, periods: u32) -> Vec<(String, Option<String>)> {
        let mut v: Vec<(String, Option<String>)> = self
            .agents
            .values()
            .filter(|a| !a.silent(now_ms, periods))
            .map(|a| (a.host.clone(), a.service.clone()))
            .collect();
        v.sort();
        v
    }
}

/// Adds what an agent sampled since its previous report, per service, divided by the
/// Hz of the plan it followed (a window without sampling adds nothing).
fn add_rates(
    rates: &mut HashMap<String, VecDeque<RatePoint>>,
    prev: &AgentEntry,
    report: &c::AgentReport,
    now_ms: i64,
) {
    let hz = match prev.plan.events.first() {
        Some(e) if prev.plan.profile && e.frequency_hz > 0 => e.frequency_hz as f64,
        _ => return,
    };
    let before: BTreeMap<&str, u64> = prev
        .report
        .services
        .iter()
        .map(|s| (s.service.as_str(), s.samples))
        .collect();
    for s in &report.services {
        let was = before.get(s.service.as_str()).copied().unwrap_or(0);
        let delta = s.samples.saturating_sub(was);
        let points = rates.entry(s.service.clone()).or_default();
        if points.len() >= MAX_RATE_POINTS {
            points.pop_front();
        }
        points.push_back(RatePoint {
            from_ms: prev.last_contact_ms,
            to_ms: now_ms,
            samples_per_hz: delta as f64 / hz,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(host: &str, id: &str, samples: u64) -> c::GetPlanRequest {
        c::GetPlanRequest {
            agent_id: id.into(),
            host: host.into(),
            report: Some(c::AgentReport {
                samples,
                services: vec![c::ServiceSamples {
                    service: "api".into(),
                    samples,
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn sampled_at(hz: u64) -> c::Plan {
        c::Plan {
            profile: true,
            period_secs: 60,
            events: vec![c::EventPlan {
                event: "cpu-clock".into(),
                frequency_hz: hz,
            }],
            ..Default::default()
        }
    }

    #[test]
    fn rates_are_differences_divided_by_the_planned_hz() {
        let mut t = TenantAgents::default();
        t.check_in(&req("h", "a", 0), 0, true, 10)
            .expect("room")
            .plan = sampled_at(19);
        assert_eq!(t.rate_per_hz("api", 0), None);
        // 1900 samples in 100 s at 19 Hz: 100 per Hz per 100 s = 3600 per Hz per hour.
        t.check_in(&req("h", "a", 1900), 100_000, true, 10)
            .expect("room");
        let r = t.rate_per_hz("api", 100_000).expect("rate");
        assert!((r - 3600.0).abs() < 1e-6, "{r}");
    }

    #[test]
    fn a_restarted_agent_replaces_its_entry_and_resets_totals() {
        let mut t = TenantAgents::default();
        t.check_in(&req("h", "a", 5000), 0, true, 10)
            .expect("room")
            .plan = sampled_at(19);
        t.check_in(&req("h", "b", 10), 60_000, true, 10)
            .expect("room");
        assert_eq!(t.agents.len(), 1);
        assert_eq!(t.agents["h"].agent_id, "b");
        assert_eq!(
            t.rate_per_hz("api", 60_000),
            None,
            "no difference across a restart"
        );
    }

    #[test]
    fn full_registry_refuses_new_hosts_only() {
        let mut t = TenantAgents::default();
        t.check_in(&req("h", "a", 0), 0, true, 1).expect("room");
        assert_eq!(
            t.check_in(&req("g", "b", 0), 0, false, 1).err(),
            Some(Refusal::Full { max: 1 })
        );
        assert!(t.check_in(&req("h", "a", 1), 1, false, 1).is_ok());
    }

    #[test]
    fn silence_is_measured_in_periods() {
        let mut t = TenantAgents::default();
        t.check_in(&req("h", "a", 0), 0, true, 10)
            .expect("room")
            .plan = sampled_at(19);
        let a = &t.agents["h"];
        assert!(!a.silent(180_000, 3));
        assert!(a.silent(180_001, 3));
    }
}
