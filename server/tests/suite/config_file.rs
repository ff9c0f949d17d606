//! `profiledb serve --config FILE` and `profiledb config …` as a user runs them:
//! the real binary over a real file, a flag given as well winning over it, and a
//! mistaken file refused before anything starts.

use std::process::{Command, Stdio};

use crate::common::{free_port, spawn_ready};

const BIN: &str = env!("CARGO_BIN_EXE_profiledb");

fn profiledb(args: &[&str]) -> std::process::Output {
    Command::new(BIN).args(args).output().unwrap()
}

#[test]
fn serve_takes_its_settings_from_the_file_and_flags_win_over_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = free_port();
    let file = dir.path().join("profiledb.yaml");
    std::fs::write(
        &file,
        format!(
            "server:\n  listen: 127.0.0.1:{port}\n  data_dir: {}\n  max_body_mb: 1\n\
             storage:\n  fsync: never\n  compaction_interval_minutes: 0\n",
            data.display()
        ),
    )
    .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--config"])
        .arg(&file)
        .args(["--max-body-mb", "2"])
        .stderr(Stdio::null());
    // Listening where the file says.
    let mut child = spawn_ready(cmd, &url);
    let client = reqwest::blocking::Client::new();
    assert!(data.join("LOCK").exists(), "the file's data directory");
    // A body between the file's 1 MiB and the flag's 2 MiB is taken; past 2 MiB
    // it is refused.
    let folded = |bytes: usize| {
        let line = "main;work;leaf 1\n";
        line.repeat(bytes / line.len() + 1)
    };
    let post = |body: String| {
        client
            .post(format!("{url}/ingest?name=cfg.cpu&from=now-10s"))
            .body(body)
            .send()
            .unwrap()
            .status()
    };
    assert_eq!(post(folded(3 << 19)), 200, "1.5 MiB under the flag's limit");
    assert_eq!(post(folded(5 << 19)), 413, "2.5 MiB over the flag's limit");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn config_check_passes_the_printed_defaults_and_names_every_mistake() {
    let dir = tempfile::tempdir().unwrap();
    let out = profiledb(&["config", "print-defaults"]);
    assert!(out.status.success(), "{out:?}");
    let defaults = dir.path().join("defaults.yaml");
    std::fs::write(&defaults, &out.stdout).unwrap();
    let out = profiledb(&["config", "check", defaults.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(": ok, "), "{text}");
    assert!(text.contains("  server.listen = 127.0.0.1:4040"), "{text}");

    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "cluster:\n  bucket_retention_dayz: 3\nmemory:\n  memory_mb: lots\n",
    )
    .unwrap();
    let bad = bad.to_str().unwrap();
    let out = profiledb(&["config", "check", bad]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cluster.bucket_retention_dayz: unknown field; did you mean cluster.bucket_retention_days?"),
        "{err}"
    );
    assert!(
        err.contains("memory.memory_mb: invalid value 'lots'"),
        "{err}"
    );
    // `serve` refuses it the same way, before it listens or opens anything.
    let data = dir.path().join("data");
    let out = profiledb(&[
        "serve",
        "--config",
        bad,
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cluster.bucket_retention_dayz"), "{err}");
    assert!(!data.exists());
}
