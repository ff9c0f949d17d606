//! Real programs for the symbolization tests: a C program (gcc) and a Rust one
//! (rustc), both with DWARF and an inlined function, each with a stripped copy and
//! a debug-only file (`objcopy --only-keep-debug`); binutils' `nm` for their
//! function symbols and `addr2line -f -i -C` as the oracle of what an address is.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `Some(())` when `tool` runs; else skips (or fails under `PROFILEDB_REQUIRE_EXTERNAL=1`).
pub fn need(tool: &str) -> Option<()> {
    let ok = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(());
    }
    crate::external::missing(tool, "not found (.ci/run installs it)");
    None
}

const C_SOURCE: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline __attribute__((always_inline)) unsigned long mix(unsigned long x) {
    x ^= x >> 13;
    x *= 0x9E3779B97F4A7C15ul;
    return x ^ (x >> 29);
}

__attribute__((noinline)) unsigned long hot_loop(unsigned long n) {
    unsigned long acc = 1;
    for (unsigned long i = 0; i < n; i++)
        acc = mix(acc + i);
    return acc;
}

__attribute__((noinline)) unsigned long cold_path(unsigned long n) {
    return hot_loop(n / 4) + 7;
}

/* Read at every call, so the pure calls are not hoisted out of the loop. */
volatile unsigned long work = 1000000;

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 0;
    unsigned long acc = 0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        acc += hot_loop(work) + cold_path(work / 2);
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
    printf("%lu\n", acc);
    return 0;
}
"#;

const RUST_SOURCE: &str = r#"
#[inline(always)]
fn mix(x: u64) -> u64 {
    let x = x ^ (x >> 13);
    let x = x.wrapping_mul(0x9E3779B97F4A7C15);
    x ^ (x >> 29)
}

#[inline(never)]
fn hot_loop(n: u64) -> u64 {
    let mut acc = 1u64;
    for i in 0..n {
        acc = mix(acc.wrapping_add(i));
    }
    acc
}

#[inline(never)]
fn cold_path(n: u64) -> u64 {
    hot_loop(std::hint::black_box(n / 4)).wrapping_add(7)
}

fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0.0);
    let start = std::time::Instant::now();
    let mut acc = 0u64;
    loop {
        acc = acc.wrapping_add(hot_loop(std::hint::black_box(1_000_000)));
        acc = acc.wrapping_add(cold_path(std::hint::black_box(400_000)));
        if start.elapsed().as_secs_f64() >= secs {
            break;
        }
    }
    println!("{acc}");
}
"#;

/// A compiled program and its copies.
pub struct Program {
    /// Base name of the binary (`cprog`, `rprog`).
    pub name: String,
    /// With symbols and DWARF: what the oracle reads.
    pub full: PathBuf,
    /// `strip --strip-all`: what runs in production.
    pub stripped: PathBuf,
    /// `objcopy --only-keep-debug`: what is uploaded.
    pub debug: PathBuf,
    /// Function name → (address, size), from `nm -S`.
    pub functions: Vec<(String, u64, u64)>,
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn finish(dir: &Path, name: &str, functions: &[&str]) -> Program {
    let full = dir.join(name);
    let stripped = dir.join(format!("{name}.stripped"));
    let debug = dir.join(format!("{name}.debug"));
    run(Command::new("strip")
        .arg("--strip-all")
        .arg("-o")
        .arg(&stripped)
        .arg(&full));
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&full)
        .arg(&debug));
    let nm = run(Command::new("nm")
        .args(["-S", "-C", "--defined-only"])
        .arg(&full));
    let mut found = Vec::new();
    for line in nm.lines() {
        let parts: Vec<&str> = line.splitn(4, ' ').collect();
        if let [addr, size, kind, sym] = parts[..] {
            if !kind.eq_ignore_ascii_case("t") {
                continue;
            }
            if let Some(want) = functions.iter().find(|f| sym == **f) {
                found.push((
                    want.to_string(),
                    u64::from_str_radix(addr, 16).unwrap(),
                    u64::from_str_radix(size, 16).unwrap(),
                ));
            }
        }
    }
    assert_eq!(found.len(), functions.len(), "nm found {found:?}");
    Program {
        name: name.to_string(),
        full,
        stripped,
        debug,
        functions: found,
    }
}

/// The C program, built with `gcc -g -O2` and a build id.
pub fn c_program(dir: &Path) -> Program {
    let src = dir.join("cprog.c");
    std::fs::write(&src, C_SOURCE).unwrap();
    run(Command::new("gcc")
        .args([
            "-g",
            "-O2",
            "-fno-omit-frame-pointer",
            "-Wl,--build-id",
            "-o",
        ])
        .arg(dir.join("cprog"))
        .arg(&src));
    finish(dir, "cprog", &["hot_loop", "cold_path", "main"])
}

/// The Rust program, built with `rustc -g -O` and a build id.
pub fn rust_program(dir: &Path) -> Program {
    let src = dir.join("rprog.rs");
    std::fs::write(&src, RUST_SOURCE).unwrap();
    run(Command::new("rustc")
        .args([
            "-g",
            "-C",
            "opt-level=2",
            "-C",
            "force-frame-pointers=yes",
            "-C",
            "link-arg=-Wl,--build-id",
            "-o",
        ])
        .arg(dir.join("rprog"))
        .arg(&src));
    finish(
        dir,
        "rprog",
        &["rprog::hot_loop", "rprog::cold_path", "rprog::main"],
    )
}

/// One frame as addr2line prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OracleFrame {
    pub function: String,
    pub file: String,
    pub line: u32,
}

/// `addr2line -a -f -i -C -e file ADDR…`: each address's frames, outermost first.
pub fn addr2line(file: &Path, vaddrs: &[u64]) -> Vec<Vec<OracleFrame>> {
    let mut cmd = Command::new("addr2line");
    cmd.args(["-a", "-f", "-i", "-C", "-e"]).arg(file);
    for a in vaddrs {
        cmd.arg(format!("{a:#x}"));
    }
    let out = run(&mut cmd);
    let mut all: Vec<Vec<OracleFrame>> = Vec::new();
    let mut lines = out.lines().peekable();
    while let Some(l) = lines.next() {
        if l.starts_with("0x") {
            all.push(Vec::new());
            continue;
        }
        let function = l.to_string();
        let place = lines.next().unwrap_or("??:0");
        let place = place.split(" (discriminator").next().unwrap_or(place);
        let (file, line) = place.rsplit_once(':').unwrap_or((place, "0"));
        let frame = OracleFrame {
            function,
            file: if file == "??" {
                String::new()
            } else {
                file.to_string()
            },
            line: line.parse().unwrap_or(0),
        };
        all.last_mut().expect("an address line first").push(frame);
    }
    for frames in &mut all {
        frames.reverse();
    }
    assert_eq!(all.len(), vaddrs.len());
    all
}

/// The executable load segment of an ELF file: `(p_offset, p_vaddr, p_memsz)`, from
/// `readelf -lW`.
pub fn text_segment(file: &Path) -> (u64, u64, u64) {
    let out = run(Command::new("readelf").arg("-lW").arg(file));
    for l in out.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.first() == Some(&"LOAD") && f.iter().any(|x| x.contains('E')) {
            let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
            return (hex(f[1]), hex(f[2]), hex(f[5]));
        }
    }
    panic!("no executable LOAD segment in {}", file.display());
}

/// The GNU build id, from `readelf -n`.
pub fn build_id(file: &Path) -> String {
    let out = run(Command::new("readelf").arg("-n").arg(file));
    out.lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .expect("a build id")
        .trim()
        .to_string()
}
