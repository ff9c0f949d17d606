//! `bench cluster --split`: one long query split across 1, 2 and 4 queriers
//! (issue #56). A generated fleet (services × hosts, Zipf stack popularity,
//! 19 Hz per host) is pushed through two writers into moto, time-compressed:
//! each host pushes one 10 s profile per simulated hour (the real density of a
//! push, `--split-hours` hours of them), a compactor merges every hour, then
//! fresh queriers (M = 1, 2, 4; each given every querier's address) answer the
//! fleet flame graph, a group-by by service and function, and a diff of the two
//! halves. Per query and per querier: bucket GETs and bytes, CPU seconds (from
//! `/proc/<pid>/stat`), and the answer time at the querier asked; the first ask
//! (cold: fresh queriers) apart from a repeat over a range never asked before
//! (ad hoc: the segments are cached, the answer is not). Answers must be equal
//! for every M, or the run fails.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Value};

use super::{ingest_jobs, Node};
use crate::agent_suite::cpu_seconds;
use crate::fleet::Fleet;
use crate::report;
use crate::server::wait_ready;

const HOUR: i64 = 3_600_000;
const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";

/// What one querier spent on one query.
#[derive(Clone, Copy, Default)]
struct Spent {
    gets: f64,
    bytes: f64,
    cpu_s: f64,
}

/// A querier and its process id (for its CPU).
struct Querier {
    node: Node,
    pid: u32,
}

impl Querier {
    fn spent(&self) -> anyhow::Result<Spent> {
        Ok(Spent {
            gets: self.node.metric("profiledb_bucket_get_requests_total")?,
            bytes: self.node.metric("profiledb_bucket_read_bytes_total")?,
            cpu_s: cpu_seconds(self.pid).unwrap_or(0.0),
        })
    }
}

/// Starts `m` queriers on ports chosen first, each told every address.
fn start_queriers(
    bin: &Path,
    dir: &Path,
    m: usize,
    flags: &[String],
) -> anyhow::Result<Vec<Querier>> {
    let ports: Vec<u16> = (0..m)
        .map(|_| {
            Ok(std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port())
        })
        .collect::<anyhow::Result<_>>()?;
    let peers = ports
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut out = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let d = dir.join(format!("m{m}-q{i}"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(d.with_extension("log"))?;
        let mut args: Vec<String> = flags.to_vec();
        if m > 1 {
            args.extend(["--querier-peers".into(), peers.clone()]);
            args.extend(["--split-min-blocks".into(), "2".into()]);
        }
        let child = Command::new(bin)
            .args(["serve", "--data-dir"])
            .arg(&d)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(&args)
            .env("AWS_ACCESS_KEY_ID", "bench")
            .env("AWS_SECRET_ACCESS_KEY", "bench")
            .env("AWS_REGION", "us-east-1")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting a querier")?;
        let pid = child.id();
        let url = format!("http://127.0.0.1:{port}");
        out.push(Querier {
            node: Node { child, url },
            pid,
        });
    }
    for q in &out {
        wait_ready(&q.node.url, Instant::now(), Duration::from_secs(300))?;
    }
    Ok(out)
}

/// The three queries over `[from, until)`: (name, method, path, query or body).
fn queries(from: i64, until: i64) -> Vec<(&'static str, Value)> {
    let mid = from + (until - from) / 2;
    vec![
        (
            "fleet flame graph",
            json!({"get": "/api/v1/merge", "query": [["query", format!("{CPU}{{}}")],
                ["from", from.to_string()], ["until", until.to_string()], ["format", "folded"]]}),
        ),
        (
            "group-by service, function",
            json!({"post": "/api/v1/query", "body": {"profile_type": CPU, "selector": "{}",
                "start": from, "end": until, "group_by": ["service_name", "function"],
                "limit": 50}}),
        ),
        (
            "diff of the two halves",
            json!({"post": "/api/v1/diff", "body": {"profile_type": CPU, "selector": "{}",
                "base": {"start": from.to_string(), "end": mid.to_string()},
                "compare": {"start": mid.to_string(), "end": until.to_string()},
                "top": 10, "max_nodes": 2048}}),
        ),
    ]
}

/// Asks `q` at `url`; returns (ms, what of the answer must be equal for every M).
fn ask(client: &reqwest::blocking::Client, url: &str, q: &Value) -> anyhow::Result<(f64, Value)> {
    let t = Instant::now();
    let r = match (q["get"].as_str(), q["post"].as_str()) {
        (Some(path), _) => {
            let params: Vec<(String, String)> = serde_json::from_value(q["query"].clone())?;
            client.get(format!("{url}{path}")).query(&params).send()?
        }
        (_, Some(path)) => client
            .post(format!("{url}{path}"))
            .json(&q["body"])
            .send()?,
        _ => bail!("query without a path"),
    };
    if !r.status().is_success() {
        bail!("{url}: {} {}", r.status(), r.text().unwrap_or_default());
    }
    let text = r.text()?;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    let key = if q["get"].is_string() {
        // Folded stacks: total and count, and a digest of every line.
        let mut lines: Vec<&str> = text.lines().collect();
        lines.sort_unstable();
        let total: i64 = lines
            .iter()
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<i64>().ok())
            .sum();
        json!({"stacks": lines.len(), "total": total, "digest": digest(&lines.join("\n"))})
    } else {
        let v: Value = serde_json::from_str(&text)?;
        match v.get("stats") {
            Some(stats) => json!({"stats": {"samples_base": stats["samples_base"],
                "samples_compare": stats["samples_compare"],
                "manhattan": (stats["manhattan"].as_f64().unwrap_or(0.0) * 1e9).round()}}),
            None => json!({"rows": v["rows"], "total": v["total"]}),
        }
    };
    Ok((ms, key))
}

