//! Store configuration with the defaults the server embeds.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::InvalidConfig;

/// When the WAL is fsynced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FsyncPolicy {
    /// Every group commit is fsynced before any write in it is acknowledged (default).
    Always,
    /// fsync at most every `ms` milliseconds; an acknowledged write can be lost on a
    /// machine crash (not on a process crash) within that window.
    Interval {
        /// Longest time between two fsyncs.
        ms: u64,
    },
    /// Leave it to the OS. For tests and benchmarks only.
    Never,
}

/// How a store is laid out and how it behaves; see each field's default.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct StoreConfig {
    /// Width of a time partition; one segment never spans two. Default 1 h.
    pub partition_ms: i64,
    /// Head aggregation step; timestamps are floored to it. Default 10 s.
    pub step_ms: i64,
    /// Head memory budget, for open partitions and those being flushed together.
    /// Open partitions past half of it are sealed, largest first, and flushed (the
    /// other half holds them while they are written); while open and flushing
    /// partitions together pass it, writes wait for flushes (the write queue then
    /// fills and callers see `Busy`).
    /// It bounds the WAL too: once the WAL files hold more than this many bytes, the
    /// partition holding the oldest record is flushed early (even if its hour is
    /// still open) so those files can be deleted, and a replay after a crash reads
    /// at most about this much.
    pub head_max_bytes: usize,
    /// A partition is flushed once its time range ended this long ago and it has
    /// received no write for the same duration. Default 60 s.
    pub flush_grace: Duration,
    /// When the WAL is fsynced. Default [`FsyncPolicy::Always`].
    pub fsync: FsyncPolicy,
    /// A WAL file is rotated past this size (or past a quarter of `head_max_bytes`,
    /// whichever is smaller, so truncation can keep the WAL near the head budget).
    pub wal_file_bytes: u64,
    /// Most bytes of queued writes the writer commits in one group; its buffer
    /// keeps this much capacity between commits. Default 32 MiB.
    pub wal_buffer_bytes: usize,
    /// Capacity of the writer queue, in batches.
    pub write_queue: usize,
    /// Bytes the stack interner may hold: store-wide ids for the stacks writes
    /// carry, so the writer thread maps a repeated stack by id instead of by its
    /// frames. Past it the interner starts over. 0 turns it off. Default 64 MiB.
    pub stack_interner_bytes: usize,
    /// Decoded segments kept in memory for queries (default 1 GiB). A decoded
    /// segment is about 9x its file (dictionary, index, rows as flat columns,
    /// frame-id memo), and a segment evicted between
    /// queries is decoded again and loses its frame ids.
    pub segment_cache_bytes: u64,
    /// Decode the newest segments into the cache after open (up to half of it), and
    /// each flushed segment as it is written. Default on.
    pub warm_segment_cache: bool,
    /// Nodes of the shared name-level frame tree merges build on; past it the next
    /// query starts a fresh tree. About 32 bytes a node plus its names. Default 4 M.
    pub frame_tree_max_nodes: usize,
    /// Threads scanning segments in one query (0 = number of CPUs).
    pub query_threads: usize,
    /// zstd level for segment columns.
    pub zstd_level: i32,
    /// zstd level for wide and wider blocks (`BlockPolicy::zstd_level`), when
    /// higher than `zstd_level`: written once a week or month and kept for long,
    /// they are worth slower compression. Default 15: fewer bytes than level 3 for
    /// seconds more of compaction per block
    /// (docs/perf-log/2026-11-27-round-16-ranks-per-service-4-week-blocks.md).
    pub wide_zstd_level: i32,
    /// Write compacted blocks a day wide or wider on a symbol base shared by the
    /// tenant's blocks (their stack tree and symbols stored once, see
    /// `segment/base.rs`). Default on; the cluster's writers keep their local
    /// segments self-contained.
    pub symbol_bases: bool,
    /// Run the background flusher clock (tests turn it off to flush by hand).
    pub background_flush: bool,
    /// Run the background compactor (compaction, downsampling, retention) every
    /// `compaction_interval`. Only when `background_flush` is on too. Default on.
    pub background_compaction: bool,
    /// How often the background compactor runs. Default 10 min.
    pub compaction_interval: Duration,
    /// Most bytes one compaction merge holds in memory: the merged output so far
    /// (16 bytes a row plus its dictionaries) and the source segment being added.
    /// A block merge plans its sources by an estimate of this; a merge that would
    /// pass it anyway is skipped with a reason. Default 1 GiB.
    pub compaction_max_bytes: u64,
    /// Tier merges of open partitions: once this many segments of one level gather
    /// in a partition still taking flushes (early flushes of a busy hour), the
    /// background compactor merges them into one of the next level, so queries of
    /// the open hour read a handful of segments instead of one per flush. Runs after
    /// each flush when the background compactor runs; below 2 it is off. Default 4.
    pub open_merge_segments: usize,
    /// Largest estimated decoded size (16 bytes a row plus the files' bytes) of one
    /// tier merge of an open partition; bigger tiers wait for the whole-partition
    /// merge after the grace. Keeps the merges of data that does not repeat (unique
    /// stacks: big segments that merging cannot shrink) out of the peak memory.
    /// Default 64 MiB.
    pub open_merge_max_bytes: u64,
    /// Downsampling rules: partitions that ended more than `after` ago are rewritten
    /// at `step_ms` by compaction. Default: after 7 days 60 s, after 30 days 1 h.
    pub downsample: Vec<DownsampleRule>,
    /// Wider blocks compaction merges old partitions into. Default: a UTC day, two
    /// hours after it ends; meanwhile 6-hour part blocks, two hours after each ends;
    /// 7-day wide blocks once a week and the day after it are over, and 28-day
    /// wider blocks once those 4 weeks and the week after them are over (where
    /// retention allows).
    pub blocks: BlockPolicy,
}

