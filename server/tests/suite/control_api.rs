//! The fleet controller over real HTTP: seeded machine sampling, sample targets,
//! overrides that win and expire, the agent list, bad input, and state that survives
//! a restart.

use std::collections::BTreeSet;

use crate::common::TestServer;
use serde_json::{json, Value};

const GET_PLAN: &str = "/control.v1.ControlService/GetPlan";

fn put_policy(s: &TestServer, policy: Value) -> reqwest::blocking::Response {
    s.client
        .put(format!("{}/api/v1/admin/agents/policy", s.url))
        .json(&policy)
        .send()
        .expect("put policy")
}

/// One check-in (Connect JSON, as an agent without protobuf would send it).
fn check_in(s: &TestServer, body: Value) -> Value {
    let r = s
        .client
        .post(format!("{}{GET_PLAN}", s.url))
        .json(&body)
        .send()
        .expect("check in");
    assert_eq!(r.status(), 200);
    r.json::<Value>().expect("json")["plan"].clone()
}

fn chosen(s: &TestServer, hosts: usize) -> BTreeSet<String> {
    (0..hosts)
        .map(|i| format!("host-{i}"))
        .filter(|h| check_in(s, json!({"agentId": h, "host": h}))["profile"] == true)
        .collect()
}

#[test]
fn machine_sampling_is_seeded_and_survives_a_restart() {
    let s = TestServer::start_with(|o| o.control.seed = 7);
    let r = put_policy(
        &s,
        json!({"machine_fraction": 0.25, "period_secs": 3600, "window_secs": 600}),
    );
    assert_eq!(r.status(), 200);
    let first = chosen(&s, 400);
    // 25 % of 400 = 100, binomial sd ≈ 8.7: within 4 sd.
    assert!((65..=135).contains(&first.len()), "{}", first.len());
    let plan = check_in(&s, json!({"agentId": "host-0", "host": "host-0"}));
    assert_eq!(plan["periodSecs"], 3600);
    // protojson omits zero values.
    assert_eq!(
        plan["windowSecs"].as_u64().unwrap_or(0),
        if first.contains("host-0") { 600 } else { 0 }
    );
    let dir = s.stop();
    let s = TestServer::start_in(dir, |o| o.control.seed = 7);
    assert_eq!(
        chosen(&s, 400),
        first,
        "same seed, same period: same machines"
    );
    let policy: Value = s.json("/api/v1/admin/agents/policy", &[]);
    assert_eq!(policy["machine_fraction"], 0.25, "the policy was saved");
    let dir = s.stop();
    let s = TestServer::start_in(dir, |o| o.control.seed = 8);
    assert_ne!(
        chosen(&s, 400),
        first,
        "another seed chooses other machines"
    );
}

#[test]
fn fleet_budget_caps_machines_per_period() {
    let s = TestServer::start();
    put_policy(&s, json!({"machine_fraction": 1.0, "max_machines": 5}));
    // The budget ranks the live agents: register them, then ask again.
    chosen(&s, 40);
    assert_eq!(chosen(&s, 40).len(), 5);
    let m = s.get("/metrics").text().expect("metrics");
    assert!(m.contains("profiledb_control_agents 40"), "{m}");
}

#[test]
fn sample_target_sets_frequency_from_reported_samples() {
    let s = TestServer::start();
    put_policy(
        &s,
        json!({"period_secs": 60, "window_secs": 60,
               "events": [{"event": "cpu-clock", "frequency_hz": 19}],
               "sample_target": {"samples_per_hour": 36000, "min_hz": 1, "max_hz": 99}}),
    );
    let first = check_in(&s, json!({"agentId": "a1", "host": "h1", "service": "api"}));
    assert_eq!(
        first["events"][0]["frequencyHz"], "19",
        "no samples seen yet"
    );
    // The report is totals: 1900 samples at 19 Hz since the previous check-in.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let next = check_in(
        &s,
        json!({"agentId": "a1", "host": "h1", "service": "api",
               "report": {"samples": "1900", "services": [{"service": "api", "samples": "1900"}]}}),
    );
    // 100 samples per Hz in about a second: far more than 36 000/hour needs.
    assert_eq!(next["events"][0]["frequencyHz"], "1", "{next}");
    assert!(next["reason"]
        .as_str()
        .unwrap_or("")
        .contains("samples/hour of api"));
}

