//! Memory: the one budget and the parts' own limits (docs/operations.md, "Memory
//! budget").

use crate::memory::{self, MemoryPlan};
use crate::ServeOptions;

#[derive(clap::Args, Clone, Debug)]
#[command(next_help_heading = "Memory")]
pub struct MemoryArgs {
    /// Memory budget in MiB shared by the head, caches, queries, ingest and the
    /// WAL writer (see docs/operations.md for the split). Default: half the
    /// machine's memory (the smaller of MemTotal and the cgroup limit).
    #[arg(long)]
    pub memory_mb: Option<u64>,
    /// Head memory budget in MiB before partitions are flushed early; it bounds
    /// the WAL on disk too. Default: 25% of --memory-mb.
    #[arg(long)]
    pub head_max_mb: Option<u64>,
    /// Query result cache size in MiB (0 disables it): a quarter for whole
    /// answers, the rest for merge and group-by parts. Default: 10% of
    /// --memory-mb.
    #[arg(long)]
    pub query_cache_mb: Option<u64>,
    /// Decoded segments kept in memory for queries, in MiB. A decoded segment
    /// takes about 9x its file size; queries over more than fit reload them.
    /// Default: 25% of --memory-mb.
    #[arg(long)]
    pub segment_cache_mb: Option<u64>,
    /// Memory for running queries in MiB: a quarter bounds the shared frame
    /// tree, the rest is reserved by queries as they run (a merge reserves its
    /// tree budget; more wait, then get 503). Default: 20% of --memory-mb.
    #[arg(long)]
    pub query_memory_mb: Option<u64>,
    /// Memory for uploads being decoded in MiB (about 4x their bodies); past it
    /// uploads get 429. Default: 6% of --memory-mb.
    #[arg(long)]
    pub ingest_memory_mb: Option<u64>,
    /// Most a compaction merge holds in memory, in MiB (the merged output so
    /// far and the source being added); bigger merges are left as they are
    /// (reported with the reason). Default: 10% of --memory-mb.
    #[arg(long)]
    pub compaction_memory_mb: Option<u64>,
}

impl MemoryArgs {
    /// The budget split by the documented rule; a part's own flag wins over its
    /// share.
    pub fn plan(&self) -> MemoryPlan {
        let mut plan = MemoryPlan::split(
            self.memory_mb
                .map_or_else(memory::default_total, super::mib),
        );
        let part = |flag: Option<u64>, share: u64| flag.map_or(share, super::mib);
        plan.head = part(self.head_max_mb, plan.head);
        plan.query = part(self.query_memory_mb, plan.query);
        plan.segment_cache = part(self.segment_cache_mb, plan.segment_cache);
        plan.compaction = part(self.compaction_memory_mb, plan.compaction);
        plan.ingest = part(self.ingest_memory_mb, plan.ingest);
        plan.result_cache = part(self.query_cache_mb, plan.result_cache);
        plan
    }

    pub fn apply(&self, o: &mut ServeOptions) -> anyhow::Result<()> {
        self.plan().apply(o);
        Ok(())
    }
}
