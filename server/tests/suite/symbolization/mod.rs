//! Server-side symbolization end to end, with real binaries (gcc and rustc, with
//! stripped and debug-only copies), binutils' `addr2line` as the oracle, and a real
//! `debuginfod` process on loopback.
//!
//! A pprof carries only addresses inside mappings with build ids (built here from
//! `nm`'s symbol table and `readelf`'s program headers); frames show as
//! `module+0xoffset` until the debug file arrives, then as addr2line names them
//! (inlined frames expanded), with totals unchanged.

mod bad_input;
mod binaries;
mod debuginfod;

use std::collections::BTreeMap;
use std::path::Path;

use binaries::{addr2line, build_id, need, text_segment, OracleFrame, Program};

use crate::common::{encode, gzip, pprof, TestServer};

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
/// Where the tests pretend the program was loaded (a PIE's usual base).
const LOAD_BASE: u64 = 0x5555_5555_0000;

/// A pprof of `prog` as a profiler that does not symbolize sends it: each sample
/// is `[main's first address, one address of a function]`, leaf first in pprof,
/// with no function or line; the mapping carries the build id and where the text
/// segment lay. Returns it with each sample's `(virtual addresses root first, value)`.
pub struct AddressProfile {
    pub bytes: Vec<u8>,
    pub samples: Vec<(Vec<u64>, i64)>,
    pub mapping: (u64, u64, u64),
}

pub fn address_profile(prog: &Program, service_time_ns: i64) -> AddressProfile {
    let (p_offset, p_vaddr, p_memsz) = text_segment(&prog.full);
    let page = |v: u64| v & !0xfff;
    let start = LOAD_BASE + page(p_vaddr);
    let limit = LOAD_BASE + p_vaddr + p_memsz;
    let offset = page(p_offset);
    let main = prog
        .functions
        .iter()
        .find(|f| f.0.ends_with("main"))
        .expect("main");
    let mut samples = Vec::new();
    let mut value = 1_000_000i64;
    for (_, addr, size) in &prog.functions {
        for k in 0..6u64 {
            let vaddr = addr + size * k / 6;
            samples.push((vec![main.1, vaddr], value));
            value += 1_000_000;
        }
    }
    let mut strings = vec![String::new()];
    let mut sid = |s: &str| {
        strings.push(s.to_string());
        (strings.len() - 1) as i64
    };
    let (cpu, ns) = (sid("cpu"), sid("nanoseconds"));
    let file = sid(&format!("/opt/app/{}", prog.name));
    let bid = sid(&build_id(&prog.stripped));
    let mut locations: Vec<pprof::Location> = Vec::new();
    let mut loc_id = |vaddr: u64| -> u64 {
        let address = LOAD_BASE + vaddr;
        if let Some(l) = locations.iter().find(|l| l.address == address) {
            return l.id;
        }
        let id = locations.len() as u64 + 1;
        locations.push(pprof::Location {
            id,
            mapping_id: 1,
            address,
            ..Default::default()
        });
        id
    };
    let sample: Vec<pprof::Sample> = samples
        .iter()
        .map(|(stack, v)| pprof::Sample {
            location_id: stack.iter().rev().map(|&a| loc_id(a)).collect(),
            value: vec![*v],
            ..Default::default()
        })
        .collect();
    let p = pprof::Profile {
        sample_type: vec![pprof::ValueType {
            r#type: cpu,
            unit: ns,
        }],
        period_type: Some(pprof::ValueType {
            r#type: cpu,
            unit: ns,
        }),
        period: 10_000_000,
        sample,
        mapping: vec![pprof::Mapping {
            id: 1,
            memory_start: start,
            memory_limit: limit,
            file_offset: offset,
            filename: file,
            build_id: bid,
            ..Default::default()
        }],
        location: locations,
        string_table: strings.into_iter().map(Into::into).collect(),
        time_nanos: service_time_ns,
        ..Default::default()
    };
    AddressProfile {
        bytes: gzip(&encode(&p)),
        samples,
        mapping: (start, limit, offset),
    }
}

pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

pub fn ingest(url: &str, service: &str, body: &[u8]) {
    let r = reqwest::blocking::Client::new()
        .post(format!("{url}/ingest?name={service}&format=pprof"))
        .body(body.to_vec())
        .send()
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().unwrap());
}

pub fn query(service: &str) -> String {
    format!("{CPU}{{service_name=\"{service}\"}}")
}

/// The folded stacks the oracle expects: each frame named as addr2line names it,
/// inlined frames outermost first, values summed per name path.
pub fn expected_folded(prog: &Program, p: &AddressProfile) -> BTreeMap<String, i64> {
    let addrs: Vec<u64> = p.samples.iter().flat_map(|s| s.0.clone()).collect();
    let frames = addr2line(&prog.full, &addrs);
    let mut it = frames.iter();
    let mut want = BTreeMap::new();
    for (stack, v) in &p.samples {
        let names: Vec<String> = stack
            .iter()
            .flat_map(|_| it.next().unwrap().iter().map(|f| f.function.clone()))
            .collect();
        *want.entry(names.join(";")).or_insert(0) += v;
    }
    want
}

/// The folded stacks before any debug file: `module+0xoffset` per frame.
fn unsymbolized_folded(prog: &Program, p: &AddressProfile) -> BTreeMap<String, i64> {
    let (start, _, offset) = p.mapping;
    let mut want = BTreeMap::new();
    for (stack, v) in &p.samples {
        let names: Vec<String> = stack
            .iter()
            .map(|a| format!("{}+{:#x}", prog.name, LOAD_BASE + a - start + offset))
            .collect();
        *want.entry(names.join(";")).or_insert(0) += v;
    }
    want
}

