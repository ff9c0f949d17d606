//! What an alert rule remembers between evaluations and across restarts: its
//! Prometheus-style state, the figures last measured, and the notifications it still
//! owes (the outbox) or has delivered. Stored as JSON in the catalog's `alert_state`
//! tree after every evaluation and delivery.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::rule::Ranges;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertState {
    #[default]
    Inactive,
    Pending,
    Firing,
    Resolved,
}

impl AlertState {
    pub const ALL: [AlertState; 4] = [
        AlertState::Inactive,
        AlertState::Pending,
        AlertState::Firing,
        AlertState::Resolved,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AlertState::Inactive => "inactive",
            AlertState::Pending => "pending",
            AlertState::Firing => "firing",
            AlertState::Resolved => "resolved",
        }
    }
}

/// One function's shares on both sides.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Mover {
    pub function: String,
    pub base_share: f64,
    pub compare_share: f64,
    /// compare − base, in percentage points.
    pub delta_pp: f64,
}

/// The figures of one evaluation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    pub ranges: Ranges,
    /// The function the figures are about: the matched (or most moved) function with
    /// the largest compare value.
    pub function: Option<String>,
    /// Share (0..1) of the watched entry on each side.
    pub base_share: f64,
    pub compare_share: f64,
    pub delta_pp: f64,
    /// compare / base − 1; a base share of 0 counts as one sample.
    pub relative_increase: f64,
    pub manhattan: f64,
    pub entropy_base: f64,
    pub entropy_compare: f64,
    /// Side totals in the profile type's unit, and as samples (total / sample_value).
    pub total_base: i64,
    pub total_compare: i64,
    pub samples_base: f64,
    pub samples_compare: f64,
    pub required_samples: u64,
    /// The figure compared with the threshold, in the condition's unit.
    pub value: f64,
    pub threshold: f64,
    pub enough_samples: bool,
    pub condition_met: bool,
    pub top: Vec<Mover>,
    /// The noise check of a rule with `above_noise`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<NoiseCheck>,
}

/// How the distance of an evaluation compares with sampling noise.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NoiseCheck {
    /// The distance sampling noise alone gives these sample counts; `None` when
    /// it could not be fitted (fewer than two hosts in the baseline) or a side is
    /// empty.
    pub expected: Option<f64>,
    /// `manhattan` > margin × `expected`. Unknown noise does not block: the sample
    /// guard still applies.
    pub above: Option<bool>,
}

impl Measurement {
    /// Whether this evaluation counts as "the condition holds".
    pub fn active(&self) -> bool {
        let above_noise = self.noise.as_ref().and_then(|n| n.above) != Some(false);
        self.enough_samples && self.condition_met && above_noise
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotificationKind {
    Firing,
    Resolved,
}

/// A state change to tell the outside world about.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    pub rule: String,
    pub kind: NotificationKind,
    /// When the episode began (the alert's activeAt, as Prometheus sends it).
    pub starts_at_ms: i64,
    /// When it fired (firing) or resolved (resolved).
    pub at_ms: i64,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub measurement: Measurement,
}

impl Notification {
    /// Identity for "sent already": the episode (starts_at) and the transition.
    pub fn key(&self) -> DeliveryKey {
        DeliveryKey {
            rule: self.rule.clone(),
            kind: self.kind,
            starts_at_ms: self.starts_at_ms,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    Alertmanager,
    Webhook,
}

impl Target {
    pub fn as_str(self) -> &'static str {
        match self {
            Target::Alertmanager => "alertmanager",
            Target::Webhook => "webhook",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DeliveryKey {
    pub rule: String,
    pub kind: NotificationKind,
    pub starts_at_ms: i64,
}

/// A notification owed to one target.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outgoing {
    pub target: Target,
    pub notification: Notification,
    pub attempts: u32,
    pub next_attempt_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// How many delivered keys are remembered per rule: enough to cover every
/// notification an outbox can still hold.
pub const DELIVERED_KEPT: usize = 64;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RuleState {
    pub state: AlertState,
    /// When the condition started holding in the current episode.
    pub active_at_ms: Option<i64>,
    pub fired_at_ms: Option<i64>,
    pub resolved_at_ms: Option<i64>,
    pub last_eval_ms: Option<i64>,
    pub last_error: Option<String>,
    pub last: Option<Measurement>,
    /// The figures at the moment the alert fired (what the firing notification said).
    pub fired_with: Option<Measurement>,
    /// Notifications not yet delivered, per target.
    pub outbox: Vec<Outgoing>,
    /// Notifications delivered, newest last, as (target, key).
    pub delivered: Vec<(Target, DeliveryKey)>,
    /// Last time the firing alert was (re)sent to Alertmanager.
    pub alertmanager_sent_ms: Option<i64>,
}

impl RuleState {
    pub fn was_delivered(&self, target: Target, key: &DeliveryKey) -> bool {
        self.delivered.iter().any(|(t, k)| *t == target && k == key)
    }

    pub fn mark_delivered(&mut self, target: Target, key: DeliveryKey) {
        if !self.was_delivered(target, &key) {
            self.delivered.push((target, key));
        }
        let extra = self.delivered.len().saturating_sub(DELIVERED_KEPT);
        self.delivered.drain(..extra);
    }

    /// Queues `n` for every target that has not had it yet.
    pub fn enqueue(&mut self, n: &Notification, targets: &[Target], now: i64) {
        let key = n.key();
        for &t in targets {
            let queued = self
                .outbox
                .iter()
                .any(|o| o.target == t && o.notification.key() == key);
            if !queued && !self.was_delivered(t, &key) {
                self.outbox.push(Outgoing {
                    target: t,
                    notification: n.clone(),
                    attempts: 0,
                    next_attempt_ms: now,
                    last_error: None,
                });
            }
        }
    }
}
