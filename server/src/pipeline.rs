//! The ingest pipeline: a bounded queue of raw uploads, a fixed pool of decoder
//! threads, and the storage write.
//!
//! HTTP handlers only read the body and submit a [`Job`]; decoding (CPU-heavy) runs
//! on the pool, never on the async runtime. The queue is a bounded crossbeam channel:
//! when it is full, [`Pipeline::try_submit`] fails at once with
//! [`PipelineError::Busy`] and the client is told to retry (HTTP 429) instead of the
//! server buffering without bound. A job's reply is sent only once the batch is
//! durable in the WAL: by the storage writer, which answers it, so a decoder hands
//! the batch over and goes on to the next upload instead of waiting for the commit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use bytes::Bytes;
use crossbeam::channel::{self, Receiver, Sender, TrySendError};
use profiledb_storage::{now_ms, Batch, StorageError, Store, TenantId, WriteError, WriteRemains};
use tracing::debug;

use crate::tenancy::{Admission, LimitExceeded};

use profiledb_ingest::{
    decode_ingest, decode_otlp, decode_push, push_to_batch, IngestBody, IngestError, IngestParams,
    Limits, PushEncoding,
};

/// What one upload carries, as the HTTP layer extracted it.
pub enum Payload {
    /// `/ingest` with a raw body.
    Raw { params: IngestParams, body: Bytes },
    /// `/ingest` with a multipart body.
    Multipart {
        params: IngestParams,
        profile: Bytes,
        sample_type_config: Option<Bytes>,
        /// The Java agent's `labels` part (JFR uploads).
        labels: Option<Bytes>,
    },
    /// `push.v1.PusherService/Push`.
    Push { encoding: PushEncoding, body: Bytes },
    /// An OTLP `ExportProfilesServiceRequest` (HTTP or gRPC).
    Otlp { encoding: PushEncoding, body: Bytes },
}

impl Payload {
    /// Bytes as sent, which the tenant's ingestion rate counts.
    pub fn wire_bytes(&self) -> u64 {
        let n = match self {
            Payload::Raw { body, .. } | Payload::Push { body, .. } | Payload::Otlp { body, .. } => {
                body.len()
            }
            Payload::Multipart {
                profile,
                sample_type_config,
                ..
            } => profile.len() + sample_type_config.as_ref().map_or(0, Bytes::len),
        };
        n as u64
    }
}

/// One upload to decode and store.
pub struct Job {
    pub tenant: TenantId,
    pub payload: Payload,
    /// Receive time, used for missing timestamps and the future-skew check.
    pub received_ms: i64,
}

/// What a stored upload amounted to, and where in time its samples went (a
/// profile's own timestamp wins over the receive time, so an old profile lands in
/// the past, not in "the last hour").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stored {
    pub samples: u64,
    pub series: u64,
    /// Oldest and newest sample time (ms), when any sample was stored.
    pub time_span: Option<(i64, i64)>,
    /// The WAL record that holds them (none when nothing was stored).
    pub lsn: Option<u64>,
    /// Acknowledged from the local WAL only: `--ack bucket` gave up waiting for the
    /// upload (it happens later).
    pub local_only: bool,
}

/// The oldest and newest sample time of a batch.
pub fn time_span(batch: &Batch) -> Option<(i64, i64)> {
    let mut times = batch
        .series
        .iter()
        .flat_map(|s| s.samples.iter().map(|x| x.timestamp_ms));
    let first = times.next()?;
    Some(times.fold((first, first), |(lo, hi), t| (lo.min(t), hi.max(t))))
}

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Decode(#[from] IngestError),
    /// A sample is newer than `now + max_future_skew` or older than the window.
    #[error("{0}")]
    Timestamp(String),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("the ingest queue is full; retry later")]
    Busy,
    /// In-flight uploads or the head passed their share of the memory budget.
    #[error("{0}")]
    OverMemory(String),
    #[error("the ingest pipeline is shutting down")]
    Closed,
    /// Over one of the tenant's limits.
    #[error(transparent)]
    Limit(#[from] LimitExceeded),
}

