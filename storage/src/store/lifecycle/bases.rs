//! Symbol bases in the lifecycle (the format is `segment/base.rs`): which base
//! a compacted block is written on, and deleting bases no segment names.
//!
//! A tenant's current base is the one its newest block names; [`decide`] says
//! whether a block is written on it, on a grown copy of it, or on a fresh base
//! of its own tables. Older bases stay while any segment, live or retired but
//! still read, names them; every lifecycle run deletes the others, and so does
//! opening the store (a crash between writing a base and the segment naming it
//! leaves one).

use std::collections::BTreeSet;
use std::fs;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tracing::{info, warn};

use crate::error::{IoContext, Result};
use crate::model::TenantId;
use crate::segment::{self, BaseDecision, BaseFit, BaseRef, SymbolBase, BASES_DIR};
use crate::store::state::SegmentHandle;
use crate::store::Inner;

/// What a block is written on, given how it fits the tenant's current base.
///
/// * **Use** it while the block adds at most a sixteenth of its stack nodes:
///   the block stores those itself.
/// * **Grow** it (a new base: the current one and what the block adds) when the
///   block adds more but shares at least half the base. A day samples most of
///   a fleet's stacks, not all: a base cut from one day lacks some of the next
///   month's nodes, which every block would store again
///   (docs/perf-log/2026-11-27-round-17-symbol-bases.md).
/// * **Fresh** otherwise (its own tables alone): the base is mostly stacks the
///   block does not have, as when a tenant's stacks change wholesale. Growing
///   then would copy the whole base into every new one.
///
/// Either way the base may not outgrow four times the block (plus 65,536
/// nodes): reading a block decodes its whole base.
pub(crate) fn decide(f: &BaseFit) -> BaseDecision {
    let bound = f.segment_nodes.saturating_mul(4).saturating_add(65_536);
    let shared = f.segment_nodes.saturating_sub(f.added_nodes);
    if f.added_nodes.saturating_mul(16) <= f.segment_nodes && f.base_nodes <= bound {
        BaseDecision::Use
    } else if shared.saturating_mul(2) >= f.base_nodes
        && f.base_nodes.saturating_add(f.added_nodes) <= bound
    {
        BaseDecision::Grow
    } else {
        BaseDecision::Fresh
    }
}

/// Whether a block of this width is written on a base: a day and wider. Tier
/// merges of open hours are merged again within the day.
pub(crate) fn block_uses_bases(width_ms: i64) -> bool {
    width_ms >= DAY_MS
}

const DAY_MS: i64 = 86_400_000;

impl Inner {
    /// The base `tenant`'s newest block was written on, loaded (`None` without
    /// one, or when it cannot be read: the next block cuts a new one).
    pub(super) fn current_base(&self, tenant: &TenantId) -> Option<Arc<SymbolBase>> {
        let newest = self
            .state
            .read()
            .segments
            .values()
            .filter(|h| h.meta.tenant == *tenant && h.meta.base.is_some())
            .max_by_key(|h| h.meta.id)
            .cloned()?;
        let want = newest.meta.base?;
        match segment::load_base(&newest.file.path, want) {
            Ok(b) => Some(b),
            Err(e) => {
                warn!(tenant = %tenant, base = want.id, error = %e, "cannot read the current symbol base; the next block cuts a new one");
                None
            }
        }
    }

    /// Reads the bases the newest segments name into memory (as many as it
    /// keeps): a first query after a restart would otherwise read and
    /// decompress one before its answer.
    /// One that cannot be read is left to the query that needs it, which
    /// quarantines its segments.
    pub(in crate::store) fn preload_bases(&self) {
        let mut newest: Vec<(BaseRef, Arc<SegmentHandle>)> = self
            .state
            .read()
            .segments
            .values()
            .filter_map(|h| Some((h.meta.base?, h.clone())))
            .collect();
        newest.sort_unstable_by_key(|(_, h)| std::cmp::Reverse(h.meta.id));
        let mut seen = BTreeSet::new();
        for (want, h) in newest {
            if seen.len() >= segment::LOADED_BASES || !seen.insert(want.id) {
                continue;
            }
            if let Err(e) = segment::load_base(&h.file.path, want) {
                warn!(base = want.id, error = %e, "cannot read a symbol base at open");
            }
        }
    }

    /// Deletes base files no live or retired segment names, and leftovers of a
    /// base write cut short; counts the rest for `/metrics`.
    pub(in crate::store) fn collect_bases(&self) -> Result<()> {
        let named: BTreeSet<u64> = {
            let st = self.state.read();
            let retired = self.retired.lock();
            st.segments
                .values()
                .chain(retired.iter())
                .filter_map(|h: &Arc<SegmentHandle>| h.meta.base.map(|b| b.id))
                .collect()
        };
        let root = self.dir.join("segments");
        let (mut count, mut bytes) = (0u64, 0u64);
        let tenants = match fs::read_dir(&root) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(crate::error::StorageError::io(&root, e)),
        };
        for tdir in tenants {
            let dir = tdir.at(&root)?.path().join(BASES_DIR);
            let Ok(files) = fs::read_dir(&dir) else {
                continue;
            };
            let mut removed = false;
            for f in files {
                let f = f.at(&dir)?;
                let path = f.path();
                let name = f.file_name().to_string_lossy().into_owned();
                let keep =
                    segment::base_id_from_file_name(&name).is_some_and(|id| named.contains(&id));
                if keep {
                    count += 1;
                    bytes += f.metadata().at(&path)?.len();
                    continue;
                }
                info!(file = %path.display(), "deleting a symbol base no segment names");
                segment::forget_base(&path);
                fs::remove_file(&path).at(&path)?;
                removed = true;
            }
            if removed {
                crate::durable::sync_dir(&dir)?;
            }
        }
        self.base_files.store(count, Ordering::Relaxed);
        self.base_bytes.store(bytes, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_uses_grows_or_replaces_its_base_by_what_it_shares_and_adds() {
        let decide = |segment_nodes, added_nodes, base_nodes| {
            decide(&BaseFit {
                segment_nodes,
                added_nodes,
                base_nodes,
            })
        };
        use BaseDecision::*;
        assert_eq!(decide(1600, 0, 1600), Use);
        assert_eq!(decide(1600, 100, 1600), Use);
        // A sixteenth and one more node: the base grows.
        assert_eq!(decide(1600, 101, 1600), Grow);
        assert_eq!(decide(1000, 800, 400), Grow);
        // Sharing under half of the base: a fresh one.
        assert_eq!(decide(1000, 600, 801), Fresh);
        assert_eq!(decide(1000, 1000, 1000), Fresh);
        // A base over four times the block (plus the slack) is not used...
        assert_eq!(decide(100_000, 0, 465_537), Fresh);
        assert_eq!(decide(100_000, 0, 465_536), Use);
        // ... nor grown past it.
        assert_eq!(decide(100_000, 10_000, 400_000), Fresh);
        // A quiet day of a tenant with a big base reads on it all the same.
        assert_eq!(decide(10, 0, 65_000), Use);
        assert!(block_uses_bases(DAY_MS));
        assert!(!block_uses_bases(3_600_000));
    }
}
