//! Storage: WAL durability, partitions, and the background compaction that merges
//! them into blocks (on one node and, with the same flags, in a cluster's
//! compactors).

use std::time::Duration;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use profiledb_storage::{BlockPolicy, FsyncPolicy};

use super::{mib, to_ms};
use crate::cli::offline::DEFAULT_PARTITION_MINUTES;
use crate::ServeOptions;

#[derive(clap::Args, Clone, Debug)]
#[command(next_help_heading = "Storage")]
pub struct StorageArgs {
    /// WAL durability policy.
    #[arg(long, default_value = "always", value_parser = fsync_policy())]
    pub fsync: FsyncPolicy,
    /// With --fsync interval: most milliseconds between two fsyncs (what a
    /// machine crash can lose).
    #[arg(long, default_value_t = 100)]
    pub fsync_interval_ms: u64,
    /// Time partition width in minutes (one segment never spans two).
    #[arg(long, default_value_t = DEFAULT_PARTITION_MINUTES)]
    pub partition_minutes: i64,
    /// Minutes between background compaction, downsampling and retention runs
    /// (0 disables them).
    #[arg(long, default_value_t = 10)]
    pub compaction_interval_minutes: u64,
    /// Merge an open partition's segments once this many of one level have
    /// gathered (early flushes of a busy hour), right after the flush that
    /// completes them, so queries of the open hour read a few segments, not one
    /// per flush (below 2: off; off too with --compaction-interval-minutes 0).
    #[arg(long, default_value_t = 4)]
    pub open_merge_segments: usize,
    /// Largest estimated decoded size in MiB of one such merge (16 bytes a row
    /// plus the files' bytes); bigger tiers, from data that does not repeat,
    /// wait for the merge of the whole partition after the hour.
    #[arg(long, default_value_t = 64)]
    pub open_merge_max_mb: u64,
    /// Hours of the blocks compaction merges old partitions into, on one node as
    /// in a cluster's compactors (a week is then read as 7 segments, not 168, and
    /// a block stores its stack tree once); 0 keeps partitions apart. Must be a
    /// multiple of the partition width to apply.
    #[arg(long, default_value_t = 24)]
    pub block_hours: u64,
    /// Minutes after a block's end before its partitions are merged into it
    /// (late writes land in their hours first).
    #[arg(long, default_value_t = 120)]
    pub block_delay_minutes: u64,
    /// Until a block is due, its partitions are merged into part blocks of this
    /// many hours as each ends (after the same delay), so the last day is read as
    /// a few segments, not one per hour; 0 for none (so does --block-hours 0).
    /// Must divide --block-hours.
    #[arg(long, default_value_t = 6)]
    pub part_block_hours: u64,
    /// Once a week (this many days, aligned to the epoch) and the day after it
    /// are over for the delay, its blocks are merged into one wide block: a month
    /// is then stored with about five stack trees instead of thirty. 0 for none.
    /// Must be a multiple of --block-hours. Not applied to data whose retention is
    /// under four of them (retention drops whole segments, so it would keep data
    /// too long).
    #[arg(long, default_value_t = 7)]
    pub wide_block_days: u64,
    /// Once this many days (aligned to the epoch; four weeks by default) and the
    /// wide block after them are over for the delay, their wide blocks are merged
    /// into one wider block: old data then keeps one stack tree per four weeks.
    /// 0 for none (so does --wide-block-days 0). Must be a multiple of
    /// --wide-block-days. Not applied to data whose retention is under four of
    /// them.
    #[arg(long, default_value_t = 28)]
    pub wider_block_days: u64,
}

/// `--fsync`'s values, as storage's own policy; `interval` takes its period from
/// `--fsync-interval-ms` in [`StorageArgs::apply`].
fn fsync_policy() -> impl TypedValueParser<Value = FsyncPolicy> {
    PossibleValuesParser::new([
        PossibleValue::new("always")
            .help("fsync every group commit before acknowledging (default)"),
        PossibleValue::new("interval")
            .help("fsync at most every --fsync-interval-ms (a machine crash can lose that much)"),
        PossibleValue::new("never").help("Never fsync (tests and benchmarks only)"),
    ])
    // The parser above lets only those three names through.
    .map(|name| match name.as_str() {
        "never" => FsyncPolicy::Never,
        "interval" => FsyncPolicy::Interval { ms: 0 },
        _ => FsyncPolicy::Always,
    })
}

impl StorageArgs {
    /// `--block-hours`, `--block-delay-minutes`, `--part-block-hours`,
    /// `--wide-block-days` and `--wider-block-days`, checked.
    pub fn block_policy(&self) -> anyhow::Result<BlockPolicy> {
        let policy = BlockPolicy {
            width_ms: to_ms(self.block_hours, 3_600_000, "block-hours")?,
            delay_ms: to_ms(self.block_delay_minutes, 60_000, "block-delay-minutes")?,
            part_width_ms: to_ms(self.part_block_hours, 3_600_000, "part-block-hours")?,
            wide_width_ms: to_ms(self.wide_block_days, 86_400_000, "wide-block-days")?,
            wider_width_ms: to_ms(self.wider_block_days, 86_400_000, "wider-block-days")?,
        };
        policy.validate().map_err(anyhow::Error::msg)?;
        Ok(policy)
    }

    pub fn apply(&self, o: &mut ServeOptions) -> anyhow::Result<()> {
        let s = &mut o.store;
        s.fsync = match self.fsync {
            FsyncPolicy::Interval { .. } => FsyncPolicy::Interval {
                ms: self.fsync_interval_ms,
            },
            other => other,
        };
        s.partition_ms = self.partition_minutes.saturating_mul(60_000);
        s.background_compaction = self.compaction_interval_minutes > 0;
        s.compaction_interval =
            Duration::from_secs(self.compaction_interval_minutes.saturating_mul(60));
        s.open_merge_segments = self.open_merge_segments;
        s.open_merge_max_bytes = mib(self.open_merge_max_mb);
        s.blocks = self.block_policy()?;
        Ok(())
    }
}
