//! One query split across queriers (docs/architecture.md, "Queries split across
//! queriers"). A querier asked a query whose range reads at least
//! `--split-min-blocks` sources cuts the range into parts of about equal bytes
//! (`plan.rs`), keeps the first and asks peers (`peers.rs`) for the others over
//! `POST /internal/v1/partial` (`wire.rs`, `endpoint.rs`), and puts the answers
//! together as one querier would (`queries.rs`).
//!
//! A part whose peer fails (refused, reset, timed out, answering for another
//! tenant or from another view of the index) is asked of the next peer, then
//! computed here: this querier sees every block too, so an answer is always
//! complete or an error, never silently partial.

mod endpoint;
pub mod peers;
mod plan;
pub mod queries;
mod wire;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use parking_lot::Mutex;
use profiledb_storage::{Querier, TenantId, TimeRange};

pub use endpoint::routes;
pub use peers::Peer;
use wire::{answer, PartAnswer, PartKind, PartReply, PartRequest, FROM_HEADER, PARTIAL_PATH};

use crate::error::ApiError;
use crate::http::TENANT_HEADER;

/// Most bytes of one part's answer (a merge tree of a million frames is about
/// 60 MB of JSON).
const MAX_PART_ANSWER: u64 = 512 << 20;

/// The split's settings (`--querier-peers`, `--split-min-blocks`,
/// `--split-part-timeout-ms`).
#[derive(Clone, Debug)]
pub struct SplitOptions {
    pub peers: Vec<Peer>,
    /// A query reading fewer sources is answered here alone.
    pub min_sources: usize,
    /// How long one peer gets for one part before it is asked elsewhere.
    pub part_timeout: Duration,
}

impl Default for SplitOptions {
    fn default() -> Self {
        SplitOptions {
            peers: Vec::new(),
            min_sources: 16,
            part_timeout: Duration::from_secs(30),
        }
    }
}

/// What the split counted, for `/metrics`.
#[derive(Default)]
pub struct SplitStats {
    /// Queries this querier split.
    pub queries: AtomicU64,
    /// Parts a peer answered (first ask or retry).
    pub parts_by_peers: AtomicU64,
    /// Parts answered by a second peer after the first failed.
    pub parts_retried: AtomicU64,
    /// Parts computed here after every peer asked failed.
    pub parts_local: AtomicU64,
    /// Parts this querier answered for peers.
    pub parts_served: AtomicU64,
    /// Parts this querier refused (its view of the index differed).
    pub parts_refused: AtomicU64,
}

/// A querier's side of splitting: asking peers and answering them.
pub struct Split {
    opts: SplitOptions,
    /// This node's id: a part sent to this very process is refused by it.
    node: String,
    /// Sent as a bearer token: with authentication on, peers take parts only
    /// from a holder of the admin token.
    token: Option<String>,
    agent: ureq::Agent,
    /// Addresses found to be this querier (a peer list naming every querier).
    myself: Mutex<BTreeSet<SocketAddr>>,
    pub stats: SplitStats,
}