/// When compaction merges a time range's partitions into one segment spanning it
/// (a *block*): a week is then read as 7 segments instead of 168, and each block
/// stores its strings and stack tree once instead of once an hour.
///
/// Until a block is due, its partitions are merged into *part blocks* (6 hours by
/// default) as each of those ends: a day of hour partitions would otherwise be
/// read as 24 segments, each with its own stack tree to decode and resolve, by
/// every query over the last day (and by the first one after a restart).
///
/// Once a *wide block* (7 days by default, aligned to the epoch: Thursday to
/// Wednesday, UTC) and the block after it are over, its blocks are merged into it:
/// a day later than it could be, so that the last day, which a restart's first
/// queries read and its warm-up resolves, is never part of a week. Most of a
/// block's bytes are its stack tree, and the days of a week share most of their
/// stacks: a month stored as weeks keeps about five trees instead of thirty.
///
/// Once a *wider block* (28 days by default: four wide blocks) and the wide
/// block after it are over, its wide blocks are merged into it, so data older
/// than a few weeks keeps one tree per four weeks. Waiting a wide block keeps the
/// last week, which 7-day queries read, out of it: such a query never decodes a
/// wider block's rows for the few days it wants.
///
/// Retention drops whole segments, so a wide or wider block is kept until all
/// of it has expired; a tenant whose maximum age is under
/// [`BlockPolicy::WIDE_RETENTION_FACTOR`] wide (or wider) blocks gets none
/// ([`BlockPolicy::for_max_age`]), which bounds what is kept past the maximum age
/// to a quarter of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BlockPolicy {
    /// Width of a block, aligned to the epoch (UTC days for 24 h); 0 keeps
    /// partitions apart. Partitions whose width does not divide it stay apart.
    pub width_ms: i64,
    /// How long after a block's (or part block's) end its partitions are merged
    /// into it, so late writes land in their partitions first.
    pub delay_ms: i64,
    /// Width of a part block; 0 for none. Must divide `width_ms`.
    pub part_width_ms: i64,
    /// Width of a wide block; 0 for none. A multiple of `width_ms`.
    pub wide_width_ms: i64,
    /// Width of a wider block; 0 for none (as without wide blocks: it is made of
    /// them). A multiple of `wide_width_ms`.
    pub wider_width_ms: i64,
}

impl Default for BlockPolicy {
    fn default() -> Self {
        BlockPolicy {
            width_ms: 86_400_000,
            delay_ms: 2 * 3_600_000,
            part_width_ms: 6 * 3_600_000,
            wide_width_ms: 7 * 86_400_000,
            wider_width_ms: 28 * 86_400_000,
        }
    }
}

