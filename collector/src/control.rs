//! The agent's side of the control plane: a thread that checks in with the server once
//! per period, carrying the agent's report, and keeps the plan it answers.
//!
//! Reports are totals, sent with each check-in and once more when the agent stops.
//! The sampling thread never waits on the network: it reads the newest plan from here
//! on each tick. When the server cannot be reached the last plan stays in force (it
//! repeats each period); before any answer the command line's plan is used.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use profiledb_proto::control::v1 as c;
use prost::Message;
use thiserror::Error;

use crate::plan::Plan;

/// Why a check-in failed.
#[derive(Debug, Error)]
pub enum ControlError {
    #[error("cannot reach the controller: {0}")]
    Transport(String),
    #[error("controller answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("controller answer is not a GetPlanResponse: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("controller answered without a plan")]
    NoPlan,
}

/// Who the agent is, sent with every check-in.
#[derive(Clone, Debug, Default)]
pub struct Identity {
    pub agent_id: String,
    pub host: String,
    pub service: Option<String>,
    pub platform: Option<String>,
    pub available_events: Vec<String>,
}

/// How the check-ins went.
#[derive(Clone, Debug, Default)]
pub struct ControlStats {
    pub calls_ok: u64,
    pub calls_failed: u64,
    pub last_error: Option<String>,
    /// Plans received whose version differed from the one before.
    pub plan_changes: u64,
}

#[derive(Default)]
struct State {
    plan: Option<Arc<Plan>>,
    report: c::AgentReport,
    stats: ControlStats,
    warnings: Vec<String>,
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind: keep using it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The check-in thread and the plan it keeps.
pub struct ControlClient {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A stable spread of check-ins across the fleet: up to a tenth of the period.
fn jitter(agent_id: &str, period: Duration) -> Duration {
    let h = agent_id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let span = (period.as_millis() as u64 / 10).clamp(1, 1000);
    Duration::from_millis(h % span)
}

impl ControlClient {
    /// Starts checking in with `server` right away.
    pub fn spawn(server: &str, identity: Identity, timeout: Duration) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        });
        let url = format!(
            "{}/control.v1.ControlService/GetPlan",
            server.trim_end_matches('/')
        );
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .build()
            .into();
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("profiledb-control".into())
            .spawn(move || run(&s, &agent, &url, &identity))?;
        Ok(ControlClient {
            shared,
            thread: Some(thread),
        })
    }

    /// The newest plan from the server, if any arrived yet.
    pub fn plan(&self) -> Option<Arc<Plan>> {
        self.shared.lock().plan.clone()
    }

    /// What the next check-in reports.
    pub fn set_report(&self, report: c::AgentReport) {
        self.shared.lock().report = report;
    }

    pub fn stats(&self) -> ControlStats {
        self.shared.lock().stats.clone()
    }

    /// Warnings about plans received since the last call (unknown events...).
    pub fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut self.shared.lock().warnings)
    }

    /// Stops the thread after one last check-in carrying the final report (at most
    /// the timeout when the server does not answer).
    pub fn stop(mut self) -> ControlStats {
        self.shutdown();
        self.stats()
    }

    fn shutdown(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ControlClient {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn call(agent: &ureq::Agent, url: &str, req: &c::GetPlanRequest) -> Result<c::Plan, ControlError> {
    let resp = agent
        .post(url)
        .header("Content-Type", "application/proto")
        .header("Connect-Protocol-Version", "1")
        .send(&req.encode_to_vec()[..])
        .map_err(|e| ControlError::Transport(e.to_string()))?;
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let bytes = body
        .with_config()
        .limit(1 << 20)
        .read_to_vec()
        .map_err(|e| ControlError::Transport(e.to_string()))?;
    if !(200..300).contains(&status) {
        return Err(ControlError::Status {
            status,
            body: String::from_utf8_lossy(&bytes).chars().take(300).collect(),
        });
    }
    c::GetPlanResponse::decode(&bytes[..])?
        .plan
        .ok_or(ControlError::NoPlan)
}

fn run(shared: &Shared, agent: &ureq::Agent, url: &str, id: &Identity) {
    loop {
        let (req, stopping) = {
            let st = shared.lock();
            let req = c::GetPlanRequest {
                agent_id: id.agent_id.clone(),
                host: id.host.clone(),
                service: id.service.clone().unwrap_or_default(),
                platform: id.platform.clone().unwrap_or_default(),
                plan_version: st.plan.as_ref().map_or(0, |p| p.version),
                report: Some(st.report.clone()),
                available_events: id.available_events.clone(),
            };
            (req, st.stop)
        };
        let result = call(agent, url, &req);
        if stopping {
            // That was the final report, with the agent's last totals.
            return;
        }
        let wait = {
            let mut st = shared.lock();
            match result {
                Ok(p) => {
                    let (plan, warnings) = Plan::from_server(&p);
                    st.stats.calls_ok += 1;
                    if st
                        .plan
                        .as_ref()
                        .is_none_or(|old| old.version != plan.version)
                    {
                        st.stats.plan_changes += 1;
                    }
                    st.warnings.extend(warnings);
                    let next = plan.period_start_ms + plan.period.as_millis() as i64 - now_ms();
                    let period = plan.period;
                    st.plan = Some(Arc::new(plan));
                    Duration::from_millis(next.max(0) as u64)
                        .clamp(Duration::from_millis(250), period)
                        + jitter(&id.agent_id, period)
                }
                Err(e) => {
                    st.stats.calls_failed += 1;
                    st.stats.last_error = Some(e.to_string());
                    let period = st
                        .plan
                        .as_ref()
                        .map_or(Duration::from_secs(5), |p| p.period);
                    period.min(Duration::from_secs(5))
                }
            }
        };
        let st = shared.lock();
        if st.stop {
            return;
        }
        let _ = shared.wake.wait_timeout(st, wait);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreachable_server_leaves_no_plan_and_counts_failures() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        drop(listener);
        let client = ControlClient::spawn(
            &format!("http://{addr}"),
            Identity {
                agent_id: "a".into(),
                host: "h".into(),
                ..Default::default()
            },
            Duration::from_millis(500),
        )
        .expect("spawn");
        let t = std::time::Instant::now();
        while client.stats().calls_failed == 0 && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(client.plan().is_none());
        let s = client.stop();
        assert!(s.calls_failed >= 1);
        assert!(s.last_error.is_some_and(|e| e.contains("cannot reach")));
    }

    #[test]
    fn jitter_is_bounded_by_a_tenth_of_the_period() {
        for id in ["a", "b", "host-17"] {
            assert!(jitter(id, Duration::from_secs(2)) < Duration::from_millis(200));
            assert!(jitter(id, Duration::from_secs(600)) < Duration::from_millis(1000));
        }
    }
}
