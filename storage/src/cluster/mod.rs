//! The cluster roles over a bucket: what makes stateless processes out of a store.
//!
//! Each role is a thread beside a local [`Store`](crate::Store), talking to the
//! bucket through [`Bucket`](crate::Bucket) (whose index is updated only by
//! compare-and-swap, so there is no consensus of our own):
//!
//! | file           | role      | does                                                        |
//! |----------------|-----------|-------------------------------------------------------------|
//! | `uploader.rs`  | writer    | flushes the head every interval, uploads new segments, adds them to the index, raises the replay floor, drops local copies |
//! | `mirror.rs`    | querier   | follows the index, downloads new segments, swaps them into a local store's live set |
//! | `compactor.rs` | compactor | merges a partition's small segments under a lease, replaces them in the index, expires old data, collects garbage |
//! | `plan.rs`      | compactor | which segments to merge: the bucket's view for `crate::compaction` |
//! | `seqs.rs`      | writer    | upload sequence numbers, kept on disk                        |
//! | `fault.rs`     | all       | fault points where tests make a role crash                   |
//! | `error.rs`     | all       | `ClusterError`, what starting a role or a pass fails with    |
//! | `health.rs`    | all       | a role's standing with the bucket (for `/ready`, `/metrics`) |
//!
//! Segment objects are named `<origin>-<id>`: a writer's local segment id, so an
//! upload retried after a crash writes the same object. Its index entry carries
//! the writer's upload sequence number, and the index refuses a number its
//! writer's mark has passed, so a sample is never counted twice, however late
//! the retry (`bucket/index.rs`).

mod compactor;
mod entry;
mod error;
mod fault;
mod health;
mod mirror;
mod plan;
mod seqs;
mod uploader;

pub use compactor::{Compactor, CompactorConfig, CompactorStats};
pub use error::{ClusterError, InvalidFault};
pub use fault::{Fault, FaultAction, FaultPoint};
pub use health::Health;
pub use mirror::{Mirror, MirrorConfig, MirrorStats};
pub use plan::{plan_merges, MergePlan, MergePolicy};
pub use uploader::{Acked, Uploader, UploaderConfig, UploaderStats};

/// A stoppable background loop: the thread, the channel that stops it and the
/// one that wakes it early.
struct Worker {
    stop: Option<crossbeam::channel::Sender<()>>,
    kick: crossbeam::channel::Sender<()>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    /// Runs `pass` now and then every `interval`, or at once when kicked, until
    /// stopped; `pass` returns false to end the loop.
    fn spawn(
        name: &str,
        interval: std::time::Duration,
        mut pass: impl FnMut() -> bool + Send + 'static,
    ) -> std::io::Result<Worker> {
        use crossbeam::channel::{bounded, select};
        let (tx, rx) = bounded::<()>(1);
        let (kick, kicked) = bounded::<()>(1);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || loop {
                if !pass() {
                    return;
                }
                select! {
                    recv(rx) -> _ => return,
                    recv(kicked) -> _ => {}
                    default(interval) => {}
                }
            })?;
        Ok(Worker {
            stop: Some(tx),
            kick,
            thread: Some(thread),
        })
    }

    /// Wakes the loop for a pass now (or right after the running one).
    fn kick(&self) {
        let _ = self.kick.try_send(());
    }

    fn stop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop();
    }
}