#[derive(Clone, Debug)]
pub struct PipelineConfig {
    /// Decoder threads. Default: the number of CPUs.
    pub workers: usize,
    /// Uploads waiting for a decoder before new ones get `Busy`. Default 64.
    pub queue: usize,
    pub limits: Limits,
    /// Samples later than this past the receive time are refused. Default 10 min.
    pub max_future_skew_ms: i64,
    /// If set, samples older than this before the receive time are refused. Off by
    /// default: importing history is a feature.
    pub max_age_ms: Option<i64>,
    /// Bytes that uploads queued or being decoded may hold (estimated as
    /// [`DECODE_FACTOR`] times the body); past it new uploads get 429. One upload
    /// is always let in, so a body under `max_body_bytes` is never refused forever.
    /// Default 256 MiB.
    pub memory_bytes: u64,
    /// Per-tenant limits uploads are admitted against (none: no limit).
    pub admission: Option<Arc<Admission>>,
}

/// Memory an upload holds while queued and decoded, per byte of body: the body,
/// the decoded batch (names, stacks, samples) and the WAL record encoded from it.
pub const DECODE_FACTOR: u64 = 4;

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            workers: std::thread::available_parallelism().map_or(2, |n| n.get()),
            queue: 64,
            limits: Limits::default(),
            max_future_skew_ms: 10 * 60_000,
            max_age_ms: None,
            memory_bytes: 256 << 20,
            admission: None,
        }
    }
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct PipelineStats {
    pub accepted: AtomicU64,
    pub rejected_busy: AtomicU64,
    pub decode_errors: AtomicU64,
    pub samples: AtomicU64,
    /// Uploads refused with 429 because in-flight or head memory was over its share.
    pub rejected_memory: AtomicU64,
}

/// An upload's share of the in-flight bytes, given back when it is answered.
struct Inflight {
    bytes: u64,
    counter: Arc<AtomicU64>,
}

impl Drop for Inflight {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

type Reply = tokio::sync::oneshot::Sender<Result<Stored, PipelineError>>;

type Queued = (Job, Reply, Inflight);

pub struct Pipeline {
    tx: Option<Sender<Queued>>,
    store: Arc<Store>,
    inflight: Arc<AtomicU64>,
    workers: Vec<JoinHandle<()>>,
    stats: Arc<PipelineStats>,
    config: PipelineConfig,
}

impl Pipeline {
    pub fn start(store: Arc<Store>, config: PipelineConfig) -> Pipeline {
        let (tx, rx) = channel::bounded::<Queued>(config.queue.max(1));
        let stats = Arc::new(PipelineStats::default());
        let workers = (0..config.workers.max(1))
            .map(|i| {
                let (rx, store, stats, config) =
                    (rx.clone(), store.clone(), stats.clone(), config.clone());
                std::thread::Builder::new()
                    .name(format!("profiledb-ingest-{i}"))
                    .spawn(move || worker(rx, store, stats, config))
                    .expect("spawning an ingest worker thread")
            })
            .collect();
        Pipeline {
            tx: Some(tx),
            store,
            inflight: Arc::default(),
            workers,
            stats,
            config,
        }
    }

    pub fn config(&self) -> &PipelineConfig {
        &self.config
    }

    pub fn stats(&self) -> &PipelineStats {
        &self.stats
    }