impl BlockPolicy {
    /// No blocks: partitions are merged only with themselves.
    pub const OFF: BlockPolicy = BlockPolicy {
        width_ms: 0,
        delay_ms: 0,
        part_width_ms: 0,
        wide_width_ms: 0,
        wider_width_ms: 0,
    };

    /// A tenant gets wide blocks only when its maximum age is at least this many
    /// of them (see the type's docs).
    pub const WIDE_RETENTION_FACTOR: i64 = 4;

    /// The policy for a tenant whose data expires after `max_age_ms` (`None`:
    /// kept forever): without wide or wider blocks when they would keep expired
    /// data for more than a quarter of the maximum age.
    pub fn for_max_age(&self, max_age_ms: Option<i64>) -> BlockPolicy {
        let fits = |width: i64| {
            max_age_ms.is_none_or(|age| age >= width.saturating_mul(Self::WIDE_RETENTION_FACTOR))
        };
        let wide = fits(self.wide_width_ms);
        BlockPolicy {
            wide_width_ms: if wide { self.wide_width_ms } else { 0 },
            // Built of wide blocks: none without them.
            wider_width_ms: if wide && fits(self.wider_width_ms) {
                self.wider_width_ms
            } else {
                0
            },
            ..*self
        }
    }

    /// The `(start, width)` of the block the partition `[start, start + width)`
    /// is merged into now: the widest of its wider block, wide block, block and
    /// part block that ended `delay_ms` before `now_ms`; `None` when none is due,
    /// blocks are off (which turns the others off too: they are built of blocks)
    /// or the partition fits none. A block is its own block.
    pub fn block_of(&self, start: i64, width: i64, now_ms: i64) -> Option<(i64, i64)> {
        if self.width_ms <= 0 {
            return None;
        }
        // A wide block waits one block more: the last day, which a restart's
        // first queries read and its warm-up resolves, is then never a week's.
        // A wider block waits one wide block more: the last week, which 7-day
        // queries read, is never part of it.
        let wider = if self.wide_width_ms > 0 {
            self.wider_width_ms
        } else {
            0
        };
        [
            (wider, self.wide_width_ms),
            (self.wide_width_ms, self.width_ms),
            (self.width_ms, 0),
            (self.part_width_ms, 0),
        ]
        .into_iter()
        .find_map(|(w, wait)| {
            self.due_block(w, wait, start, width, now_ms)
                .map(|b| (b, w))
        })
    }

    /// The start of the `block_width` block holding `[start, start + width)` if
    /// it ended `wait + delay_ms` before `now_ms`.
    fn due_block(
        &self,
        block_width: i64,
        wait: i64,
        start: i64,
        width: i64,
        now_ms: i64,
    ) -> Option<i64> {
        if block_width <= 0 || width <= 0 || block_width % width != 0 {
            return None;
        }
        let block = start.div_euclid(block_width) * block_width;
        let inside = start.saturating_add(width) <= block.saturating_add(block_width);
        let due = block
            .saturating_add(block_width)
            .saturating_add(wait)
            .saturating_add(self.delay_ms)
            <= now_ms;
        (inside && due).then_some(block)
    }

    /// The zstd level a segment `width_ms` wide is written at: `wide` (when
    /// higher) for wide and wider blocks, `base` for the rest.
    pub fn zstd_level(&self, width_ms: i64, base: i32, wide: i32) -> i32 {
        if self.wide_width_ms > 0 && width_ms >= self.wide_width_ms {
            base.max(wide)
        } else {
            base
        }
    }

