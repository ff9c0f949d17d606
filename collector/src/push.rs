//! Pushing encoded windows to the server, off the sampling thread.
//!
//! Windows wait in a bounded queue; when it is full the oldest waiting window is
//! dropped (and counted). Each window is tried up to [`RetryPolicy::max_attempts`]
//! times with exponential backoff on retryable failures (connection errors, 429,
//! 5xx); after that, or on a non-retryable refusal (400, 413, 422, ...), it is dropped
//! and counted. Memory is bounded by `max_queue` windows plus the one in flight.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use thiserror::Error;

/// Why one push attempt failed.
#[derive(Debug, Error)]
pub enum PushError {
    #[error("server answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("could not reach the server: {0}")]
    Transport(String),
}

impl PushError {
    /// Whether trying again later may succeed.
    pub fn retryable(&self) -> bool {
        match self {
            PushError::Status { status, .. } => *status == 429 || *status == 408 || *status >= 500,
            PushError::Transport(_) => true,
        }
    }
}

/// Sends one gzip'd push body.
pub trait Transport: Send + 'static {
    fn send(&mut self, body: &[u8]) -> Result<(), PushError>;
}

/// Connect unary `POST {server}/push.v1.PusherService/Push` over plain HTTP.
pub struct HttpTransport {
    agent: ureq::Agent,
    url: String,
}

impl HttpTransport {
    pub fn new(server: &str, timeout: Duration) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .build()
            .into();
        Self {
            agent,
            url: format!(
                "{}/push.v1.PusherService/Push",
                server.trim_end_matches('/')
            ),
        }
    }
}

impl Transport for HttpTransport {
    fn send(&mut self, body: &[u8]) -> Result<(), PushError> {
        let resp = self
            .agent
            .post(&self.url)
            .header("Content-Type", "application/proto")
            .header("Content-Encoding", "gzip")
            .header("Connect-Protocol-Version", "1")
            .send(body)
            .map_err(|e| PushError::Transport(e.to_string()))?;
        let status = resp.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(());
        }
        let mut body = resp.into_body();
        let text = body
            .with_config()
            .limit(4096)
            .read_to_string()
            .unwrap_or_default();
        Err(PushError::Status { status, body: text })
    }
}

/// Retry and backoff settings.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 4,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
        }
    }
}

impl RetryPolicy {
    /// Backoff before attempt `n + 1` (n ≥ 1 failed attempts so far).
    pub fn backoff(&self, failed: u32) -> Duration {
        let exp = failed.saturating_sub(1).min(16);
        self.initial_backoff
            .saturating_mul(1u32 << exp)
            .min(self.max_backoff)
    }
}

/// Totals of the pusher.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PushStats {
    pub pushed_windows: u64,
    /// Dropped because the queue was full (oldest first).
    pub dropped_queue_full: u64,
    /// Dropped after all attempts failed or on a non-retryable refusal.
    pub dropped_failed: u64,
    /// Dropped at shutdown because the flush deadline passed.
    pub dropped_shutdown: u64,
    pub failed_attempts: u64,
    pub bytes_sent: u64,
}

impl PushStats {
    pub fn dropped(&self) -> u64 {
        self.dropped_queue_full + self.dropped_failed + self.dropped_shutdown
    }
}

#[derive(Default)]
struct State {
    queue: VecDeque<Vec<u8>>,
    /// Set by `finish`: flush until this instant, then drop what is left.
    deadline: Option<Instant>,
    stats: PushStats,
}

