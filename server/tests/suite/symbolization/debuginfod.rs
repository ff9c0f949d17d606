//! A real `debuginfod` (elfutils) serving the programs' debug files on loopback,
//! found by the real `profiledb` binary through `DEBUGINFOD_URLS`: frames of a
//! profile of the stripped programs get addr2line's names without any upload.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::binaries::{build_id, need};
use super::{address_profile, expected_folded, ingest, now_ns, query};
use crate::common::{free_port, merged_at, wait_for};

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn get(url: &str) -> Option<reqwest::blocking::Response> {
    reqwest::blocking::Client::new().get(url).send().ok()
}

/// `debuginfod -F -p PORT DIR` over `dir`, once it serves `build_ids`.
fn start_debuginfod(dir: &std::path::Path, build_ids: &[String]) -> (Proc, String) {
    let port = free_port();
    let child = Command::new("debuginfod")
        .args(["-F", "-p", &port.to_string(), "-d"])
        .arg(dir.join("debuginfod.sqlite"))
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("debuginfod starts");
    let proc = Proc(child);
    let url = format!("http://127.0.0.1:{port}");
    for id in build_ids {
        wait_for(60, "debuginfod to index the programs", || {
            get(&format!("{url}/buildid/{id}/debuginfo")).filter(|r| r.status() == 200)
        });
    }
    (proc, url)
}

fn start_profiledb(data: &std::path::Path, debuginfod: &str) -> (Proc, String) {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_profiledb"))
        .args(["serve", "--data-dir"])
        .arg(data)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("DEBUGINFOD_URLS", debuginfod)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let proc = Proc(child);
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(&format!("{url}/ready")).is_none_or(|r| r.status() != 200) {
        assert!(Instant::now() < deadline, "profiledb did not become ready");
        std::thread::sleep(Duration::from_millis(20));
    }
    (proc, url)
}

#[test]
fn debug_files_come_from_a_real_debuginfod() {
    if need("gcc")
        .and(need("rustc"))
        .and(need("addr2line"))
        .and(need("debuginfod"))
        .is_none()
    {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let served = work.path().join("served");
    std::fs::create_dir_all(&served).unwrap();
    let progs = [
        super::binaries::c_program(work.path()),
        super::binaries::rust_program(work.path()),
    ];
    // debuginfod indexes the unstripped binaries (their DWARF is the debuginfo).
    for p in &progs {
        std::fs::copy(&p.full, served.join(&p.name)).unwrap();
    }
    let ids: Vec<String> = progs.iter().map(|p| build_id(&p.stripped)).collect();
    let (_debuginfod, dbg_url) = start_debuginfod(&served, &ids);
    let data = tempfile::tempdir().unwrap();
    let (_server, url) = start_profiledb(data.path(), &dbg_url);

    for p in &progs {
        let prof = address_profile(p, now_ns() - 5_000_000_000);
        let svc = format!("{}-dbg", p.name);
        ingest(&url, &svc, &prof.bytes);
        let want = expected_folded(p, &prof);
        // The first query asks debuginfod in the background and shows addresses;
        // the file arrives and a later query names the frames.
        let got = wait_for(60, "frames named from debuginfod", || {
            let got = merged_at(
                &reqwest::blocking::Client::new(),
                &url,
                None,
                &query(&svc),
                ("0", "now+1d"),
            );
            (got == want).then_some(got)
        });
        assert_eq!(
            got.values().sum::<i64>(),
            prof.samples.iter().map(|s| s.1).sum::<i64>()
        );
    }
    let metrics = get(&format!("{url}/metrics")).unwrap().text().unwrap();
    assert!(
        metrics.contains("profiledb_symbolizer_fetches_ok_total 2"),
        "{metrics}"
    );
    let cached = metrics
        .lines()
        .find_map(|l| l.strip_prefix("profiledb_symbolizer_cache_bytes "))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap();
    assert!(cached > 0, "the parsed files are counted");
}