    /// Refuses negative widths or delay, part blocks that do not divide blocks
    /// wide blocks that blocks do not divide, and wider blocks that wide blocks do
    /// not divide.
    pub fn validate(&self) -> std::result::Result<(), InvalidConfig> {
        if self.width_ms < 0
            || self.delay_ms < 0
            || self.part_width_ms < 0
            || self.wide_width_ms < 0
            || self.wider_width_ms < 0
        {
            return Err(InvalidConfig(
                "block widths and delay must not be negative".into(),
            ));
        }
        if self.wide_width_ms > 0 && self.width_ms > 0 && self.wide_width_ms % self.width_ms != 0 {
            return Err(InvalidConfig(format!(
                "the wide block width ({} ms) must be a multiple of the block width ({} ms)",
                self.wide_width_ms, self.width_ms
            )));
        }
        if self.wider_width_ms > 0
            && self.wide_width_ms > 0
            && self.wider_width_ms % self.wide_width_ms != 0
        {
            return Err(InvalidConfig(format!(
                "the wider block width ({} ms) must be a multiple of the wide block width ({} ms)",
                self.wider_width_ms, self.wide_width_ms
            )));
        }
        if self.part_width_ms > 0 && self.width_ms > 0 && self.width_ms % self.part_width_ms != 0 {
            return Err(InvalidConfig(format!(
                "the part block width ({} ms) must divide the block width ({} ms)",
                self.part_width_ms, self.width_ms
            )));
        }
        Ok(())
    }
}

/// Data older than `after` is rewritten at the coarser `step_ms`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DownsampleRule {
    /// Age of a partition's end past which the rule applies.
    pub after: Duration,
    /// The step old data is rewritten at.
    pub step_ms: i64,
}

impl DownsampleRule {
    /// The default rules: after 7 days 1-minute steps, after 30 days 1-hour steps.
    pub fn defaults() -> Vec<DownsampleRule> {
        vec![
            DownsampleRule {
                after: Duration::from_secs(7 * 86_400),
                step_ms: 60_000,
            },
            DownsampleRule {
                after: Duration::from_secs(30 * 86_400),
                step_ms: 3_600_000,
            },
        ]
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            partition_ms: 3_600_000,
            step_ms: 10_000,
            head_max_bytes: 512 << 20,
            flush_grace: Duration::from_secs(60),
            fsync: FsyncPolicy::Always,
            wal_file_bytes: 64 << 20,
            wal_buffer_bytes: 32 << 20,
            write_queue: 64,
            stack_interner_bytes: 64 << 20,
            segment_cache_bytes: 1 << 30,
            warm_segment_cache: true,
            frame_tree_max_nodes: 4_000_000,
            query_threads: 0,
            zstd_level: 3,
            wide_zstd_level: 15,
            symbol_bases: true,
            background_flush: true,
            background_compaction: true,
            compaction_interval: Duration::from_secs(600),
            compaction_max_bytes: 1 << 30,
            open_merge_segments: 4,
            open_merge_max_bytes: 64 << 20,
            downsample: DownsampleRule::defaults(),
            blocks: BlockPolicy::default(),
        }
    }
}

impl StoreConfig {
    /// Refuses settings the engine cannot run with (zero or misaligned widths and steps).
    pub fn validate(&self) -> std::result::Result<(), InvalidConfig> {
        let bad = |m: &str| Err(InvalidConfig(m.into()));
        if self.step_ms <= 0 {
            return bad("step_ms must be positive");
        }
        if self.partition_ms <= 0 || self.partition_ms % self.step_ms != 0 {
            return bad("partition_ms must be a positive multiple of step_ms");
        }
        if self.partition_ms / self.step_ms > u32::MAX as i64 {
            return bad("too many steps per partition");
        }
        if self.write_queue == 0 {
            return bad("write_queue must be at least 1");
        }
        if self.downsample.iter().any(|r| r.step_ms <= 0) {
            return bad("downsample step_ms must be positive");
        }
        self.blocks.validate()?;
        Ok(())
    }

    /// Scan threads per query: `query_threads`, or the number of CPUs.
    pub fn threads(&self) -> usize {
        if self.query_threads > 0 {
            self.query_threads
        } else {
            // Asked once: the answer reads cgroup files, a share of a small query.
            static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
            *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
        }
    }

    /// Bytes of open head partitions past which the largest are sealed and flushed:
    /// half the head budget, so a partition being flushed and the open ones filling
    /// meanwhile fit in the budget together.
    pub fn head_seal_bytes(&self) -> usize {
        self.head_max_bytes / 2
    }