    /// Queues `job`; fails at once with `Busy` when the queue is full.
    pub fn try_submit(
        &self,
        job: Job,
    ) -> Result<tokio::sync::oneshot::Receiver<Result<Stored, PipelineError>>, PipelineError> {
        let tx = self.tx.as_ref().ok_or(PipelineError::Closed)?;
        if let Some(a) = &self.config.admission {
            // Bytes are charged before decoding, so a tenant over its rate costs no
            // decoder time.
            a.admit_bytes(&job.tenant, job.payload.wire_bytes())?;
        }
        let inflight = self.reserve(&job).inspect_err(|_| {
            self.stats.rejected_memory.fetch_add(1, Ordering::Relaxed);
        })?;
        let (reply, rx) = tokio::sync::oneshot::channel();
        match tx.try_send((job, reply, inflight)) {
            Ok(()) => {
                self.stats.accepted.fetch_add(1, Ordering::Relaxed);
                Ok(rx)
            }
            Err(TrySendError::Full(_)) => {
                self.stats.rejected_busy.fetch_add(1, Ordering::Relaxed);
                Err(PipelineError::Busy)
            }
            Err(TrySendError::Disconnected(_)) => Err(PipelineError::Closed),
        }
    }

    /// Bytes held by uploads queued or being decoded (estimated).
    pub fn inflight_bytes(&self) -> u64 {
        self.inflight.load(Ordering::Relaxed)
    }

