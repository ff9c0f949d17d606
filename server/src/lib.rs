//! The profiledb server: the HTTP API over the storage engine and the ingest
//! decoders, plus the command-line entry points.
//!
//! [`Server::bind`] binds the listener first and opens the store in the background,
//! so `/ready` can answer 503 while a large WAL replays and 200 once the store is
//! open; every data endpoint answers 503 until then.

// No unwrap() outside tests: a panic on bad input would take the process down.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod adhoc;
pub mod alerts;
pub mod cli;
pub mod cluster;
pub mod control;
pub mod debuginfo;
pub mod error;
pub mod http;
pub mod memory;
pub mod metrics;
pub mod pipeline;
pub mod retention;
pub mod tenancy;
pub mod time;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use anyhow::Context;
use profiledb_storage::{Querier, QueryLimits};
use profiledb_storage::{ReplayProgress, Store, StoreConfig};
use tokio::net::TcpListener;
use tracing::{error, info};

use crate::error::ApiError;
use crate::metrics::HttpMetrics;
use crate::pipeline::{Pipeline, PipelineConfig};

/// Everything `profiledb serve` needs.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub store: StoreConfig,
    pub ingest: PipelineConfig,
    /// Largest request body read, before any decompression. Default 64 MiB.
    pub max_body_bytes: usize,
    /// Bytes of query results kept for repeated queries over immutable segments.
    /// Default 256 MiB; 0 disables the cache.
    pub query_cache_bytes: u64,
    /// Per-query time and memory budgets.
    pub query_limits: QueryLimits,
    /// The query share of the memory budget: a quarter bounds the shared frame tree
    /// (set in `store`), the rest is reserved by running queries
    /// ([`http::query_memory`]). Default 512 MiB.
    pub query_memory_bytes: u64,
    /// How long a query waits for room in its share before a 503. Default 10 s.
    pub query_queue_wait: std::time::Duration,
    /// When set, `/api/v1/admin/*` requires `Authorization: Bearer <token>`.
    pub admin_token: Option<String>,
    /// Alert rules from a file and where notifications go.
    pub alerts: alerts::AlertOptions,
    /// Authentication and per-tenant limits.
    pub tenancy: tenancy::TenancyOptions,
    /// Run as part of a cluster sharing a bucket (`--storage`); `None` is the
    /// single-node default.
    pub cluster: Option<cluster::ClusterOptions>,
    /// The fleet controller agents ask for sampling plans.
    pub control: control::ControlOptions,
    /// How long `/ready` waits after the store opens for the warm-up of the
    /// last day's segments (see [`Readiness::Warming`]); zero: not at all.
    /// Default 30 s.
    pub ready_warm_up: std::time::Duration,
    /// Symbolization of frames kept as addresses: debug files and debuginfod.
    pub debuginfo: debuginfo::DebuginfoOptions,
    /// Bounds of the ad-hoc profiles (uploads viewed without being stored).
    pub adhoc: adhoc::AdhocOptions,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 4040)),
            data_dir: PathBuf::from("./data"),
            store: StoreConfig::default(),
            ingest: PipelineConfig::default(),
            max_body_bytes: 64 << 20,
            query_cache_bytes: 256 << 20,
            query_limits: QueryLimits::default(),
            query_memory_bytes: 512 << 20,
            query_queue_wait: std::time::Duration::from_secs(10),
            admin_token: None,
            alerts: alerts::AlertOptions::default(),
            tenancy: tenancy::TenancyOptions::default(),
            cluster: None,
            control: control::ControlOptions::default(),
            ready_warm_up: std::time::Duration::from_secs(30),
            debuginfo: debuginfo::DebuginfoOptions::default(),
            adhoc: adhoc::AdhocOptions::default(),
        }
    }
}

/// Where a process stands on its way to serving, as `/ready` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// The store is opening (the WAL replaying) or, in a cluster, a role is
    /// not serving yet: data endpoints answer 503.
    Opening,
    /// Everything serves, and the warm-up is still decoding the segments of the
    /// last day: queries are answered, the first ones over recent data doing
    /// that work themselves, competing with it (several times slower:
    /// docs/perf-log/2026-11-27-round-19-ready-after-warm-up.md), so a load
    /// balancer should wait.
    Warming,
    /// A cluster role waits for the object store (`cluster::Waiting` says for
    /// what); its endpoints answer 503 with the reason meanwhile.
    Waiting(cluster::Waiting),
    Ready,
}