fn upload_with_cli(url: &str, file: &Path) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_profiledb"))
        .args(["debuginfo", "upload", "--server", url])
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "debuginfo upload: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("build id"));
}

/// The whole path for one program: addresses before, addr2line's names after an
/// upload (without re-ingesting), group-by by line, source lines and pprof lines.
fn symbolized_after_upload(prog: &Program) {
    let s = TestServer::start();
    let p = address_profile(prog, now_ns() - 5_000_000_000);
    let svc = format!("{}-svc", prog.name);
    ingest(&s.url, &svc, &p.bytes);
    let before = s.merged(None, &query(&svc));
    assert_eq!(before, unsymbolized_folded(prog, &p), "no debug file yet");
    // Into a segment (a stop flushes the head), asked twice: the frame tree,
    // the segment's memo and the result caches all hold the address names now.
    let s = TestServer::start_in(s.stop(), |_| {});
    for _ in 0..2 {
        assert_eq!(s.merged(None, &query(&svc)), before, "from the segment");
    }

    upload_with_cli(&s.url, &prog.debug);
    let after = s.merged(None, &query(&svc));
    let want = expected_folded(prog, &p);
    assert_eq!(
        after, want,
        "named as addr2line names them, without re-ingesting"
    );
    // The file is kept in the data directory: named after a restart too.
    let s = TestServer::start_in(s.stop(), |_| {});
    assert_eq!(s.merged(None, &query(&svc)), want, "after a restart");
    assert_eq!(
        after.values().sum::<i64>(),
        before.values().sum::<i64>(),
        "totals unchanged"
    );
    assert!(
        want.keys().any(|k| k.contains("mix")),
        "the inlined function is its own frame: {want:?}"
    );

    check_lines(&s, prog, &p, &svc);
}

/// Group-by `line`, the source lines of `hot_loop` and pprof with lines, against
/// addr2line's innermost file and line of each leaf address.
fn check_lines(s: &TestServer, prog: &Program, p: &AddressProfile, svc: &str) {
    let leaves: Vec<u64> = p.samples.iter().map(|x| x.0[1]).collect();
    let frames = addr2line(&prog.full, &leaves);
    let mut by_line: BTreeMap<String, i64> = BTreeMap::new();
    for (f, (_, v)) in frames.iter().zip(&p.samples) {
        let inner = f.last().unwrap();
        *by_line
            .entry(format!("{}:{}", inner.file, inner.line))
            .or_insert(0) += v;
    }
    let r = s
        .client
        .post(format!("{}/api/v1/query", s.url))
        .json(&serde_json::json!({
            "profile_type": CPU,
            "selector": format!("{{service_name=\"{svc}\"}}"),
            "start": 0, "end": "now+1d",
            "group_by": ["line"],
        }))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().unwrap();
    let got: BTreeMap<String, i64> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["key"][0].as_str().unwrap().to_string(),
                r["value"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, by_line, "group-by line");

    // The function whose leaf frames are `hot_loop`'s (by the oracle's name).
    let hot = &prog
        .functions
        .iter()
        .find(|f| f.0.ends_with("hot_loop"))
        .unwrap()
        .0;
    let mut want_self: BTreeMap<(String, u32), i64> = BTreeMap::new();
    for (f, (_, v)) in frames.iter().zip(&p.samples) {
        let inner: &OracleFrame = f.last().unwrap();
        if &inner.function == hot {
            *want_self
                .entry((inner.file.clone(), inner.line))
                .or_insert(0) += v;
        }
    }
    let lines = s.json(
        "/api/v1/source-lines",
        &[
            ("query", &query(svc)),
            ("from", "0"),
            ("until", "now+1d"),
            ("function", hot),
        ],
    );
    let got_self: BTreeMap<(String, u32), i64> = lines["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["self"].as_i64().unwrap() > 0)
        .map(|l| {
            (
                (
                    l["file"].as_str().unwrap().to_string(),
                    l["line"].as_u64().unwrap() as u32,
                ),
                l["self"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got_self, want_self, "self per line of {hot}");
    assert_eq!(
        lines["self"].as_i64().unwrap(),
        want_self.values().sum::<i64>()
    );

    let r = s
        .client
        .get(format!("{}/api/v1/pprof/lines", s.url))
        .query(&[
            ("query", query(svc).as_str()),
            ("from", "0"),
            ("until", "now+1d"),
        ])
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let raw = r.bytes().unwrap();
    let mut d = flate2::read::GzDecoder::new(&raw[..]);
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut d, &mut bytes).unwrap();
    let prof: pprof::Profile = prost::Message::decode(&bytes[..]).unwrap();
    let total: i64 = prof.sample.iter().map(|x| x.value[0]).sum();
    assert_eq!(total, p.samples.iter().map(|x| x.1).sum::<i64>());
    let mut pprof_lines: BTreeMap<String, i64> = BTreeMap::new();
    for x in &prof.sample {
        let leaf = &prof.location[(x.location_id[0] - 1) as usize];
        let f = &prof.function[(leaf.line[0].function_id - 1) as usize];
        let file = String::from_utf8_lossy(&prof.string_table[f.filename as usize]);
        *pprof_lines
            .entry(format!("{file}:{}", leaf.line[0].line))
            .or_insert(0) += x.value[0];
    }
    assert_eq!(pprof_lines, by_line, "pprof leaf lines");
}

#[test]
fn c_program_symbolized_after_upload() {
    if need("gcc").and(need("addr2line")).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    symbolized_after_upload(&binaries::c_program(dir.path()));
}

#[test]
fn rust_program_symbolized_after_upload() {
    if need("rustc").and(need("addr2line")).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    symbolized_after_upload(&binaries::rust_program(dir.path()));
}