impl Split {
    pub fn new(opts: SplitOptions, node: String, token: Option<String>) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(opts.part_timeout))
            .http_status_as_error(false)
            .build()
            .new_agent();
        Split {
            opts,
            node,
            token,
            agent,
            myself: Mutex::default(),
            stats: SplitStats::default(),
        }
    }

    /// This querier's own part of `kind` over `range`, computed by `own` while
    /// the peers compute theirs, and the other parts' answers; `None` when the
    /// query is not split (no peer, few sources, or a source only this process
    /// holds).
    fn run<T: Send>(
        &self,
        querier: &Querier,
        tenant: &TenantId,
        range: TimeRange,
        kind: &PartKind,
        own: impl FnOnce(TimeRange) -> Result<T, ApiError>,
    ) -> Result<Option<(T, Vec<PartAnswer>)>, ApiError> {
        if self.opts.peers.is_empty() {
            return Ok(None);
        }
        let spans = querier.source_spans(tenant, range)?;
        if spans.len() < self.opts.min_sources.max(2) || spans.iter().any(|s| s.head) {
            return Ok(None);
        }
        let peers = peers::resolve_all(&self.opts.peers, &self.myself.lock());
        let parts = plan::cut(range, &spans, peers.len() + 1);
        let Some((own_range, theirs)) = parts.split_first().filter(|(_, t)| !t.is_empty()) else {
            return Ok(None);
        };
        self.stats.queries.fetch_add(1, Relaxed);
        std::thread::scope(|s| {
            let asks: Vec<_> = theirs
                .iter()
                .enumerate()
                .map(|(i, &r)| {
                    let peers = &peers;
                    s.spawn(move || self.remote_part(querier, tenant, r, kind, i, peers))
                })
                .collect();
            let mine = own(*own_range);
            let mut theirs = Vec::with_capacity(asks.len());
            for a in asks {
                theirs.push(
                    a.join()
                        .unwrap_or_else(|_| Err(ApiError::internal("a query part panicked")))?,
                );
            }
            Ok(Some((mine?, theirs)))
        })
    }

    /// Part `i` over `r`: its peer, else the next peer, else here.
    fn remote_part(
        &self,
        querier: &Querier,
        tenant: &TenantId,
        r: TimeRange,
        kind: &PartKind,
        i: usize,
        peers: &[SocketAddr],
    ) -> Result<PartAnswer, ApiError> {
        let req = PartRequest {
            tenant: tenant.as_str().to_string(),
            start_ms: r.start_ms,
            end_ms: r.end_ms,
            expect: querier.source_spans(tenant, r)?,
            kind: kind.clone(),
        };
        let mut tries: Vec<SocketAddr> =
            [i, i + 1].iter().map(|k| peers[k % peers.len()]).collect();
        tries.dedup();
        for (n, addr) in tries.into_iter().enumerate() {
            match self.ask(addr, &req) {
                Ok(a) => {
                    self.stats.parts_by_peers.fetch_add(1, Relaxed);
                    if n > 0 {
                        self.stats.parts_retried.fetch_add(1, Relaxed);
                    }
                    return Ok(a);
                }
                Err(e) => tracing::warn!(peer = %addr, error = %e, "a query part failed on a peer"),
            }
        }
        self.stats.parts_local.fetch_add(1, Relaxed);
        answer(querier, tenant, r, kind)
    }

    /// Asks the querier at `addr` for one part; every way it can fail is an
    /// error (the caller asks elsewhere).
    fn ask(&self, addr: SocketAddr, req: &PartRequest) -> Result<PartAnswer, PeerError> {
        let url = format!("http://{addr}{PARTIAL_PATH}");
        let mut rb = self
            .agent
            .post(&url)
            .header(FROM_HEADER, &self.node)
            .header(TENANT_HEADER, &req.tenant);
        if let Some(t) = &self.token {
            rb = rb.header("Authorization", format!("Bearer {t}"));
        }
        let body = serde_json::to_vec(req).map_err(PeerError::Encode)?;
        let mut resp = rb
            .header("Content-Type", "application/json")
            .send(&body[..])
            .map_err(PeerError::Transport)?;
        let status = resp.status();
        if status == ureq::http::StatusCode::MISDIRECTED_REQUEST {
            self.myself.lock().insert(addr);
            return Err(PeerError::Myself);
        }
        if !status.is_success() {
            let text = resp.body_mut().read_to_string().unwrap_or_default();
            return Err(PeerError::Refused { status, text });
        }
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(MAX_PART_ANSWER)
            .read_to_vec()
            .map_err(PeerError::Unreadable)?;
        let reply: PartReply = serde_json::from_slice(&bytes).map_err(PeerError::Undecodable)?;
        if reply.tenant != req.tenant {
            return Err(PeerError::OtherTenant {
                answered: reply.tenant,
                asked: req.tenant.clone(),
            });
        }
        if !req.kind.expects(&reply.answer) {
            return Err(PeerError::OtherKind);
        }
        if let PartAnswer::Merge(t) = &reply.answer {
            t.check().map_err(PeerError::BadTree)?;
        }
        Ok(reply.answer)
    }

    /// `/metrics` lines.
    pub fn render_metrics(&self, out: &mut String) {
        let s = &self.stats;
        for (name, help, v) in [
            (
                "profiledb_query_split_total",
                "Queries this querier split across queriers.",
                &s.queries,
            ),
            (
                "profiledb_query_split_parts_by_peers_total",
                "Parts of split queries answered by peers.",
                &s.parts_by_peers,
            ),
            (
                "profiledb_query_split_parts_retried_total",
                "Parts answered by a second peer after the first failed.",
                &s.parts_retried,
            ),
            (
                "profiledb_query_split_parts_local_total",
                "Parts computed by the asking querier after every peer asked failed.",
                &s.parts_local,
            ),
            (
                "profiledb_query_parts_served_total",
                "Parts of other queriers' split queries this querier answered.",
                &s.parts_served,
            ),
            (
                "profiledb_query_parts_refused_total",
                "Parts refused because this querier's view of the bucket index differed.",
                &s.parts_refused,
            ),
        ] {
            crate::metrics::family(out, name, "counter", help, v.load(Relaxed));
        }
    }
}

/// Why a peer gave no usable part; the part is then asked of the next peer, or
/// computed here.
#[derive(Debug, thiserror::Error)]
enum PeerError {
    #[error("cannot encode the request: {0}")]
    Encode(serde_json::Error),
    #[error("{0}")]
    Transport(ureq::Error),
    /// The address is this querier's own (it answered 421): never asked again.
    #[error("the address is this querier's own")]
    Myself,
    #[error("answered HTTP {status}: {text:.300}")]
    Refused {
        status: ureq::http::StatusCode,
        text: String,
    },
    #[error("unreadable answer: {0}")]
    Unreadable(ureq::Error),
    #[error("unreadable answer: {0}")]
    Undecodable(serde_json::Error),
    #[error("answered for tenant {answered:?}, asked for {asked:?}")]
    OtherTenant { answered: String, asked: String },
    #[error("answered another kind of part")]
    OtherKind,
    /// A merge tree that does not hold together.
    #[error("{0}")]
    BadTree(profiledb_storage::StorageError),
}
