//! `profiledb-agent --symbolize server` end to end: the agent samples *stripped*
//! programs (gcc and rustc builds) and sends addresses with mappings and build ids;
//! a real `profiledb serve` shows them as `module+0xoffset` until the debug file is
//! uploaded, then names every one of them as binutils' `addr2line` names the same
//! address in the unstripped binary (inlined frames expanded), totals unchanged.
//!
//! Skips (passing, with the reason) when the kernel refuses perf_event_open or the
//! server binary is not built; fails under `PROFILEDB_REQUIRE_EXTERNAL=1` when gcc,
//! rustc or binutils are missing.

mod common;

#[allow(dead_code)]
#[path = "../../server/tests/suite/symbolization/binaries.rs"]
mod binaries;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use binaries::{addr2line, need, text_segment, Program};
use common::external;
use common::{http_bytes, http_get, start_server, Kill};

fn folded(addr: SocketAddr, service: &str) -> BTreeMap<String, i64> {
    let query = format!(
        "/api/v1/merge?query=process_cpu:cpu:nanoseconds:cpu:nanoseconds%7Bservice_name%3D%22{service}%22%7D&from=0&until=now%2B1d&format=folded"
    );
    let (status, body) = http_get(addr, &query).expect("query");
    assert_eq!(status, 200, "{body}");
    body.lines()
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// Samples `prog`'s stripped binary with the agent in server mode.
fn profile_stripped(addr: SocketAddr, prog: &Program, service: &str) {
    let busy = Kill(
        Command::new(&prog.stripped)
            .arg("20")
            .stdout(Stdio::null())
            .spawn()
            .expect("run the program"),
    );
    std::thread::sleep(Duration::from_millis(200));
    let out = Command::new(env!("CARGO_BIN_EXE_profiledb-agent"))
        .args(["--server", &format!("http://{addr}")])
        .args(["--pid", &busy.0.id().to_string()])
        .args([
            "--duration",
            "4s",
            "--push-interval",
            "2s",
            "--frequency",
            "99",
        ])
        .args(["--service", service, "--max-cpu-percent", "50"])
        .args(["--symbolize", "server"])
        .output()
        .expect("run agent");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "agent failed: {stderr}");
}

/// What each `name+0xoffset` frame of the program becomes: addr2line's frames of
/// the virtual address the offset is at (outermost first), joined by `;`.
fn oracle_names(prog: &Program, before: &BTreeMap<String, i64>) -> BTreeMap<String, String> {
    let (p_offset, p_vaddr, _) = text_segment(&prog.full);
    let prefix = format!(
        "{}+0x",
        prog.stripped.file_name().unwrap().to_string_lossy()
    );
    let mut offsets: Vec<u64> = before
        .keys()
        .flat_map(|k| k.split(';'))
        .filter_map(|f| f.strip_prefix(&prefix))
        .map(|h| u64::from_str_radix(h, 16).unwrap())
        .collect();
    offsets.sort_unstable();
    offsets.dedup();
    assert!(!offsets.is_empty(), "no frame of {prefix}…: {before:?}");
    let vaddrs: Vec<u64> = offsets
        .iter()
        .map(|o| o - (p_offset & !0xfff) + (p_vaddr & !0xfff))
        .collect();
    let frames = addr2line(&prog.full, &vaddrs);
    offsets
        .iter()
        .zip(frames)
        .map(|(o, f)| {
            let names: Vec<String> = f.into_iter().map(|x| x.function).collect();
            (format!("{prefix}{o:x}"), names.join(";"))
        })
        .collect()
}

fn check(addr: SocketAddr, prog: &Program) {
    let service = format!("{}-agent-{}", prog.name, std::process::id());
    profile_stripped(addr, prog, &service);
    let before = folded(addr, &service);
    let names = oracle_names(prog, &before);
    let debug = std::fs::read(&prog.debug).unwrap();
    let (status, body) = http_bytes(
        addr,
        "POST",
        "/api/v1/debuginfo",
        "application/octet-stream",
        &debug,
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let after = folded(addr, &service);
    let mut want: BTreeMap<String, i64> = BTreeMap::new();
    for (stack, v) in &before {
        let renamed: Vec<&str> = stack
            .split(';')
            .map(|f| names.get(f).map_or(f, String::as_str))
            .collect();
        *want.entry(renamed.join(";")).or_insert(0) += v;
    }
    assert_eq!(
        after, want,
        "every frame of the program as addr2line names it"
    );
    assert_eq!(after.values().sum::<i64>(), before.values().sum::<i64>());
    let hot: i64 = after
        .iter()
        .filter(|(k, _)| k.contains("hot_loop"))
        .map(|(_, v)| v)
        .sum();
    assert!(
        hot * 2 > after.values().sum::<i64>(),
        "hot_loop holds most samples: {after:?}"
    );
}

#[test]
fn agent_in_server_mode_profiles_stripped_programs() {
    if let Err(reason) = profiledb_agent::perf::probe_system_wide() {
        external::refused("perf_event_open", reason);
        return;
    }
    if need("gcc")
        .and(need("rustc"))
        .and(need("addr2line"))
        .and(need("objcopy"))
        .is_none()
    {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((_server, addr)) = start_server(&dir.path().join("data")) else {
        eprintln!("SKIP: the profiledb server binary is not built next to this test (run `cargo build -p profiledb` first)");
        return;
    };
    check(addr, &binaries::c_program(dir.path()));
    check(addr, &binaries::rust_program(dir.path()));
}
