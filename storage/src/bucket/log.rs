//! Each tenant's index as an append-only log of changes with checkpoints.
//!
//! A change is written once, as the log entry of the next generation, with
//! create-if-absent: of two processes appending at once, the store lets one
//! create generation `g` and tells the other it exists, and that one appends at
//! `g + 1`. Nothing is read, changed and written back, so the bytes a change
//! writes are the change's own, not the whole index's. A reader holds the fold
//! of the log up to some generation ([`TenantView`]) and catches up by listing
//! the entries after it and folding them in, in order.
//!
//! The compactor writes a checkpoint (the fold at a generation) once the log
//! after the last one holds as many bytes as the index itself, or 64 entries,
//! so checkpoints cost at most what the changes did, and a fresh reader reads
//! one checkpoint and at most that many entries. Entries a checkpoint covers
//! are deleted only after [`LOG_GRACE`]: a reader or writer that listed them
//! a moment ago still finds them. A reader whose next entry is gone (it was
//! behind a checkpoint and the entries were deleted) reloads from the newest
//! checkpoint.
//!
//! An append whose answer was lost (the connection broke, or the request
//! timed out) may have been made: every entry carries a nonce, and an append
//! finding its generation taken reads the entry there to see whether it was
//! its own.

use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tracing::error;

use super::client::Bucket;
use super::error::BucketError;
use super::index::{Change, Outcome, TenantIndex};
use super::layout::{
    checkpoint_key, checkpoint_prefix, generation_of, index_key, log_key, log_prefix, TENANTS,
};

/// How long log entries and checkpoints a newer checkpoint covers are kept.
/// Longer than any append takes from its LIST to its PUT, and than any
/// reader's pause between two syncs (see [`RECHECK_AFTER`]).
pub const LOG_GRACE: Duration = Duration::from_secs(600);

/// A reader or writer whose last look at the log is older than this starts
/// again from the newest checkpoint (a reader) or lists the log before it
/// appends (a writer), instead of trusting what it knew: well within
/// [`LOG_GRACE`], so nothing it knew of was deleted meanwhile.
const RECHECK_AFTER: Duration = Duration::from_secs(60);

/// Appends of one change before giving up on a contended log.
const APPEND_ATTEMPTS: u32 = 60;

/// A checkpoint is written once the entries after the last one hold at least
/// this many, or as many bytes as the checkpoint.
const CHECKPOINT_ENTRIES: u64 = 64;

/// Log entries read at once by a catching-up reader.
const PARALLEL_READS: usize = 16;

/// One log entry as written.
#[derive(Serialize)]
struct LogEntryOut<'a> {
    generation: u64,
    nonce: u64,
    changes: &'a [Change],
}

/// One log entry as read.
#[derive(Deserialize)]
struct LogEntry {
    /// Tells an append whose answer was lost whether the entry is its own.
    nonce: u64,
    changes: Vec<Change>,
}

/// A tenant's index as one process follows it: the fold of the log up to a
/// generation, and what it takes to keep it current.
#[derive(Clone, Debug)]
pub struct TenantView {
    /// The tenant.
    pub tenant: String,
    /// The index as of `index.generation`.
    pub index: TenantIndex,
    /// When the log was last listed for this view.
    checked: Option<Instant>,
    /// The newest checkpoint seen, and the log bytes and entries folded in
    /// since it: when the next one is due.
    checkpoint: u64,
    since_bytes: u64,
    since_entries: u64,
    checkpoint_bytes: u64,
}

impl TenantView {
    /// An empty view of `tenant`, not yet synced.
    pub fn new(tenant: &str) -> TenantView {
        TenantView {
            tenant: tenant.to_string(),
            index: TenantIndex::default(),
            checked: None,
            checkpoint: 0,
            since_bytes: 0,
            since_entries: 0,
            checkpoint_bytes: 0,
        }
    }

    fn fresh(&self) -> bool {
        self.checked.is_some_and(|t| t.elapsed() < RECHECK_AFTER)
    }

    /// Whether the log after the newest checkpoint has grown enough for a new
    /// one.
    pub fn checkpoint_due(&self) -> bool {
        self.index.generation > self.checkpoint
            && (self.since_entries >= CHECKPOINT_ENTRIES
                || self.since_bytes >= self.checkpoint_bytes.max(1))
    }
}

