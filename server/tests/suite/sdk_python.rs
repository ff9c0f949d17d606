//! The real Pyroscope Python SDK (`pyroscope-io` from PyPI) pushing to profiledb,
//! unchanged. `.ci/run` installs it into `target/sdk-venv`; elsewhere point
//! `PROFILEDB_SDK_PYTHON` at a Python that has it, or the test skips (fails with
//! `PROFILEDB_REQUIRE_EXTERNAL=1`).

use std::path::PathBuf;
use std::process::Command;

use crate::common::TestServer;

fn python() -> Option<PathBuf> {
    let p = std::env::var_os("PROFILEDB_SDK_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/sdk-venv/bin/python")
        });
    let ok = Command::new(&p)
        .args(["-c", "import pyroscope"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        crate::external::missing(
            "the Pyroscope Python SDK",
            format!(
                "no Python with pyroscope-io at {} (set PROFILEDB_SDK_PYTHON or run .ci/run)",
                p.display()
            ),
        );
        return None;
    }
    Some(p)
}

#[test]
fn python_sdk_pushes_and_its_hot_function_leads() {
    let Some(py) = python() else { return };
    let s = TestServer::start();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/pyroscope_app.py");
    let out = Command::new(py)
        .arg(&script)
        .arg(&s.url)
        .arg("12")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "SDK app failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let series = s.json(
        "/api/v1/series",
        &[
            ("query", "{service_name=\"pyapp\"}"),
            ("from", "now-1h"),
            ("until", "now+1m"),
        ],
    );
    let series = series.as_array().unwrap();
    assert!(!series.is_empty(), "the SDK's pushes stored nothing");
    assert_eq!(series[0]["env"], "test", "tags become labels");
    assert_eq!(series[0]["__name__"], "process_cpu");

    let stacks = s.merged(
        None,
        "process_cpu:cpu:nanoseconds:cpu:nanoseconds{service_name=\"pyapp\"}",
    );
    let total: i64 = stacks.values().sum();
    let hash: i64 = stacks
        .iter()
        .filter(|(k, _)| k.ends_with("busy_hash"))
        .map(|(_, v)| v)
        .sum();
    assert!(total > 0);
    // busy_hash does ~20x the work of busy_sort; sampling noise cannot flip that.
    assert!(
        hash * 2 > total,
        "busy_hash has {hash} of {total}: {stacks:?}"
    );
}
