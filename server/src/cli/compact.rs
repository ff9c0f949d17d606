//! `profiledb compact`: compacts and downsamples a stopped server's directory.

use std::time::Instant;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use profiledb_storage::TimeRange;

use super::offline::{self, OfflineArgs};

#[derive(clap::Args, Clone, Debug)]
pub struct CompactArgs {
    #[command(flatten)]
    pub dir: OfflineArgs,
    /// Only this tenant.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Only partitions overlapping [start, end): start, in milliseconds since the
    /// epoch.
    #[arg(long)]
    pub start_ms: Option<i64>,
    /// Only partitions overlapping [start, end): end (exclusive), in milliseconds
    /// since the epoch.
    #[arg(long)]
    pub end_ms: Option<i64>,
    /// Do not downsample old data (merge only).
    #[arg(long)]
    pub no_downsample: bool,
    /// Plan blocks and downsampling as if the clock read this (milliseconds
    /// since the epoch), e.g. to lay out a copy of a directory as a server
    /// would have at that time.
    #[arg(long)]
    pub as_of_ms: Option<i64>,
}

impl CompactArgs {
    /// `[--start-ms, --end-ms)`, open at a missing end; `None` without either.
    pub fn range(&self) -> Option<TimeRange> {
        (self.start_ms.is_some() || self.end_ms.is_some()).then(|| {
            TimeRange::new(
                self.start_ms.unwrap_or(i64::MIN),
                self.end_ms.unwrap_or(i64::MAX),
            )
        })
    }

    pub fn run(&self) -> anyhow::Result<()> {
        let started = Instant::now();
        let tenant = self.tenant.as_deref().map(offline::tenant).transpose()?;
        let store = self.dir.open(!self.no_downsample)?;
        // Data still in the WAL becomes segments first, so it is compacted too.
        store.flush().context("flushing the WAL")?;
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} compacting [{bar:40}] {pos}/{len} partitions {msg} ({elapsed})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        let now = self.as_of_ms.unwrap_or_else(profiledb_storage::now_ms);
        let report = store.compact_at(tenant.as_ref(), self.range(), now, &|p| {
            bar.set_length(p.partitions_total as u64);
            bar.set_position(p.partitions_done as u64);
            bar.set_message(format!("{} / {}", mib(p.bytes_done), mib(p.bytes_total)));
        })?;
        bar.finish_and_clear();
        store.shutdown()?;
        println!(
            "compacted {} partitions in {:.2} s",
            report.compacted.len(),
            started.elapsed().as_secs_f64()
        );
        println!(
            "segments: {} -> {}",
            report.segments_before, report.segments_after
        );
        println!(
            "bytes:    {} ({}) -> {} ({})",
            report.bytes_before,
            mib(report.bytes_before),
            report.bytes_after,
            mib(report.bytes_after)
        );
        let downsampled = report
            .compacted
            .iter()
            .filter(|c| c.step_ms_after != c.step_ms_before)
            .count();
        if downsampled > 0 {
            println!("downsampled partitions: {downsampled}");
        }
        for s in &report.skipped {
            println!(
                "skipped {} partition {}: {}",
                s.tenant, s.partition_start_ms, s.reason
            );
        }
        Ok(())
    }
}

fn mib(b: u64) -> String {
    format!("{:.2} MiB", b as f64 / (1 << 20) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: CompactArgs,
    }

    fn parse(argv: &[&str]) -> CompactArgs {
        Cmd::try_parse_from(std::iter::once("compact").chain(argv.iter().copied()))
            .unwrap()
            .args
    }

    #[test]
    fn the_range_is_open_where_a_bound_is_missing() {
        assert_eq!(parse(&[]).range(), None);
        assert_eq!(
            parse(&["--start-ms", "5"]).range(),
            Some(TimeRange::new(5, i64::MAX))
        );
        assert_eq!(
            parse(&["--end-ms", "9"]).range(),
            Some(TimeRange::new(i64::MIN, 9))
        );
        let a = parse(&["--data-dir", "/d", "--partition-minutes", "30"]);
        assert_eq!(a.dir.data_dir, std::path::PathBuf::from("/d"));
        assert_eq!(a.dir.partition_minutes, 30);
    }
}