/// Where a writer appends next to a tenant's log: the generation it last
/// appended (or saw), and when.
#[derive(Clone, Copy, Debug, Default)]
pub struct AppendHint {
    generation: u64,
    at: Option<Instant>,
}

enum CatchUp {
    Done,
    /// Entries the view needs are gone (a checkpoint covers them): reload.
    Gap,
}

fn nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

impl Bucket {
    /// Tenants with objects in the bucket (one LIST with a delimiter).
    pub fn tenants(&self) -> Result<Vec<String>, BucketError> {
        self.list_dirs(TENANTS)
    }

    /// `tenant`'s index now, read from scratch.
    pub fn load_index(&self, tenant: &str) -> Result<TenantIndex, BucketError> {
        let mut view = TenantView::new(tenant);
        self.sync(&mut view)?;
        Ok(view.index)
    }

    /// Brings `view` up to the newest generation; true when it changed.
    pub fn sync(&self, view: &mut TenantView) -> Result<bool, BucketError> {
        let before = view.index.generation;
        let mut reloaded = false;
        for _ in 0..5 {
            if view.checked.is_none() || !view.fresh() {
                match self.reload(view) {
                    // The checkpoint listed was pruned under a newer one.
                    Err(BucketError::NotFound { .. }) => continue,
                    r => r?,
                }
                reloaded = true;
            }
            match self.catch_up(view, &mut |_, _, _| {})? {
                CatchUp::Done => {
                    view.checked = Some(Instant::now());
                    return Ok(reloaded || view.index.generation != before);
                }
                CatchUp::Gap => view.checked = None,
            }
        }
        Err(BucketError::Contended {
            key: log_prefix(&view.tenant),
            attempts: 5,
        })
    }

    /// Replaces `view` with the newest checkpoint (or the index document of an
    /// earlier release, or nothing).
    fn reload(&self, view: &mut TenantView) -> Result<(), BucketError> {
        let tenant = view.tenant.clone();
        let newest = self
            .list(&checkpoint_prefix(&tenant))?
            .into_iter()
            .filter_map(|o| generation_of(&o.key).map(|g| (g, o.key)))
            .max();
        let (index, bytes) = match newest {
            Some((g, key)) => {
                let body = self.get(&key)?;
                let mut index: TenantIndex = decode(&key, &body)?;
                index.generation = g;
                (index, body.len() as u64)
            }
            None => match self.get(&index_key(&tenant)) {
                Ok(body) => (decode(&index_key(&tenant), &body)?, body.len() as u64),
                Err(BucketError::NotFound { .. }) => (TenantIndex::default(), 0),
                Err(e) => return Err(e),
            },
        };
        *view = TenantView {
            checkpoint: index.generation,
            checkpoint_bytes: bytes,
            index,
            ..TenantView::new(&tenant)
        };
        Ok(())
    }

    /// Folds the entries after the view's generation into it, telling
    /// `observe` each change's generation, what it did and the index after it.
    fn catch_up(
        &self,
        view: &mut TenantView,
        observe: &mut dyn FnMut(u64, &Outcome, &TenantIndex),
    ) -> Result<CatchUp, BucketError> {
        let after = log_key(&view.tenant, view.index.generation);
        let listed = self.list_after(&log_prefix(&view.tenant), Some(&after))?;
        let gens: Vec<u64> = listed
            .iter()
            .filter_map(|o| generation_of(&o.key))
            .collect();
        for (i, g) in gens.iter().enumerate() {
            if *g != view.index.generation + 1 + i as u64 {
                return Ok(CatchUp::Gap);
            }
        }
        let keys: Vec<String> = listed.into_iter().map(|o| o.key).collect();
        for chunk in keys.chunks(PARALLEL_READS) {
            for (key, body) in chunk.iter().zip(self.get_many(chunk)) {
                let body = match body {
                    Ok(b) => b,
                    Err(BucketError::NotFound { .. }) => return Ok(CatchUp::Gap),
                    Err(e) => return Err(e),
                };
                let g = view.index.generation + 1;
                view.since_bytes += body.len() as u64;
                view.since_entries += 1;
                match serde_json::from_slice::<LogEntry>(&body) {
                    Ok(entry) => {
                        for change in &entry.changes {
                            let outcome = view.index.apply(change);
                            observe(g, &outcome, &view.index);
                        }
                    }
                    Err(e) => {
                        // Every reader folds the same bytes, so every reader
                        // skips it: the indexes stay equal. Reported, not hidden.
                        error!(key, error = %e, "undecodable index log entry skipped");
                        view.index.unreadable.push(g);
                    }
                }
                view.index.generation = g;
            }
        }
        Ok(CatchUp::Done)
    }

