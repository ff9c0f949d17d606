//! `profiledb serve`: its flags, one struct per section, converted once into
//! [`ServeOptions`] by [`ServeArgs::options`].
//!
//! A section is a flag's heading in `serve --help` and its section in the
//! configuration file (`--max-body-mb` under "Server" is `server.max_body_mb`,
//! see [`crate::cli::config_file`]); each lives in the module of its name, next
//! to the conversion of its flags into options. Adding a flag is one change in
//! that module: the field (its doc comment is the help and the file's comment,
//! its default the one default) and the line of `apply` that sets its option.

mod alerts;
pub(crate) mod cluster;
mod control;
mod ingest;
mod limits;
mod memory;
mod query;
mod server;
mod storage;
mod symbolization;
mod tenancy;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

use anyhow::Context;

use crate::{shutdown_signal, ServeOptions, Server};

pub use alerts::AlertArgs;
pub use cluster::ClusterArgs;
pub use control::ControlArgs;
pub use ingest::IngestArgs;
pub use limits::LimitsArgs;
pub use memory::MemoryArgs;
pub use query::QueryArgs;
pub use server::ServerArgs;
pub use storage::StorageArgs;
pub use symbolization::SymbolizationArgs;
pub use tenancy::TenancyArgs;

/// The flags of `profiledb serve`.
#[derive(clap::Args, Clone, Debug)]
pub struct ServeArgs {
    /// Read settings from this YAML file: each section of it is a heading below,
    /// each key a flag's name with underscores (`server: {max_body_mb: 16}`).
    /// Flags given as well win over it; `profiledb config print-defaults` prints
    /// one with every key at its default.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub server: ServerArgs,
    #[command(flatten)]
    pub memory: MemoryArgs,
    #[command(flatten)]
    pub storage: StorageArgs,
    #[command(flatten)]
    pub ingest: IngestArgs,
    #[command(flatten)]
    pub query: QueryArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub tenancy: TenancyArgs,
    #[command(flatten)]
    pub limits: LimitsArgs,
    #[command(flatten)]
    pub alerts: AlertArgs,
    #[command(flatten)]
    pub control: ControlArgs,
    #[command(flatten)]
    pub symbolization: SymbolizationArgs,
}

impl ServeArgs {
    /// Everything the server runs with, checked: the one conversion from flags
    /// (and the configuration file, see [`crate::cli::config_file`]) to options.
    pub fn options(&self) -> anyhow::Result<ServeOptions> {
        let mut o = ServeOptions::default();
        self.server.apply(&mut o)?;
        self.storage.apply(&mut o)?;
        self.ingest.apply(&mut o)?;
        self.query.apply(&mut o)?;
        self.tenancy.apply(&mut o)?;
        self.limits.apply(&mut o)?;
        self.alerts.apply(&mut o)?;
        self.control.apply(&mut o)?;
        self.symbolization.apply(&mut o)?;
        // After storage: a cluster's compactors merge into the same blocks.
        self.cluster.apply(&mut o)?;
        // Last: it sizes the parts the others set up.
        self.memory.apply(&mut o)?;
        o.store.validate().context("invalid storage options")?;
        Ok(o)
    }

    /// Runs the server until SIGINT or SIGTERM.
    pub fn run(&self) -> anyhow::Result<()> {
        let opts = self.options()?;
        tracing::info!(
            total_mb = self.memory.plan().total >> 20,
            head_mb = opts.store.head_max_bytes >> 20,
            query_memory_mb = opts.query_memory_bytes >> 20,
            "memory budget"
        );
        let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
        rt.block_on(async {
            let server = Server::bind(opts).await?;
            server.run(shutdown_signal()).await
        })
    }
}

/// `n` units of `unit_ms` in milliseconds, refusing a value too large to be a
/// time width.
fn to_ms(n: u64, unit_ms: i64, flag: &str) -> anyhow::Result<i64> {
    i64::try_from(n)
        .ok()
        .and_then(|n| n.checked_mul(unit_ms))
        .ok_or_else(|| anyhow::anyhow!("--{flag} {n} is too large"))
}

/// `v` if it is not 0.
fn positive(v: u64, flag: &str) -> anyhow::Result<u64> {
    if v == 0 {
        anyhow::bail!("--{flag} must be positive");
    }
    Ok(v)
}

/// `MiB` in bytes.
fn mib(m: u64) -> u64 {
    m.saturating_mul(1 << 20)
}

/// A text flag, `None` when empty or blank.
fn nonempty(s: &Option<String>) -> Option<String> {
    s.clone().filter(|s| !s.trim().is_empty())
}