impl Readiness {
    /// A serving process's readiness: ready once its recent data is `warm`, or
    /// once it has `waited` as long as `limit` allows.
    fn of_serving(warm: bool, waited: std::time::Duration, limit: std::time::Duration) -> Self {
        if warm || waited >= limit {
            Readiness::Ready
        } else {
            Readiness::Warming
        }
    }
}

/// State shared by every handler.
pub struct AppState {
    store: OnceLock<Arc<Store>>,
    pipeline: OnceLock<Pipeline>,
    querier: OnceLock<Arc<Querier>>,
    /// Whole answers of segment-only queries (see `http::query::answers`).
    pub(crate) answers: http::query::AnswerCache,
    /// The alerting subsystem, started once the store is open.
    pub alerts: OnceLock<Arc<alerts::Alerts>>,
    /// Query admission against the query share of the memory budget.
    pub admission: http::query_memory::Admission,
    /// The WAL replay's progress while the store opens (for `/ready`).
    pub replay: ReplayProgress,
    pub http: HttpMetrics,
    /// Uploads viewed without being stored.
    pub adhoc: adhoc::AdhocProfiles,
    /// Credentials and per-tenant limits.
    pub tenancy: Arc<tenancy::Tenancy>,
    /// The cluster roles, once open (with `--storage`).
    pub cluster: OnceLock<Arc<cluster::Running>>,
    /// The fleet controller (policies in `<data-dir>/control.json`).
    pub control: OnceLock<Arc<control::Controller>>,
    pub started: Instant,
    /// When every role of this process started serving (see [`Readiness`]).
    serving_since: OnceLock<Instant>,
    pub options: ServeOptions,
}

impl AppState {
    pub fn new(options: ServeOptions, tenancy: tenancy::Tenancy) -> Self {
        AppState {
            tenancy: Arc::new(tenancy),
            store: OnceLock::new(),
            cluster: OnceLock::new(),
            control: OnceLock::new(),
            pipeline: OnceLock::new(),
            querier: OnceLock::new(),
            answers: http::query::AnswerCache::new(options.query_cache_bytes),
            alerts: OnceLock::new(),
            admission: http::query_memory::Admission::new(
                options.query_memory_bytes - options.query_memory_bytes / 4,
                memory::MemoryPlan::per_query(options.query_memory_bytes),
                options.query_queue_wait,
            ),
            replay: ReplayProgress::default(),
            http: HttpMetrics::default(),
            adhoc: adhoc::AdhocProfiles::new(options.adhoc.clone()),
            started: Instant::now(),
            serving_since: OnceLock::new(),
            options,
        }
    }

    /// The store queries read, or a 503 while it is still opening (or, in a
    /// cluster, while the bucket is unreachable), or a 421 when this process runs
    /// no querier role.
    pub fn store(&self) -> Result<Arc<Store>, ApiError> {
        self.check_role(|r| r.querier, "queries", "querier")?;
        if let Some(c) = self.cluster.get() {
            c.check_queries()?;
        }
        self.store
            .get()
            .cloned()
            .ok_or_else(|| ApiError::unavailable("the store is still opening (replaying the WAL)"))
    }

    /// A 421 when this process is part of a cluster without the role `has`.
    fn check_role(
        &self,
        has: fn(&cluster::Roles) -> bool,
        what: &str,
        role: &str,
    ) -> Result<(), ApiError> {
        match &self.options.cluster {
            Some(c) if !has(&c.roles) => Err(ApiError::new(
                axum::http::StatusCode::MISDIRECTED_REQUEST,
                "wrong_role",
                format!(
                    "this process runs --role {}: send {what} to a process with the {role} role",
                    c.roles.names()
                ),
            )),
            _ => Ok(()),
        }
    }

