//! Helpers of the agent's end-to-end tests: the server binary, a free port and a
//! plain HTTP/1.1 client (the agent crate depends on no HTTP client for tests).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../../../storage/tests/support/external.rs"]
pub mod external;

/// Kills and reaps a child process when dropped.
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `target/<profile>/profiledb`, next to the test executable's directory.
pub fn server_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    // target/<profile>/deps/sampling-xxxx → target/<profile>/profiledb
    let p = exe.parent()?.parent()?.join("profiledb");
    p.exists().then_some(p)
}

pub fn free_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr")
}

pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    http(addr, "GET", path, "")
}

/// One HTTP/1.1 request with a JSON body; the status and the (de-chunked) body.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    http_bytes(addr, method, path, "application/json", body.as_bytes())
}

/// One HTTP/1.1 request with a body of any type; the status and the body.
pub fn http_bytes(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )?;
    s.write_all(body)?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((status, body))
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((len, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(len.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Starts `profiledb serve` on a free port with its data in `dir`; waits until it
/// accepts connections. `None` when the binary is not built.
/// A server in `dir` for an agent test to push to, or `None` after saying why:
/// the kernel refuses perf_event_open (a skip wherever), or the `profiledb`
/// binary is not built (a failure with `PROFILEDB_REQUIRE_EXTERNAL=1`).
pub fn server_for_agent(dir: &Path) -> Option<(Kill, SocketAddr)> {
    if let Err(reason) = profiledb_agent::perf::probe_system_wide() {
        external::refused("perf_event_open", reason);
        return None;
    }
    let server = start_server(dir);
    if server.is_none() {
        external::missing(
            "the profiledb server binary",
            "it is not built next to this test (run `cargo build -p profiledb` first)",
        );
    }
    server
}

pub fn start_server(dir: &Path) -> Option<(Kill, SocketAddr)> {
    let server = server_binary()?;
    let addr = free_addr();
    let child = Kill(
        Command::new(&server)
            .args(["serve", "--data-dir"])
            .arg(dir)
            .args(["--listen", &addr.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn profiledb serve"),
    );
    // Ready, not only listening: the server accepts connections while it opens
    // its store and answers 503 meanwhile, without reading a request's body (a
    // PUT sent then could see its connection reset).
    let t = Instant::now();
    while !matches!(http_get(addr, "/ready"), Ok((200, _))) {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "server did not get ready"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    Some((child, addr))
}
