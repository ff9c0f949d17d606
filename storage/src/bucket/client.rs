//! [`Bucket`]: the object store behind a synchronous API, with request counters.
//!
//! The engine's roles are threads, and the server calls them from tokio's
//! blocking pool; `object_store` is async. Each call is spawned onto a small
//! runtime the bucket owns and awaited over a channel, which works from any
//! thread (a `block_on` from inside a runtime would panic).
//!
//! Every request is bounded in time, so a store that hangs is noticed within
//! seconds, not minutes: the client gives up on a request whose answer (or
//! the next bytes of its body) takes longer than the request timeout, and
//! retries a bounded number of times. Segment uploads, whose body can be
//! large, get a deadline that grows with their size instead.

use std::future::Future;
use std::ops::Range;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::aws::AmazonS3Builder;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientOptions, GetOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions,
    PutPayload, PutResult, RetryConfig,
};

use super::config::BucketConfig;
use super::error::{transport_failure, BucketError};

/// The slowest upload a segment PUT is allowed before it counts as hung:
/// its deadline is the request timeout plus its size at this rate.
const MIN_UPLOAD_BYTES_PER_SEC: u64 = 1 << 20;

/// One object, as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Key relative to the bucket prefix.
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// Entity tag, when the store gives one.
    pub etag: Option<String>,
    /// Last modification (ms since the epoch).
    pub last_modified_ms: i64,
}

/// Requests made and bytes moved, for `/metrics` and the bench.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BucketStats {
    /// Whole-object GETs (conditional ones included).
    pub gets: u64,
    /// Ranged GETs.
    pub range_gets: u64,
    /// HEADs.
    pub heads: u64,
    /// PUTs (conditional ones included).
    pub puts: u64,
    /// LIST pages.
    pub lists: u64,
    /// DELETEs.
    pub deletes: u64,
    /// Bytes of object bodies read.
    pub bytes_read: u64,
    /// Bytes of object bodies written.
    pub bytes_written: u64,
    /// Of `bytes_written`, the index's (log entries and checkpoints).
    pub index_bytes_written: u64,
    /// Of `bytes_read`, the index's.
    pub index_bytes_read: u64,
    /// Conditional writes that lost a race.
    pub cas_conflicts: u64,
    /// Requests that failed (not found excepted).
    pub errors: u64,
    /// Of `errors`, those that found the store unreachable after the retries,
    /// by how ([`Unreachable::ALL`] order): the rest were answers about an object
    /// (damage, a lost race, a refusal).
    pub unreachable: [u64; 4],
    /// When the store last answered a request (ms since the epoch; 0: never).
    pub last_answer_ms: i64,
}

#[derive(Default)]
struct Counters {
    gets: AtomicU64,
    range_gets: AtomicU64,
    heads: AtomicU64,
    puts: AtomicU64,
    lists: AtomicU64,
    deletes: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    index_bytes_written: AtomicU64,
    index_bytes_read: AtomicU64,
    cas_conflicts: AtomicU64,
    errors: AtomicU64,
    unreachable: [AtomicU64; 4],
    last_answer_ms: AtomicI64,
}

struct Inner {
    /// Every request but segment uploads: each answer (and each read of a body)
    /// must come within the request timeout.
    store: Arc<dyn ObjectStore>,
    /// Segment uploads: bounded by a deadline from their size (a large body
    /// takes longer than the request timeout to send).
    bulk: Arc<dyn ObjectStore>,
    timeout: Duration,
    retries: usize,
    /// Prefix inside the store, without slashes at either end ("" for none).
    prefix: String,
    describe: String,
    rt: Option<tokio::runtime::Runtime>,
    counters: Counters,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle may go away on a runtime thread, where a blocking
        // shutdown would panic.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// A bucket and prefix. Cheap to clone; every method blocks until the store
/// answered (after the client's own retries) or the request timed out.
#[derive(Clone)]
pub struct Bucket {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.inner.describe)
    }
}

