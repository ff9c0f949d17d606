//! Every shell example in README.md and docs/*.md runs against a real server, and
//! its output is compared with what the document shows, so a doc cannot drift from
//! the code.
//!
//! How a document is read:
//! - each ```` ```sh ```` block is a list of commands (a command continues over
//!   lines ending in `\` and over open quotes); lines `# …` right after a command are
//!   its expected output, and a ```` ```json ```` block right after the sh block is
//!   the expected output of the block's last command;
//! - `<!-- doc-test: skip: <reason> -->` on the line before a fence leaves the block
//!   out (starting the server, running the whole suite, timing benches), and
//!   `<!-- doc-test: run-only: <reason> -->` runs it without comparing its output;
//! - every command must exit 0; `http://127.0.0.1:4040` is the test server and
//!   `profiledb` the binary under test. Blocks of one document run in order against
//!   one fresh server, so a document's uploads feed its later examples.
//!
//! Comparison ignores white space; `...` in the expected text matches anything, and
//! so do unix times (10 and 13 digits) and RFC 3339 timestamps, which move with the
//! clock.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::TestServer;

const DOC_URL: &str = "http://127.0.0.1:4040";

#[derive(Debug, Clone, PartialEq)]
enum Mode {
    Compare,
    RunOnly,
    Skip,
}

#[derive(Debug)]
struct Example {
    file: String,
    line: usize,
    command: String,
    expected: Option<String>,
    mode: Mode,
}

/// Whether a command's text is complete: no open quote and no trailing `\`, `|` or
/// `&&`.
fn complete(text: &str) -> bool {
    #[derive(PartialEq)]
    enum Q {
        Out,
        Single,
        Ansi,
        Double,
    }
    let mut q = Q::Out;
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match q {
            Q::Out => match c {
                b'\\' => i += 1,
                b'$' if b.get(i + 1) == Some(&b'\'') => {
                    q = Q::Ansi;
                    i += 1;
                }
                b'\'' => q = Q::Single,
                b'"' => q = Q::Double,
                _ => {}
            },
            Q::Single if c == b'\'' => q = Q::Out,
            Q::Ansi if c == b'\\' => i += 1,
            Q::Ansi if c == b'\'' => q = Q::Out,
            Q::Double if c == b'\\' => i += 1,
            Q::Double if c == b'"' => q = Q::Out,
            _ => {}
        }
        i += 1;
    }
    let end = text.trim_end();
    q == Q::Out && !end.ends_with('\\') && !end.ends_with('|') && !end.ends_with("&&")
}

fn directive(line: &str) -> Option<Mode> {
    let l = line.trim();
    let rest = l.strip_prefix("<!-- doc-test:")?.trim_start();
    if rest.starts_with("skip") {
        Some(Mode::Skip)
    } else if rest.starts_with("run-only") {
        Some(Mode::RunOnly)
    } else {
        panic!("unknown doc-test directive {l:?}")
    }
}

/// The examples of one document, in order.
fn examples(path: &Path) -> Vec<Example> {
    let text = std::fs::read_to_string(path).unwrap();
    let file = path.file_name().unwrap().to_string_lossy().to_string();
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<Example> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() != "```sh" {
            i += 1;
            continue;
        }
        let mode = (1..=2)
            .filter_map(|back| i.checked_sub(back).map(|j| lines[j]))
            .find(|l| !l.trim().is_empty())
            .and_then(directive)
            .unwrap_or(Mode::Compare);
        let mut j = i + 1;
        let first = out.len();
        let mut current: Option<Example> = None;
        while j < lines.len() && lines[j].trim() != "```" {
            let l = lines[j];
            let open = current.as_ref().is_some_and(|c| !complete(&c.command));
            if open {
                let c = current.as_mut().unwrap();
                c.command.push('\n');
                c.command.push_str(l);
            } else if let Some(expected) = l.trim_start().strip_prefix('#') {
                // (A comment before the first command is prose.)
                if let Some(c) = current.as_mut() {
                    let e = c.expected.get_or_insert_with(String::new);
                    e.push_str(expected.strip_prefix(' ').unwrap_or(expected));
                    e.push('\n');
                }
            } else if !l.trim().is_empty() {
                out.extend(current.take());
                current = Some(Example {
                    file: file.clone(),
                    line: j + 1,
                    command: l.to_string(),
                    expected: None,
                    mode: mode.clone(),
                });
            }
            j += 1;
        }
        out.extend(current.take());
        // A json block right after the sh block: the last command's output.
        if lines.get(j + 1).is_some_and(|l| l.trim() == "```json") {
            let mut k = j + 2;
            let mut json = String::new();
            while k < lines.len() && lines[k].trim() != "```" {
                json.push_str(lines[k]);
                json.push('\n');
                k += 1;
            }
            if out.len() > first {
                out.last_mut().unwrap().expected = Some(json);
            }
            j = k;
        }
        i = j + 1;
    }
    out
}

