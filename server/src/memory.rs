//! One memory budget (`--memory-mb`) shared by the parts that hold large structures,
//! and the `/metrics` gauges that show each part's bytes beside its limit.
//!
//! The rule (docs/operations.md, "Memory"): of the total,
//!
//! | part           | share | what it bounds                                          |
//! |----------------|-------|---------------------------------------------------------|
//! | `head`         | 25 %  | open partitions and those being flushed; also the WAL    |
//! | `segment_cache`| 25 %  | decoded segments and their frame-id memos               |
//! | `result_cache` | 10 %  | cached answers, per-segment parts, function indexes      |
//! | `query`        | 20 %  | a quarter for the shared frame tree, the rest admitted per query |
//! | `compaction`   | 10 %  | one compaction's decoded sources and merge              |
//! | `ingest`       | 6 %   | request bodies being decoded and their decoded batches  |
//! | `stack_interner` | 2 % | store-wide stack ids the writer maps stacks by          |
//! | `wal_buffer`   | 2 %   | the WAL writer's group-commit buffer (at most 32 MiB)   |
//!
//! What no part tracks (the binary, thread stacks, sled's page cache, allocator
//! slack) is a fixed overhead on top (docs/performance.md, Memory). A part's own
//! flag (`--head-max-mb`, `--segment-cache-mb`, `--query-cache-mb`,
//! `--query-memory-mb`, `--compaction-memory-mb`, `--ingest-memory-mb`) wins over
//! its share.

use crate::AppState;
use std::fmt::Write;

/// Default `--memory-mb`: this fraction of the machine's memory (the smaller of
/// `MemTotal` and the cgroup limit), leaving the rest to the OS page cache that
/// segment reads and the WAL rely on.
pub const DEFAULT_FRACTION: f64 = 0.5;

/// Used when neither /proc/meminfo nor a cgroup limit can be read.
const FALLBACK_TOTAL: u64 = 4 << 30;

/// Bytes a merged call-tree node costs while a query builds it (node, children
/// map slot, name id, value): the unit that turns the per-query share into
/// [`profiledb_storage::QueryLimits::max_tree_nodes`].
pub const TREE_NODE_BYTES: u64 = 64;

/// Bytes a shared frame-tree node costs (two `u32` columns, a child-map slot).
pub const FRAME_NODE_BYTES: u64 = 32;

/// Merges admitted at once when each reserves its whole tree budget.
pub const HEAVY_QUERIES: u64 = 4;

/// The bytes each part may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryPlan {
    pub total: u64,
    pub head: u64,
    pub segment_cache: u64,
    pub result_cache: u64,
    pub query: u64,
    pub compaction: u64,
    pub ingest: u64,
    pub stack_interner: u64,
    pub wal_buffer: u64,
}

impl MemoryPlan {
    /// `total` split by the rule in the module docs.
    pub fn split(total: u64) -> Self {
        let pct = |p: u64| total / 100 * p;
        MemoryPlan {
            total,
            head: pct(25),
            segment_cache: pct(25),
            result_cache: pct(10),
            query: pct(20),
            compaction: pct(10),
            ingest: pct(6),
            stack_interner: pct(2),
            wal_buffer: pct(2).min(32 << 20),
        }
    }

    /// The shared frame tree's node limit: a quarter of the query share.
    pub fn frame_tree_nodes(query: u64) -> usize {
        usize::try_from(query / 4 / FRAME_NODE_BYTES).unwrap_or(usize::MAX)
    }

    /// Bytes one merge reserves (and may hold in its tree): the rest of the query
    /// share divided among [`HEAVY_QUERIES`].
    pub fn per_query(query: u64) -> u64 {
        (query - query / 4) / HEAVY_QUERIES
    }

    /// The merged-tree node limit of one query.
    pub fn max_tree_nodes(query: u64) -> usize {
        usize::try_from(Self::per_query(query) / TREE_NODE_BYTES)
            .unwrap_or(usize::MAX)
            .max(1)
    }
}

impl MemoryPlan {
    /// Sizes every bounded part of `opts` by this plan: what `profiledb serve` runs
    /// with, so an in-process server (the bench's) is sized like the binary.
    pub fn apply(&self, opts: &mut crate::ServeOptions) {
        let bytes = |b: u64| usize::try_from(b).unwrap_or(usize::MAX);
        opts.store.head_max_bytes = bytes(self.head);
        opts.store.wal_buffer_bytes = bytes(self.wal_buffer);
        opts.store.stack_interner_bytes = bytes(self.stack_interner);
        opts.store.frame_tree_max_nodes = Self::frame_tree_nodes(self.query);
        opts.store.segment_cache_bytes = self.segment_cache;
        opts.store.compaction_max_bytes = self.compaction;
        opts.ingest.memory_bytes = self.ingest;
        opts.query_cache_bytes = self.result_cache;
        opts.query_limits.max_tree_nodes = Self::max_tree_nodes(self.query);
        opts.query_memory_bytes = self.query;
    }
}

