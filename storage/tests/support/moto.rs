//! A real S3-protocol server for tests and benches: moto (`pip install
//! "moto[server]"`; `.ci/run` puts it in `target/moto-venv`), started on a free
//! loopback port with one bucket, killed on drop. Shared by the storage tests,
//! the server's cluster test and the cluster bench through `#[path]`.
//!
//! moto is started through `moto_atomic.py`, which applies each writing
//! request as one step: plain moto lets two racing conditional PUTs both
//! succeed, which S3 never does and the bucket index depends on.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use profiledb_storage::BucketConfig;

// `external.rs`, which each includer declares once beside this module.
use super::external;

/// The bucket every test uses; prefixes keep tests apart.
pub const BUCKET: &str = "profiledb-test";

pub struct MotoServer {
    child: Child,
    port: u16,
}

/// `moto_server`: the CI venv, then `PROFILEDB_MOTO`, then `PATH`.
fn binary() -> Option<PathBuf> {
    let mut dir = Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    while let Some(d) = dir {
        let p = d.join("target/moto-venv/bin/moto_server");
        if p.exists() {
            return Some(p);
        }
        dir = d.parent().map(PathBuf::from);
    }
    if let Some(p) = std::env::var_os("PROFILEDB_MOTO") {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("moto_server"))
            .find(|p| p.exists())
    })
}

/// moto's own server, with each writing request applied as one step.
const ATOMIC_LAUNCHER: &str = include_str!("moto_atomic.py");

/// The interpreter `moto_server` was installed for: the one its `#!` line names
/// (pip writes it), else the `python` beside it (a venv's, or pyenv's shim), else
/// `python3` from `PATH`.
fn python_beside(moto_server: &std::path::Path) -> PathBuf {
    let shebang = std::fs::read(moto_server).ok().and_then(|b| {
        let line = b.split(|&c| c == b'\n').next()?;
        let path = std::str::from_utf8(line.strip_prefix(b"#!")?).ok()?.trim();
        let python = PathBuf::from(path);
        let named_python = python
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("python"));
        (named_python && python.exists()).then_some(python)
    });
    shebang
        .or_else(|| {
            ["python", "python3"]
                .iter()
                .map(|name| moto_server.with_file_name(name))
                .find(|p| p.exists())
        })
        .unwrap_or_else(|| PathBuf::from("python3"))
}

/// One HTTP/1.1 request with an empty body; the status code.
fn request(port: u16, method: &str, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

impl MotoServer {
    /// Starts moto, or says why not and returns None (the caller skips); with
    /// `PROFILEDB_REQUIRE_EXTERNAL=1`, panics instead.
    pub fn start() -> Option<MotoServer> {
        let Some(bin) = binary() else {
            external::missing(
                "moto",
                "no moto_server (pip install \"moto[server]\" into target/moto-venv, as .ci/run does, or set PROFILEDB_MOTO)",
            );
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        let child = match Command::new(python_beside(&bin))
            .args([
                "-c",
                ATOMIC_LAUNCHER,
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                external::missing("moto", format!("cannot start {}: {e}", bin.display()));
                return None;
            }
        };
        let mut server = MotoServer { child, port };
        let deadline = Instant::now() + Duration::from_secs(30);
        while request(port, "GET", "/").is_none() {
            // moto is installed, so a launcher that dies is a breakage to see,
            // not a reason to skip the S3 tests quietly.
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!(
                    "{} is installed but storage/tests/support/moto_atomic.py exited ({status}); \
                     run it with `{} -c \"$(cat storage/tests/support/moto_atomic.py)\" -p 5000` to see why",
                    bin.display(),
                    python_beside(&bin).display()
                );
            }
            if Instant::now() > deadline {
                external::missing(
                    "moto",
                    format!("moto at port {port} did not answer within 30 s"),
                );
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        match request(port, "PUT", &format!("/{BUCKET}")) {
            Some(200) => Some(server),
            other => {
                external::missing(
                    "moto",
                    format!("moto refused to create the bucket: {other:?}"),
                );
                None
            }
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The bucket under `prefix`, reached over plain HTTP with moto's dummy keys.
    pub fn config(&self, prefix: &str) -> BucketConfig {
        BucketConfig {
            url: format!("s3://{BUCKET}/{prefix}"),
            endpoint: Some(self.endpoint()),
            region: Some("us-east-1".into()),
            access_key_id: Some("test".into()),
            secret_access_key: Some("test".into()),
            allow_http: true,
        }
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
