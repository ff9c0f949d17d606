//! Debug files for server-side symbolization: the options and flags of `serve`
//! (`--debuginfod-url`, the cache bound), opening the store's symbolizer, the HTTP
//! endpoints (`http.rs`: upload, list, a function's source lines, pprof with
//! lines) and `profiledb debuginfo upload` (`cli.rs`).

pub mod cli;
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

/// `serve`'s flags for debug files.
#[derive(Clone, Debug, clap::Args)]
pub struct DebuginfoArgs {
    /// debuginfod server asked for debug files by build id (repeatable); added to
    /// the space-separated DEBUGINFOD_URLS variable.
    #[arg(long = "debuginfod-url")]
    pub debuginfod_url: Vec<String>,
    /// Parsed debug files kept in memory for symbolization, in MiB.
    #[arg(long, default_value_t = 256)]
    pub symbol_cache_mb: u64,
    /// Largest debug file accepted (upload or debuginfod), in MiB.
    #[arg(long, default_value_t = 1024)]
    pub max_debuginfo_mb: u64,
}

impl DebuginfoArgs {
    pub fn options(&self) -> DebuginfoOptions {
        let mut urls = debuginfod::urls_from_env();
        for u in &self.debuginfod_url {
            urls.extend(debuginfod::split_urls(u));
        }
        DebuginfoOptions {
            debuginfod_urls: urls,
            cache_bytes: self.symbol_cache_mb << 20,
            max_file_bytes: self.max_debuginfo_mb << 20,
            ..DebuginfoOptions::default()
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
