//! Limits: every tenant's, unless the auth file overrides them for one. 0 means
//! unlimited.

use crate::tenancy::Limits;
use crate::time::parse_max_age;
use crate::ServeOptions;

const MIB: f64 = (1u64 << 20) as f64;

#[derive(clap::Args, Clone, Debug)]
#[command(next_help_heading = "Limits")]
pub struct LimitsArgs {
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

fn bytes(v: f64, flag: &str) -> anyhow::Result<u64> {
    if !(v.is_finite() && v >= 0.0) {
        anyhow::bail!("{flag} must be a number of MiB, 0 or more (got {v})");
    }
    Ok((v * MIB).round() as u64)
}

impl LimitsArgs {
    pub fn apply(&self, o: &mut ServeOptions) -> anyhow::Result<()> {
        let range = parse_max_age("--max-query-range", &self.max_query_range)?;
        o.tenancy.limits = Limits {
            ingestion_rate_bytes: bytes(self.ingestion_rate_mb, "--ingestion-rate-mb")?,
            ingestion_burst_bytes: bytes(self.ingestion_burst_mb, "--ingestion-burst-mb")?,
            ingestion_rate_profiles: self.ingestion_rate_profiles,
            ingestion_burst_profiles: self.ingestion_burst_profiles,
            max_active_series: self.max_active_series,
            max_labels_per_series: self.max_labels_per_series,
            max_query_range_secs: range.map_or(0, |ms| ms.unsigned_abs().div_ceil(1000)),
            max_nodes: self.max_nodes,
            max_concurrent_queries: self.max_concurrent_queries,
        };
        o.tenancy.active_series_window_ms =
            i64::try_from(self.active_series_window_minutes.saturating_mul(60_000))
                .unwrap_or(i64::MAX)
                .max(60_000);
        Ok(())
    }
}
