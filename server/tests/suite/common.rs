//! A real profiledb server on a loopback port for integration tests, plus helpers
//! to build pprof payloads and read fixtures.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use profiledb::{ServeOptions, Server};

pub struct TestServer {
    pub url: String,
    pub dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    pub client: reqwest::blocking::Client,
}

impl TestServer {
    pub fn start() -> Self {
        Self::start_with(|_| {})
    }

    /// Starts a server on `127.0.0.1:0` over a fresh data directory, after letting
    /// `tweak` adjust the options, and waits until `/ready` answers 200.
    pub fn start_with(tweak: impl FnOnce(&mut ServeOptions)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(dir, tweak)
    }

    pub fn start_in(dir: tempfile::TempDir, tweak: impl FnOnce(&mut ServeOptions)) -> Self {
        let mut opts = ServeOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            data_dir: dir.path().to_path_buf(),
            ..ServeOptions::default()
        };
        opts.ingest.workers = 2;
        tweak(&mut opts);
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let server = Server::bind(opts).await.unwrap();
                addr_tx.send(server.local_addr()).unwrap();
                server
                    .run(async move {
                        let _ = stop_rx.await;
                    })
                    .await
                    .unwrap();
            });
        });
        let addr = addr_rx.recv().unwrap();
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let url = format!("http://{addr}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = client.get(format!("{url}/ready")).send() {
                if r.status() == 200 {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "server never became ready");
            std::thread::sleep(Duration::from_millis(10));
        }
        TestServer {
            url,
            dir,
            stop: Some(stop_tx),
            thread: Some(thread),
            client,
        }
    }

    /// Stops the server (flushing the head) and returns its data directory.
    pub fn stop(mut self) -> tempfile::TempDir {
        self.shutdown();
        let dir = tempfile::tempdir().unwrap();
        std::mem::replace(&mut self.dir, dir)
    }

    fn shutdown(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    pub fn get(&self, path: &str) -> reqwest::blocking::Response {
        self.client
            .get(format!("{}{path}", self.url))
            .send()
            .unwrap()
    }

    /// Folded stacks → value of a merge over all time.
    pub fn merged(
        &self,
        tenant: Option<&str>,
        query: &str,
    ) -> std::collections::BTreeMap<String, i64> {
        self.merged_in(tenant, query, ("0", "now+1d"))
    }

    /// Folded stacks → value of a merge over `[from, until)` (any time form the
    /// API takes).
    pub fn merged_in(
        &self,
        tenant: Option<&str>,
        query: &str,
        range: (&str, &str),
    ) -> std::collections::BTreeMap<String, i64> {
        merged_at(&self.client, &self.url, tenant, query, range)
    }

    pub fn total(&self, tenant: Option<&str>, query: &str) -> i64 {
        self.merged(tenant, query).values().sum()
    }

    /// POSTs JSON to `path` and answers the JSON answer, asserting its `status`.
    pub fn post_json(
        &self,
        path: &str,
        body: &serde_json::Value,
        status: u16,
    ) -> serde_json::Value {
        let r = self
            .client
            .post(format!("{}{path}", self.url))
            .json(body)
            .send()
            .unwrap();
        assert_eq!(r.status(), status, "{path} {body}");
        r.json().unwrap()
    }

    /// `POST /ingest?name=<name>&from=<from_s>` of folded `body`, as `tenant` (`""`:
    /// no `X-Scope-OrgID`, the default tenant), asserting 200.
    pub fn ingest(&self, tenant: &str, name: &str, from_s: i64, body: &str) {
        let mut req = self
            .client
            .post(format!("{}/ingest", self.url))
            .query(&[("name", name), ("from", &from_s.to_string())]);
        if !tenant.is_empty() {
            req = req.header("X-Scope-OrgID", tenant);
        }
        let r = req.body(body.to_string()).send().unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().unwrap_or_default());
    }

    /// The value of the unlabelled metric `name` in /metrics (0 when absent).
    pub fn metric(&self, name: &str) -> u64 {
        metric_at(&self.url, name).map_or(0, |v| v as u64)
    }

    /// `POST /ingest?<query>` with `body`, asserting 200.
    pub fn upload(&self, query: &str, body: Vec<u8>) {
        let r = self.post_ingest(query, body);
        assert_eq!(r.status(), 200, "{query}: {}", r.text().unwrap_or_default());
    }

    /// `POST /ingest?<query>` with `body`, whatever the answer.
    pub fn post_ingest(
        &self,
        query: &str,
        body: impl Into<reqwest::blocking::Body>,
    ) -> reqwest::blocking::Response {
        self.client
            .post(format!("{}/ingest?{query}", self.url))
            .body(body)
            .send()
            .unwrap()
    }

    pub fn json(&self, path: &str, params: &[(&str, &str)]) -> serde_json::Value {
        let resp = self
            .client
            .get(format!("{}{path}", self.url))
            .query(params)
            .send()
            .unwrap();
        assert_eq!(resp.status(), 200, "{path} {params:?}");
        resp.json().unwrap()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Folded stacks → value of a merge over `[from, until)` (any time form the API
/// takes), asked of the server at `url` (a [`TestServer`] or a spawned binary).
pub fn merged_at(
    client: &reqwest::blocking::Client,
    url: &str,
    tenant: Option<&str>,
    query: &str,
    (from, until): (&str, &str),
) -> std::collections::BTreeMap<String, i64> {
    let mut req = client.get(format!("{url}/api/v1/merge")).query(&[
        ("query", query),
        ("from", from),
        ("until", until),
        ("format", "folded"),
    ]);
    if let Some(t) = tenant {
        req = req.header("X-Scope-OrgID", t);
    }
    let resp = req.send().unwrap();
    assert_eq!(resp.status(), 200, "merge {query}");
    resp.text()
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

/// `../shared/fixtures`, or `None` (and a message) when absent; a failure instead
/// with `PROFILEDB_REQUIRE_EXTERNAL=1`.
pub fn fixtures() -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures");
    if p.is_dir() {
        Some(p)
    } else {
        crate::external::missing(
            "the shared fixtures",
            format!("not found at {}", p.display()),
        );
        None
    }
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

pub use profiledb_ingest::proto::pprof;

/// Builds a pprof profile: `stacks` are root-first function names with one value per
/// sample type; `labels` (key, value) go on every sample.
pub fn build_pprof(
    sample_types: &[(&str, &str)],
    period: (&str, &str, i64),
    stacks: &[(Vec<String>, Vec<i64>)],
    labels: &[(&str, &str)],
    time_nanos: i64,
) -> pprof::Profile {
    let mut strings: Vec<String> = vec![String::new()];
    let mut sid = |s: &str| -> i64 {
        if let Some(i) = strings.iter().position(|x| x == s) {
            return i as i64;
        }
        strings.push(s.to_string());
        (strings.len() - 1) as i64
    };
    let st: Vec<pprof::ValueType> = sample_types
        .iter()
        .map(|(t, u)| pprof::ValueType {
            r#type: sid(t),
            unit: sid(u),
        })
        .collect();
    let period_type = Some(pprof::ValueType {
        r#type: sid(period.0),
        unit: sid(period.1),
    });
    let mut functions: Vec<pprof::Function> = Vec::new();
    let mut locations: Vec<pprof::Location> = Vec::new();
    let mut samples = Vec::new();
    let label_ids: Vec<(i64, i64)> = labels.iter().map(|(k, v)| (sid(k), sid(v))).collect();
    for (stack, values) in stacks {
        let mut loc_ids = Vec::new();
        for name in stack.iter().rev() {
            let name_id = sid(name);
            let fid = match functions.iter().position(|f| f.name == name_id) {
                Some(i) => i as u64 + 1,
                None => {
                    functions.push(pprof::Function {
                        id: functions.len() as u64 + 1,
                        name: name_id,
                        system_name: name_id,
                        filename: 0,
                        start_line: 0,
                    });
                    functions.len() as u64
                }
            };
            let lid = match locations
                .iter()
                .position(|l| l.line.first().map(|x| x.function_id) == Some(fid))
            {
                Some(i) => i as u64 + 1,
                None => {
                    locations.push(pprof::Location {
                        id: locations.len() as u64 + 1,
                        mapping_id: 0,
                        address: 0,
                        line: vec![pprof::Line {
                            function_id: fid,
                            line: 1,
                            column: 0,
                        }],
                        is_folded: false,
                    });
                    locations.len() as u64
                }
            };
            loc_ids.push(lid);
        }
        samples.push(pprof::Sample {
            location_id: loc_ids,
            value: values.clone(),
            label: label_ids
                .iter()
                .map(|(k, v)| pprof::Label {
                    key: *k,
                    str: *v,
                    num: 0,
                    num_unit: 0,
                })
                .collect(),
        });
    }
    pprof::Profile {
        sample_type: st,
        sample: samples,
        function: functions,
        location: locations,
        string_table: strings.into_iter().map(|s| s.into_bytes().into()).collect(),
        time_nanos,
        period_type,
        period: period.2,
        ..Default::default()
    }
}

pub fn encode(p: &pprof::Profile) -> Vec<u8> {
    use prost::Message;
    p.encode_to_vec()
}

/// A loopback port free right now, for a server process to listen on.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The value of the series written exactly `series` (name and labels) in a
/// `/metrics` text.
/// The value of the series `series` (a name, with its labels if it has any) in the
/// `/metrics` page of the server at `url`.
pub fn metric_at(url: &str, series: &str) -> Option<f64> {
    let text = reqwest::blocking::get(format!("{url}/metrics"))
        .unwrap()
        .text()
        .unwrap();
    metric_value(&text, series)
}

pub fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Starts a `profiledb serve` process (`cmd`, stdout dropped) and waits until
/// `url`/ready answers 200.
pub fn spawn_ready(mut cmd: std::process::Command, url: &str) -> std::process::Child {
    let child = cmd.stdout(std::process::Stdio::null()).spawn().unwrap();
    let client = reqwest::blocking::Client::new();
    wait_for(30, &format!("{url}/ready"), || {
        let r = client.get(format!("{url}/ready")).send().ok()?;
        (r.status() == 200).then_some(())
    });
    child
}

/// Polls until `f` returns Some, failing after `secs`.
pub fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One hardware-event pprof upload of `svc` on `platform` at `at_s`: each
/// `(leaf, value)` is the stack `main;leaf`.
pub fn ingest_hw_event(
    s: &TestServer,
    event: &str,
    svc: &str,
    platform: &str,
    leaves: &[(&str, i64)],
    at_s: i64,
) {
    let stacks: Vec<(Vec<String>, Vec<i64>)> = leaves
        .iter()
        .map(|(leaf, v)| (vec!["main".to_string(), leaf.to_string()], vec![*v]))
        .collect();
    let p = build_pprof(
        &[(event, "count")],
        (event, "count", 1),
        &stacks,
        &[],
        at_s * 1_000_000_000,
    );
    let r = s
        .client
        .post(format!("{}/ingest", s.url))
        .query(&[
            ("name", format!("{svc}{{platform={platform}}}")),
            ("format", "pprof".into()),
        ])
        .body(encode(&p))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().unwrap_or_default());
}

/// A part a test needs is missing: with `PROFILEDB_REQUIRE_EXTERNAL=1` (CI) that
/// fails the test, else it prints why the test is skipped.
pub fn skip_or_fail(why: &str) {
    crate::external::missing("a part the test needs", why)
}

/// The repository's root (the workspace holding this crate).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A tool `.ci/run` installs under `target/` (a venv's or npm's bin), or on PATH.
pub fn tool(in_target: &str, on_path_name: &str) -> Option<PathBuf> {
    let local = repo_root().join("target").join(in_target);
    if local.exists() {
        return Some(local);
    }
    on_path(on_path_name)
}

/// `name` in a directory of PATH.
pub fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.exists())
    })
}

/// A copy of the executable `from` at `to` (mode 0755) that can be run at once. The
/// copy is written by a `cp` process, not by this one: a file this process held open
/// for writing would be inherited by children that other test threads fork meanwhile,
/// and exec of it would fail with "Text file busy" until they exec themselves.
pub fn executable_copy(from: &Path, to: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let status = std::process::Command::new("cp")
        .arg(from)
        .arg(to)
        .status()
        .expect("cp");
    assert!(status.success(), "cp {} {}", from.display(), to.display());
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}