pub(super) fn inc(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Keys of the index (log entries, checkpoints, the legacy document).
fn is_index_key(key: &str) -> bool {
    key.contains("/index/") || key.ends_with("/index.json")
}

impl Bucket {
    /// Connects to the bucket `cfg` names. Nothing is requested yet: an
    /// unreachable store shows on the first call.
    pub fn open(cfg: &BucketConfig) -> Result<Bucket, BucketError> {
        if cfg.url == "memory://" {
            return Ok(Self::from_store(Arc::new(InMemory::new()), ""));
        }
        let Some((bucket, prefix)) = cfg.s3_parts() else {
            return Err(BucketError::Config(format!(
                "unsupported storage URL {:?}: use s3://bucket/prefix (AWS S3, MinIO, Ceph RGW; \
                 the index needs conditional writes, which a plain directory cannot do)",
                cfg.url
            )));
        };
        let t = cfg.request_timeout;
        let builder = |client: ClientOptions, retries: usize| {
            let mut b = AmazonS3Builder::new()
                .with_bucket_name(bucket)
                .with_region(cfg.region.as_deref().unwrap_or("us-east-1"))
                .with_allow_http(cfg.allow_http)
                .with_retry(RetryConfig {
                    backoff: BackoffConfig {
                        init_backoff: Duration::from_millis(100),
                        max_backoff: t,
                        base: 2.,
                    },
                    max_retries: retries,
                    retry_timeout: t * (retries as u32 + 1),
                })
                .with_client_options(
                    client
                        .with_connect_timeout(t)
                        .with_allow_http(cfg.allow_http),
                );
            if let Some(e) = &cfg.endpoint {
                b = b.with_endpoint(e);
            }
            if let Some(k) = &cfg.access_key_id {
                b = b.with_access_key_id(k);
            }
            if let Some(k) = &cfg.secret_access_key {
                b = b.with_secret_access_key(k);
            }
            b.build()
                .map_err(|e| BucketError::Config(format!("{}: {e}", cfg.url)))
        };
        // The answer and every read of a body within the timeout; no bound on
        // the whole of a long download that keeps coming.
        let store = builder(
            ClientOptions::new()
                .with_timeout_disabled()
                .with_read_timeout(t),
            cfg.retries,
        )?;
        // Uploads are timed by `put` itself, and retried there.
        let bulk = builder(ClientOptions::new().with_timeout_disabled(), 0)?;
        let mut b = Self::from_stores(Arc::new(store), Arc::new(bulk), prefix, t, cfg.retries);
        let at = cfg.endpoint.as_deref().unwrap_or("AWS");
        if let Some(inner) = Arc::get_mut(&mut b.inner) {
            inner.describe = format!("{} at {at}", cfg.url);
        }
        Ok(b)
    }

    /// A bucket over any `object_store` store (tests: in memory, local files).
    pub fn from_store(store: Arc<dyn ObjectStore>, prefix: &str) -> Bucket {
        let defaults = BucketConfig::new("memory://");
        Self::from_stores(
            store.clone(),
            store,
            prefix,
            defaults.request_timeout,
            defaults.retries,
        )
    }

    fn from_stores(
        store: Arc<dyn ObjectStore>,
        bulk: Arc<dyn ObjectStore>,
        prefix: &str,
        timeout: Duration,
        retries: usize,
    ) -> Bucket {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("profiledb-bucket")
            .enable_all()
            .build()
            .ok();
        let prefix = prefix.trim_matches('/').to_string();
        Bucket {
            inner: Arc::new(Inner {
                describe: format!("{store}/{prefix}"),
                store,
                bulk,
                timeout,
                retries,
                prefix,
                rt,
                counters: Counters::default(),
            }),
        }
    }

    /// The bucket for logs: URL and endpoint, never credentials.
    pub fn describe(&self) -> String {
        self.inner.describe.clone()
    }

    /// How long one request may wait for an answer.
    pub fn request_timeout(&self) -> Duration {
        self.inner.timeout
    }

    pub(super) fn path(&self, key: &str) -> Path {
        if self.inner.prefix.is_empty() {
            Path::from(key)
        } else {
            Path::from(format!("{}/{key}", self.inner.prefix))
        }
    }

    pub(super) fn key_of(&self, path: &str) -> String {
        match self.inner.prefix.as_str() {
            "" => path.to_string(),
            pre => path
                .strip_prefix(pre)
                .map_or(path, |s| s.trim_start_matches('/'))
                .to_string(),
        }
    }

    /// Runs `fut` on the bucket's runtime and waits for it; notes the answer.
    pub(super) fn run<T: Send + 'static>(
        &self,
        fut: impl Future<Output = object_store::Result<T>> + Send + 'static,
    ) -> object_store::Result<T> {
        let Some(rt) = &self.inner.rt else {
            return Err(object_store::Error::Generic {
                store: "bucket",
                source: "no runtime: the bucket's threads could not be started".into(),
            });
        };
        let (tx, rx) = crossbeam::channel::bounded(1);
        rt.spawn(async move {
            let _ = tx.send(fut.await);
        });
        let out = rx.recv().unwrap_or_else(|_| {
            Err(object_store::Error::Generic {
                store: "bucket",
                source: "the bucket's runtime stopped".into(),
            })
        });
        // A refusal of ours (not found, precondition) is an answer too.
        let answered = match &out {
            Ok(_) => true,
            Err(e) => transport_failure(e).is_none(),
        };
        if answered {
            // The clock here, not `store::now_ms`: the bucket is a lower layer.
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            self.inner
                .counters
                .last_answer_ms
                .fetch_max(now, Ordering::Relaxed);
        }
        out
    }

    pub(super) fn failed(&self, what: &str, key: &str, e: object_store::Error) -> BucketError {
        if !matches!(e, object_store::Error::NotFound { .. }) {
            inc(&self.inner.counters.errors, 1);
        }
        let e = BucketError::from_store(what, key, e);
        if let BucketError::Unreachable { why, .. } = &e {
            inc(&self.inner.counters.unreachable[why.index()], 1);
        }
        e
    }

    /// Counts a LIST request.
    pub(super) fn count_list(&self) {
        inc(&self.inner.counters.lists, 1);
    }

    /// The store every request but segment uploads goes to.
    pub(super) fn store(&self) -> Arc<dyn ObjectStore> {
        self.inner.store.clone()
    }

    fn count_written(&self, key: &str, n: usize) {
        let c = &self.inner.counters;
        inc(&c.puts, 1);
        inc(&c.bytes_written, n as u64);
        if is_index_key(key) {
            inc(&c.index_bytes_written, n as u64);
        }
    }

    fn count_read(&self, key: &str, n: usize) {
        let c = &self.inner.counters;
        inc(&c.bytes_read, n as u64);
        if is_index_key(key) {
            inc(&c.index_bytes_read, n as u64);
        }
    }

    /// Writes `bytes` at `key` (replacing any object there): a segment body.
    /// Each attempt has a deadline from the body's size; a hung attempt is
    /// retried like a failed one.
    pub fn put(&self, key: &str, bytes: Bytes) -> Result<(), BucketError> {
        let deadline = self.inner.timeout
            + Duration::from_millis(bytes.len() as u64 * 1000 / MIN_UPLOAD_BYTES_PER_SEC);
        let mut attempt = 0;
        loop {
            self.count_written(key, bytes.len());
            let (store, path, body) = (self.inner.bulk.clone(), self.path(key), bytes.clone());
            let done = self.run(async move {
                match tokio::time::timeout(deadline, store.put(&path, PutPayload::from(body))).await
                {
                    Ok(r) => r.map(|_| ()),
                    Err(_) => Err(timed_out(deadline)),
                }
            });
            match done {
                Ok(()) => return Ok(()),
                Err(e) if attempt < self.inner.retries && transport_failure(&e).is_some() => {
                    attempt += 1;
                }
                Err(e) => return Err(self.failed("PUT", key, e)),
            }
        }
    }

    /// A PUT with options (conditional writes), errors unclassified: callers
    /// read a lost race from them.
    pub(super) fn put_opts(
        &self,
        key: &str,
        bytes: Bytes,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.count_written(key, bytes.len());
        let (store, path) = (self.inner.store.clone(), self.path(key));
        self.run(async move { store.put_opts(&path, PutPayload::from(bytes), opts).await })
    }

    /// Writes `bytes` at `key` only if no object is there (`If-None-Match: *`).
    /// `Ok(false)`: one is (someone else created it first), left as it was.
    pub fn put_if_absent(&self, key: &str, bytes: Bytes) -> Result<bool, BucketError> {
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match self.put_opts(key, bytes, opts) {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => {
                self.conflict();
                Ok(false)
            }
            Err(e) => Err(self.failed("PUT (create)", key, e)),
        }
    }

    /// Writes a small object (index checkpoint, lease) at `key`, replacing any
    /// object there, within the request timeout.
    pub(super) fn put_small(&self, key: &str, bytes: Bytes) -> Result<(), BucketError> {
        self.put_opts(key, bytes, PutOptions::default())
            .map(|_| ())
            .map_err(|e| self.failed("PUT", key, e))
    }

    /// The whole objects at `keys`, requested at once; in order.
    pub(super) fn get_many(&self, keys: &[String]) -> Vec<Result<Bytes, BucketError>> {
        use futures_util::StreamExt;
        inc(&self.inner.counters.gets, keys.len() as u64);
        let store = self.inner.store.clone();
        let paths: Vec<Path> = keys.iter().map(|k| self.path(k)).collect();
        let n = paths.len().max(1);
        let got = self.run(async move {
            let all = futures_util::stream::iter(paths.into_iter().map(|p| {
                let store = store.clone();
                async move {
                    let r = store.get(&p).await?;
                    r.bytes().await
                }
            }))
            .buffered(n)
            .collect::<Vec<_>>()
            .await;
            Ok(all)
        });
        let got = match got {
            Ok(v) => v,
            Err(e) => {
                return keys
                    .iter()
                    .map(|k| Err(self.failed("GET", k, clone_err(&e))))
                    .collect()
            }
        };
        keys.iter()
            .zip(got)
            .map(|(k, r)| match r {
                Ok(b) => {
                    self.count_read(k, b.len());
                    Ok(b)
                }
                Err(e) => Err(self.failed("GET", k, e)),
            })
            .collect()
    }

    /// Counts a conditional write that lost its race.
    pub(super) fn conflict(&self) {
        inc(&self.inner.counters.cas_conflicts, 1);
    }

    /// The whole object at `key`.
    pub fn get(&self, key: &str) -> Result<Bytes, BucketError> {
        self.get_with_etag(key, None)
            .and_then(|r| r.ok_or_else(|| BucketError::NotFound { key: key.into() }))
            .map(|(b, _)| b)
    }

    /// The whole object at `key`, which the index says is `size` bytes: a
    /// shorter (or longer) object is damaged, not an unreachable store.
    pub fn get_sized(&self, key: &str, size: u64) -> Result<Bytes, BucketError> {
        let b = self.get(key)?;
        if b.len() as u64 != size {
            return Err(BucketError::Short {
                key: key.into(),
                wanted: size,
                size: b.len() as u64,
            });
        }
        Ok(b)
    }

    /// The object and its etag; `Ok(None)` when its etag is still `known`.
    pub(super) fn get_with_etag(
        &self,
        key: &str,
        known: Option<&str>,
    ) -> Result<Option<(Bytes, Option<String>)>, BucketError> {
        inc(&self.inner.counters.gets, 1);
        let (store, path) = (self.inner.store.clone(), self.path(key));
        let opts = GetOptions {
            if_none_match: known.map(str::to_string),
            ..GetOptions::default()
        };
        let got = self.run(async move {
            let r = store.get_opts(&path, opts).await?;
            let etag = r.meta.e_tag.clone();
            Ok((r.bytes().await?, etag))
        });
        match got {
            Ok((bytes, etag)) => {
                self.count_read(key, bytes.len());
                Ok(Some((bytes, etag)))
            }
            Err(object_store::Error::NotModified { .. }) => Ok(None),
            Err(e) => Err(self.failed("GET", key, e)),
        }
    }

    /// Bytes `range` of the object at `key`. A range the object does not hold
    /// (HTTP 416, or fewer bytes back) is [`BucketError::Short`]: the object
    /// is damaged, whatever status the store used to say so.
    pub fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, BucketError> {
        inc(&self.inner.counters.range_gets, 1);
        let (store, path) = (self.inner.store.clone(), self.path(key));
        let want = range.clone();
        let got = self.run(async move { store.get_range(&path, want).await });
        let b = match got {
            Ok(b) => b,
            // No answer at all: the store, not the object.
            Err(e) if transport_failure(&e).is_some() => {
                return Err(self.failed("GET (range)", key, e))
            }
            Err(e @ object_store::Error::NotFound { .. }) => {
                return Err(self.failed("GET (range)", key, e))
            }
            // An answer that did not fit the range: the object's own size says
            // whether it is short; if it is not, the store erred.
            Err(e) => {
                return match self.head(key) {
                    Ok(info) if info.size < range.end => Err(BucketError::Short {
                        key: key.into(),
                        wanted: range.end,
                        size: info.size,
                    }),
                    Err(h) if h.is_damage() => Err(h),
                    _ => Err(self.failed("GET (range)", key, e)),
                }
            }
        };
        self.count_read(key, b.len());
        if (b.len() as u64) < range.end - range.start {
            return Err(BucketError::Short {
                key: key.into(),
                wanted: range.end,
                size: range.start + b.len() as u64,
            });
        }
        Ok(b)
    }

    /// Size, etag and time of the object at `key`.
    pub fn head(&self, key: &str) -> Result<ObjectInfo, BucketError> {
        inc(&self.inner.counters.heads, 1);
        let (store, path) = (self.inner.store.clone(), self.path(key));
        let m = self
            .run(async move { store.head(&path).await })
            .map_err(|e| self.failed("HEAD", key, e))?;
        Ok(ObjectInfo {
            key: key.to_string(),
            size: m.size,
            etag: m.e_tag,
            last_modified_ms: m.last_modified.timestamp_millis(),
        })
    }

    /// Deletes the object at `key`; a missing object is not an error.
    pub fn delete(&self, key: &str) -> Result<(), BucketError> {
        inc(&self.inner.counters.deletes, 1);
        let (store, path) = (self.inner.store.clone(), self.path(key));
        match self.run(async move { store.delete(&path).await }) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.failed("DELETE", key, e)),
        }
    }

    /// Requests and bytes so far.
    pub fn stats(&self) -> BucketStats {
        let c = &self.inner.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        BucketStats {
            gets: g(&c.gets),
            range_gets: g(&c.range_gets),
            heads: g(&c.heads),
            puts: g(&c.puts),
            lists: g(&c.lists),
            deletes: g(&c.deletes),
            bytes_read: g(&c.bytes_read),
            bytes_written: g(&c.bytes_written),
            index_bytes_written: g(&c.index_bytes_written),
            index_bytes_read: g(&c.index_bytes_read),
            cas_conflicts: g(&c.cas_conflicts),
            errors: g(&c.errors),
            unreachable: c.unreachable.each_ref().map(g),
            last_answer_ms: c.last_answer_ms.load(Ordering::Relaxed),
        }
    }
}

/// The error of an upload that missed its deadline: a transport failure,
/// classified as timed out like the client's own.
fn timed_out(after: Duration) -> object_store::Error {
    object_store::Error::Generic {
        store: "bucket",
        source: Box::new(object_store::client::HttpError::new(
            object_store::client::HttpErrorKind::Timeout,
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {} ms", after.as_millis()),
            ),
        )),
    }
}

/// A copy of a runtime failure for each of several requests it failed.
fn clone_err(e: &object_store::Error) -> object_store::Error {
    object_store::Error::Generic {
        store: "bucket",
        source: e.to_string().into(),
    }
}