#[test]
fn overrides_win_expire_and_are_listed() {
    let s = TestServer::start();
    put_policy(&s, json!({"machine_fraction": 0.0}));
    let off = check_in(
        &s,
        json!({"agentId": "a", "host": "web-1", "service": "web"}),
    );
    assert_eq!(off["profile"], Value::Null, "false is the default, omitted");
    let r = s
        .client
        .post(format!("{}/api/v1/admin/agents/overrides", s.url))
        .json(&json!({"service": "web", "event": "instructions", "frequency_hz": 49, "until": "1h", "reason": "slow checkout"}))
        .send()
        .expect("override");
    assert_eq!(r.status(), 201);
    let created: Value = r.json().expect("json");
    let id = created["override"]["id"].as_u64().expect("id");
    let on = check_in(
        &s,
        json!({"agentId": "a", "host": "web-1", "service": "web",
                                 "availableEvents": ["cpu-clock", "instructions"]}),
    );
    assert_eq!(on["profile"], true);
    let events: Vec<(String, String)> = on["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap_or("").into(),
                e["frequencyHz"].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    assert_eq!(
        events,
        vec![
            ("cpu-clock".into(), "19".into()),
            ("instructions".into(), "49".into())
        ]
    );
    let other = check_in(&s, json!({"agentId": "b", "host": "db-1", "service": "db"}));
    assert_eq!(
        other["profile"],
        Value::Null,
        "other services keep the policy"
    );

    let agents: Value = s.json("/api/v1/agents", &[]);
    assert_eq!(agents["summary"]["agents"], 2);
    assert_eq!(agents["summary"]["profiling"], 1);
    let web = &agents["agents"][1];
    assert_eq!(web["host"], "web-1");
    assert_eq!(web["status"], "ok");
    assert_eq!(web["plan"]["events"][1]["frequency_hz"], 49);

    let list: Value = s.json("/api/v1/admin/agents/overrides", &[]);
    assert_eq!(list["overrides"][0]["reason"], "slow checkout");
    let del = s
        .client
        .delete(format!("{}/api/v1/admin/agents/overrides/{id}", s.url))
        .send()
        .expect("delete");
    assert_eq!(del.status(), 204);
    let back = check_in(
        &s,
        json!({"agentId": "a", "host": "web-1", "service": "web"}),
    );
    assert_eq!(back["profile"], Value::Null, "override gone: policy again");
    // Another tenant sees none of it.
    let t: Value = s
        .client
        .get(format!("{}/api/v1/agents", s.url))
        .header("X-Scope-OrgID", "other")
        .send()
        .expect("agents")
        .json()
        .expect("json");
    assert_eq!(t["summary"]["agents"], 0);
}

#[test]
fn bad_input_is_refused_with_the_reason() {
    let s = TestServer::start();
    let cases = [
        (json!({"machine_fraction": 2}), "machine_fraction"),
        (json!({"period_secs": 0}), "period_secs"),
        (
            json!({"events": [{"event": "bogus", "frequency_hz": 19}]}),
            "unknown event",
        ),
        (json!({"no_such_field": 1}), "unknown field"),
    ];
    for (policy, want) in cases {
        let r = put_policy(&s, policy);
        assert_eq!(r.status(), 400);
        let body = r.text().expect("text");
        assert!(body.contains(want), "{body} lacks {want}");
    }
    let r = s
        .client
        .post(format!("{}{GET_PLAN}", s.url))
        .json(&json!({"agentId": "x"}))
        .send()
        .expect("post");
    assert_eq!(r.status(), 400);
    assert!(r.text().expect("text").contains("host is empty"));
    let past = s
        .client
        .post(format!("{}/api/v1/admin/agents/overrides", s.url))
        .json(&json!({"host": "h", "until": 1}))
        .send()
        .expect("post");
    assert_eq!(past.status(), 400);
    let missing = s
        .client
        .delete(format!("{}/api/v1/admin/agents/overrides/99", s.url))
        .send()
        .expect("delete");
    assert_eq!(missing.status(), 404);
    // Nothing bad was stored: the default policy is still in force.
    let policy: Value = s.json("/api/v1/admin/agents/policy", &[]);
    assert_eq!(policy["machine_fraction"], 1.0);
}

#[test]
fn silent_agents_are_shown_as_silent() {
    let s = TestServer::start();
    put_policy(
        &s,
        json!({"period_secs": 1, "window_secs": 1, "silent_after_periods": 1}),
    );
    check_in(&s, json!({"agentId": "a", "host": "quiet"}));
    crate::common::wait_for(10, "the agent to be shown as silent", || {
        let v: Value = s.json("/api/v1/agents", &[]);
        (v["agents"][0]["status"] == "silent").then_some(())
    });
    let m = s.get("/metrics").text().expect("metrics");
    assert!(m.contains("profiledb_control_agents_silent 1"), "{m}");
}