/// The expected text as an anchored, white-space-free regex.
fn pattern(expected: &str) -> regex::Regex {
    let squashed: String = expected.chars().filter(|c| !c.is_whitespace()).collect();
    const WILD: &str = "\u{1}";
    // A run of three or more dots is one wildcard (white space is gone, so `... ..`
    // is one run), and so is a quoted one, as a key and value or alone.
    let dots = regex::Regex::new(r"\.{3,}").unwrap();
    let marked = dots
        .replace_all(&squashed, WILD)
        .replace(&format!("\"{WILD}\":\"{WILD}\""), WILD)
        .replace(&format!("\"{WILD}\""), WILD);
    // Clock-dependent values: RFC 3339 times, then unix seconds and ms.
    let rfc = regex::Regex::new(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\\\.\d+)?Z").unwrap();
    let unix = regex::Regex::new(r"\b\d{10}(\d{3})?\b").unwrap();
    let mut re = String::from("(?s)^");
    for (k, part) in marked.split(WILD).enumerate() {
        if k > 0 {
            re.push_str(".*?");
        }
        let esc = regex::escape(part);
        let esc = rfc.replace_all(&esc, r"[0-9T:.Z-]+");
        re.push_str(&unix.replace_all(&esc, r"\d+"));
    }
    re.push('$');
    regex::Regex::new(&re).unwrap()
}

fn docs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = vec![root.join("README.md")];
    let mut more: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    more.sort();
    files.extend(more);
    files
}

/// A directory with `profiledb` on PATH and the files examples upload.
fn workdir(server: &TestServer) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_profiledb"), bin.join("profiledb")).unwrap();
    // `cpu.pb.gz`: a real gzip'd pprof, exported by the server itself from a folded
    // upload on a tenant of its own (so no document's data changes).
    let up = server
        .client
        .post(format!("{}/ingest?name=goapp.cpu&from=now-1m", server.url))
        .header("X-Scope-OrgID", "doc-fixtures")
        .body("main;work 5\n")
        .send()
        .unwrap();
    assert_eq!(up.status(), 200);
    let pprof = server
        .client
        .get(format!("{}/api/v1/pprof", server.url))
        .header("X-Scope-OrgID", "doc-fixtures")
        .query(&[(
            "query",
            "process_cpu:cpu:nanoseconds:cpu:nanoseconds{service_name=\"goapp\"}",
        )])
        .send()
        .unwrap();
    assert_eq!(pprof.status(), 200);
    std::fs::write(dir.path().join("cpu.pb.gz"), pprof.bytes().unwrap()).unwrap();
    dir
}

fn run(ex: &Example, server: &TestServer, dir: &Path) -> Result<(), String> {
    let cmd = ex.command.replace(DOC_URL, &server.url);
    let path = format!(
        "{}:{}",
        dir.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("timeout")
        .args(["120", "bash", "-c", &cmd])
        .current_dir(dir)
        .env("PATH", path)
        .output()
        .map_err(|e| format!("cannot run bash: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "exit {:?}\nstdout: {stdout}\nstderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    if ex.mode == Mode::Compare {
        if let Some(expected) = &ex.expected {
            let squashed: String = stdout.chars().filter(|c| !c.is_whitespace()).collect();
            if !pattern(expected).is_match(&squashed) {
                return Err(format!(
                    "output differs from the document\n--- document:\n{expected}\n--- actual:\n{stdout}"
                ));
            }
        }
    }
    Ok(())
}

#[test]
fn every_shell_example_in_the_docs_runs_as_shown() {
    if Command::new("curl").arg("--version").output().is_err() {
        return crate::external::missing("curl", "the doc examples use it");
    }
    let mut failures = Vec::new();
    let (mut ran, mut skipped) = (0, 0);
    for doc in docs() {
        let list = examples(&doc);
        if list.iter().all(|e| e.mode == Mode::Skip) {
            skipped += list.len();
            continue;
        }
        let server = TestServer::start();
        let dir = workdir(&server);
        for ex in &list {
            if ex.mode == Mode::Skip {
                skipped += 1;
                continue;
            }
            ran += 1;
            if let Err(e) = run(ex, &server, dir.path()) {
                failures.push(format!("{}:{}: {}\n{}", ex.file, ex.line, ex.command, e));
            }
        }
    }
    eprintln!("doc examples: {ran} run, {skipped} skipped");
    assert!(
        ran >= 10,
        "only {ran} doc examples ran: is the parser broken?"
    );
    assert!(
        failures.is_empty(),
        "{} doc examples fail:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn the_parser_reads_commands_outputs_and_directives() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.md");
    std::fs::write(
        &p,
        "text\n```sh\ncurl -s a \\\n  -d '{\"a\":\n 1}'\n# {\"a\": 1}\necho hi\n```\n```json\n{\"x\": ...}\n```\n\
         <!-- doc-test: skip: slow -->\n```sh\ncargo test\n```\n",
    )
    .unwrap();
    let ex = examples(&p);
    assert_eq!(ex.len(), 3);
    assert_eq!(ex[0].command, "curl -s a \\\n  -d '{\"a\":\n 1}'");
    assert_eq!(ex[0].expected.as_deref(), Some("{\"a\": 1}\n"));
    assert_eq!(ex[1].command, "echo hi");
    assert_eq!(ex[1].expected.as_deref(), Some("{\"x\": ...}\n"));
    assert_eq!(ex[2].mode, Mode::Skip);
    assert!(pattern("{\"x\": ...}").is_match("{\"x\":[1,2]}"));
    assert!(pattern("{\"t\": 1672531200000}").is_match("{\"t\":1763900000000}"));
    assert!(!pattern("{\"names\":[\"prod\"]}").is_match("{\"names\":[]}"));
    assert!(complete("echo $'a\\'b' 'c'"));
    assert!(!complete("echo 'open"));
}