struct Shared {
    state: Mutex<State>,
    cv: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain counters behind: keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The pusher thread and its queue.
pub struct Pusher {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
    max_queue: usize,
}

impl Pusher {
    /// Starts the pusher thread.
    pub fn spawn<T: Transport>(transport: T, policy: RetryPolicy, max_queue: usize) -> Self {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
        });
        let s2 = shared.clone();
        let handle = std::thread::Builder::new()
            .name("profiledb-push".into())
            .spawn(move || worker(s2, transport, policy))
            .ok();
        Self {
            shared,
            handle,
            max_queue: max_queue.max(1),
        }
    }

    /// Queues a window, dropping the oldest waiting one if the queue is full.
    pub fn submit(&self, body: Vec<u8>) {
        let mut st = self.shared.lock();
        while st.queue.len() >= self.max_queue {
            st.queue.pop_front();
            st.stats.dropped_queue_full += 1;
            eprintln!(
                "profiledb-agent: push queue full, dropped the oldest window ({} dropped so far)",
                st.stats.dropped()
            );
        }
        st.queue.push_back(body);
        self.shared.cv.notify_all();
    }

    /// Current totals.
    pub fn stats(&self) -> PushStats {
        self.shared.lock().stats
    }

    /// Flushes what is queued for at most `grace`, then stops the thread.
    pub fn finish(mut self, grace: Duration) -> PushStats {
        {
            let mut st = self.shared.lock();
            st.deadline = Some(Instant::now() + grace);
            self.shared.cv.notify_all();
        }
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        let mut st = self.shared.lock();
        let left = st.queue.len() as u64;
        st.queue.clear();
        st.stats.dropped_shutdown += left;
        st.stats
    }
}

