//! One background task per rule: evaluate at the rule's interval, then deliver what
//! the outbox holds, retrying failures with backoff. Queries and HTTP calls run on
//! the blocking pool; the state is persisted before anything is sent and after every
//! delivery.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use profiledb_storage::analysis::noise::DEFAULT_SPLITS;
use profiledb_storage::now_ms;
use tokio::sync::Notify;
use tracing::{error, info, warn};

use super::deliver::{self, backoff_ms, MAX_ATTEMPTS};
use super::eval::{check_noise, measure, step, EvalError};
use super::rule::Rule;
use super::state::{AlertState, NotificationKind, RuleState, Target};
use super::{lock, target_index, Alerts};

/// Asks a rule task to end after its current step.
#[derive(Debug, Default)]
pub(crate) struct Stop {
    requested: AtomicBool,
    wake: Notify,
}

impl Stop {
    pub fn request(&self) {
        self.requested.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }

    fn requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }
}

pub(crate) async fn run_rule(
    alerts: Arc<Alerts>,
    rule: Arc<Rule>,
    state: Arc<Mutex<RuleState>>,
    stop: Arc<Stop>,
) {
    // After a restart, keep the rhythm instead of evaluating at once.
    let mut next_eval = lock(&state)
        .last_eval_ms
        .map_or(0, |t| t + rule.interval_ms);
    while !stop.requested() {
        let now = now_ms();
        if now >= next_eval {
            evaluate(&alerts, &rule, &state, now).await;
            // Fixed rate, so `for` is reached after exactly for/interval evaluations;
            // ticks missed while an evaluation overran are skipped, not bunched.
            next_eval = if next_eval + rule.interval_ms > now {
                next_eval + rule.interval_ms
            } else {
                now + rule.interval_ms
            };
        }
        deliver_due(&alerts, &rule, &state, &stop).await;
        let retry_at = lock(&state)
            .outbox
            .iter()
            .map(|o| o.next_attempt_ms)
            .min()
            .unwrap_or(i64::MAX);
        let wake = next_eval.min(retry_at);
        let wait = (wake - now_ms()).clamp(10, 3_600_000);
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(wait as u64)) => {}
            _ = stop.wake.notified() => {}
        }
    }
}

async fn persist(alerts: &Arc<Alerts>, rule: &Rule, state: &Arc<Mutex<RuleState>>) {
    let json = match serde_json::to_vec(&*lock(state)) {
        Ok(j) => j,
        Err(e) => {
            error!(rule = rule.name(), error = %e, "cannot encode alert state");
            return;
        }
    };
    let (a, name) = (alerts.clone(), rule.name().to_string());
    let res =
        tokio::task::spawn_blocking(move || a.store.catalog().put_alert_state(&name, &json)).await;
    match res {
        Ok(Ok(())) => {}
        Ok(Err(e)) => error!(rule = rule.name(), error = %e, "cannot store alert state"),
        Err(e) => error!(rule = rule.name(), error = %e, "alert state task failed"),
    }
}

async fn evaluate(alerts: &Arc<Alerts>, rule: &Arc<Rule>, state: &Arc<Mutex<RuleState>>, now: i64) {
    let ranges = rule.ranges(now);
    let (a, r) = (alerts.clone(), rule.clone());
    let outcome = tokio::task::spawn_blocking(move || {
        let base = (ranges.base_start_ms, ranges.base_end_ms);
        let cmp = (ranges.compare_start_ms, ranges.compare_end_ms);
        let d = a.querier.diff(
            &r.tenant,
            (
                &r.selector,
                profiledb_storage::TimeRange::new(base.0, base.1),
            ),
            (&r.selector, profiledb_storage::TimeRange::new(cmp.0, cmp.1)),
            r.top_k(),
            // The flame graph is not used; keep it small.
            16,
        )?;
        let mut m = measure(
            &r,
            ranges,
            &d.base.self_by_name(),
            &d.compare.self_by_name(),
            &d.top,
            &d.stats,
        );
        if let Some(n) = &r.spec.above_noise {
            let base = profiledb_storage::TimeRange::new(base.0, base.1);
            let model = a.querier.noise_model(
                &r.tenant,
                &r.selector,
                base,
                &n.host_label,
                r.top_k(),
                DEFAULT_SPLITS,
            )?;
            m.noise = Some(check_noise(model.as_ref(), &d.stats, n.margin));
        }
        Ok(m)
    })
    .await
    .unwrap_or_else(|e| Err(EvalError::Task(e)));
    alerts.metrics.evaluations.fetch_add(1, Ordering::Relaxed);
    if let Err(e) = &outcome {
        alerts
            .metrics
            .evaluation_failures
            .fetch_add(1, Ordering::Relaxed);
        warn!(rule = rule.name(), error = %e, "alert rule evaluation failed");
    }
    let targets = alerts.targets();
    {
        let mut s = lock(state);
        let (next, notes) = step(rule, &s, now, outcome);
        if next.state != s.state {
            info!(
                rule = rule.name(),
                from = s.state.as_str(),
                to = next.state.as_str(),
                "alert state changed"
            );
        }
        *s = next;
        for n in &notes {
            s.enqueue(n, &targets, now);
        }
    }
    // The outbox is durable before the first attempt: a crash from here on redelivers
    // rather than forgets.
    persist(alerts, rule, state).await;
    refresh_alertmanager(alerts, rule, state, now).await;
}

