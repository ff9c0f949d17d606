//! Regression-diff alerts: rules evaluated on the diff engine in the background,
//! Prometheus-style states, delivery to Alertmanager and/or a webhook.
//!
//! Module map: [`rule`] (rule documents and validation), [`eval`] (the pure
//! evaluation step), [`state`] (what survives restarts), [`deliver`] (payloads and
//! HTTP), [`scheduler`] (one task per rule), [`time`] (durations and RFC 3339).
//!
//! Rules and states live in the catalog (`alert_rules`, `alert_state`). A state is
//! written after every evaluation, with the notifications it owes in its outbox, and
//! again after every delivery, so a restart neither loses a notification nor sends a
//! delivered one again (see docs/alerts.md for the exact guarantee).

pub mod deliver;
pub mod eval;
pub mod rule;
pub mod scheduler;
pub mod state;

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use profiledb_storage::Querier;
use profiledb_storage::Store;
use tracing::warn;

use rule::{Rule, RuleSpec};
use state::{AlertState, RuleState, Target};

/// Where notifications go and how links are built.
#[derive(Clone, Debug, Default)]
pub struct AlertOptions {
    /// Alertmanager base URL (`http://127.0.0.1:9093`); alerts are POSTed to
    /// `<url>/api/v2/alerts`.
    pub alertmanager_url: Option<String>,
    /// URL receiving the webhook JSON.
    pub webhook_url: Option<String>,
    /// Base URL of this server in links (default `http://<listen address>`).
    pub external_url: Option<String>,
    /// Rules from `--rules FILE`, stored (replacing same-named rules) at start.
    pub rules: Vec<RuleSpec>,
    /// How often a firing alert is re-sent to Alertmanager (default 1 min, as
    /// Prometheus' `--rules.alert.resend-delay`).
    pub resend_delay: Option<Duration>,
}

/// Counters for `/metrics`, per target where it matters (index = [`target_index`]).
#[derive(Debug, Default)]
pub struct AlertMetrics {
    pub evaluations: AtomicU64,
    pub evaluation_failures: AtomicU64,
    pub sent: [AtomicU64; 2],
    pub failed: [AtomicU64; 2],
    pub retried: [AtomicU64; 2],
    pub dropped: [AtomicU64; 2],
}

pub fn target_index(t: Target) -> usize {
    match t {
        Target::Alertmanager => 0,
        Target::Webhook => 1,
    }
}

pub(crate) struct Entry {
    pub rule: Arc<Rule>,
    pub state: Arc<Mutex<RuleState>>,
    stop: Arc<scheduler::Stop>,
    task: tokio::task::JoinHandle<()>,
}

impl Entry {
    /// Lets the task finish the evaluation or delivery it is in (so a notification
    /// sent is also recorded as sent), then waits for it to end.
    async fn stop(self) -> Arc<Mutex<RuleState>> {
        self.stop.request();
        if tokio::time::timeout(STOP_TIMEOUT, self.task).await.is_err() {
            warn!(
                rule = self.rule.name(),
                "alert rule task did not stop in time"
            );
        }
        self.state
    }
}

/// Longest wait for a rule task to finish its step: a delivery has a 10 s timeout.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// The alerting subsystem of one open store.
pub struct Alerts {
    pub(crate) store: Arc<Store>,
    pub(crate) querier: Arc<Querier>,
    pub(crate) opts: AlertOptions,
    pub(crate) external_url: String,
    pub(crate) agent: ureq::Agent,
    pub metrics: AlertMetrics,
    rules: Mutex<BTreeMap<String, Entry>>,
    handle: tokio::runtime::Handle,
}

