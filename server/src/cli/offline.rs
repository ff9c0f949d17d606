//! What the offline commands (`compact`, `segments`, `retention`) share: the data
//! directory of a stopped server and the partition width it was written with, and
//! opening it as the server would.

use std::path::PathBuf;

use anyhow::Context;
use profiledb_storage::{DownsampleRule, OpenError, Store, StoreConfig, TenantId};

use crate::time::rfc3339;

/// `--data-dir`'s default, for `serve` and the offline commands alike.
pub const DEFAULT_DATA_DIR: &str = "./data";
/// `--partition-minutes`' default, for `serve` and the offline commands alike.
pub const DEFAULT_PARTITION_MINUTES: i64 = 60;

/// The flags every offline command takes.
#[derive(clap::Args, Clone, Debug)]
pub struct OfflineArgs {
    /// Data directory of a stopped server.
    #[arg(long, default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// Time partition width the data was written with, in minutes.
    #[arg(long, default_value_t = DEFAULT_PARTITION_MINUTES)]
    pub partition_minutes: i64,
}

/// The data directory is held by a running server (its `LOCK` file).
#[derive(Debug, thiserror::Error)]
#[error(
    "{} is in use by another process (a running profiledb server holds its LOCK file).\n\
     Stop the server or use its admin API (/api/v1/admin/...) instead.",
    .0.display()
)]
pub struct DirectoryInUse(pub PathBuf);

impl OfflineArgs {
    /// The store options of an offline command: no background threads beyond the
    /// writer and flusher, downsampling by the default rules or not at all.
    pub fn store_config(&self, downsample: bool) -> StoreConfig {
        StoreConfig {
            partition_ms: self.partition_minutes.saturating_mul(60_000),
            background_flush: false,
            background_compaction: false,
            downsample: if downsample {
                DownsampleRule::defaults()
            } else {
                Vec::new()
            },
            ..StoreConfig::default()
        }
    }

    /// Opens the directory; [`DirectoryInUse`] if a server holds it.
    pub fn open(&self, downsample: bool) -> anyhow::Result<Store> {
        let dir = &self.data_dir;
        let cfg = self.store_config(downsample);
        cfg.validate().context("invalid options")?;
        if !dir.is_dir() {
            anyhow::bail!("{} is not a data directory", dir.display());
        }
        match Store::open(dir, cfg) {
            Ok(s) => Ok(s),
            Err(OpenError::Locked(d)) => Err(DirectoryInUse(d).into()),
            Err(e) => Err(anyhow::Error::new(e).context(format!("cannot open {}", dir.display()))),
        }
    }
}

/// `--tenant`, checked.
pub fn tenant(t: &str) -> anyhow::Result<TenantId> {
    TenantId::new(t).map_err(|e| anyhow::anyhow!("invalid tenant: {e}"))
}

/// `2026-11-23 16:05:00` (UTC, seconds).
pub fn utc(ms: i64) -> String {
    let t = rfc3339(ms);
    format!("{} {}", &t[..10], &t[11..19])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offline_store_options_follow_the_flags() {
        let a = OfflineArgs {
            data_dir: PathBuf::from("d"),
            partition_minutes: 30,
        };
        let c = a.store_config(false);
        assert_eq!(c.partition_ms, 1_800_000);
        assert!(!c.background_flush && !c.background_compaction);
        assert!(c.downsample.is_empty());
        assert_eq!(a.store_config(true).downsample, DownsampleRule::defaults());
    }

    #[test]
    fn utc_prints_seconds_without_the_zone() {
        assert_eq!(utc(1_795_449_900_000), "2026-11-23 16:05:00");
    }
}