/// The default total: [`DEFAULT_FRACTION`] of the machine's memory.
pub fn default_total() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| meminfo_total(&t));
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|p| {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|t| cgroup_limit(&t))
    });
    let machine = match (meminfo, cgroup) {
        (Some(m), Some(c)) => m.min(c),
        (Some(x), None) | (None, Some(x)) => x,
        (None, None) => FALLBACK_TOTAL,
    };
    (machine as f64 * DEFAULT_FRACTION) as u64
}

/// `MemTotal` of /proc/meminfo, in bytes.
fn meminfo_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// A cgroup memory limit file's value; `max` (v2) or an absurd v1 "unlimited"
/// value means no limit.
fn cgroup_limit(text: &str) -> Option<u64> {
    let v: u64 = text.trim().parse().ok()?;
    (v < 1 << 60).then_some(v)
}

/// `(part, bytes held, limit)` of every part, for `/metrics`.
pub fn parts(state: &AppState) -> Vec<(&'static str, u64, u64)> {
    let o = &state.options;
    let mut out = Vec::new();
    if let Some(store) = state.store_if_open() {
        let g = store.gauges();
        let cfg = store.config();
        // A flush's encode buffers are the head's: its budget covers flushing.
        out.push((
            "head",
            g.head_bytes + g.flush_bytes,
            cfg.head_max_bytes as u64,
        ));
        // The summary cache's budget is carved out of the segment cache's.
        out.push((
            "segment_cache",
            g.segment_cache_bytes + g.summary_cache_bytes,
            cfg.segment_cache_bytes,
        ));
        out.push((
            "frame_tree",
            g.frame_tree_bytes,
            cfg.frame_tree_max_nodes as u64 * FRAME_NODE_BYTES,
        ));
        out.push(("compaction", g.compaction_bytes, cfg.compaction_max_bytes));
        out.push((
            "stack_interner",
            g.stack_interner_bytes,
            cfg.stack_interner_bytes as u64,
        ));
        out.push((
            "wal_buffer",
            g.wal_buffer_bytes,
            cfg.wal_buffer_bytes as u64,
        ));
    }
    let result_cache =
        state.querier_if_open().map_or(0, |q| q.cached_bytes()) + state.answers.weight();
    out.push(("result_cache", result_cache, o.query_cache_bytes));
    out.push((
        "query",
        state.admission.reserved_bytes(),
        state.admission.limit_bytes(),
    ));
    let ingest = state.pipeline_if_open().map_or(0, |p| p.inflight_bytes());
    out.push(("ingest", ingest, o.ingest.memory_bytes));
    out
}

