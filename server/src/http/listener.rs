//! The TCP listener the server accepts on, with one addition: the few answers hyper
//! writes by itself give the same JSON error body as every other error.
//!
//! hyper answers a request it cannot parse (a URL over 65,534 bytes, a raw `"` or
//! space in the URL, headers over its limit) with `400`, `414` or `431` and an empty
//! body before any of our code runs, then closes the connection. No hook of hyper's
//! lets a server change that answer, so the connection's writer recognises it — a
//! head with one of those statuses, `content-length: 0` and nothing after it, which
//! the router never sends (every error of ours has a JSON body) — and writes the
//! same head with a JSON body saying what was wrong.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// Accepts like [`TcpListener`]; each connection is a [`JsonErrorStream`].
pub struct JsonErrorListener(pub TcpListener);

impl axum::serve::Listener for JsonErrorListener {
    type Io = JsonErrorStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = axum::serve::Listener::accept(&mut self.0).await;
        (JsonErrorStream::new(io), addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// A TCP connection whose writer replaces hyper's bodiless parse-error answers.
pub struct JsonErrorStream {
    inner: TcpStream,
    /// A replacement answer not yet fully written, and how far it got.
    pending: Option<(Vec<u8>, usize)>,
}

impl JsonErrorStream {
    fn new(inner: TcpStream) -> Self {
        JsonErrorStream {
            inner,
            pending: None,
        }
    }

    /// Writes what is left of a replacement answer; `Ready` once it is all out.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, done)) = &mut self.pending {
            if *done == bytes.len() {
                self.pending = None;
                break;
            }
            match Pin::new(&mut self.inner).poll_write(cx, &bytes[*done..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => *done += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Takes `buf` as written when it is one of hyper's own error heads, queueing
    /// the JSON answer in its place.
    fn replaced(&mut self, buf: &[u8]) -> bool {
        match replacement(buf) {
            Some(answer) => {
                self.pending = Some((answer, 0));
                true
            }
            None => false,
        }
    }
}

/// The statuses hyper answers by itself, and what each means to a client.
fn parse_error_message(status: u16) -> Option<(&'static str, &'static str)> {
    Some(match status {
        400 => (
            "invalid_argument",
            "the request could not be parsed: its first line or a header is malformed \
             (characters such as '\"', '<', '>', '{', '}' or a space must be percent-encoded in a URL)",
        ),
        414 => (
            "uri_too_long",
            "the URL is longer than 65,534 bytes, the most the server reads: send a long \
             query in a POST body (POST /api/v1/query, /api/v1/diff, querier.v1 Connect calls)",
        ),
        431 => (
            "headers_too_large",
            "the request's headers are larger than the server reads (about 400 KiB)",
        ),
        _ => return None,
    })
}

/// The JSON answer replacing `head`, when `head` is exactly a bodiless head of a
/// status hyper answers by itself.
fn replacement(head: &[u8]) -> Option<Vec<u8>> {
    // hyper's answer is a status line, `content-length: 0` and a date: well under this.
    if head.len() > 256 || !head.ends_with(b"\r\n\r\n") {
        return None;
    }
    let text = std::str::from_utf8(head).ok()?;
    let status_line = text.strip_prefix("HTTP/1.1 ")?;
    let status: u16 = status_line.get(..3)?.parse().ok()?;
    let (code, message) = parse_error_message(status)?;
    let mut lines = text.split("\r\n");
    let first = lines.next()?;
    let mut bodiless = false;
    let mut kept = Vec::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':')?;
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" if value.trim() == "0" => bodiless = true,
            "date" | "connection" => kept.push(line),
            // Anything else means the router wrote it: leave it alone.
            _ => return None,
        }
    }
    if !bodiless {
        return None;
    }
    let body = serde_json::json!({ "code": code, "message": message }).to_string();
    let mut out = format!(
        "{first}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    if !kept
        .iter()
        .any(|l| l.to_ascii_lowercase().starts_with("connection"))
    {
        out.push_str("connection: close\r\n");
    }
    for line in kept {
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    out.push_str(&body);
    Some(out.into_bytes())
}

impl AsyncRead for JsonErrorStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for JsonErrorStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.drain(cx)?.is_pending() {
            return Poll::Pending;
        }
        if this.replaced(buf) {
            // Written or not yet, the bytes are ours now: flush and shutdown finish them.
            let _ = this.drain(cx)?;
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.drain(cx)?.is_pending() {
            return Poll::Pending;
        }
        let mut non_empty = bufs.iter().filter(|b| !b.is_empty());
        if let (Some(only), None) = (non_empty.next(), non_empty.next()) {
            if this.replaced(only) {
                let _ = this.drain(cx)?;
                return Poll::Ready(Ok(only.len()));
            }
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.drain(cx)?.is_pending() {
            return Poll::Pending;
        }
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.drain(cx)?.is_pending() {
            return Poll::Pending;
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hypers_own_answers_get_a_json_body() {
        let head = b"HTTP/1.1 414 URI Too Long\r\nconnection: close\r\ncontent-length: 0\r\ndate: Sun, 29 Nov 2026 06:00:00 GMT\r\n\r\n";
        let out = String::from_utf8(replacement(head).expect("replaced")).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 414 URI Too Long\r\n"), "{head}");
        assert!(head.contains("content-type: application/json"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        assert!(head.contains("date: Sun, 29 Nov 2026"));
        assert_eq!(head.matches("connection: close").count(), 1);
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["code"], "uri_too_long");
    }

    #[test]
    fn the_routers_answers_are_left_alone() {
        for head in [
            // A body follows: the router's.
            &b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 20\r\n\r\n"[..],
            // A status hyper never writes by itself.
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            // Not a whole head.
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n",
            b"HTTP/1.1 400 Bad Request\r\nx-other: 1\r\ncontent-length: 0\r\n\r\n",
        ] {
            assert!(
                replacement(head).is_none(),
                "{}",
                String::from_utf8_lossy(head)
            );
        }
    }
}