    /// The `--ack bucket` gate of a cluster writer.
    pub fn upload_gate(&self) -> Option<cluster::UploadGate> {
        let c = self.cluster.get()?;
        let opts = self.options.cluster.as_ref()?;
        match (opts.ack, &c.uploader) {
            (cluster::Ack::Bucket, Some(u)) => Some(cluster::UploadGate(u.clone())),
            _ => None,
        }
    }

    /// Whether every role of this process serves and the warm-up of recent data
    /// is done (or waited for long enough): what `/ready` answers 200 to.
    pub fn readiness(&self) -> Readiness {
        let serving = match &self.options.cluster {
            None => self.store.get().is_some(),
            Some(_) => match self.cluster.get() {
                Some(c) => match c.waiting() {
                    Some(w) => return Readiness::Waiting(w),
                    None => true,
                },
                None => false,
            },
        };
        if !serving {
            return Readiness::Opening;
        }
        let since = *self.serving_since.get_or_init(Instant::now);
        let warm = self.store.get().is_none_or(|s| s.recent_data_warm());
        Readiness::of_serving(warm, since.elapsed(), self.options.ready_warm_up)
    }

    pub fn store_if_open(&self) -> Option<&Arc<Store>> {
        self.store.get()
    }

    /// The ingest pipeline, or a 503 while the store is still opening, or a 421
    /// when this process runs no writer role.
    pub fn pipeline(&self) -> Result<&Pipeline, ApiError> {
        self.check_role(|r| r.writer, "writes", "writer")?;
        self.pipeline
            .get()
            .ok_or_else(|| ApiError::unavailable("the store is still opening (replaying the WAL)"))
    }

    pub fn pipeline_if_open(&self) -> Option<&Pipeline> {
        self.pipeline.get()
    }

    /// The querier (result cache, function indexes, limits) of the open store.
    pub fn querier(&self) -> Result<Arc<Querier>, ApiError> {
        self.check_role(|r| r.querier, "queries", "querier")?;
        if let Some(c) = self.cluster.get() {
            c.check_queries()?;
        }
        self.querier
            .get()
            .cloned()
            .ok_or_else(|| ApiError::unavailable("the store is still opening (replaying the WAL)"))
    }

    pub fn querier_if_open(&self) -> Option<&Arc<Querier>> {
        self.querier.get()
    }
}

/// A bound, not yet serving, server.
pub struct Server {
    listener: TcpListener,
    state: Arc<AppState>,
}

impl Server {
    pub async fn bind(options: ServeOptions) -> anyhow::Result<Server> {
        let listener = TcpListener::bind(options.listen)
            .await
            .with_context(|| format!("cannot listen on {}", options.listen))?;
        let tenancy = tenancy::Tenancy::open(options.tenancy.clone())?;
        std::fs::create_dir_all(&options.data_dir)
            .with_context(|| format!("cannot create {}", options.data_dir.display()))?;
        let controller = control::Controller::open(&options.data_dir, options.control.clone())?;
        let state = Arc::new(AppState::new(options, tenancy));
        let _ = state.control.set(Arc::new(controller));
        Ok(Server { listener, state })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or(self.state.options.listen)
    }

    /// Opens the store, serves until `shutdown` resolves, then flushes the head.
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let Server { listener, state } = self;
        let addr = listener.local_addr()?;
        let app = http::router(state.clone());
        let (fail_tx, mut fail_rx) = tokio::sync::mpsc::channel::<anyhow::Error>(1);

        let opener = {
            let state = state.clone();
            let handle = tokio::runtime::Handle::current();
            let fail_tx = fail_tx.clone();
            tokio::task::spawn_blocking(move || {
                if let Err(e) = open_roles(&state, addr, handle) {
                    let _ = fail_tx.blocking_send(e);
                }
            })
        };
        info!(%addr, data_dir = %state.options.data_dir.display(), "profiledb listening on http://{addr}");
        if state.tenancy.credentials().is_some() {
            tokio::spawn(state.tenancy.clone().reload_on_sighup());
        }