    /// Appends `change` to `tenant`'s log; its generation. `hint` carries
    /// where the caller appended last, so a writer alone on a tenant appends
    /// with one request.
    pub fn append_change(
        &self,
        tenant: &str,
        change: Change,
        hint: &mut AppendHint,
    ) -> Result<u64, BucketError> {
        let nonce = nonce();
        let mut next = match hint.at {
            Some(at) if at.elapsed() < RECHECK_AFTER => hint.generation + 1,
            _ => self.next_generation(tenant, hint.generation)?,
        };
        let changes = [change];
        for attempt in 0..APPEND_ATTEMPTS {
            let key = log_key(tenant, next);
            let entry = LogEntryOut {
                generation: next,
                nonce,
                changes: &changes,
            };
            let body = serde_json::to_vec(&entry).map_err(|e| BucketError::Corrupt {
                key: key.clone(),
                reason: format!("cannot encode: {e}"),
            })?;
            // Taken: by someone else, or by this append whose answer was lost.
            if self.put_if_absent(&key, Bytes::from(body))?
                || self.entry_nonce(&key)? == Some(nonce)
            {
                *hint = AppendHint {
                    generation: next,
                    at: Some(Instant::now()),
                };
                return Ok(next);
            }
            // Jittered so racing appenders spread out.
            let ms = (u64::from(attempt) * 3 + nonce % 7) % 20;
            std::thread::sleep(Duration::from_millis(ms));
            next = self.next_generation(tenant, next)?;
        }
        Err(BucketError::Contended {
            key: log_prefix(tenant),
            attempts: APPEND_ATTEMPTS,
        })
    }

