//! The web UI: hand-written ES modules, CSS and one HTML page embedded in the binary.
//!
//! `/` and every `/ui/...` path answer the same page, so a deep link reloads to the
//! view its path and query string describe; the scripts read that state themselves.
//! Assets live under `/ui/assets/` with a content-derived `ETag` (`304` on a match)
//! and `Cache-Control: no-cache`, so a browser revalidates instead of running stale
//! code after an upgrade. Text assets are gzip'd once, on first request, when the
//! client accepts it.

use std::sync::OnceLock;

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;

use super::AppRef;
use crate::error::ApiError;

/// One embedded file: its path under `/ui/assets/`, content type and bytes.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

macro_rules! assets {
    ($($path:literal => $ctype:expr),* $(,)?) => {
        &[$(Asset {
            path: $path,
            content_type: $ctype,
            bytes: include_bytes!(concat!("../../ui/", $path)),
        }),*]
    };
}

const JS: &str = "text/javascript; charset=utf-8";

static ASSETS: &[Asset] = assets! {
    "index.html" => "text/html; charset=utf-8",
    "app.css" => "text/css; charset=utf-8",
    "favicon.svg" => "image/svg+xml",
    "js/main.js" => JS,
    "js/api.js" => JS,
    "js/state.js" => JS,
    "js/dom.js" => JS,
    "js/format.js" => JS,
    "js/flamemodel.js" => JS,
    "js/flame.js" => JS,
    "js/chart.js" => JS,
    "js/table.js" => JS,
    "js/controls.js" => JS,
    "js/explore.js" => JS,
    "js/labels.js" => JS,
    "js/compare.js" => JS,
    "js/groupby.js" => JS,
    "js/fleet.js" => JS,
    "js/alerts.js" => JS,
    "js/admin.js" => JS,
};

/// An asset with its precomputed validator and (lazily) its gzip'd form.
struct Served {
    asset: &'static Asset,
    etag: HeaderValue,
    gzip: OnceLock<Option<Bytes>>,
}

fn served() -> &'static [Served] {
    static SERVED: OnceLock<Vec<Served>> = OnceLock::new();
    SERVED.get_or_init(|| {
        ASSETS
            .iter()
            .map(|a| Served {
                asset: a,
                etag: etag_of(a.bytes),
                gzip: OnceLock::new(),
            })
            .collect()
    })
}

/// FNV-1a over the bytes: the assets are fixed at build time, so any stable hash that
/// changes with the content is a valid strong validator.
fn etag_of(bytes: &[u8]) -> HeaderValue {
    let h = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    // Hex digits and quotes are always a valid header value.
    HeaderValue::from_str(&format!("\"{h:016x}-{}\"", bytes.len()))
        .unwrap_or(HeaderValue::from_static("\"0\""))
}

pub fn routes() -> Router<AppRef> {
    Router::new()
        .route("/", get(page))
        .route("/ui", get(page))
        .route("/ui/", get(page))
        .route("/ui/assets/{*path}", get(asset))
        .route("/ui/{*view}", get(page))
}

async fn page(headers: HeaderMap) -> Response {
    respond("index.html", &headers).unwrap_or_else(IntoResponse::into_response)
}

async fn asset(Path(path): Path<String>, headers: HeaderMap) -> Response {
    respond(&path, &headers).unwrap_or_else(IntoResponse::into_response)
}

fn respond(path: &str, headers: &HeaderMap) -> Result<Response, ApiError> {
    let s = served()
        .iter()
        .find(|s| s.asset.path == path)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("no UI asset {path:?}"),
            )
        })?;
    let common = [
        (header::ETAG, s.etag.clone()),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (header::VARY, HeaderValue::from_static("Accept-Encoding")),
    ];
    if headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| matches_etag(v, &s.etag))
    {
        return Ok((StatusCode::NOT_MODIFIED, common).into_response());
    }
    let ctype = [(
        header::CONTENT_TYPE,
        HeaderValue::from_static(s.asset.content_type),
    )];
    let gzip = accepts_gzip(headers)
        .then(|| s.gzip.get_or_init(|| gzip(s.asset)).clone())
        .flatten();
    Ok(match gzip {
        Some(z) => (
            common,
            ctype,
            [(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"))],
            z,
        )
            .into_response(),
        None => (common, ctype, s.asset.bytes).into_response(),
    })
}

fn matches_etag(v: &HeaderValue, etag: &HeaderValue) -> bool {
    v.to_str().is_ok_and(|v| {
        v.split(',')
            .map(|t| t.trim().trim_start_matches("W/"))
            .any(|t| t == "*" || t.as_bytes() == etag.as_bytes())
    })
}

fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',').any(|e| {
                let mut parts = e.split(';');
                let name = parts.next().unwrap_or("").trim();
                let refused = parts.any(|p| p.trim().replace(' ', "") == "q=0");
                name.eq_ignore_ascii_case("gzip") && !refused
            })
        })
}

/// The gzip'd asset, or `None` when it is not worth it (images, tiny files).
fn gzip(a: &Asset) -> Option<Bytes> {
    use profiledb_proto::gzip::{gzip, Compression};
    if a.content_type.starts_with("image/") || a.bytes.len() < 512 {
        return None;
    }
    gzip(a.bytes, Compression::best()).ok().map(Bytes::from)
}