#[derive(Debug, thiserror::Error)]
pub enum AlertError {
    #[error("invalid rule: {0}")]
    Invalid(#[from] rule::InvalidRule),
    #[error("rule {0:?} already exists (use PUT to replace it)")]
    Exists(String),
    #[error("no rule named {0:?}")]
    NotFound(String),
    #[error(transparent)]
    Storage(#[from] profiledb_storage::StorageError),
    #[error("cannot encode: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("{0}")]
    Task(String),
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind; keep serving it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Alerts {
    /// Loads stored rules and states, stores the rules from `opts.rules` and starts
    /// one task per rule on `handle`. Blocking (catalog reads and writes).
    pub fn start(
        store: Arc<Store>,
        querier: Arc<Querier>,
        opts: AlertOptions,
        default_external_url: String,
        handle: tokio::runtime::Handle,
    ) -> Result<Arc<Alerts>, AlertError> {
        let external_url = opts
            .external_url
            .clone()
            .unwrap_or(default_external_url)
            .trim_end_matches('/')
            .to_string();
        let alerts = Arc::new(Alerts {
            store,
            querier,
            opts,
            external_url,
            agent: deliver::agent(),
            metrics: AlertMetrics::default(),
            rules: Mutex::new(BTreeMap::new()),
            handle,
        });
        let cat = alerts.store.catalog();
        for spec in &alerts.opts.rules {
            // Validated by the caller already; validate again so nothing unchecked
            // reaches the catalog.
            let r = Rule::validate(spec.clone())?;
            cat.put_alert_rule(r.name(), &serde_json::to_vec(&r.spec)?)?;
        }
        let mut states: BTreeMap<String, RuleState> = BTreeMap::new();
        for (name, v) in cat.alert_states()? {
            match serde_json::from_slice(&v) {
                Ok(s) => {
                    states.insert(name, s);
                }
                Err(e) => warn!(rule = %name, error = %e, "ignoring undecodable alert state"),
            }
        }
        for (name, v) in cat.alert_rules()? {
            let rule = serde_json::from_slice::<RuleSpec>(&v)
                .map_err(|e| rule::InvalidRule(e.to_string()))
                .and_then(Rule::validate);
            match rule {
                Ok(r) => {
                    let st = states.remove(&name).unwrap_or_default();
                    alerts.install(Arc::new(r), Arc::new(Mutex::new(st)));
                }
                Err(e) => {
                    warn!(rule = %name, error = %e, "ignoring a stored alert rule that no longer validates")
                }
            }
        }
        Ok(alerts)
    }

    pub fn targets(&self) -> Vec<Target> {
        let mut t = Vec::new();
        if self.opts.alertmanager_url.is_some() {
            t.push(Target::Alertmanager);
        }
        if self.opts.webhook_url.is_some() {
            t.push(Target::Webhook);
        }
        t
    }

    pub(crate) fn resend_delay_ms(&self) -> i64 {
        self.opts
            .resend_delay
            .map_or(60_000, |d| d.as_millis() as i64)
    }

    /// Starts the task of a rule that is not running (the caller removed or stopped
    /// any previous one).
    fn install(self: &Arc<Self>, rule: Arc<Rule>, state: Arc<Mutex<RuleState>>) {
        let stop = Arc::new(scheduler::Stop::default());
        let task = self.handle.spawn(scheduler::run_rule(
            self.clone(),
            rule.clone(),
            state.clone(),
            stop.clone(),
        ));
        let name = rule.name().to_string();
        let entry = Entry {
            rule,
            state,
            stop,
            task,
        };
        if let Some(old) = lock(&self.rules).insert(name, entry) {
            // Not reached: callers take the old entry out first.
            old.stop.request();
        }
    }

    /// Stores and starts a rule. `replace` = PUT semantics. The state of a replaced
    /// rule is kept, so an alert firing under the old version still resolves once.
    pub async fn upsert(
        self: &Arc<Self>,
        spec: RuleSpec,
        replace: bool,
    ) -> Result<Arc<Rule>, AlertError> {
        let rule = Arc::new(Rule::validate(spec)?);
        let name = rule.name().to_string();
        let old = {
            let mut rules = lock(&self.rules);
            if rules.contains_key(&name) && !replace {
                return Err(AlertError::Exists(name));
            }
            rules.remove(&name)
        };
        let (old_rule, state) = match old {
            Some(e) => (Some(e.rule.clone()), e.stop().await),
            None => (None, Arc::new(Mutex::new(RuleState::default()))),
        };
        let json = serde_json::to_vec(&rule.spec)?;
        let a = self.clone();
        let n2 = name.clone();
        let is_new = old_rule.is_none();
        let stored = tokio::task::spawn_blocking(move || {
            a.store.catalog().put_alert_rule(&n2, &json)?;
            if is_new {
                // Overwrites any state left behind by a deleted rule of this name.
                let fresh = serde_json::to_vec(&RuleState::default())?;
                a.store.catalog().put_alert_state(&n2, &fresh)?;
            }
            Ok::<_, AlertError>(())
        })
        .await
        .map_err(|e| AlertError::Task(format!("storing the rule failed: {e}")))
        .and_then(|r| r);
        match stored {
            Ok(()) => {
                self.install(rule.clone(), state);
                Ok(rule)
            }
            Err(e) => {
                if let Some(r) = old_rule {
                    self.install(r, state);
                }
                Err(e)
            }
        }
    }

    /// Stops and forgets a rule and its state.
    pub async fn remove(self: &Arc<Self>, name: &str) -> Result<(), AlertError> {
        let entry = lock(&self.rules).remove(name);
        let found = entry.is_some();
        if let Some(e) = entry {
            e.stop().await;
        }
        let (a, n) = (self.clone(), name.to_string());
        let existed = tokio::task::spawn_blocking(move || a.store.catalog().remove_alert_rule(&n))
            .await
            .map_err(|e| AlertError::Task(format!("removing the rule failed: {e}")))??;
        if found || existed {
            Ok(())
        } else {
            Err(AlertError::NotFound(name.to_string()))
        }
    }

    pub fn rule(&self, name: &str) -> Option<Arc<Rule>> {
        lock(&self.rules).get(name).map(|e| e.rule.clone())
    }

    /// Every rule with a copy of its state, ordered by name.
    pub fn list(&self) -> Vec<(Arc<Rule>, RuleState)> {
        lock(&self.rules)
            .values()
            .map(|e| (e.rule.clone(), lock(&e.state).clone()))
            .collect()
    }

    /// Stops every rule task (at shutdown, before the store closes), letting each
    /// finish the step it is in.
    pub async fn stop(&self) {
        let entries: Vec<Entry> = std::mem::take(&mut *lock(&self.rules))
            .into_values()
            .collect();
        for e in entries {
            e.stop().await;
        }
    }

    /// Appends the alerting metrics in the Prometheus text format.
    pub fn render_metrics(&self, out: &mut String) {
        let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let m = &self.metrics;
        let mut simple = |name: &str, help: &str, v: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
            );
        };
        simple(
            "profiledb_alert_rule_evaluations_total",
            "Alert rule evaluations.",
            c(&m.evaluations),
        );
        simple(
            "profiledb_alert_rule_evaluation_failures_total",
            "Alert rule evaluations whose diff query failed.",
            c(&m.evaluation_failures),
        );
        let per_target: [(&str, &str, &[AtomicU64; 2]); 4] = [
            (
                "profiledb_alert_notifications_sent_total",
                "Notifications delivered (Alertmanager refreshes included).",
                &m.sent,
            ),
            (
                "profiledb_alert_notifications_failed_total",
                "Notification attempts that failed.",
                &m.failed,
            ),
            (
                "profiledb_alert_notifications_retried_total",
                "Notification attempts that were retries of a failed one.",
                &m.retried,
            ),
            (
                "profiledb_alert_notifications_dropped_total",
                "Notifications given up after the last retry.",
                &m.dropped,
            ),
        ];
        for (name, help, arr) in per_target {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for t in [Target::Alertmanager, Target::Webhook] {
                let _ = writeln!(
                    out,
                    "{name}{{target=\"{}\"}} {}",
                    t.as_str(),
                    c(&arr[target_index(t)])
                );
            }
        }
        let mut by_state = [0u64; 4];
        let mut outbox = 0u64;
        for (_, s) in self.list() {
            by_state[s.state as usize] += 1;
            outbox += s.outbox.len() as u64;
        }
        crate::metrics::labelled(
            out,
            ("profiledb_alerts", "gauge", "Alert rules by state."),
            "state",
            AlertState::ALL.map(|st| (st.as_str(), by_state[st as usize])),
        );
        let _ = writeln!(
            out,
            "# HELP profiledb_alert_notifications_queued Notifications waiting for (re)delivery.\n# TYPE profiledb_alert_notifications_queued gauge\nprofiledb_alert_notifications_queued {outbox}"
        );
    }
}
