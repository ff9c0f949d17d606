//! The fleet controller: agents ask it what to sample, and it answers with a plan.
//!
//! GWP's model: a central controller picks a random subset of machines each period
//! and profiles each for a window, so the fleet's overhead stays negligible while
//! every service is still seen. Here that is:
//! - [`policy`]: what a tenant asks of its fleet (fraction, budget, events, targets);
//! - [`overrides`]: an engineer's "profile this host/service/event until then";
//! - [`planner`]: the pure decision, seeded, so tests can tell which machines run;
//! - [`registry`]: the agents heard from, their reports and the per-service rates.
//!
//! Policies and overrides are saved in `<data-dir>/control.json` (written whole, then
//! renamed); the registry is memory only: agents check in every period, so it is
//! whole again one period after a restart.

pub mod overrides;
pub mod planner;
pub mod policy;
pub mod registry;

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use profiledb_proto::control::v1 as c;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use overrides::{Override, OverrideSpec};
use planner::{AgentFacts, Moment};
use policy::{EventSpec, Policy};
use registry::{AgentEntry, Refusal, TenantAgents};

/// File holding policies and overrides, in the data directory.
pub const STATE_FILE: &str = "control.json";

/// Failures a caller handles differently.
#[derive(Debug, Error)]
pub enum ControlError {
    #[error("{0}")]
    Invalid(String),
    #[error("no override {0} for this tenant")]
    NotFound(u64),
    #[error("the agent registry holds {max} agents (--control-max-agents): a new host is refused until one goes silent for a day")]
    Full { max: usize },
    #[error("cannot save {path}: {source}")]
    Save {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a valid controller state ({source}); move it aside to start from the default policy")]
    Corrupt {
        path: PathBuf,
        source: serde_json::Error,
    },
}

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct ControlOptions {
    /// Seed of machine sampling: the same seed chooses the same machines.
    pub seed: u64,
    /// Agents (hosts) remembered across all tenants.
    pub max_agents: usize,
}

impl Default for ControlOptions {
    fn default() -> Self {
        ControlOptions {
            seed: 0,
            max_agents: 100_000,
        }
    }
}

/// What `control.json` holds.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Saved {
    #[serde(default)]
    policies: BTreeMap<String, Policy>,
    #[serde(default)]
    overrides: BTreeMap<String, Vec<Override>>,
    #[serde(default)]
    next_override_id: u64,
}

/// The fleet budget's threshold of one tenant, for one period and fleet size.
type BudgetCache = (i64, usize, Option<(f64, String)>);

#[derive(Default)]
struct Inner {
    saved: Saved,
    tenants: HashMap<String, TenantAgents>,
    budget: HashMap<String, BudgetCache>,
    plans_served: u64,
    last_prune_ms: i64,
}

/// The controller of one server process.
pub struct Controller {
    options: ControlOptions,
    path: PathBuf,
    inner: Mutex<Inner>,
}

/// Gauges for `/metrics`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ControlMetrics {
    pub agents: u64,
    pub silent: u64,
    pub profiling: u64,
    pub overrides: u64,
    pub plans_served: u64,
}

impl Controller {
    /// Opens the controller state in `dir` (defaults when there is none yet).
    pub fn open(dir: &Path, options: ControlOptions) -> Result<Controller, ControlError> {
        let path = dir.join(STATE_FILE);
        let saved = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|source| ControlError::Corrupt {
                path: path.clone(),
                source,
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Saved::default(),
            Err(source) => return Err(ControlError::Read { path, source }),
        };
        Ok(Controller {
            options,
            path,
            inner: Mutex::new(Inner {
                saved,
                ..Default::default()
            }),
        })
    }

