//! The command line of tenancy: `profiledb serve`'s authentication and limit flags,
//! and `profiledb auth` (add a tenant or a token, hash a token).

use std::path::PathBuf;

use anyhow::Context;

use super::authfile::{generate_token, hash_token, AuthFile};
use super::limits::Limits;
use super::TenancyOptions;
use crate::time::parse_max_age;

const MIB: f64 = (1u64 << 20) as f64;

/// Flags of `profiledb serve`. Every limit is per tenant; 0 means unlimited; the
/// auth file can override any of them for one tenant.
#[derive(Clone, Debug, clap::Args)]
pub struct TenancyArgs {
    /// Turn authentication on with the tenants and hashed tokens of this file
    /// (YAML; `profiledb auth add-tenant` writes it). Reloaded on SIGHUP.
    #[arg(long, value_name = "FILE")]
    pub auth_file: Option<PathBuf>,
    /// Ingest bytes per second per tenant, as sent (before decompression), in MiB.
    #[arg(long, default_value_t = 64.0)]
    pub ingestion_rate_mb: f64,
    /// Ingest bytes a tenant may send at once after being idle, in MiB.
    #[arg(long, default_value_t = 256.0)]
    pub ingestion_burst_mb: f64,
    /// Profiles per second per tenant.
    #[arg(long, default_value_t = 1000)]
    pub ingestion_rate_profiles: u64,
    /// Profiles a tenant may send at once after being idle.
    #[arg(long, default_value_t = 5000)]
    pub ingestion_burst_profiles: u64,
    /// Distinct series a tenant may write within the active-series window.
    #[arg(long, default_value_t = 100_000)]
    pub max_active_series: u64,
    /// Minutes a series counts as active after its last write.
    #[arg(long, default_value_t = 60)]
    pub active_series_window_minutes: u64,
    /// Labels of one series, reserved ones included.
    #[arg(long, default_value_t = 30)]
    pub max_labels_per_series: u64,
    /// Longest query window, e.g. 7d or 12h (`none`: no limit).
    #[arg(long, default_value = "none")]
    pub max_query_range: String,
    /// Largest max_nodes a query may ask for (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub max_nodes: u64,
    /// Queries of one tenant running at once.
    #[arg(long, default_value_t = 32)]
    pub max_concurrent_queries: u64,
}

fn mib(v: f64, flag: &str) -> anyhow::Result<u64> {
    if !(v.is_finite() && v >= 0.0) {
        anyhow::bail!("{flag} must be a number of MiB, 0 or more (got {v})");
    }
    Ok((v * MIB).round() as u64)
}

impl TenancyArgs {
    pub fn options(&self) -> anyhow::Result<TenancyOptions> {
        let range = parse_max_age("--max-query-range", &self.max_query_range)?;
        Ok(TenancyOptions {
            auth_file: self.auth_file.clone(),
            limits: Limits {
                ingestion_rate_bytes: mib(self.ingestion_rate_mb, "--ingestion-rate-mb")?,
                ingestion_burst_bytes: mib(self.ingestion_burst_mb, "--ingestion-burst-mb")?,
                ingestion_rate_profiles: self.ingestion_rate_profiles,
                ingestion_burst_profiles: self.ingestion_burst_profiles,
                max_active_series: self.max_active_series,
                max_labels_per_series: self.max_labels_per_series,
                max_query_range_secs: range.map_or(0, |ms| ms.unsigned_abs().div_ceil(1000)),
                max_nodes: self.max_nodes,
                max_concurrent_queries: self.max_concurrent_queries,
            },
            active_series_window_ms: i64::try_from(
                self.active_series_window_minutes.saturating_mul(60_000),
            )
            .unwrap_or(i64::MAX)
            .max(60_000),
        })
    }
}

/// `profiledb auth ...`.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum AuthCommand {
    /// Add a tenant to the auth file (created if missing), or one more token to a
    /// tenant it has, and print the token. Only its SHA-256 digest is stored: keep
    /// the printed token, it cannot be shown again. Send SIGHUP to a running server
    /// to take it into account.
    ///
    /// Clients send it as HTTP basic auth (user: the tenant id, password: the token),
    /// as Grafana's Pyroscope datasource and the Pyroscope SDKs do, or as
    /// `Authorization: Bearer <token>`.
    #[command(verbatim_doc_comment)]
    AddTenant {
        /// The auth file.
        #[arg(long, value_name = "FILE")]
        auth_file: PathBuf,
        /// The tenant id (what X-Scope-OrgID would carry).
        #[arg(long)]
        tenant: String,
        /// Use this token instead of a new random one (at least 16 characters).
        #[arg(long)]
        token: Option<String>,
    },
    /// Print the digest of a token (`sha256:...`), as the auth file stores it.
    HashToken {
        /// The token; read from standard input when absent.
        #[arg(long)]
        token: Option<String>,
    },
}

impl AuthCommand {
    pub fn run(self) -> anyhow::Result<()> {
        match self {
            AuthCommand::AddTenant {
                auth_file,
                tenant,
                token,
            } => {
                let mut file = if auth_file.exists() {
                    AuthFile::read(&auth_file)?
                } else {
                    AuthFile::default()
                };
                let token = match token {
                    Some(t) => t,
                    None => generate_token().context("no random numbers for a token")?,
                };
                file.add_token(&tenant, hash_token(&token)?)?;
                // The whole file must still load as a server would read it.
                file.compile(&Limits::default())?;
                file.write(&auth_file)?;
                eprintln!(
                    "tenant {tenant} added to {}; send SIGHUP to a running server to load it",
                    auth_file.display()
                );
                println!("{token}");
                Ok(())
            }
            AuthCommand::HashToken { token } => {
                let token = match token {
                    Some(t) => t,
                    None => {
                        let mut line = String::new();
                        std::io::stdin()
                            .read_line(&mut line)
                            .context("cannot read the token from standard input")?;
                        line.trim_end_matches(['\r', '\n']).to_string()
                    }
                };
                println!("{}", hash_token(&token)?);
                Ok(())
            }
        }
    }
}
