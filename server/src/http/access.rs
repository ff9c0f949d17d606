//! What every request leaves behind: a request id (the client's `X-Request-Id`
//! when it sends a usable one, else a new one), returned in the response's
//! `X-Request-Id` and carried by the `request` span every log line of the
//! handler is in; one log line when it is answered (tenant, route, status,
//! duration); the HTTP counters and the latency histogram of `/metrics`.

use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use profiledb_storage::TenantId;
use tracing::Instrument;

use super::AppRef;
use crate::metrics::latency::UNMATCHED;

/// The header carrying the request id, both ways.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Longest client request id kept; a longer one is replaced.
const MAX_ID_LEN: usize = 128;

/// The tenant the gate decided a request is for, left in the response's
/// extensions for the log line.
#[derive(Clone, Debug)]
pub struct ServedTenant(pub TenantId);

/// Routes probed every few seconds by load balancers and Prometheus: their line is
/// logged at debug, so the info log is about traffic.
const PROBES: [&str; 3] = ["/ready", "/healthy", "/metrics"];

/// The client's id when it is 1 to 128 visible ASCII characters (what a proxy or
/// a tracing header holds), else a new random one.
fn request_id(req: &Request) -> String {
    let theirs = req
        .headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            !v.is_empty() && v.len() <= MAX_ID_LEN && v.bytes().all(|b| b.is_ascii_graphic())
        });
    match theirs {
        Some(id) => id.to_string(),
        None => new_id(),
    }
}

/// 32 hex digits from the OS's random source (the clock and a counter if it
/// fails, which is unique enough for a log).
fn new_id() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        bytes[..8].copy_from_slice(&profiledb_storage::now_ms().to_be_bytes());
        bytes[8..].copy_from_slice(&n.to_be_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The middleware, around every route (inside routing, so the route template is
/// known).
pub async fn observe(State(state): State<AppRef>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let id = request_id(&req);
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or(UNMATCHED, |p| p.as_str())
        .to_string();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let span = tracing::info_span!("request", request_id = %id);
    let mut resp = next.run(req).instrument(span).await;
    let took = started.elapsed();
    let status = resp.status();

    let m = &state.http;
    m.requests.fetch_add(1, Ordering::Relaxed);
    if status.is_client_error() {
        m.client_errors.fetch_add(1, Ordering::Relaxed);
    } else if status.is_server_error() {
        m.server_errors.fetch_add(1, Ordering::Relaxed);
    }
    m.latency
        .observe(&route, method.as_str(), status.as_u16(), took);

    let tenant = resp.extensions().get::<ServedTenant>().map(|t| t.0.clone());
    let tenant = tenant.as_ref().map_or("-", |t| t.as_str());
    let duration_ms = took.as_secs_f64() * 1000.0;
    let status = status.as_u16();
    if PROBES.contains(&route.as_str()) {
        tracing::debug!(request_id = %id, tenant, method = %method, route, path, status, duration_ms, "request");
    } else {
        tracing::info!(request_id = %id, tenant, method = %method, route, path, status, duration_ms, "request");
    }
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(REQUEST_ID, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_header(v: &str) -> Request {
        Request::builder()
            .header("x-request-id", v)
            .body(axum::body::Body::empty())
            .unwrap()
    }

    #[test]
    fn a_usable_client_id_is_kept_and_any_other_replaced() {
        assert_eq!(request_id(&with_header("abc-123")), "abc-123");
        let long = "x".repeat(MAX_ID_LEN + 1);
        for bad in ["", "has space", long.as_str()] {
            let id = request_id(&with_header(bad));
            assert_ne!(id, bad);
            assert_eq!(id.len(), 32);
            assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        }
        assert_ne!(new_id(), new_id());
    }
}