    /// Records an agent's check-in and returns its plan for the current period.
    pub fn get_plan(
        &self,
        tenant: &str,
        req: &c::GetPlanRequest,
        now_ms: i64,
    ) -> Result<c::Plan, ControlError> {
        if req.host.trim().is_empty() {
            return Err(ControlError::Invalid(
                "host is empty: every agent names its host".into(),
            ));
        }
        if req.host.len() > 256 || req.agent_id.len() > 256 || req.service.len() > 256 {
            return Err(ControlError::Invalid(
                "host, agent_id and service are at most 256 bytes".into(),
            ));
        }
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        if now_ms - inner.last_prune_ms > 60_000 {
            inner.last_prune_ms = now_ms;
            for t in inner.tenants.values_mut() {
                t.prune(now_ms);
            }
        }
        let known: usize = inner.tenants.values().map(|t| t.agents.len()).sum();
        let room = known < self.options.max_agents;
        let policy = inner
            .saved
            .policies
            .get(tenant)
            .cloned()
            .unwrap_or_default();
        let overrides = inner
            .saved
            .overrides
            .get(tenant)
            .cloned()
            .unwrap_or_default();
        let agents = inner.tenants.entry(tenant.to_string()).or_default();
        agents
            .check_in(req, now_ms, room, self.options.max_agents)
            .map_err(|Refusal::Full { max }| ControlError::Full { max })?;
        let m = Moment {
            tenant,
            seed: self.options.seed,
            now_ms,
        };
        let threshold = if policy.max_machines.is_some() {
            let fleet = agents.live_fleet(now_ms, policy.silent_after_periods);
            let period = m.period_index(&policy);
            match inner.budget.get(tenant) {
                Some((p, n, t)) if *p == period && *n == fleet.len() => t.clone(),
                _ => {
                    let t = planner::budget_threshold(&policy, &m, &fleet);
                    inner
                        .budget
                        .insert(tenant.to_string(), (period, fleet.len(), t.clone()));
                    t
                }
            }
        } else {
            None
        };
        let agents = inner.tenants.entry(tenant.to_string()).or_default();
        let plan = {
            let Some(entry) = agents.agents.get(&req.host) else {
                return Err(ControlError::Invalid(
                    "agent vanished during check-in".into(),
                ));
            };
            let facts = AgentFacts {
                host: &entry.host,
                service: entry.service.as_deref(),
                services_seen: &entry.services_seen,
                available_events: &entry.available_events,
            };
            let rate = |s: &str| agents.rate_per_hz(s, now_ms);
            planner::plan(&policy, &overrides, threshold.as_ref(), &rate, &facts, &m)
        };
        if let Some(entry) = agents.agents.get_mut(&req.host) {
            entry.plan = plan.clone();
        }
        inner.plans_served += 1;
        Ok(plan)
    }

    /// Every agent of `tenant`, by host.
    pub fn agents(&self, tenant: &str, now_ms: i64) -> Vec<AgentView> {
        let inner = self.inner.lock();
        let periods = inner
            .saved
            .policies
            .get(tenant)
            .map_or(Policy::default().silent_after_periods, |p| {
                p.silent_after_periods
            });
        let mut v: Vec<AgentView> = inner
            .tenants
            .get(tenant)
            .map(|t| {
                t.agents
                    .values()
                    .map(|a| AgentView::of(a, now_ms, periods))
                    .collect()
            })
            .unwrap_or_default();
        v.sort_by(|a, b| a.host.cmp(&b.host));
        v
    }

    pub fn policy(&self, tenant: &str) -> Policy {
        self.inner
            .lock()
            .saved
            .policies
            .get(tenant)
            .cloned()
            .unwrap_or_default()
    }

    /// Replaces a tenant's policy (validated) and saves it.
    pub fn set_policy(&self, tenant: &str, policy: Policy) -> Result<(), ControlError> {
        policy.validate()?;
        let mut inner = self.inner.lock();
        let old = inner.saved.policies.insert(tenant.to_string(), policy);
        inner.budget.remove(tenant);
        if let Err(e) = self.save(&inner.saved) {
            match old {
                Some(p) => inner.saved.policies.insert(tenant.to_string(), p),
                None => inner.saved.policies.remove(tenant),
            };
            return Err(e);
        }
        Ok(())
    }

    /// The tenant's overrides that have not expired, oldest first.
    pub fn overrides(&self, tenant: &str, now_ms: i64) -> Vec<Override> {
        self.inner
            .lock()
            .saved
            .overrides
            .get(tenant)
            .map(|v| v.iter().filter(|o| o.active(now_ms)).cloned().collect())
            .unwrap_or_default()
    }

    /// Adds an override (expired ones are dropped on the way) and saves.
    pub fn add_override(
        &self,
        tenant: &str,
        spec: OverrideSpec,
        now_ms: i64,
    ) -> Result<Override, ControlError> {
        let mut added = self.add_overrides(tenant, vec![spec], now_ms)?;
        added
            .pop()
            .ok_or(ControlError::Invalid("no override".into()))
    }

    /// Adds overrides all or none: every spec is checked before any is stored, and
    /// one save holds them all (expired ones are dropped on the way).
    pub fn add_overrides(
        &self,
        tenant: &str,
        specs: Vec<OverrideSpec>,
        now_ms: i64,
    ) -> Result<Vec<Override>, ControlError> {
        for spec in &specs {
            spec.validate(now_ms)?;
        }
        let mut inner = self.inner.lock();
        let before = (inner.saved.overrides.clone(), inner.saved.next_override_id);
        for v in inner.saved.overrides.values_mut() {
            v.retain(|o| o.active(now_ms));
        }
        let mut added = Vec::with_capacity(specs.len());
        for spec in specs {
            inner.saved.next_override_id += 1;
            added.push(Override {
                id: inner.saved.next_override_id,
                created_ms: now_ms,
                spec,
            });
        }
        inner
            .saved
            .overrides
            .entry(tenant.to_string())
            .or_default()
            .extend(added.iter().cloned());
        if let Err(e) = self.save(&inner.saved) {
            (inner.saved.overrides, inner.saved.next_override_id) = before;
            return Err(e);
        }
        Ok(added)
    }

