//! Byte-bounded caches of large items, shared by the segment cache (decoded
//! segments) and the querier (function indexes).

/// A cache of large items in one shard: quick_cache splits a sharded cache's budget
/// per shard and refuses any item over a shard's hot area, so a few items of tens
/// to hundreds of MB (decoded segments, function indexes) were never kept.
pub(crate) fn one_shard_cache<V: Clone, W: quick_cache::Weighter<u64, V> + Clone>(
    bytes: u64,
    weighter: W,
) -> quick_cache::sync::Cache<u64, V, W> {
    let items = (bytes / (16 << 20)).clamp(16, 100_000) as usize;
    let options = quick_cache::OptionsBuilder::new()
        .shards(1)
        .estimated_items_capacity(items)
        .weight_capacity(bytes)
        .build();
    match options {
        Ok(o) => quick_cache::sync::Cache::with_options(
            o,
            weighter,
            Default::default(),
            Default::default(),
        ),
        // Not reached (every option is set); a cache of the default shape still works.
        Err(_) => quick_cache::sync::Cache::with_weighter(items, bytes, weighter),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone)]
    struct ValueIsWeight;

    impl quick_cache::Weighter<u64, u64> for ValueIsWeight {
        fn weight(&self, _: &u64, v: &u64) -> u64 {
            *v
        }
    }

    /// Segments of a few hundred MB must stay cached while the budget holds them: a
    /// cache sharded 8 ways refused any item over an eighth of the budget, so the
    /// largest segment was read from disk on every query.
    #[test]
    fn items_up_to_the_whole_budget_stay_cached() {
        const MB: u64 = 1 << 20;
        let cache = one_shard_cache(1024 * MB, ValueIsWeight);
        let sizes = [300 * MB, 300 * MB, 250 * MB, 10 * MB, 10 * MB];
        for (id, &w) in sizes.iter().enumerate() {
            cache.insert(id as u64, w);
        }
        for (id, &w) in sizes.iter().enumerate() {
            assert_eq!(cache.get(&(id as u64)), Some(w), "item {id} of {w} bytes");
        }
        assert_eq!(cache.weight(), sizes.iter().sum::<u64>());
        // Over budget, something is evicted and the weight stays within it.
        cache.insert(99, 400 * MB);
        assert!(cache.weight() <= 1024 * MB);
    }
}
