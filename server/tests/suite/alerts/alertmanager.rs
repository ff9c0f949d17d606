//! Delivery to a real Alertmanager (Debian `prometheus-alertmanager`).

use super::*;

/// A real Alertmanager (Debian `prometheus-alertmanager`), started here.
#[test]
fn delivers_to_a_real_alertmanager() {
    let bin = ["prometheus-alertmanager", "alertmanager"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    let Some(bin) = bin else {
        return crate::external::missing(
            "prometheus-alertmanager",
            "apt-get install prometheus-alertmanager (.ci/run installs it)",
        );
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("alertmanager.yml");
    std::fs::write(
        &cfg,
        "route:\n  receiver: blackhole\n  group_wait: 1s\nreceivers:\n  - name: blackhole\n",
    )
    .unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let am_url = format!("http://127.0.0.1:{port}");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _am = Kill(
        Command::new(bin)
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--cluster.listen-address=")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let client = reqwest::blocking::Client::new();
    wait_for(60, "Alertmanager /-/ready", || {
        client
            .get(format!("{am_url}/-/ready"))
            .send()
            .ok()
            .filter(|r| r.status() == 200)
    });
    let s = fast_server(|o| {
        o.alerts = AlertOptions {
            alertmanager_url: Some(am_url.clone()),
            resend_delay: Some(Duration::from_secs(1)),
            ..AlertOptions::default()
        }
    });
    let feeder = hot_rule(&s, "am-hot", json!({"for": "0s"}));
    let alert = wait_for(60, "the alert in Alertmanager", || {
        let v: Value = client
            .get(format!("{am_url}/api/v2/alerts"))
            .send()
            .ok()?
            .json()
            .ok()?;
        v.as_array()?
            .iter()
            .find(|a| a["labels"]["alertname"] == "am-hot")
            .cloned()
    });
    assert_eq!(alert["labels"]["severity"], "page");
    assert_eq!(alert["annotations"]["function"], "hot");
    assert_eq!(alert["status"]["state"], "active");
    assert!(alert["annotations"]["diff_flamegraph"]
        .as_str()
        .unwrap()
        .contains("/api/v1/diff.svg?"));
    assert!(alert["generatorURL"].as_str().unwrap().starts_with(&s.url));
    assert!(
        metric(
            &s,
            "profiledb_alert_notifications_sent_total{target=\"alertmanager\"}"
        ) >= 1
    );
    // Back to normal: the resolved alert (endsAt = resolve time) leaves the active list.
    feeder.hot.store(50, Ordering::Relaxed);
    wait_for(60, "the alert to resolve in Alertmanager", || {
        let v: Value = client
            .get(format!("{am_url}/api/v2/alerts"))
            .send()
            .ok()?
            .json()
            .ok()?;
        let active = v
            .as_array()?
            .iter()
            .any(|a| a["labels"]["alertname"] == "am-hot" && a["status"]["state"] == "active");
        (!active).then_some(())
    });
    assert_eq!(rule_state(&s, "am-hot")["state"], "resolved");
}
