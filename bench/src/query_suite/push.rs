//! The query suite's push clients, and the baselines' rows turned into Parquet.

use super::*;

/// What the push clients send: one push per host per tick, all its services.
pub(super) struct Pushes {
    pub fleet: Arc<Fleet>,
    pub replay: Option<Arc<Replay>>,
    pub ticks: Arc<Vec<i64>>,
    pub hosts: usize,
    pub replay_hosts: usize,
    pub seed: u64,
    pub t_end: i64,
    pub clients: usize,
    /// Where each client writes the rows it pushed for the baselines (none: no rows).
    pub rows_dir: Option<PathBuf>,
    pub url: String,
}

/// What the push clients sent.
pub(super) struct Pushed {
    pub values: u64,
    pub bytes_sent: u64,
    pub retries: u64,
}

/// Pushes every (tick, host) over `p.clients` threads, retrying 429 and 503.
pub(super) fn push_all(p: &Pushes, pb: &ProgressBar) -> anyhow::Result<Pushed> {
    let jobs = (p.ticks.len() * p.hosts) as u64;
    let next = Arc::new(AtomicU64::new(0));
    let values = Arc::new(AtomicU64::new(0));
    let bytes_sent = Arc::new(AtomicU64::new(0));
    let retries = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..p.clients.max(1))
        .map(|w| {
            let (fleet, replay, ticks, next, values, bytes_sent, retries, pb) = (
                p.fleet.clone(),
                p.replay.clone(),
                p.ticks.clone(),
                next.clone(),
                values.clone(),
                bytes_sent.clone(),
                retries.clone(),
                pb.clone(),
            );
            let url = p.url.clone();
            let (hosts, replay_hosts, seed, t_end) = (p.hosts, p.replay_hosts, p.seed, p.t_end);
            let rows_path = p
                .rows_dir
                .as_ref()
                .map(|d| d.join(format!("samples-{w}.csv")));
            std::thread::spawn(move || -> anyhow::Result<()> {
                let client = reqwest::blocking::Client::new();
                let mut rows_file = match &rows_path {
                    Some(path) => Some(std::io::BufWriter::new(
                        std::fs::File::create(path)
                            .with_context(|| format!("creating {}", path.display()))?,
                    )),
                    None => None,
                };
                let mut rows = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= jobs {
                        break;
                    }
                    let (tick, host) = ((i as usize) / hosts, (i as usize) % hosts);
                    let Some(&ts) = ticks.get(tick) else { break };
                    rows.clear();
                    let (mut body, v) = fleet.host_push_body(
                        host,
                        ts,
                        heap_due(ts),
                        rows_file.as_ref().map(|_| &mut rows),
                    );
                    values.fetch_add(v, Ordering::Relaxed);
                    if let Some(r) = &replay {
                        if host < replay_hosts && ts >= t_end - HOUR && ts % 300_000 == 0 {
                            if let Some(s) = r.push(seed, host, ts) {
                                // One more `series` (field 1) after the fleet's.
                                prost::encoding::message::encode(1, &s, &mut body);
                            }
                        }
                    }
                    if let Some(f) = rows_file.as_mut() {
                        std::io::Write::write_all(f, &rows)?;
                    }
                    // Shared bytes: a retry re-sends without copying the body.
                    let body = bytes::Bytes::from(body);
                    bytes_sent.fetch_add(body.len() as u64, Ordering::Relaxed);
                    loop {
                        let r = client
                            .post(format!("{url}/push.v1.PusherService/Push"))
                            .header("content-type", "application/proto")
                            .body(body.clone())
                            .send()?;
                        if r.status() == 429 || r.status() == 503 {
                            retries.fetch_add(1, Ordering::Relaxed);
                            std::thread::sleep(Duration::from_millis(20));
                            continue;
                        }
                        if !r.status().is_success() {
                            bail!(
                                "push failed: {} {}",
                                r.status(),
                                r.text().unwrap_or_default()
                            );
                        }
                        break;
                    }
                    pb.inc(1);
                }
                if let Some(mut f) = rows_file {
                    std::io::Write::flush(&mut f)?;
                }
                Ok(())
            })
        })
        .collect();
    for w in workers {
        w.join()
            .map_err(|_| anyhow::anyhow!("push client panicked"))??;
    }
    Ok(Pushed {
        values: values.load(Ordering::Relaxed),
        bytes_sent: bytes_sent.load(Ordering::Relaxed),
        retries: retries.load(Ordering::Relaxed),
    })
}

/// Converts the pushed rows (CSV) to Parquet with DuckDB, then deletes the CSV.
pub(super) fn convert_rows(rows_dir: &Path) -> anyhow::Result<Value> {
    let rows_s = rows_dir.display().to_string();
    println!("baseline: converting rows to Parquet with DuckDB …");
    let c = baselines::run_duckdb(&["convert", "--dir", &rows_s])?;
    println!(
        "baseline: {} rows, {} of Parquet, converted in {:.1} s",
        c.get("rows").and_then(Value::as_u64).unwrap_or(0),
        human_bytes(
            c.get("parquet_bytes")
                .and_then(Value::as_f64)
                .unwrap_or(0.0)
        ),
        c.get("seconds").and_then(Value::as_f64).unwrap_or(0.0)
    );
    // CSV is no longer needed.
    for e in std::fs::read_dir(rows_dir)?.flatten() {
        if e.path().extension().is_some_and(|x| x == "csv") {
            let _ = std::fs::remove_file(e.path());
        }
    }
    Ok(c)
}