    /// Removes one of the tenant's overrides and saves.
    pub fn delete_override(&self, tenant: &str, id: u64) -> Result<(), ControlError> {
        let mut inner = self.inner.lock();
        let list = inner
            .saved
            .overrides
            .get_mut(tenant)
            .ok_or(ControlError::NotFound(id))?;
        let at = list
            .iter()
            .position(|o| o.id == id)
            .ok_or(ControlError::NotFound(id))?;
        let removed = list.remove(at);
        if let Err(e) = self.save(&inner.saved) {
            if let Some(list) = inner.saved.overrides.get_mut(tenant) {
                list.insert(at, removed);
            }
            return Err(e);
        }
        Ok(())
    }

    pub fn metrics(&self, now_ms: i64) -> ControlMetrics {
        let inner = self.inner.lock();
        let mut m = ControlMetrics {
            plans_served: inner.plans_served,
            overrides: inner
                .saved
                .overrides
                .values()
                .flatten()
                .filter(|o| o.active(now_ms))
                .count() as u64,
            ..Default::default()
        };
        for (tenant, t) in &inner.tenants {
            let periods = inner
                .saved
                .policies
                .get(tenant)
                .map_or(Policy::default().silent_after_periods, |p| {
                    p.silent_after_periods
                });
            for a in t.agents.values() {
                m.agents += 1;
                if a.silent(now_ms, periods) {
                    m.silent += 1;
                } else if a.plan.profile {
                    m.profiling += 1;
                }
            }
        }
        m
    }

    /// The controller's gauges and counters in the Prometheus text format.
    pub fn render_metrics(&self, out: &mut String, now_ms: i64) {
        let m = self.metrics(now_ms);
        let f = crate::metrics::family;
        f(
            out,
            "profiledb_control_agents",
            "gauge",
            "Agents the fleet controller remembers (bounded by --control-max-agents).",
            m.agents,
        );
        f(
            out,
            "profiledb_control_agents_silent",
            "gauge",
            "Agents past their check-in deadline.",
            m.silent,
        );
        f(
            out,
            "profiledb_control_agents_profiling",
            "gauge",
            "Agents whose current plan samples.",
            m.profiling,
        );
        f(
            out,
            "profiledb_control_overrides",
            "gauge",
            "Overrides in force.",
            m.overrides,
        );
        f(
            out,
            "profiledb_control_plans_total",
            "counter",
            "Plans served to agents.",
            m.plans_served,
        );
    }

    /// Writes the state to a temporary file, syncs it and renames it over the old one,
    /// so a crash leaves either the old state or the new one.
    fn save(&self, saved: &Saved) -> Result<(), ControlError> {
        let err = |source| ControlError::Save {
            path: self.path.clone(),
            source,
        };
        let body = serde_json::to_vec_pretty(saved).map_err(|e| err(std::io::Error::other(e)))?;
        let tmp = self.path.with_extension("json.tmp");
        let mut f = std::fs::File::create(&tmp).map_err(err)?;
        f.write_all(&body).map_err(err)?;
        f.sync_all().map_err(err)?;
        std::fs::rename(&tmp, &self.path).map_err(err)?;
        if let Some(dir) = self.path.parent() {
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }
}

/// One agent as `GET /api/v1/agents` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct AgentView {
    pub host: String,
    pub agent_id: String,
    pub service: Option<String>,
    pub platform: String,
    /// `ok`, or `silent` past the policy's deadline.
    pub status: &'static str,
    pub first_seen: String,
    pub last_contact: String,
    pub seconds_since_contact: f64,
    pub plan: PlanView,
    pub samples_sent: u64,
    pub cpu_percent: f64,
    pub rss_bytes: u64,
    pub lost_samples: u64,
    pub unsymbolized_samples: u64,
    pub unattributed_samples: u64,
    pub windows_pushed: u64,
    pub windows_dropped: u64,
    pub perf_fds: u64,
    pub events: Vec<String>,
    pub available_events: Vec<String>,
    pub counting_rounds: u64,
    pub counted_cgroups: u64,
    pub guard: Option<String>,
    pub errors: Vec<String>,
}

