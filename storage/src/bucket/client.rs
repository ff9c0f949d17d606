//! [`Bucket`]: the object store behind a synchronous API, with request counters.
//!
//! The engine's roles are threads, and the server calls them from tokio's
//! blocking pool; `object_store` is async. Each call is spawned onto a small
//! runtime the bucket owns and awaited over a channel, which works from any
//! thread (a `block_on` from inside a runtime would panic).

use std::future::Future;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientOptions, GetOptions, ObjectStore, ObjectStoreExt, PutOptions, PutPayload,
    PutResult, RetryConfig,
};

use super::config::BucketConfig;
use super::error::BucketError;

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
    /// Conditional writes that lost a race.
    pub cas_conflicts: u64,
    /// Requests that failed (not found excepted).
    pub errors: u64,
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
    cas_conflicts: AtomicU64,
    errors: AtomicU64,
}

struct Inner {
    store: Arc<dyn ObjectStore>,
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
/// answered (after the client's own retries).
#[derive(Clone)]
pub struct Bucket {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.inner.describe)
    }
}

fn inc(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
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
        let mut b = AmazonS3Builder::new()
            .with_bucket_name(bucket)
            .with_region(cfg.region.as_deref().unwrap_or("us-east-1"))
            .with_allow_http(cfg.allow_http)
            // Bounded: an unreachable store answers in seconds, not minutes, so
            // writers can refuse writes and queriers report it while it lasts.
            .with_retry(RetryConfig {
                backoff: BackoffConfig::default(),
                max_retries: 3,
                retry_timeout: Duration::from_secs(10),
            })
            .with_client_options(
                ClientOptions::new()
                    .with_connect_timeout(Duration::from_secs(2))
                    .with_timeout(Duration::from_secs(60))
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
        let store = b
            .build()
            .map_err(|e| BucketError::Config(format!("{}: {e}", cfg.url)))?;
        let mut bucket = Self::from_store(Arc::new(store), prefix);
        let at = cfg.endpoint.as_deref().unwrap_or("AWS");
        if let Some(inner) = Arc::get_mut(&mut bucket.inner) {
            inner.describe = format!("{} at {at}", cfg.url);
        }
        Ok(bucket)
    }

    /// A bucket over any `object_store` store (tests: in memory, local files).
    pub fn from_store(store: Arc<dyn ObjectStore>, prefix: &str) -> Bucket {
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

    fn path(&self, key: &str) -> Path {
        if self.inner.prefix.is_empty() {
            Path::from(key)
        } else {
            Path::from(format!("{}/{key}", self.inner.prefix))
        }
    }

    fn key_of(&self, path: &Path) -> String {
        let p = path.as_ref();
        match self.inner.prefix.as_str() {
            "" => p.to_string(),
            pre => p
                .strip_prefix(pre)
                .map_or(p, |s| s.trim_start_matches('/'))
                .to_string(),
        }
    }

    /// Runs `fut` on the bucket's runtime and waits for it.
    fn run<T: Send + 'static>(
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
        rx.recv().unwrap_or_else(|_| {
            Err(object_store::Error::Generic {
                store: "bucket",
                source: "the bucket's runtime stopped".into(),
            })
        })
    }

    fn failed(&self, what: &str, key: &str, e: object_store::Error) -> BucketError {
        if !matches!(e, object_store::Error::NotFound { .. }) {
            inc(&self.inner.counters.errors, 1);
        }
        BucketError::from_store(what, key, e)
    }

    /// Writes `bytes` at `key` (replacing any object there).
    pub fn put(&self, key: &str, bytes: Bytes) -> Result<(), BucketError> {
        self.put_opts(key, bytes, PutOptions::default())
            .map(|_| ())
            .map_err(|e| self.failed("PUT", key, e))
    }

    /// Writes `bytes` at `key` only if no object is there (`If-None-Match: *`).
    /// `Ok(false)`: one is, and it was left as it was.
    pub fn put_if_absent(&self, key: &str, bytes: Bytes) -> Result<bool, BucketError> {
        let opts = PutOptions {
            mode: object_store::PutMode::Create,
            ..PutOptions::default()
        };
        match self.put_opts(key, bytes, opts) {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => {
                self.conflict();
                Ok(false)
            }
            Err(e) => Err(self.failed("PUT", key, e)),
        }
    }

    /// A PUT with options, errors unclassified (the CAS loops read them).
    pub(super) fn put_opts(
        &self,
        key: &str,
        bytes: Bytes,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let c = &self.inner.counters;
        inc(&c.puts, 1);
        inc(&c.bytes_written, bytes.len() as u64);
        let (store, path) = (self.inner.store.clone(), self.path(key));
        self.run(async move { store.put_opts(&path, PutPayload::from(bytes), opts).await })
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
                inc(&self.inner.counters.bytes_read, bytes.len() as u64);
                Ok(Some((bytes, etag)))
            }
            Err(object_store::Error::NotModified { .. }) => Ok(None),
            Err(e) => Err(self.failed("GET", key, e)),
        }
    }

    /// Bytes `range` of the object at `key`.
    pub fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, BucketError> {
        inc(&self.inner.counters.range_gets, 1);
        let (store, path) = (self.inner.store.clone(), self.path(key));
        let b = self
            .run(async move { store.get_range(&path, range).await })
            .map_err(|e| self.failed("GET (range)", key, e))?;
        inc(&self.inner.counters.bytes_read, b.len() as u64);
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

    /// Every object whose key starts with `prefix` (a directory-like prefix
    /// ending in `/`), recursively.
    pub fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>, BucketError> {
        inc(&self.inner.counters.lists, 1);
        let (store, path) = (
            self.inner.store.clone(),
            self.path(prefix.trim_end_matches('/')),
        );
        let metas = self
            .run(async move { store.list(Some(&path)).try_collect::<Vec<_>>().await })
            .map_err(|e| self.failed("LIST", prefix, e))?;
        Ok(metas
            .into_iter()
            .map(|m| ObjectInfo {
                key: self.key_of(&m.location),
                size: m.size,
                etag: m.e_tag,
                last_modified_ms: m.last_modified.timestamp_millis(),
            })
            .collect())
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
            cas_conflicts: g(&c.cas_conflicts),
            errors: g(&c.errors),
        }
    }
}