fn worker<T: Transport>(shared: Arc<Shared>, mut transport: T, policy: RetryPolicy) {
    loop {
        let body = {
            let mut st = shared.lock();
            loop {
                if let Some(b) = st.queue.pop_front() {
                    break b;
                }
                if st.deadline.is_some() {
                    return;
                }
                st = shared.cv.wait(st).unwrap_or_else(|p| p.into_inner());
            }
        };
        let mut failed = 0u32;
        loop {
            match transport.send(&body) {
                Ok(()) => {
                    let mut st = shared.lock();
                    st.stats.pushed_windows += 1;
                    st.stats.bytes_sent += body.len() as u64;
                    break;
                }
                Err(e) => {
                    failed += 1;
                    let mut st = shared.lock();
                    st.stats.failed_attempts += 1;
                    let give_up = !e.retryable() || failed >= policy.max_attempts;
                    let wait = policy.backoff(failed);
                    let past_deadline = st.deadline.is_some_and(|d| Instant::now() + wait > d);
                    if give_up || past_deadline {
                        if past_deadline && !give_up {
                            st.stats.dropped_shutdown += 1;
                        } else {
                            st.stats.dropped_failed += 1;
                        }
                        eprintln!(
                            "profiledb-agent: push failed after {failed} attempt(s): {e}; window dropped ({} dropped so far)",
                            st.stats.dropped()
                        );
                        break;
                    }
                    eprintln!(
                        "profiledb-agent: push attempt {failed} failed: {e}; retrying in {wait:?}"
                    );
                    // Sleep, but wake early if shutdown begins.
                    let until = Instant::now() + wait;
                    while Instant::now() < until {
                        let left = until.saturating_duration_since(Instant::now());
                        let (g, _) = shared
                            .cv
                            .wait_timeout(st, left)
                            .unwrap_or_else(|p| p.into_inner());
                        st = g;
                        if st.deadline.is_some_and(|d| until > d) {
                            break;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    struct Scripted {
        answers: Vec<Result<(), u16>>,
        calls: Arc<AtomicUsize>,
    }

    impl Transport for Scripted {
        fn send(&mut self, _body: &[u8]) -> Result<(), PushError> {
            let i = self.calls.fetch_add(1, Ordering::SeqCst);
            match self.answers.get(i).copied().unwrap_or(Ok(())) {
                Ok(()) => Ok(()),
                Err(0) => Err(PushError::Transport("refused".into())),
                Err(status) => Err(PushError::Status {
                    status,
                    body: String::new(),
                }),
            }
        }
    }

    fn fast() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(5),
            max_backoff: Duration::from_millis(20),
        }
    }

    #[test]
    fn backoff_grows_and_caps() {
        let p = RetryPolicy::default();
        assert_eq!(p.backoff(1), Duration::from_millis(500));
        assert_eq!(p.backoff(2), Duration::from_secs(1));
        assert_eq!(p.backoff(10), Duration::from_secs(8));
    }

    #[test]
    fn retries_then_succeeds() {
        let calls = Arc::new(AtomicUsize::new(0));
        let p = Pusher::spawn(
            Scripted {
                answers: vec![Err(429), Err(0), Ok(())],
                calls: calls.clone(),
            },
            fast(),
            4,
        );
        p.submit(vec![1, 2, 3]);
        let s = p.finish(Duration::from_secs(5));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert_eq!(s.pushed_windows, 1);
        assert_eq!(s.failed_attempts, 2);
        assert_eq!(s.dropped(), 0);
    }

    #[test]
    fn gives_up_and_counts_drops() {
        let calls = Arc::new(AtomicUsize::new(0));
        let p = Pusher::spawn(
            Scripted {
                // first window: 3 × 503 → dropped; second: 400 → dropped at once; third ok
                answers: vec![Err(503), Err(503), Err(503), Err(400), Ok(())],
                calls: calls.clone(),
            },
            fast(),
            8,
        );
        p.submit(vec![1]);
        p.submit(vec![2]);
        p.submit(vec![3]);
        let s = p.finish(Duration::from_secs(5));
        assert_eq!(s.dropped_failed, 2);
        assert_eq!(s.pushed_windows, 1);
        assert_eq!(calls.load(Ordering::SeqCst), 5);
    }

    #[test]
    fn full_queue_drops_oldest() {
        let calls = Arc::new(AtomicUsize::new(0));
        // A transport that is slow enough for the queue to fill up.
        struct Slow(Arc<AtomicUsize>);
        impl Transport for Slow {
            fn send(&mut self, _b: &[u8]) -> Result<(), PushError> {
                std::thread::sleep(Duration::from_millis(50));
                self.0.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        }
        let p = Pusher::spawn(Slow(calls.clone()), fast(), 2);
        for i in 0..6u8 {
            p.submit(vec![i]);
        }
        let s = p.finish(Duration::from_secs(5));
        assert!(s.dropped_queue_full >= 3, "{s:?}");
        assert_eq!(s.pushed_windows + s.dropped(), 6, "{s:?}");
    }

    /// Retry/drop behaviour against a real HTTP server that refuses with 429.
    #[test]
    fn http_server_that_refuses() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let hits = Arc::new(AtomicUsize::new(0));
        let h2 = hits.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut c) = conn else { break };
                let mut buf = vec![0u8; 65536];
                let _ = c.set_read_timeout(Some(Duration::from_millis(200)));
                let _ = c.read(&mut buf);
                h2.fetch_add(1, Ordering::SeqCst);
                let body = r#"{"code":"resource_exhausted","message":"slow down"}"#;
                let _ = write!(
                    c,
                    "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
                    body.len(),
                    body
                );
            }
        });
        let t = HttpTransport::new(&format!("http://{addr}"), Duration::from_secs(2));
        let p = Pusher::spawn(t, fast(), 4);
        p.submit(b"\x1f\x8bnot really".to_vec());
        let s = p.finish(Duration::from_secs(5));
        assert_eq!(hits.load(Ordering::SeqCst), 3);
        assert_eq!(s.failed_attempts, 3);
        assert_eq!(s.dropped_failed, 1);
        assert_eq!(s.pushed_windows, 0);
        // and a server that is down: connection refused is retried too
        let dead = TcpListener::bind("127.0.0.1:0").expect("bind");
        let dead_addr = dead.local_addr().expect("addr");
        drop(dead);
        let p = Pusher::spawn(
            HttpTransport::new(&format!("http://{dead_addr}"), Duration::from_secs(1)),
            fast(),
            4,
        );
        p.submit(vec![0]);
        let s = p.finish(Duration::from_secs(5));
        assert_eq!(s.failed_attempts, 3);
        assert_eq!(s.dropped_failed, 1);
    }
}