    /// Takes `job`'s share of the in-flight budget, or refuses it: when the head
    /// (with partitions being flushed) is past its budget the writer is already
    /// waiting for flushes, and queueing more would only hold more memory.
    fn reserve(&self, job: &Job) -> Result<Inflight, PipelineError> {
        let head = self.store.head_bytes();
        let head_max = self.store.config().head_max_bytes as u64;
        if head > head_max {
            return Err(PipelineError::OverMemory(format!(
                "the head holds {} MiB, past its budget of {} MiB (--head-max-mb) while flushes catch up; retry shortly",
                head >> 20,
                head_max >> 20
            )));
        }
        let bytes = job.payload.wire_bytes().saturating_mul(DECODE_FACTOR);
        let limit = self.config.memory_bytes;
        let mut cur = self.inflight.load(Ordering::Relaxed);
        loop {
            if cur > 0 && cur.saturating_add(bytes) > limit {
                return Err(PipelineError::OverMemory(format!(
                    "uploads in flight hold {} MiB of the {} MiB ingest budget (--ingest-memory-mb); retry shortly",
                    cur >> 20,
                    limit >> 20
                )));
            }
            match self.inflight.compare_exchange_weak(
                cur,
                cur + bytes,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        Ok(Inflight {
            bytes,
            counter: self.inflight.clone(),
        })
    }

    /// Stops taking jobs, lets the workers finish the queued ones, and joins them.
    pub fn shutdown(&mut self) {
        self.tx = None;
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn worker(
    rx: Receiver<Queued>,
    store: Arc<Store>,
    stats: Arc<PipelineStats>,
    config: PipelineConfig,
) {
    // What the writer is done with comes back here to be freed on the thread
    // that allocated it (see `WriteRemains`), before the next upload is taken and while
    // none waits. The upload's memory share travels with it: it is given back
    // when the batch and its WAL record are freed, not when the upload is
    // answered.
    let (spent_tx, spent_rx) = channel::unbounded::<(WriteRemains, Inflight)>();
    loop {
        while spent_rx.try_recv().is_ok() {}
        let queued = channel::select! {
            recv(spent_rx) -> _ => continue,
            recv(rx) -> q => q,
        };
        let Ok((job, reply, inflight)) = queued else {
            break;
        };
        let stats = stats.clone();
        let answer = move |res: Result<Stored, PipelineError>| {
            match &res {
                Ok(s) => {
                    stats.samples.fetch_add(s.samples, Ordering::Relaxed);
                }
                Err(PipelineError::Decode(e)) => {
                    stats.decode_errors.fetch_add(1, Ordering::Relaxed);
                    debug!(error = %e, "upload refused");
                }
                Err(_) => {}
            }
            // The client may have gone away; nothing to do then.
            let _ = reply.send(res);
        };
        match prepare(&config, job) {
            Err(e) => {
                drop(inflight);
                answer(Err(e))
            }
            Ok((None, stored)) => {
                drop(inflight);
                answer(Ok(stored))
            }
            // The worker does not wait for the WAL commit: it decodes the next
            // upload while the writer commits this one, and the writer answers.
            Ok((Some(batch), stored)) => {
                let spent_tx = spent_tx.clone();
                store.submit(
                    batch,
                    Box::new(move |res, spent| {
                        answer(
                            res.map(|lsn| Stored {
                                lsn: Some(lsn),
                                ..stored
                            })
                            .map_err(PipelineError::from),
                        );
                        // Once this worker has stopped, both are freed here.
                        let _ = spent_tx.send((spent, inflight));
                    }),
                )
            }
        }
    }
}

/// Decodes one upload into a batch and the number of profiles it carried (no
/// storage involved).
pub fn decode(job: &Job, limits: &Limits) -> Result<(Batch, u64), IngestError> {
    Ok(match &job.payload {
        Payload::Raw { params, body } => (
            decode_ingest(
                params,
                IngestBody::Raw(body),
                job.tenant.clone(),
                job.received_ms,
                limits,
            )?,
            1,
        ),
        Payload::Multipart {
            params,
            profile,
            sample_type_config,
            labels,
        } => (
            decode_ingest(
                params,
                IngestBody::Multipart {
                    profile,
                    sample_type_config: sample_type_config.as_deref(),
                    labels: labels.as_deref(),
                },
                job.tenant.clone(),
                job.received_ms,
                limits,
            )?,
            1,
        ),
        Payload::Push { encoding, body } => {
            let series = decode_push(body, *encoding, limits)?;
            let profiles = series.iter().map(|s| s.profiles.len() as u64).sum();
            (
                push_to_batch(&series, job.tenant.clone(), job.received_ms, limits)?,
                profiles,
            )
        }
        Payload::Otlp { encoding, body } => {
            let batch = decode_otlp(body, *encoding, job.tenant.clone(), job.received_ms, limits)?;
            // An export carries many profiles; each series of the batch is one.
            let profiles = batch.series.len() as u64;
            (batch, profiles)
        }
    })
}

/// Refuses a batch whose samples (oldest and newest time, [`time_span`]) are too far
/// in the future (or, with a window, too old).
pub fn check_times(
    span: Option<(i64, i64)>,
    config: &PipelineConfig,
    now: i64,
) -> Result<(), PipelineError> {
    let Some((min, max)) = span else {
        return Ok(());
    };
    if max > now.saturating_add(config.max_future_skew_ms) {
        return Err(PipelineError::Timestamp(format!(
            "sample time {max} ms is {} s in the future; the limit is {} s (max_future_skew)",
            (max - now) / 1000,
            config.max_future_skew_ms / 1000
        )));
    }
    if let Some(age) = config.max_age_ms {
        if min < now.saturating_sub(age) {
            return Err(PipelineError::Timestamp(format!(
                "sample time {min} ms is older than the ingestion window of {} s",
                age / 1000
            )));
        }
    }
    Ok(())
}

/// Decodes and admits one upload: the batch to write (none when it holds no
/// sample) and the answer it will get once written.
fn prepare(config: &PipelineConfig, job: Job) -> Result<(Option<Batch>, Stored), PipelineError> {
    let (batch, profiles) = decode(&job, &config.limits)?;
    // One pass over the samples serves both the time check and the answer.
    let span = time_span(&batch);
    check_times(span, config, now_ms().max(job.received_ms))?;
    let stored = Stored {
        samples: batch.sample_count() as u64,
        series: batch.series.len() as u64,
        time_span: span,
        lsn: None,
        local_only: false,
    };
    if stored.samples == 0 {
        return Ok((None, stored));
    }
    if let Some(a) = &config.admission {
        a.admit_batch(&job.tenant, &batch, profiles, job.received_ms)?;
    }
    Ok((Some(batch), stored))
}
