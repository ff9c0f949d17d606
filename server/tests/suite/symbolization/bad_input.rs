//! Debug files that must be refused with a clear 4xx, leaving nothing stored and
//! the server serving: a truncated ELF, a file whose build id is not the one
//! claimed, a section claiming a huge decompressed size, malformed DWARF.

use std::path::Path;
use std::process::Command;

use super::binaries::{build_id, need};
use crate::common::TestServer;

fn upload(s: &TestServer, bytes: Vec<u8>, claimed: Option<&str>) -> (u16, serde_json::Value) {
    let mut req = s
        .client
        .post(format!("{}/api/v1/debuginfo", s.url))
        .body(bytes);
    if let Some(id) = claimed {
        req = req.query(&[("build_id", id)]);
    }
    let r = req.send().unwrap();
    let status = r.status().as_u16();
    (status, r.json().unwrap_or_default())
}

/// The file offset of section `name`, from `readelf -SW`.
fn section_offset(file: &Path, name: &str) -> usize {
    let out = Command::new("readelf")
        .arg("-SW")
        .arg(file)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    for l in text.lines() {
        let t: Vec<&str> = l.split_whitespace().collect();
        if let Some(i) = t.iter().position(|x| *x == name) {
            return usize::from_str_radix(t[i + 3], 16).unwrap();
        }
    }
    panic!("no section {name} in {}", file.display());
}

/// What is sent, the build id claimed, the status and a word of the message.
type Case = (&'static str, Vec<u8>, Option<String>, u16, &'static str);

#[test]
fn bad_debug_files_are_refused_and_nothing_is_stored() {
    if need("gcc").and(need("objcopy")).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let prog = super::binaries::c_program(dir.path());
    let good = std::fs::read(&prog.debug).unwrap();
    let id = build_id(&prog.debug);
    let s = TestServer::start();

    let cases: Vec<Case> = {
        let mut v = Vec::new();
        v.push(("empty body", Vec::new(), None, 400, "empty"));
        v.push((
            "not an ELF",
            b"hello, world".to_vec(),
            None,
            422,
            "not an ELF",
        ));
        v.push((
            "truncated ELF",
            good[..good.len() / 3].to_vec(),
            None,
            422,
            "",
        ));
        let mut other = id.clone().into_bytes();
        other[0] = if other[0] == b'0' { b'1' } else { b'0' };
        let other = String::from_utf8(other).unwrap();
        v.push((
            "another build id claimed",
            good.clone(),
            Some(other),
            422,
            "not",
        ));
        v.push((
            "a build id that is not hex",
            good.clone(),
            Some("../x".into()),
            400,
            "hex",
        ));

        let mut info = good.clone();
        let at = section_offset(&prog.debug, ".debug_info");
        // A unit length in DWARF's reserved range.
        info[at..at + 4].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
        v.push(("malformed .debug_info", info, None, 422, "DWARF"));

        let mut line = good.clone();
        let at = section_offset(&prog.debug, ".debug_line");
        line[at..at + 4].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
        v.push(("malformed .debug_line", line, None, 422, "DWARF"));

        let z = dir.path().join("z.debug");
        let ok = Command::new("objcopy")
            .args(["--compress-debug-sections=zlib"])
            .arg(&prog.debug)
            .arg(&z)
            .status()
            .unwrap();
        assert!(ok.success());
        let mut huge = std::fs::read(&z).unwrap();
        let at = section_offset(&z, ".debug_info");
        // Elf64_Chdr: ch_type, ch_reserved, then ch_size: a terabyte.
        huge[at + 8..at + 16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        v.push((
            "a section claiming a terabyte",
            huge,
            None,
            413,
            "above the limit",
        ));
        v
    };
    for (what, bytes, claimed, status, says) in cases {
        let (got, body) = upload(&s, bytes, claimed.as_deref());
        assert_eq!(got, status, "{what}: {body}");
        let msg = body["message"]
            .as_str()
            .or(body["error"].as_str())
            .unwrap_or("");
        assert!(msg.contains(says), "{what}: {body}");
        assert_eq!(
            s.get("/ready").status(),
            200,
            "{what}: server still serving"
        );
    }
    let listed = s.json("/api/v1/debuginfo", &[]);
    assert_eq!(listed["files"], serde_json::json!([]), "nothing stored");
    let stored: Vec<_> = std::fs::read_dir(s.dir.path().join("debuginfo"))
        .unwrap()
        .collect();
    assert!(stored.is_empty(), "no file left in the data directory");

    // The good file is still accepted afterwards, by its claimed id too.
    let (got, body) = upload(&s, good, Some(&id.to_uppercase()));
    assert_eq!(got, 200, "{body}");
    assert_eq!(body["build_id"], id.as_str());
    assert_eq!(body["has_dwarf"], true);
}