/// Alertmanager forgets an alert whose `endsAt` passes, so a firing alert is re-sent
/// every resend delay with `endsAt` pushed forward (Prometheus does the same). These
/// refreshes are the same alert (same labels); Alertmanager dedupes them.
async fn refresh_alertmanager(
    alerts: &Arc<Alerts>,
    rule: &Arc<Rule>,
    state: &Arc<Mutex<RuleState>>,
    now: i64,
) {
    let Some(url) = deliver::target_url(
        Target::Alertmanager,
        alerts.opts.alertmanager_url.as_deref(),
        None,
    ) else {
        return;
    };
    let resend = alerts.resend_delay_ms();
    let payload = {
        let s = lock(state);
        let queued = s.outbox.iter().any(|o| o.target == Target::Alertmanager);
        let due = s.alertmanager_sent_ms.is_none_or(|t| now - t >= resend);
        if s.state != AlertState::Firing || queued || !due {
            return;
        }
        let (Some(m), Some(starts)) = (s.last.as_ref(), s.active_at_ms) else {
            return;
        };
        let ends = now + 4 * resend.max(rule.interval_ms);
        deliver::alertmanager_payload(rule, m, starts, ends, &alerts.external_url)
    };
    let agent = alerts.agent.clone();
    let res = tokio::task::spawn_blocking(move || deliver::post_json(&agent, &url, &payload))
        .await
        .unwrap_or_else(|e| Err(e.into()));
    let i = target_index(Target::Alertmanager);
    match res {
        Ok(()) => {
            alerts.metrics.sent[i].fetch_add(1, Ordering::Relaxed);
            lock(state).alertmanager_sent_ms = Some(now);
            persist(alerts, rule, state).await;
        }
        Err(e) => {
            alerts.metrics.failed[i].fetch_add(1, Ordering::Relaxed);
            warn!(rule = rule.name(), error = %e, "Alertmanager refresh failed; retrying at the next evaluation");
        }
    }
}

async fn deliver_due(
    alerts: &Arc<Alerts>,
    rule: &Arc<Rule>,
    state: &Arc<Mutex<RuleState>>,
    stop: &Stop,
) {
    while !stop.requested() {
        let now = now_ms();
        let item = {
            let s = lock(state);
            s.outbox
                .iter()
                .position(|o| o.next_attempt_ms <= now)
                .map(|i| (i, s.outbox[i].clone()))
        };
        let Some((_, item)) = item else { return };
        let i = target_index(item.target);
        let url = deliver::target_url(
            item.target,
            alerts.opts.alertmanager_url.as_deref(),
            alerts.opts.webhook_url.as_deref(),
        );
        let Some(url) = url else {
            // Queued for a target the server is no longer configured with (restarted
            // with other flags): nothing to retry.
            warn!(
                rule = rule.name(),
                target = item.target.as_str(),
                "dropping a notification for a target that is no longer configured"
            );
            alerts.metrics.dropped[i].fetch_add(1, Ordering::Relaxed);
            lock(state).outbox.retain(|o| {
                !(o.target == item.target && o.notification.key() == item.notification.key())
            });
            persist(alerts, rule, state).await;
            continue;
        };
        let n = &item.notification;
        let payload = match item.target {
            Target::Alertmanager => {
                let ends = match n.kind {
                    NotificationKind::Firing => {
                        n.at_ms + 4 * alerts.resend_delay_ms().max(rule.interval_ms)
                    }
                    NotificationKind::Resolved => n.at_ms,
                };
                deliver::alertmanager_payload(
                    rule,
                    &n.measurement,
                    n.starts_at_ms,
                    ends,
                    &alerts.external_url,
                )
            }
            Target::Webhook => deliver::webhook_payload(rule, n, &alerts.external_url),
        };
        if item.attempts > 0 {
            alerts.metrics.retried[i].fetch_add(1, Ordering::Relaxed);
        }
        let agent = alerts.agent.clone();
        let res = tokio::task::spawn_blocking(move || deliver::post_json(&agent, &url, &payload))
            .await
            .unwrap_or_else(|e| Err(e.into()));
        let key = n.key();
        {
            let mut s = lock(state);
            let pos = s
                .outbox
                .iter()
                .position(|o| o.target == item.target && o.notification.key() == key);
            match (&res, pos) {
                (_, None) => {}
                (Ok(()), Some(p)) => {
                    s.outbox.remove(p);
                    s.mark_delivered(item.target, key.clone());
                    if item.target == Target::Alertmanager && n.kind == NotificationKind::Firing {
                        s.alertmanager_sent_ms = Some(now);
                    }
                    alerts.metrics.sent[i].fetch_add(1, Ordering::Relaxed);
                    info!(rule = rule.name(), target = item.target.as_str(), kind = ?n.kind, "notification delivered");
                }
                (Err(e), Some(p)) => {
                    alerts.metrics.failed[i].fetch_add(1, Ordering::Relaxed);
                    let o = &mut s.outbox[p];
                    o.attempts += 1;
                    o.last_error = Some(e.to_string());
                    if o.attempts >= MAX_ATTEMPTS {
                        error!(rule = rule.name(), target = item.target.as_str(), error = %e, "giving up on a notification");
                        alerts.metrics.dropped[i].fetch_add(1, Ordering::Relaxed);
                        s.outbox.remove(p);
                    } else {
                        o.next_attempt_ms = now + backoff_ms(o.attempts);
                        warn!(rule = rule.name(), target = item.target.as_str(), error = %e, attempt = o.attempts, "notification failed; will retry");
                    }
                }
            }
        }
        persist(alerts, rule, state).await;
    }
}