/// Appends `profiledb_memory_bytes{part=…}` and `profiledb_memory_limit_bytes{part=…}`.
pub fn render_metrics(state: &AppState, out: &mut String) {
    let parts = parts(state);
    for (name, help, pick) in [
        (
            "profiledb_memory_bytes",
            "Bytes held by each part of the memory budget (approximate).",
            1,
        ),
        (
            "profiledb_memory_limit_bytes",
            "Each part's share of --memory-mb (or its own flag).",
            2,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for (part, bytes, limit) in &parts {
            let v = if pick == 1 { bytes } else { limit };
            let _ = writeln!(out, "{name}{{part=\"{part}\"}} {v}");
        }
    }
    if let Some(store) = state.store_if_open() {
        let g = store.gauges();
        render_sizing(&g, out);
        let _ = writeln!(
            out,
            "# HELP profiledb_wal_bytes Bytes in the WAL files (what a replay after a crash reads; bounded by the head budget).\n# TYPE profiledb_wal_bytes gauge\nprofiledb_wal_bytes {}",
            g.wal_bytes
        );
        let _ = writeln!(
            out,
            "# HELP profiledb_stack_interner_stacks Stacks with a store-wide id in the stack interner.\n# TYPE profiledb_stack_interner_stacks gauge\nprofiledb_stack_interner_stacks {}\n# HELP profiledb_stack_interner_resets_total Times the stack interner emptied its tables for being over its memory share.\n# TYPE profiledb_stack_interner_resets_total counter\nprofiledb_stack_interner_resets_total {}",
            g.stack_interner_stacks, g.stack_interner_resets
        );
    }
    let (done, total) = state.replay.bytes();
    let _ = writeln!(
        out,
        "# HELP profiledb_wal_replay_bytes WAL bytes replayed at the last open, of profiledb_wal_replay_total_bytes.\n# TYPE profiledb_wal_replay_bytes gauge\nprofiledb_wal_replay_bytes {done}\n# HELP profiledb_wal_replay_total_bytes WAL bytes to replay at the last open.\n# TYPE profiledb_wal_replay_total_bytes gauge\nprofiledb_wal_replay_total_bytes {total}"
    );
}

/// Index and dictionary bytes per series and per distinct stack (stack-tree node)
/// in the head, so a user can size a node for a cardinality.
fn render_sizing(g: &profiledb_storage::Gauges, out: &mut String) {
    let per = |bytes: u64, n: u64| bytes.checked_div(n).unwrap_or(0);
    for (name, help, v) in [
        ("profiledb_head_series", "Series in the head.", g.head_series),
        (
            "profiledb_head_stack_nodes",
            "Distinct stack prefixes (stack-tree nodes) in the head's dictionaries.",
            g.head_stack_nodes,
        ),
        (
            "profiledb_head_index_bytes_per_series",
            "Bytes of label sets and label index per series in the head.",
            per(g.head_index_bytes, g.head_series),
        ),
        (
            "profiledb_head_dictionary_bytes_per_stack_node",
            "Dictionary bytes (strings, functions, locations, stack tree) per distinct stack prefix in the head.",
            per(g.head_dictionary_bytes, g.head_stack_nodes),
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_sizes_every_bounded_part_of_the_options() {
        let p = MemoryPlan::split(1000 << 20);
        let mut o = crate::ServeOptions::default();
        p.apply(&mut o);
        assert_eq!(o.store.head_max_bytes, 250 << 20);
        assert_eq!(o.store.segment_cache_bytes, 250 << 20);
        assert_eq!(o.store.compaction_max_bytes, 100 << 20);
        assert_eq!(o.store.wal_buffer_bytes, 20 << 20);
        assert_eq!(o.store.frame_tree_max_nodes, (50 << 20) / 32);
        assert_eq!(o.ingest.memory_bytes, 60 << 20);
        assert_eq!(o.store.stack_interner_bytes, 20 << 20);
        assert_eq!(o.query_cache_bytes, 100 << 20);
        assert_eq!(o.query_memory_bytes, 200 << 20);
        assert_eq!(o.query_limits.max_tree_nodes, (150 << 20) / 4 / 64);
    }

    #[test]
    fn the_split_follows_the_documented_rule() {
        let p = MemoryPlan::split(1000 << 20);
        assert_eq!(p.head, 250 << 20);
        assert_eq!(p.segment_cache, 250 << 20);
        assert_eq!(p.result_cache, 100 << 20);
        assert_eq!(p.query, 200 << 20);
        assert_eq!(p.compaction, 100 << 20);
        assert_eq!(p.ingest, 60 << 20);
        assert_eq!(p.stack_interner, 20 << 20);
        assert_eq!(p.wal_buffer, 20 << 20);
        // Every share together is the whole budget.
        let sum = p.head
            + p.segment_cache
            + p.result_cache
            + p.query
            + p.compaction
            + p.ingest
            + p.stack_interner
            + p.wal_buffer;
        assert_eq!(sum, p.total);
        // The WAL buffer share is capped.
        assert_eq!(MemoryPlan::split(8 << 30).wal_buffer, 32 << 20);
        // Of a 200 MiB query share: 50 MiB of frame tree, 4 merges of 37.5 MiB.
        assert_eq!(MemoryPlan::frame_tree_nodes(200 << 20), (50 << 20) / 32);
        assert_eq!(MemoryPlan::per_query(200 << 20), (150 << 20) / 4);
        assert_eq!(MemoryPlan::max_tree_nodes(200 << 20), (150 << 20) / 4 / 64);
    }

    #[test]
    fn machine_memory_comes_from_meminfo_and_cgroup_files() {
        let meminfo = "MemTotal:       16314368 kB\nMemFree:         1234 kB\n";
        assert_eq!(meminfo_total(meminfo), Some(16_314_368 * 1024));
        assert_eq!(meminfo_total("MemFree: 1 kB\n"), None);
        assert_eq!(cgroup_limit("max\n"), None);
        assert_eq!(cgroup_limit("2147483648\n"), Some(2 << 30));
        assert_eq!(cgroup_limit("9223372036854771712\n"), None);
        assert!(default_total() > 0);
    }
}