/// The plan last sent to an agent.
#[derive(Clone, Debug, Serialize)]
pub struct PlanView {
    pub version: u64,
    pub profile: bool,
    pub period_secs: u32,
    pub window_secs: u32,
    pub events: Vec<EventSpec>,
    pub counting: bool,
    pub reason: String,
}

impl AgentView {
    fn of(a: &AgentEntry, now_ms: i64, periods: u32) -> AgentView {
        let r = &a.report;
        let p = &a.plan;
        AgentView {
            host: a.host.clone(),
            agent_id: a.agent_id.clone(),
            service: a.service.clone(),
            platform: a.platform.clone(),
            status: if a.silent(now_ms, periods) {
                "silent"
            } else {
                "ok"
            },
            first_seen: crate::time::rfc3339(a.first_seen_ms),
            last_contact: crate::time::rfc3339(a.last_contact_ms),
            seconds_since_contact: (now_ms - a.last_contact_ms).max(0) as f64 / 1000.0,
            plan: PlanView {
                version: p.version,
                profile: p.profile,
                period_secs: p.period_secs,
                window_secs: p.window_secs,
                events: p
                    .events
                    .iter()
                    .map(|e| EventSpec {
                        event: e.event.clone(),
                        frequency_hz: e.frequency_hz,
                    })
                    .collect(),
                counting: p.counting.is_some(),
                reason: p.reason.clone(),
            },
            samples_sent: r.samples,
            cpu_percent: r.cpu_percent,
            rss_bytes: r.rss_bytes,
            lost_samples: r.lost_samples,
            unsymbolized_samples: r.unsymbolized_samples,
            unattributed_samples: r.unattributed_samples,
            windows_pushed: r.windows_pushed,
            windows_dropped: r.windows_dropped,
            perf_fds: r.perf_fds,
            events: r.events.clone(),
            available_events: a.available_events.clone(),
            counting_rounds: r.counting_rounds,
            counted_cgroups: r.counted_cgroups,
            guard: Some(r.guard.clone()).filter(|g| !g.is_empty()),
            errors: r.errors.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(host: &str) -> c::GetPlanRequest {
        c::GetPlanRequest {
            agent_id: format!("{host}-1"),
            host: host.into(),
            ..Default::default()
        }
    }

    #[test]
    fn state_survives_reopen_and_corruption_is_reported() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ctl = Controller::open(dir.path(), ControlOptions::default()).expect("open");
        let p = Policy {
            machine_fraction: 0.25,
            ..Default::default()
        };
        ctl.set_policy("t", p.clone()).expect("set");
        let o = ctl
            .add_override(
                "t",
                OverrideSpec {
                    host: Some("h".into()),
                    service: None,
                    event: None,
                    frequency_hz: Some(99),
                    profile: true,
                    until_ms: 60_000,
                    reason: Some("investigating".into()),
                },
                0,
            )
            .expect("add");
        drop(ctl);
        let ctl = Controller::open(dir.path(), ControlOptions::default()).expect("reopen");
        assert_eq!(ctl.policy("t"), p);
        assert_eq!(ctl.overrides("t", 0), vec![o.clone()]);
        assert!(ctl.overrides("t", 60_000).is_empty(), "expired");
        assert!(ctl.overrides("other", 0).is_empty(), "per tenant");
        ctl.delete_override("t", o.id).expect("delete");
        assert!(matches!(
            ctl.delete_override("t", o.id),
            Err(ControlError::NotFound(_))
        ));
        std::fs::write(dir.path().join(STATE_FILE), b"{not json").expect("write");
        assert!(matches!(
            Controller::open(dir.path(), ControlOptions::default()),
            Err(ControlError::Corrupt { .. })
        ));
    }

    #[test]
    fn registry_is_bounded_and_metrics_count_silent_agents() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ctl = Controller::open(
            dir.path(),
            ControlOptions {
                seed: 1,
                max_agents: 2,
            },
        )
        .expect("open");
        ctl.get_plan("t", &req("a"), 0).expect("a");
        ctl.get_plan("u", &req("b"), 0).expect("b");
        assert!(matches!(
            ctl.get_plan("t", &req("c"), 0),
            Err(ControlError::Full { max: 2 })
        ));
        ctl.get_plan("t", &req("a"), 200_000)
            .expect("known host still served");
        let m = ctl.metrics(200_000);
        assert_eq!((m.agents, m.silent, m.plans_served), (2, 1, 3));
        let v = ctl.agents("t", 200_000);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].status, "ok");
        assert_eq!(ctl.agents("u", 200_000)[0].status, "silent");
        assert!(ctl.get_plan("t", &req(" "), 0).is_err());
    }
}
