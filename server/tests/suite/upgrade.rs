//! Upgrading a node in place: data directories written by the previous release
//! (server/tests/data/format-v6, made by its make.sh with the build of commit
//! fa85469) opened by this build. Its segments (flushed on SIGTERM) and its WAL
//! (the process killed with SIGKILL before any flush) both answer exactly the
//! workload that was uploaded, per tenant, service, stack and hour, and go on
//! doing so after this build restarts over them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::common::{repo_root, TestServer};

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
/// The previous release's segment format; this test is about reading it.
const PREVIOUS_FORMAT: u16 = 6;

fn data() -> PathBuf {
    repo_root().join("server/tests/data/format-v6")
}

/// One upload of the workload.
struct Upload {
    tenant: String,
    service: String,
    at_s: i64,
    stack: String,
    count: i64,
}

fn workload() -> Vec<Upload> {
    std::fs::read_to_string(data().join("workload.txt"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Upload {
                tenant: f[0].into(),
                service: f[1].into(),
                at_s: f[2].parse().unwrap(),
                stack: f[3].into(),
                count: f[4].parse().unwrap(),
            }
        })
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// The format version in a segment file's trailer (docs/format.md): the u16
/// 12 bytes before the end.
fn segment_version(path: &Path) -> u16 {
    let b = std::fs::read(path).unwrap();
    u16::from_le_bytes([b[b.len() - 12], b[b.len() - 11]])
}

/// Every (tenant, service) over all time and per hour equals the workload.
fn assert_answers_the_workload(s: &TestServer, what: &str) {
    let uploads = workload();
    let mut expected: BTreeMap<(String, String, Option<i64>), BTreeMap<String, i64>> =
        BTreeMap::new();
    for u in &uploads {
        // `/ingest` reads folded counts at 100 Hz: 10 ms of CPU each.
        let ns = u.count * 10_000_000;
        for hour in [None, Some(u.at_s - u.at_s % 3600)] {
            let key = (u.tenant.clone(), u.service.clone(), hour);
            *expected
                .entry(key)
                .or_default()
                .entry(u.stack.clone())
                .or_default() += ns;
        }
    }
    for ((tenant, service, hour), stacks) in &expected {
        let range = hour.map_or((0, 4_102_444_800), |h| (h, h + 3600));
        let query = format!("{CPU}{{service_name=\"{service}\"}}");
        let (from, until) = (range.0.to_string(), range.1.to_string());
        let got = s.merged_in(Some(tenant), &query, (&from, &until));
        assert_eq!(&got, stacks, "{what}: {tenant}/{service} in {hour:?}");
    }
}

#[test]
fn a_previous_release_data_directory_answers_its_workload_exactly() {
    let segments = data().join("flushed/segments");
    let mut files = 0;
    for tenant in std::fs::read_dir(&segments).unwrap() {
        for seg in std::fs::read_dir(tenant.unwrap().path()).unwrap() {
            let path = seg.unwrap().path();
            assert_eq!(
                segment_version(&path),
                PREVIOUS_FORMAT,
                "{}",
                path.display()
            );
            files += 1;
        }
    }
    assert_eq!(files, 5, "one segment per tenant and hour");

    for (name, what) in [
        ("flushed", "segments of the previous release"),
        ("wal", "WAL of the previous release, killed before a flush"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(&data().join(name), dir.path());
        let s = TestServer::start_in(dir, |_| {});
        assert_answers_the_workload(&s, what);
        // Restarted by this build over what it made of them: the same answers
        // (a replayed WAL is not counted twice once flushed).
        let dir = s.stop();
        let s = TestServer::start_in(dir, |_| {});
        assert_answers_the_workload(&s, &format!("{what}, after a restart"));
    }
}