    /// Size past which a WAL file is rotated: `wal_file_bytes`, or a quarter of the
    /// head budget (at least 64 KiB) when that is smaller.
    pub fn wal_rotate_bytes(&self) -> u64 {
        let quarter = (self.head_max_bytes as u64 / 4).max(64 << 10);
        self.wal_file_bytes.min(quarter)
    }

    /// Start of the partition containing `ts`.
    pub fn partition_of(&self, ts: i64) -> i64 {
        ts.div_euclid(self.partition_ms) * self.partition_ms
    }
}

/// A duration in whole milliseconds, saturating.
pub(crate) fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3_600_000;
    const DAY: i64 = 24 * H;

    /// A partition goes into its day once the day is due, else into its six-hour
    /// part once that is due, else nowhere; blocks and part blocks are their own.
    #[test]
    fn a_partition_goes_into_the_widest_due_block() {
        let p = BlockPolicy::default();
        let d = 100 * DAY;
        // Hour 7 of day d: its part (6..12) is due at d + 14 h, the day at d + 26 h.
        assert_eq!(p.block_of(d + 7 * H, H, d + 14 * H - 1), None);
        assert_eq!(
            p.block_of(d + 7 * H, H, d + 14 * H),
            Some((d + 6 * H, 6 * H))
        );
        assert_eq!(p.block_of(d + 7 * H, H, d + 26 * H), Some((d, DAY)));
        assert_eq!(
            p.block_of(d + 6 * H, 6 * H, d + 14 * H),
            Some((d + 6 * H, 6 * H))
        );
        assert_eq!(p.block_of(d + 6 * H, 6 * H, d + 26 * H), Some((d, DAY)));
        assert_eq!(p.block_of(d, DAY, d + 26 * H), Some((d, DAY)));
        // A partition wider than a part, or not dividing it, goes only into days.
        assert_eq!(p.block_of(d, 12 * H, d + 25 * H), None);
        assert_eq!(p.block_of(d + 7 * H, 7 * H, d + 25 * H), None);
        let no_parts = BlockPolicy {
            part_width_ms: 0,
            ..p
        };
        assert_eq!(no_parts.block_of(d + 7 * H, H, d + 25 * H), None);
        // `--block-hours 0` keeps hours apart, part blocks included.
        let no_blocks = BlockPolicy { width_ms: 0, ..p };
        assert_eq!(no_blocks.block_of(d + 7 * H, H, d + 25 * H), None);
        assert_eq!(BlockPolicy::OFF.block_of(d + 7 * H, H, d + 100 * DAY), None);
    }

    /// Weeks start on the epoch's weekday: day 98 (a Thursday) to 105. A day block,
    /// an hour or a part of the week goes into it once the week and the day after
    /// it are over for the delay; until then into its day as before; a week is
    /// its own block.
    #[test]
    fn a_day_goes_into_its_week_once_the_week_is_over() {
        let p = BlockPolicy {
            wider_width_ms: 0,
            ..BlockPolicy::default()
        };
        let week = 7 * DAY;
        let (w, d) = (98 * DAY, 101 * DAY);
        let due = w + week + DAY + 2 * H;
        assert_eq!(p.block_of(d, DAY, due - 1), Some((d, DAY)));
        assert_eq!(p.block_of(d, DAY, due), Some((w, week)));
        assert_eq!(p.block_of(d + 7 * H, H, due), Some((w, week)));
        assert_eq!(p.block_of(d + 6 * H, 6 * H, due), Some((w, week)));
        assert_eq!(p.block_of(w, week, due + 100 * DAY), Some((w, week)));
        // The last day of the week and the first of the next (its own block).
        assert_eq!(p.block_of(w + 6 * DAY, DAY, due), Some((w, week)));
        assert_eq!(p.block_of(w + week, DAY, due), Some((w + week, DAY)));
        // Off: days stay days.
        let no_wide = BlockPolicy {
            wide_width_ms: 0,
            ..p
        };
        assert_eq!(no_wide.block_of(d, DAY, due), Some((d, DAY)));
    }

    /// Wider blocks are four epoch weeks: days 84 to 112 hold weeks 84, 91, 98
    /// and 105. A week (or a day, an hour) goes into it once those 28 days and
    /// the week after them are over for the delay; until then into its week as
    /// before. Without wide blocks there are no wider ones.
    #[test]
    fn a_week_goes_into_its_wider_block_once_it_and_the_next_week_are_over() {
        let p = BlockPolicy::default();
        let (week, wider) = (7 * DAY, 28 * DAY);
        let b = 84 * DAY;
        let due = b + wider + week + 2 * H;
        for w in [84, 91, 98, 105].map(|d| d * DAY) {
            assert_eq!(p.block_of(w, week, due - 1), Some((w, week)));
            assert_eq!(p.block_of(w, week, due), Some((b, wider)));
        }
        assert_eq!(p.block_of(101 * DAY, DAY, due), Some((b, wider)));
        assert_eq!(p.block_of(101 * DAY + 7 * H, H, due), Some((b, wider)));
        assert_eq!(p.block_of(b, wider, due + 100 * DAY), Some((b, wider)));
        // The next wider block's first week stays a week.
        assert_eq!(
            p.block_of(b + wider, week, due + DAY),
            Some((b + wider, week))
        );
        let no_wide = BlockPolicy {
            wide_width_ms: 0,
            ..p
        };
        assert_eq!(no_wide.block_of(98 * DAY, DAY, due), Some((98 * DAY, DAY)));
        assert!(no_wide.validate().is_ok());
    }

    /// Wide blocks only where they keep at most a quarter of the maximum age
    /// past it: 28 days and more, or no maximum age; wider blocks from 112 days.
    #[test]
    fn short_retention_turns_wide_blocks_off() {
        let p = BlockPolicy::default();
        assert_eq!(p.for_max_age(None), p);
        assert_eq!(p.for_max_age(Some(112 * DAY)), p);
        let weeks = p.for_max_age(Some(112 * DAY - 1));
        assert_eq!((weeks.wide_width_ms, weeks.wider_width_ms), (7 * DAY, 0));
        assert_eq!(p.for_max_age(Some(28 * DAY)), weeks);
        let short = p.for_max_age(Some(28 * DAY - 1));
        assert_eq!((short.wide_width_ms, short.wider_width_ms), (0, 0));
        assert_eq!(short.width_ms, p.width_ms);
        assert_eq!(
            short.block_of(101 * DAY, DAY, 200 * DAY),
            Some((101 * DAY, DAY))
        );
        // No wide blocks to begin with: nothing to turn off.
        assert_eq!(BlockPolicy::OFF.for_max_age(Some(1)), BlockPolicy::OFF);
    }

    /// Wide and wider blocks are written at the wide level, never below the
    /// base one; the rest at the base level.
    #[test]
    fn wide_blocks_are_written_at_the_wide_zstd_level() {
        let p = BlockPolicy::default();
        assert_eq!(p.zstd_level(H, 3, 15), 3);
        assert_eq!(p.zstd_level(DAY, 3, 15), 3);
        assert_eq!(p.zstd_level(7 * DAY, 3, 15), 15);
        assert_eq!(p.zstd_level(28 * DAY, 3, 15), 15);
        assert_eq!(p.zstd_level(28 * DAY, 19, 15), 19);
        let no_wide = BlockPolicy {
            wide_width_ms: 0,
            ..p
        };
        assert_eq!(no_wide.zstd_level(28 * DAY, 3, 15), 3);
    }

    #[test]
    fn part_blocks_must_divide_blocks() {
        assert!(BlockPolicy::default().validate().is_ok());
        let bad = BlockPolicy {
            part_width_ms: 7 * H,
            ..BlockPolicy::default()
        };
        assert!(bad.validate().unwrap_err().0.contains("must divide"));
        let bad_wide = BlockPolicy {
            wide_width_ms: 36 * H,
            ..BlockPolicy::default()
        };
        assert!(bad_wide.validate().unwrap_err().0.contains("multiple"));
        let bad_wider = BlockPolicy {
            wider_width_ms: 10 * DAY,
            ..BlockPolicy::default()
        };
        assert!(bad_wider
            .validate()
            .unwrap_err()
            .0
            .contains("wider block width"));
        assert!(BlockPolicy {
            delay_ms: -1,
            ..BlockPolicy::OFF
        }
        .validate()
        .is_err());
    }
}
