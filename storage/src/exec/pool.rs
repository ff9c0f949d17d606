//! The threads a query runs on besides the one that asked: a pool kept for the
//! process, not threads spawned per query.
//!
//! Spawning scan threads per query cost a flame-graph query about a fifth of its
//! CPU: each new thread faulted in a fresh stack and a fresh allocator heap (huge
//! pages, zeroed on first touch) and gave them back when it ended.
//!
//! The pool has twice as many threads as CPUs, so that concurrent queries each get
//! helpers at once, as they did with their own threads (a job waiting for a free
//! pool thread holds its query back until another query's job ends). Not more:
//! idle pool threads spin and yield for a while before they sleep, and with four
//! per CPU that cost a diff a fifth more CPU and half a millisecond.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use parking_lot::Mutex;

use crate::error::{Result, StorageError};

/// Pool threads per CPU.
const THREADS_PER_CPU: usize = 2;

/// The process's query pool, started on first use. `None` when its threads cannot
/// be started (queries then run on the asking thread alone).
fn pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        rayon::ThreadPoolBuilder::new()
            .num_threads(cpus * THREADS_PER_CPU)
            .thread_name(|i| format!("profiledb-query-{i}"))
            .build()
            .ok()
    })
    .as_ref()
}

/// Starts the pool's threads now rather than in the first query that needs them.
pub(crate) fn start() {
    let _ = pool();
}

/// `f()`, with a panic turned into this query's error instead of the server's.
fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err(StorageError::Corrupt(format!("{what} panicked"))))
}

/// Runs `f` over `items` on up to `threads` workers, each folding into its own
/// accumulator from `init`; returns the accumulators. The first error wins. The
/// asking thread is one of the workers.
pub fn par_fold<I: Sync, T: Send>(
    items: &[I],
    threads: usize,
    init: impl Fn() -> T + Sync,
    f: impl Fn(&mut T, &I) -> Result<()> + Sync,
) -> Result<Vec<T>> {
    let threads = threads.clamp(1, items.len().max(1));
    let next = AtomicUsize::new(0);
    let work = || {
        guarded("query worker", || {
            let mut acc = init();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(it) = items.get(i) else { break };
                f(&mut acc, it)?;
            }
            Ok(acc)
        })
    };
    let pool = match pool() {
        Some(p) if threads > 1 => p,
        _ => return work().map(|acc| vec![acc]),
    };
    let helpers: Vec<Mutex<Option<Result<T>>>> = (1..threads).map(|_| Mutex::new(None)).collect();
    let mine = pool.in_place_scope(|s| {
        for slot in &helpers {
            s.spawn(|_| *slot.lock() = Some(work()));
        }
        work()
    });
    std::iter::once(mine)
        .chain(helpers.into_iter().map(|slot| {
            slot.into_inner()
                .unwrap_or_else(|| Err(StorageError::Corrupt("a query worker was lost".into())))
        }))
        .collect()
}

/// `(a(), b())`, `a` on a pool thread while `b` runs on the asking thread (the two
/// sides of a diff).
pub fn join<A: Send, B>(
    a: impl FnOnce() -> Result<A> + Send,
    b: impl FnOnce() -> Result<B>,
) -> (Result<A>, Result<B>) {
    let Some(pool) = pool() else {
        return (guarded("query side", a), guarded("query side", b));
    };
    let slot = Mutex::new(None);
    let rb = pool.in_place_scope(|s| {
        s.spawn(|_| *slot.lock() = Some(guarded("query side", a)));
        guarded("query side", b)
    });
    let ra = slot
        .into_inner()
        .unwrap_or_else(|| Err(StorageError::Corrupt("a query side was lost".into())));
    (ra, rb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_is_folded_once_across_workers() {
        let items: Vec<u64> = (1..=1000).collect();
        let accs = par_fold(
            &items,
            3,
            || 0u64,
            |acc, &x| {
                *acc += x;
                Ok(())
            },
        )
        .unwrap();
        assert!(!accs.is_empty() && accs.len() <= 3);
        assert_eq!(accs.iter().sum::<u64>(), 500_500);
    }

    #[test]
    fn a_worker_error_or_panic_is_the_query_error() {
        let items: Vec<u32> = (0..100).collect();
        let err = par_fold(
            &items,
            2,
            || (),
            |_, &x| {
                if x == 57 {
                    return Err(StorageError::Invalid("item 57".into()));
                }
                Ok(())
            },
        );
        assert!(matches!(err, Err(StorageError::Invalid(m)) if m == "item 57"));
        let panicked = par_fold(
            &items,
            2,
            || (),
            |_, &x| {
                assert_ne!(x, 3, "boom");
                Ok(())
            },
        );
        assert!(matches!(panicked, Err(StorageError::Corrupt(_))));
        // The pool still serves queries after a worker panicked.
        let (a, b) = join(|| Ok(1), || Ok(2));
        assert_eq!((a.unwrap(), b.unwrap()), (1, 2));
    }

    #[test]
    fn nested_folds_on_pool_threads_finish() {
        let outer: Vec<u32> = (0..16).collect();
        let accs = par_fold(
            &outer,
            4,
            || 0u32,
            |acc, _| {
                let inner: Vec<u32> = (0..10).collect();
                let sums = par_fold(
                    &inner,
                    4,
                    || 0u32,
                    |a, &x| {
                        *a += x;
                        Ok(())
                    },
                )?;
                *acc += sums.iter().sum::<u32>();
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(accs.iter().sum::<u32>(), 16 * 45);
    }
}
