//! Rules through the API and the command line: bad ones refused, kept across restarts, loaded from `rules.yaml`; `profiledb diff`.

use super::*;

#[test]
fn bad_rules_are_refused_and_nothing_is_stored() {
    let s = fast_server(|_| {});
    let base = (1_700_000_000_000, 1_700_000_010_000);
    let cases = [
        (
            json!({"profile_type": "nosuch:cpu:nanoseconds:cpu:nanoseconds"}),
            "unknown profile type",
        ),
        (json!({"profile_type": "cpu"}), "unknown profile type"),
        (json!({"watch": {"function": "(unclosed"}}), "regex"),
        (json!({"window": "-1h"}), "negative"),
        (json!({"baseline": {"offset": "-1d"}}), "negative"),
        (json!({"for": "-5m"}), "negative"),
        (json!({"condition": {"manhattan": 0.3}}), "top_k"),
        (json!({"condition": {"share_delta_pp": -3}}), "positive"),
        (json!({"watch": {"everything": true}}), "invalid rule"),
    ];
    for (extra, needle) in cases {
        let (st, body) = post_rule(&s, &rule("bad", base, extra.clone()));
        assert_eq!(st, 400, "{extra}: {body}");
        let msg = body["message"].as_str().unwrap_or("");
        assert!(msg.contains(needle), "{extra}: {msg:?} lacks {needle:?}");
    }
    let list = s.json("/api/v1/alerts/rules", &[]);
    assert!(list["rules"].as_array().unwrap().is_empty(), "{list}");
    // Good rule, then duplicate and mismatched PUT.
    assert_eq!(post_rule(&s, &rule("good", base, json!({}))).0, 201);
    assert_eq!(post_rule(&s, &rule("good", base, json!({}))).0, 409);
    let put = s
        .client
        .put(format!("{}/api/v1/alerts/rules/other", s.url))
        .json(&rule("good", base, json!({})))
        .send()
        .unwrap();
    assert_eq!(put.status(), 400);
    let put = s
        .client
        .put(format!("{}/api/v1/alerts/rules/good", s.url))
        .json(&rule("good", base, json!({"window": "-3s"})))
        .send()
        .unwrap();
    assert_eq!(put.status(), 400);
    assert_eq!(rule_state(&s, "good")["rule"]["window"], "3s");
    // Rules belong to the tenant that created them.
    let other = s
        .client
        .get(format!("{}/api/v1/alerts/rules/good", s.url))
        .header("X-Scope-OrgID", "other")
        .send()
        .unwrap();
    assert_eq!(other.status(), 404);
    let other: Value = s
        .client
        .get(format!("{}/api/v1/alerts/rules", s.url))
        .header("X-Scope-OrgID", "other")
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert!(other["rules"].as_array().unwrap().is_empty());
    let del = s
        .client
        .delete(format!("{}/api/v1/alerts/rules/good", s.url))
        .header("X-Scope-OrgID", "other")
        .send()
        .unwrap();
    assert_eq!(del.status(), 404);
    let del = s
        .client
        .delete(format!("{}/api/v1/alerts/rules/good", s.url))
        .send()
        .unwrap();
    assert_eq!(del.status(), 204);
    assert_eq!(s.get("/api/v1/alerts/rules/good").status(), 404);
}

#[test]
fn rules_persist_and_rules_yaml_loads_at_start() {
    let yaml = r#"
rules:
  - name: from-file
    profile_type: process_cpu:cpu:nanoseconds:cpu:nanoseconds
    selector: '{service_name="shop"}'
    watch: {top_k: 10}
    window: 1h
    baseline: {offset: 7d}
    condition: {manhattan: 0.2}
    for: 10m
    interval: 1m
    labels: {severity: ticket}
"#;
    let rules = profiledb::alerts::rule::parse_rules_file(yaml).unwrap();
    let s = TestServer::start_with(|o| o.alerts.rules = rules.clone());
    let r = rule_state(&s, "from-file");
    assert_eq!(r["rule"]["condition"]["manhattan"], 0.2);
    assert_eq!(
        post_rule(&s, &rule("api-made", (0, 1000), json!({}))).0,
        201
    );
    let dir = s.stop();
    // Without the file: both rules come back from the catalog.
    let s = TestServer::start_in(dir, |_| {});
    let names: Vec<String> = s.json("/api/v1/alerts/rules", &[])["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rule"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["api-made", "from-file"]);
}

#[test]
fn serve_refuses_an_invalid_rules_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules.yaml");
    std::fs::write(
        &file,
        "- name: broken\n  profile_type: process_cpu:cpu:nanoseconds:cpu:nanoseconds\n  watch: {function: '(('}\n  window: 1h\n  baseline: {offset: 1d}\n  condition: {share_delta_pp: 5}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_profiledb"))
        .args(["serve", "--listen", "127.0.0.1:0", "--rules"])
        .arg(&file)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("broken") && err.contains("regex"), "{err}");
}

#[test]
fn diff_command_prints_the_top_movers() {
    let s = fast_server(|_| {});
    let now = now_ms();
    for i in 0..5 {
        assert!(ingest(
            &s.client,
            &s.url,
            now - 7_200_000 + i * 1000,
            folded(1000, 50, None)
        ));
        assert!(ingest(
            &s.client,
            &s.url,
            now - 60_000 + i * 1000,
            folded(1000, 200, None)
        ));
    }
    let help = Command::new(env!("CARGO_BIN_EXE_profiledb"))
        .args(["diff", "--help"])
        .output()
        .unwrap();
    assert!(help.status.success());
    assert!(String::from_utf8_lossy(&help.stdout).contains("--base-from"));
    let out = Command::new(env!("CARGO_BIN_EXE_profiledb"))
        .args([
            "diff",
            "--server",
            &s.url,
            "--selector",
            "{service_name=\"shop\"}",
            "--base-from",
            "now-3h",
            "--base-until",
            "now-1h",
            "--compare-from",
            "now-10m",
            "--top",
            "3",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hot = text
        .lines()
        .find(|l| l.starts_with("hot "))
        .unwrap_or_else(|| panic!("{text}"));
    let cols: Vec<&str> = hot.split_whitespace().collect();
    assert_eq!(cols[1..], ["5.00%", "20.00%", "+15.00"], "{text}");
    assert!(text.contains("manhattan (top 3)"), "{text}");
}
