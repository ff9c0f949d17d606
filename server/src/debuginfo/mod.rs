//! Debug files for server-side symbolization: the options of `serve` (its flags
//! are `cli::serve::symbolization`), opening the store's symbolizer, the HTTP
//! endpoints (`http.rs`: upload, list, a function's source lines, pprof with
//! lines) and `profiledb debuginfo upload` (`crate::cli::debuginfo`).
pub mod http;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use profiledb_storage::symbolize::{
    debuginfod, Config, DebugStore, Limits, Replica, Source, Symbolizer,
};

/// Where debug files are kept inside the data directory.
pub const DIR: &str = "debuginfo";

/// How the server symbolizes frames kept as addresses.
#[derive(Clone, Debug)]
pub struct DebuginfoOptions {
    /// debuginfod servers asked for debug files the server lacks (`DEBUGINFOD_URLS`
    /// and `--debuginfod-url`).
    pub debuginfod_urls: Vec<String>,
    /// Parsed debug files kept in memory.
    pub cache_bytes: u64,
    /// Largest debug file accepted (upload or debuginfod).
    pub max_file_bytes: u64,
    /// Each debuginfod request's timeout.
    pub debuginfod_timeout: Duration,
}

impl Default for DebuginfoOptions {
    fn default() -> Self {
        DebuginfoOptions {
            debuginfod_urls: debuginfod::urls_from_env(),
            cache_bytes: 256 << 20,
            max_file_bytes: 1 << 30,
            debuginfod_timeout: Duration::from_secs(30),
        }
    }
}

/// The symbolizer over `<data_dir>/debuginfo`, fetching from `opts`'s debuginfod
/// servers and from `bucket` (a cluster's), keeping what arrives in `replica`.
pub fn open(
    data_dir: &Path,
    opts: &DebuginfoOptions,
    bucket: Option<(Arc<dyn Source>, Arc<dyn Replica>)>,
) -> anyhow::Result<Arc<Symbolizer>> {
    let dir = data_dir.join(DIR);
    let store = DebugStore::open(&dir)
        .with_context(|| format!("cannot open the debug file directory {}", dir.display()))?;
    let limits = Limits {
        max_file_bytes: opts.max_file_bytes,
        ..Limits::default()
    };
    let mut sources: Vec<Arc<dyn Source>> = Vec::new();
    let replica = bucket.map(|(source, replica)| {
        sources.push(source);
        replica
    });
    if !opts.debuginfod_urls.is_empty() {
        tracing::info!(urls = ?opts.debuginfod_urls, "debuginfod servers for symbolization");
        sources.push(Arc::new(debuginfod::Debuginfod::new(
            opts.debuginfod_urls.clone(),
            opts.debuginfod_timeout,
            opts.max_file_bytes,
        )));
    }
    let cfg = Config {
        cache_bytes: opts.cache_bytes,
        limits,
        ..Config::default()
    };
    Ok(Symbolizer::new(cfg, store, sources, replica))
}