        let open_failure = Arc::new(std::sync::Mutex::new(None::<anyhow::Error>));
        let stop = {
            let open_failure = open_failure.clone();
            async move {
                tokio::select! {
                    _ = shutdown => info!("shutdown requested; finishing in-flight requests"),
                    Some(e) = fail_rx.recv() => {
                        if let Ok(mut slot) = open_failure.lock() {
                            *slot = Some(e);
                        }
                    }
                }
            }
        };
        // hyper's own answers to unparsable requests get a JSON body too.
        axum::serve(
            http::listener::JsonErrorListener(listener),
            app.into_make_service(),
        )
        .with_graceful_shutdown(stop)
        .await
        .context("HTTP server failed")?;
        let _ = opener.await;
        if let Some(e) = open_failure.lock().ok().and_then(|mut s| s.take()) {
            return Err(e);
        }
        if let Some(a) = state.alerts.get() {
            a.stop().await;
        }
        if let Some(c) = state.cluster.get().cloned() {
            info!("uploading what the writer holds");
            let _ = tokio::task::spawn_blocking(move || c.stop()).await;
        }
        for store in open_stores(&state) {
            info!(dir = %store.dir().display(), "flushing the head to segments");
            let res = tokio::task::spawn_blocking(move || store.shutdown()).await;
            match res {
                Ok(Ok(())) => info!("store closed cleanly"),
                Ok(Err(e)) => {
                    error!(error = %e, "flush at shutdown failed; the WAL keeps the data")
                }
                Err(e) => error!(error = %e, "shutdown task failed"),
            }
        }
        Ok(())
    }
}

/// Opens the stores of this process's roles (one store without `--storage`) and
/// hands them to the server: queries read one, the ingest pipeline writes one.
fn open_roles(
    state: &Arc<AppState>,
    addr: SocketAddr,
    handle: tokio::runtime::Handle,
) -> anyhow::Result<()> {
    let dir = state.options.data_dir.clone();
    let (reads, writes) = match &state.options.cluster {
        None => {
            let store = Store::open_with_progress(&dir, state.options.store.clone(), &state.replay)
                .with_context(|| format!("cannot open the store in {}", dir.display()))?;
            let store = Arc::new(store);
            (Some(store.clone()), Some(store))
        }
        Some(c) => {
            let running = Arc::new(cluster::open(
                &dir,
                &state.options.store,
                c,
                &state.replay,
                state.options.admin_token.clone(),
            )?);
            let stores = (running.querier.clone(), running.writer.clone());
            let _ = state.cluster.set(running);
            stores
        }
    };
    // One symbolizer for the process: queries name frames kept as addresses
    // with it (debug files in the data directory, debuginfod).
    let symbols = debuginfo::open(&dir, &state.options.debuginfo, None)?;
    for s in reads.iter().chain(writes.iter()) {
        s.set_symbolizer(symbols.clone());
    }
    if let Some(store) = &reads {
        let querier = Arc::new(Querier::new(
            store,
            http::query::AnswerCache::querier_bytes(state.options.query_cache_bytes),
            state.options.query_limits.clone(),
        ));
        let _ = state.querier.set(querier.clone());
        let alerts = alerts::Alerts::start(
            store.clone(),
            querier,
            state.options.alerts.clone(),
            format!("http://{addr}"),
            handle,
        )
        .context("cannot start alerting")?;
        let _ = state.alerts.set(alerts);
    }
    if let Some(store) = writes {
        let ingest = PipelineConfig {
            admission: Some(state.tenancy.admission().clone()),
            ..state.options.ingest.clone()
        };
        let _ = state.pipeline.set(Pipeline::start(store, ingest));
    }
    if let Some(store) = reads {
        let _ = state.store.set(store);
    }
    let _ = state.serving_since.set(Instant::now());
    info!(data_dir = %dir.display(), "store open; ready once the last day is warm");
    Ok(())
}

/// Every store this process opened, each once.
fn open_stores(state: &AppState) -> Vec<Arc<Store>> {
    let mut stores: Vec<Arc<Store>> = state.store.get().cloned().into_iter().collect();
    if let Some(w) = state.cluster.get().and_then(|c| c.writer.clone()) {
        if !stores.iter().any(|s| Arc::ptr_eq(s, &w)) {
            stores.push(w);
        }
    }
    stores
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
