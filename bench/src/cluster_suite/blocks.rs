//! Day blocks against hourly segments: the same days of a fleet, pushed through a
//! writer into two bucket prefixes, compacted by a compactor with `--block-hours 0`
//! (hours stay apart) and with `--block-hours 24`; then a fresh querier per prefix
//! answers a merge over every day, cold and warm. Both must answer the same total.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::{json, Value};

use super::{ingest_jobs, merge_range_p50, Node};
use crate::fleet::Fleet;
use crate::report;

const DAY: i64 = 86_400_000;
/// One push per host every half hour: enough rows per hour for a merge to
/// matter, few enough that a week ingests in a minute or two.
const PUSH_EVERY_MS: i64 = 1_800_000;

/// What one layout measured.
struct Measured {
    segments: f64,
    ready_ms: f64,
    cold_ms: f64,
    p50_ms: f64,
    gets: f64,
    bytes: f64,
    total: i64,
}

/// Runs both layouts over the `days` whole UTC days before today; returns the
/// table rows and the figures.
pub(super) fn run(
    bin: &Path,
    dir: &Path,
    fleet: &Arc<Fleet>,
    hosts: usize,
    days: i64,
    clients: usize,
    flags: impl Fn(&str, &str) -> Vec<String>,
) -> anyhow::Result<(Vec<String>, Value)> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    let end = now.div_euclid(DAY) * DAY;
    let start = end - days * DAY;
    let jobs: Vec<(usize, i64)> = (0..(end - start) / PUSH_EVERY_MS)
        .flat_map(|k| (0..hosts).map(move |h| (h, start + k * PUSH_EVERY_MS)))
        .collect();
    let mut rows = Vec::new();
    let mut figures = json!({"days": days, "pushes": jobs.len()});
    let mut totals = Vec::new();
    for block_hours in [0, 24] {
        let prefix = format!("blocks-{block_hours}");
        let writer = Node::start(
            bin,
            &dir.join(format!("{prefix}-writer")),
            &flags(&prefix, "writer"),
        )?;
        let (_, values) = ingest_jobs(fleet, &jobs, std::slice::from_ref(&writer.url), clients)?;
        let mut cflags = flags(&prefix, "compactor");
        cflags.extend(
            [
                "--block-hours",
                &block_hours.to_string(),
                // Days against hours: no week blocks over the past weeks.
                "--wide-block-days",
                "0",
                "--block-delay-minutes",
                "0",
                // Every partition is over at once, however few its segments.
                "--merge-settle-secs",
                "1",
            ]
            .map(String::from),
        );
        let compactor = Node::start(bin, &dir.join(format!("{prefix}-compactor")), &cflags)?;
        settle(&compactor)?;
        let m = measure(
            bin,
            &dir.join(format!("{prefix}-querier")),
            &flags(&prefix, "querier"),
            start,
            end,
        )?;
        drop((compactor, writer));
        let layout = if block_hours == 0 {
            "hourly segments"
        } else {
            "day blocks"
        };
        rows.push(format!(
            "| {layout} (--block-hours {block_hours}) | {:.0} | {:.0} ms | {:.1} ms / {:.1} ms | {:.0} GETs, {} |",
            m.segments,
            m.ready_ms,
            m.cold_ms,
            m.p50_ms,
            m.gets,
            report::human_bytes(m.bytes),
        ));
        figures[format!("block_hours_{block_hours}")] = json!({
            "values": values, "live_segments": m.segments, "querier_ready_ms": m.ready_ms,
            "merge_first_ms": m.cold_ms, "merge_p50_ms": m.p50_ms,
            "get_requests_through_merges": m.gets, "read_bytes_through_merges": m.bytes,
        });
        totals.push(m.total);
    }
    if totals.windows(2).any(|w| w[0] != w[1]) {
        bail!("hourly segments and day blocks answer different totals: {totals:?}");
    }
    Ok((rows, figures))
}

/// Waits until the compactor's merges stop changing for a few passes (its
/// interval is 2 s): every hour merged, every day blocked.
pub(super) fn settle(compactor: &Node) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(900);
    let (mut last, mut quiet) = (-1.0, 0);
    while quiet < 4 {
        if Instant::now() > deadline {
            bail!("the compactor was still merging after 15 minutes");
        }
        std::thread::sleep(Duration::from_secs(2));
        let merges = compactor.metric("profiledb_bucket_merges_total")?;
        if merges == last && merges > 0.0 {
            quiet += 1;
        } else {
            (last, quiet) = (merges, 0);
        }
    }
    Ok(())
}

/// A fresh querier's readiness and its merges over `[start, end)`. Requests and
/// bytes are counted from its start through the last merge: the warm-up decodes
/// recent segments while the first query runs, so the split between the two
/// depends on timing, their sum does not.
fn measure(
    bin: &Path,
    dir: &Path,
    flags: &[String],
    start: i64,
    end: i64,
) -> anyhow::Result<Measured> {
    let t = Instant::now();
    let q = Node::start(bin, dir, flags)?;
    let ready_ms = t.elapsed().as_secs_f64() * 1000.0;
    let (cold_ms, p50_ms, total) = merge_range_p50(&q.url, start, end, 9)?;
    Ok(Measured {
        segments: q.metric("profiledb_mirror_live_segments")?,
        ready_ms,
        cold_ms,
        p50_ms,
        gets: q.metric("profiledb_bucket_get_requests_total")?,
        bytes: q.metric("profiledb_bucket_read_bytes_total")?,
        total,
    })
}
