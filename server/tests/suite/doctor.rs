//! `profiledb doctor` as an operator runs it: the real binary on a real directory
//! (writable; unwritable to the user running it; too small for the WAL) and, with
//! moto, on a real bucket (every check passes and the probe objects are gone
//! afterwards; an unreachable endpoint and a missing bucket fail).

use crate::moto;

use std::process::{Command, Output};

use profiledb_storage::Bucket;

use crate::common::{free_port, skip_or_fail};

const BIN: &str = env!("CARGO_BIN_EXE_profiledb");

fn doctor(cmd: &mut Command, args: &[&str]) -> (i32, String) {
    let out: Output = cmd.arg("doctor").args(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

fn lines_with<'a>(text: &'a str, verdict: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| l.trim_start().starts_with(verdict))
        .collect()
}

#[test]
fn doctor_passes_a_writable_directory_and_fails_unwritable_and_full_ones() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let d = data.to_str().unwrap();
    let (code, text) = doctor(
        &mut Command::new(BIN),
        &["--data-dir", d, "--memory-mb", "64"],
    );
    assert_eq!(code, 0, "{text}");
    assert_eq!(lines_with(&text, "ok").len(), 3, "{text}");
    assert!(
        std::fs::read_dir(&data).unwrap().next().is_none(),
        "the probe is removed"
    );

    // A WAL bound no disk here has.
    let (code, text) = doctor(
        &mut Command::new(BIN),
        &["--data-dir", d, "--head-max-mb", "1000000000"],
    );
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("FAIL  free disk"), "{text}");
    assert!(text.contains("error: 1 check(s) failed"), "{text}");

    // A directory its user cannot write: root's, checked as nobody (root
    // writes anywhere), else one made read-only.
    use std::os::unix::fs::PermissionsExt;
    let root = String::from_utf8(Command::new("id").arg("-u").output().unwrap().stdout).unwrap();
    let (code, text) = if root.trim() == "0" {
        let bin = dir.path().join("profiledb");
        std::fs::copy(BIN, &bin).unwrap();
        for p in [dir.path(), &data, &bin] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
            .arg(&bin);
        doctor(&mut cmd, &["--data-dir", d, "--memory-mb", "64"])
    } else {
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o555)).unwrap();
        doctor(
            &mut Command::new(BIN),
            &["--data-dir", d, "--memory-mb", "64"],
        )
    };
    assert_eq!(code, 1, "{text}");
    let failed = lines_with(&text, "FAIL");
    assert_eq!(failed.len(), 1, "{text}");
    assert!(
        failed[0].contains("writable") && failed[0].contains("Permission denied"),
        "{text}"
    );
}

fn bucket_args<'a>(url: &'a str, endpoint: &'a str) -> [&'a str; 4] {
    ["--storage", url, "--s3-endpoint", endpoint]
}

fn with_keys(cmd: &mut Command) -> &mut Command {
    cmd.env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
}

#[test]
fn doctor_checks_a_real_bucket_and_leaves_nothing_behind() {
    let Some(moto) = moto::MotoServer::start() else {
        return skip_or_fail("moto is not installed (target/moto-venv, as .ci/run makes it)");
    };
    let url = format!("s3://{}/doctor-test", moto::BUCKET);
    let endpoint = moto.endpoint();
    let (code, text) = doctor(
        with_keys(&mut Command::new(BIN)),
        &bucket_args(&url, &endpoint),
    );
    assert_eq!(code, 0, "{text}");
    for check in [
        "reachable",
        "write, read",
        "conditional create",
        "conditional replace",
        "clock skew",
        "delete",
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("  ok    {check}"))),
            "{check} ok in {text}"
        );
    }
    // moto runs on this machine's clock.
    assert!(text.contains("clock skew         +0.0 s"), "{text}");
    let bucket = Bucket::open(&moto.config("doctor-test")).unwrap();
    assert_eq!(bucket.list("").unwrap(), vec![], "probes deleted");

    // Nothing listening: unreachable, and nothing else is tried.
    let closed = format!("http://127.0.0.1:{}", free_port());
    let (code, text) = doctor(
        with_keys(&mut Command::new(BIN)),
        &bucket_args(&url, &closed),
    );
    assert_eq!(code, 1, "{text}");
    assert_eq!(lines_with(&text, "FAIL").len(), 1, "{text}");
    assert!(text.contains("FAIL  reachable"), "{text}");

    // A bucket that does not exist.
    let missing = "s3://no-such-bucket/p";
    let (code, text) = doctor(
        with_keys(&mut Command::new(BIN)),
        &bucket_args(missing, &endpoint),
    );
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("FAIL  reachable"), "{text}");
}