/// FNV-1a: equal answers, equal digests.
fn digest(s: &str) -> String {
    let h = s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{h:016x}")
}

/// Runs the split table; returns the printed rows and the figures.
#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    bin: &Path,
    dir: &Path,
    fleet: &Arc<Fleet>,
    hosts: usize,
    hours: i64,
    clients: usize,
    flags: impl Fn(&str, &str) -> Vec<String>,
) -> anyhow::Result<(Vec<String>, Value)> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    let end = now.div_euclid(HOUR) * HOUR;
    let start = end - hours * HOUR;
    // One push per host per simulated hour, spread over the hour.
    let jobs: Vec<(usize, i64)> = (0..hours)
        .flat_map(|h| {
            (0..hosts).map(move |host| {
                let offset = (host as i64 * 7919) % (HOUR / 10_000) * 10_000;
                (host, start + h * HOUR + offset)
            })
        })
        .collect();
    let prefix = "split";
    let ingest_flags = |role| {
        let mut f = flags(prefix, role);
        f.extend(
            [
                "--ingestion-rate-profiles",
                "1000000",
                "--ingestion-burst-profiles",
                "1000000",
                // The table is about queries: acknowledged from the WAL, the
                // pushes do not wait for an upload each.
                "--ack",
                "local",
            ]
            .map(String::from),
        );
        f
    };
    let writers = [
        Node::start(bin, &dir.join("split-w1"), &ingest_flags("writer"))?,
        Node::start(bin, &dir.join("split-w2"), &ingest_flags("writer"))?,
    ];
    let urls: Vec<String> = writers.iter().map(|w| w.url.clone()).collect();
    let (ingest_s, values) = ingest_jobs(fleet, &jobs, &urls, clients)?;
    // Acknowledged from the WAL: wait until every segment is in the bucket.
    let deadline = Instant::now() + Duration::from_secs(600);
    for w in &writers {
        while w.metric("profiledb_upload_pending_segments")? > 0.0 {
            if Instant::now() > deadline {
                bail!("the writers still had segments to upload after 10 minutes");
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    let mut cflags = flags(prefix, "compactor");
    cflags.extend(["--merge-settle-secs", "1", "--block-hours", "0"].map(String::from));
    let compactor = Node::start(bin, &dir.join("split-compactor"), &cflags)?;
    super::blocks::settle(&compactor)?;
    drop(writers);
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()?;
    let mut rows = Vec::new();
    let mut figures = json!({"hosts": hosts, "hours": hours, "pushes": jobs.len(),
        "values": values, "ingest_s": ingest_s});
    let mut answers: Vec<Value> = Vec::new();
    for m in [1usize, 2, 4] {
        let qs = start_queriers(bin, dir, m, &flags(prefix, "querier"))?;
        let segments = qs[0].node.metric("profiledb_mirror_live_segments")?;
        let mut keys = Vec::new();
        for (round, label) in [(0i64, "first (cold)"), (1, "ad hoc")] {
            for (name, q) in queries(start, end + round * 1000) {
                let before: Vec<Spent> = qs.iter().map(Querier::spent).collect::<Result<_, _>>()?;
                let (ms, key) = ask(&client, &qs[0].node.url, &q)?;
                let after: Vec<Spent> = qs.iter().map(Querier::spent).collect::<Result<_, _>>()?;
                let each: Vec<Spent> = before
                    .iter()
                    .zip(&after)
                    .map(|(b, a)| Spent {
                        gets: a.gets - b.gets,
                        bytes: a.bytes - b.bytes,
                        cpu_s: a.cpu_s - b.cpu_s,
                    })
                    .collect();
                let max_cpu = each.iter().map(|s| s.cpu_s).fold(0.0, f64::max);
                let sum_cpu: f64 = each.iter().map(|s| s.cpu_s).sum();
                let per: Vec<String> = each
                    .iter()
                    .map(|s| {
                        format!(
                            "{:.0} GETs, {}, {:.2} s CPU",
                            s.gets,
                            report::human_bytes(s.bytes),
                            s.cpu_s
                        )
                    })
                    .collect();
                rows.push(format!(
                    "| {m} | {name} | {label} | {ms:.0} ms | {max_cpu:.2} s | {sum_cpu:.2} s | {} |",
                    per.join(" · ")
                ));
                figures[format!("m{m}")][name][label] = json!({
                    "answer_ms": ms, "max_querier_cpu_s": max_cpu, "sum_cpu_s": sum_cpu,
                    "per_querier": each.iter().map(|s| json!({"get_requests": s.gets,
                        "read_bytes": s.bytes, "cpu_s": s.cpu_s})).collect::<Vec<_>>(),
                });
                if round == 0 {
                    keys.push(key);
                }
            }
        }
        figures[format!("m{m}")]["live_segments"] = json!(segments);
        figures[format!("m{m}")]["split_queries"] =
            json!(qs[0].node.metric("profiledb_query_split_total")?);
        answers.push(Value::Array(keys));
    }
    drop(compactor);
    if answers.windows(2).any(|w| w[0] != w[1]) {
        bail!("answers differ between 1, 2 and 4 queriers: {answers:#?}");
    }
    figures["answers_equal"] = json!(true);
    figures["answer_keys"] = answers[0].clone();
    Ok((rows, figures))
}