    /// The nonce of the log entry at `key` (`None` if unreadable or gone).
    fn entry_nonce(&self, key: &str) -> Result<Option<u64>, BucketError> {
        match self.get(key) {
            Ok(b) => Ok(serde_json::from_slice::<LogEntry>(&b).ok().map(|e| e.nonce)),
            Err(BucketError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The generation after the newest of `tenant`'s log, looking after
    /// `known` (a generation known to exist or to be covered by a checkpoint).
    fn next_generation(&self, tenant: &str, known: u64) -> Result<u64, BucketError> {
        let after = log_key(tenant, known);
        let listed = self.list_after(&log_prefix(tenant), Some(&after))?;
        if let Some(g) = listed.iter().filter_map(|o| generation_of(&o.key)).max() {
            return Ok(g + 1);
        }
        // Nothing after `known`: entries may have been deleted under a
        // checkpoint, or the tenant's index predates the log.
        let newest_checkpoint = self
            .list(&checkpoint_prefix(tenant))?
            .iter()
            .filter_map(|o| generation_of(&o.key))
            .max();
        let base = match newest_checkpoint {
            Some(g) => g,
            None if known == 0 => match self.get(&index_key(tenant)) {
                Ok(body) => decode::<TenantIndex>(&index_key(tenant), &body)?.generation,
                Err(BucketError::NotFound { .. }) => 0,
                Err(e) => return Err(e),
            },
            None => 0,
        };
        Ok(known.max(base) + 1)
    }

    /// Appends `change` and folds the log into `view` up to it: what it did at
    /// its place in the log.
    pub fn apply_change(
        &self,
        view: &mut TenantView,
        change: Change,
    ) -> Result<Outcome, BucketError> {
        let probe = change.clone();
        let mut hint = AppendHint {
            generation: view.index.generation,
            at: None,
        };
        let g = self.append_change(&view.tenant, change, &mut hint)?;
        let mut outcome = None;
        if view.index.generation < g {
            let mut watch = |at: u64, o: &Outcome, _: &TenantIndex| {
                if at == g {
                    outcome = Some(o.clone());
                }
            };
            if let CatchUp::Gap = self.catch_up(view, &mut watch)? {
                self.sync(view)?;
            }
        }
        view.checked = Some(Instant::now());
        // Folded into a checkpoint before this view saw it: read what it did
        // off the index (rare: the view was older than the log's grace).
        Ok(outcome.unwrap_or_else(|| settled_outcome(&view.index, &probe)))
    }

    /// Folds `tenant`'s whole log from its first generation, handing `each` the
    /// index after every change: for audits, and for the bench's figure of what
    /// rewriting the whole index on every change (the release before the log)
    /// would have written. Fails once entries were pruned under a checkpoint.
    pub fn fold_log(
        &self,
        tenant: &str,
        mut each: impl FnMut(&TenantIndex),
    ) -> Result<TenantIndex, BucketError> {
        let mut view = TenantView::new(tenant);
        match self.catch_up(&mut view, &mut |_, _, idx| each(idx))? {
            CatchUp::Done => Ok(view.index),
            CatchUp::Gap => Err(BucketError::Corrupt {
                key: log_prefix(tenant),
                reason: "the log's first entries were pruned under a checkpoint".into(),
            }),
        }
    }

    /// Writes the checkpoint of `view`'s generation.
    pub fn write_checkpoint(&self, view: &mut TenantView) -> Result<u64, BucketError> {
        let key = checkpoint_key(&view.tenant, view.index.generation);
        let body = serde_json::to_vec(&view.index).map_err(|e| BucketError::Corrupt {
            key: key.clone(),
            reason: format!("cannot encode: {e}"),
        })?;
        let n = body.len() as u64;
        self.put_small(&key, Bytes::from(body))?;
        view.checkpoint = view.index.generation;
        view.checkpoint_bytes = n;
        view.since_bytes = 0;
        view.since_entries = 0;
        Ok(n)
    }

    /// Deletes `tenant`'s log entries and checkpoints that the newest
    /// checkpoint covers and that are older than `grace`; how many.
    pub fn prune_log(
        &self,
        tenant: &str,
        grace: Duration,
        now_ms: i64,
    ) -> Result<usize, BucketError> {
        let cutoff = now_ms - grace.as_millis() as i64;
        let checkpoints = self.list(&checkpoint_prefix(tenant))?;
        let Some(newest) = checkpoints
            .iter()
            .filter_map(|o| generation_of(&o.key))
            .max()
        else {
            return Ok(0);
        };
        let mut deleted = 0;
        // Oldest first, so the log left is always a run ending at its newest.
        for o in self.list(&log_prefix(tenant))? {
            let Some(g) = generation_of(&o.key) else {
                continue;
            };
            if g > newest || o.last_modified_ms > cutoff {
                break;
            }
            self.delete(&o.key)?;
            deleted += 1;
        }
        for o in checkpoints {
            if generation_of(&o.key).is_some_and(|g| g < newest) && o.last_modified_ms <= cutoff {
                self.delete(&o.key)?;
                deleted += 1;
            }
        }
        if deleted > 0 || self.head(&index_key(tenant)).is_ok() {
            self.delete(&index_key(tenant))?;
        }
        Ok(deleted)
    }
}

/// What `change` did, read off an index it has been folded into.
fn settled_outcome(index: &TenantIndex, change: &Change) -> Outcome {
    match change {
        Change::Replace {
            sources, merged, ..
        } => {
            if merged.iter().all(|m| index.knows(&m.key)) {
                Outcome::Changed(sources.len() + merged.len())
            } else {
                Outcome::SourceGone(sources.first().cloned().unwrap_or_default())
            }
        }
        // Someone's quarantine or retirement took effect; not counted as ours.
        _ => Outcome::Changed(0),
    }
}

fn decode<T: serde::de::DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T, BucketError> {
    serde_json::from_slice(bytes).map_err(|e| BucketError::Corrupt {
        key: key.to_string(),
        reason: e.to_string(),
    })
}
