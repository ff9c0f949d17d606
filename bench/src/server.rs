//! A real profiledb server in the bench process, on a loopback port: what the
//! ingest, query and agent suites measure against; or a `profiledb serve`
//! process of a given binary ([`ServeProcess`]).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use profiledb::{memory, ServeOptions, Server};

pub struct Running {
    rt: tokio::runtime::Runtime,
    pub url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    handle: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Running {
    /// Starts a server with default options over `dir`, on `workers` runtime threads
    /// (0 = one per CPU), and waits until `/ready` answers 200 (the WAL replayed).
    pub fn start(dir: &Path, workers: usize) -> anyhow::Result<Running> {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        if workers > 0 {
            b.worker_threads(workers);
        }
        let rt = b.enable_all().build()?;
        let mut opts = ServeOptions {
            listen: "127.0.0.1:0".parse()?,
            data_dir: dir.to_path_buf(),
            // The suites replay a day of a fleet in minutes: the per-tenant rate
            // limits (1,000 profiles/s by default, what a fleet sends in real time
            // with room to spare) would measure the limiter, not the engine. They
            // capped the query suite's ingest at ~54 host pushes/s.
            tenancy: profiledb::tenancy::TenancyOptions {
                limits: profiledb::tenancy::Limits::unlimited(),
                ..Default::default()
            },
            ..Default::default()
        };
        // Sized like `profiledb serve` without flags: the memory budget is half the
        // machine's memory, split among the caches, the head and the queries.
        memory::MemoryPlan::split(memory::default_total()).apply(&mut opts);
        let server = rt.block_on(Server::bind(opts))?;
        let url = format!("http://{}", server.local_addr());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let handle = rt.spawn(server.run(async move {
            let _ = rx.await;
        }));
        wait_ready(&url, Instant::now(), Duration::from_secs(120))?;
        Ok(Running {
            rt,
            url,
            stop: Some(tx),
            handle: Some(handle),
        })
    }

    /// Graceful stop: the server flushes its head into segments.
    pub fn stop(mut self) -> anyhow::Result<()> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.handle.take() {
            self.rt.block_on(h).context("server task")??;
        }
        Ok(())
    }
}

/// Pushes one request to a server's Connect `Push` endpoint.
pub fn push(
    client: &reqwest::blocking::Client,
    url: &str,
    req: &profiledb_proto::push::v1::PushRequest,
) -> anyhow::Result<()> {
    push_tries(client, url, req, 1)
}

/// `push`, waiting and trying again while the server answers 429 or 503 (a fast
/// build outruns the default per-tenant ingestion rate); other failures are errors.
pub fn push_patiently(
    client: &reqwest::blocking::Client,
    url: &str,
    req: &profiledb_proto::push::v1::PushRequest,
) -> anyhow::Result<()> {
    push_tries(client, url, req, 600)
}

/// Up to `tries` attempts, 100 ms apart, of which only 429 and 503 are retried.
fn push_tries(
    client: &reqwest::blocking::Client,
    url: &str,
    req: &profiledb_proto::push::v1::PushRequest,
    tries: u32,
) -> anyhow::Result<()> {
    use prost::Message;
    let body = req.encode_to_vec();
    for attempt in 1..=tries {
        let r = client
            .post(format!("{url}/push.v1.PusherService/Push"))
            .header("content-type", "application/proto")
            .body(body.clone())
            .send()?;
        let status = r.status();
        if status.is_success() {
            return Ok(());
        }
        if attempt == tries || (status.as_u16() != 429 && status.as_u16() != 503) {
            bail!("push failed: {status} {}", r.text().unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("push: no attempt made")
}

/// A binary of this workspace (`bin` of `package`), built with cargo for this
/// bench's profile when run through cargo, found beside the bench binary.
pub fn workspace_binary(package: &str, bin: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().context("bench binary has no directory")?;
    if let Ok(cargo) = std::env::var("CARGO") {
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-q", "-p", package, "--bin", bin]);
        if !cfg!(debug_assertions) {
            cmd.arg("--release");
        }
        let st = cmd
            .status()
            .with_context(|| format!("running cargo build -p {package}"))?;
        if !st.success() {
            bail!("cargo build -p {package} failed");
        }
    }
    let p = dir.join(bin);
    if !p.exists() {
        bail!(
            "{} not found: build it with `cargo build --release -p {package}`",
            p.display()
        );
    }
    Ok(p)
}

/// The value of the unlabelled metric `name` in `url`'s `/metrics`, if it is there.
pub fn metric(
    client: &reqwest::blocking::Client,
    url: &str,
    name: &str,
) -> anyhow::Result<Option<f64>> {
    let text = client.get(format!("{url}/metrics")).send()?.text()?;
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok()))
}

/// Polls `url/ready` until it answers 200; fails once `limit` has passed since `t`.
pub fn wait_ready(url: &str, t: Instant, limit: Duration) -> anyhow::Result<()> {
    let client = reqwest::blocking::Client::new();
    while !client
        .get(format!("{url}/ready"))
        .send()
        .is_ok_and(|r| r.status() == 200)
    {
        if t.elapsed() > limit {
            bail!("server at {url} not ready after {} s", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// A `profiledb serve` process over a data directory on a free loopback port,
/// ready when returned; killed and reaped when dropped, so an error never leaves
/// a server running.
pub struct ServeProcess {
    child: Child,
    pub url: String,
}

impl ServeProcess {
    /// Starts `bin` over `data_dir` and waits up to `limit` for `/ready`.
    pub fn start(bin: &Path, data_dir: &Path, limit: Duration) -> anyhow::Result<ServeProcess> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = Command::new(bin)
            .args(["serve", "--data-dir"])
            .arg(data_dir)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        // Owned before the wait, so a server that never gets ready is killed.
        let server = ServeProcess {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        wait_ready(&server.url, Instant::now(), limit)?;
        Ok(server)
    }

    /// The process id (for its CPU time and memory).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
