//! Prometheus text exposition of the server's and the store's counters.

pub mod latency;

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use profiledb_storage::Store;

use crate::pipeline::Pipeline;

/// HTTP-level counters.
#[derive(Debug, Default)]
pub struct HttpMetrics {
    pub requests: AtomicU64,
    pub client_errors: AtomicU64,
    pub server_errors: AtomicU64,
    pub ingest_requests: AtomicU64,
    pub query_requests: AtomicU64,
    /// Uploads whose newest sample is more than an hour before they arrived.
    pub ingest_backdated: AtomicU64,
    /// Request latency by route template, method and status class.
    pub latency: latency::RequestLatency,
}

/// A Prometheus label value: backslash, quote and newline escaped.
pub(crate) fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

pub(crate) fn family(out: &mut String, name: &str, kind: &str, help: &str, value: u64) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    let _ = writeln!(out, "{name} {value}");
}

/// Renders every metric in the Prometheus text format (version 0.0.4).
pub fn render(
    http: &HttpMetrics,
    store: Option<&Store>,
    pipeline: Option<&Pipeline>,
    querier: Option<&profiledb_storage::Querier>,
    answers: &crate::http::query::AnswerStats,
    uptime_secs: u64,
) -> String {
    let mut out = String::new();
    if let Some(sym) = store.and_then(|s| s.symbolizer()) {
        crate::debuginfo::http::render_metrics(&mut out, &sym.stats());
    }
    let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
    family(
        &mut out,
        "profiledb_up",
        "gauge",
        "1 once the store is open.",
        u64::from(store.is_some()),
    );
    family(
        &mut out,
        "profiledb_uptime_seconds",
        "gauge",
        "Seconds since the process started.",
        uptime_secs,
    );
    family(
        &mut out,
        "profiledb_http_requests_total",
        "counter",
        "HTTP requests served.",
        c(&http.requests),
    );
    family(
        &mut out,
        "profiledb_http_client_errors_total",
        "counter",
        "HTTP requests answered with a 4xx status.",
        c(&http.client_errors),
    );
    family(
        &mut out,
        "profiledb_http_server_errors_total",
        "counter",
        "HTTP requests answered with a 5xx status.",
        c(&http.server_errors),
    );
    http.latency.render(&mut out);
    family(
        &mut out,
        "profiledb_ingest_requests_total",
        "counter",
        "Ingest requests received.",
        c(&http.ingest_requests),
    );
    family(
        &mut out,
        "profiledb_ingest_backdated_profiles_total",
        "counter",
        "Uploads stored at their own timestamps more than an hour before they arrived \
         (they do not show in last-hour views; see the X-Profiledb-Stored-Range header).",
        c(&http.ingest_backdated),
    );
    family(
        &mut out,
        "profiledb_query_requests_total",
        "counter",
        "Query requests received.",
        c(&http.query_requests),
    );
    family(
        &mut out,
        "profiledb_query_cache_hits_total",
        "counter",
        "Queries whose segment part came from the result cache.",
        querier.map_or(0, |q| c(&q.stats().hits)),
    );
    family(
        &mut out,
        "profiledb_query_cache_misses_total",
        "counter",
        "Queries whose segment part was computed (and then cached).",
        querier.map_or(0, |q| c(&q.stats().misses)),
    );
    family(
        &mut out,
        "profiledb_query_response_cache_hits_total",
        "counter",
        "Query answers served whole from the cache (ranges wholly in immutable segments).",
        c(&answers.hits),
    );
    family(
        &mut out,
        "profiledb_query_response_cache_misses_total",
        "counter",
        "Cacheable query answers that had to be computed.",
        c(&answers.misses),
    );
    family(
        &mut out,
        "profiledb_query_segment_part_hits_total",
        "counter",
        "Per-segment parts of merges and group-bys reused (a window moved, the segment did not).",
        querier.map_or(0, |q| c(&q.stats().partial_hits)),
    );
    family(
        &mut out,
        "profiledb_query_segment_part_misses_total",
        "counter",
        "Per-segment parts of merges and group-bys computed.",
        querier.map_or(0, |q| c(&q.stats().partial_misses)),
    );
    family(
        &mut out,
        "profiledb_query_share_sum_hits_total",
        "counter",
        "Sums of a merge's cached segment parts reused (a window's edges moved within the same ten minutes).",
        querier.map_or(0, |q| c(&q.stats().share_sum_hits)),
    );
    family(
        &mut out,
        "profiledb_query_share_sum_misses_total",
        "counter",
        "Sums of a merge's cached segment parts computed.",
        querier.map_or(0, |q| c(&q.stats().share_sum_misses)),
    );
    family(
        &mut out,
        "profiledb_query_skeleton_builds_total",
        "counter",
        "Skeletons of merged frames built or grown (a selector's first flame graph, or new stacks).",
        querier.map_or(0, |q| c(&q.stats().skeleton_builds)),
    );
    family(
        &mut out,
        "profiledb_query_function_index_builds_total",
        "counter",
        "Per-segment function-name indexes built.",
        querier.map_or(0, |q| c(&q.stats().fn_index_builds)),
    );
    if let Some(p) = pipeline {
        let s = p.stats();
        family(
            &mut out,
            "profiledb_ingest_accepted_total",
            "counter",
            "Uploads queued for decoding.",
            c(&s.accepted),
        );
        family(
            &mut out,
            "profiledb_ingest_rejected_busy_total",
            "counter",
            "Uploads refused with 429 because the ingest queue was full.",
            c(&s.rejected_busy),
        );
        family(
            &mut out,
            "profiledb_ingest_rejected_memory_total",
            "counter",
            "Uploads refused with 429 because in-flight uploads or the head were over their memory share.",
            c(&s.rejected_memory),
        );
        family(
            &mut out,
            "profiledb_ingest_decode_errors_total",
            "counter",
            "Uploads refused because they did not decode or broke a limit.",
            c(&s.decode_errors),
        );
        family(
            &mut out,
            "profiledb_ingest_samples_total",
            "counter",
            "Samples stored from uploads.",
            c(&s.samples),
        );
    }
    if let Some(store) = store {
        for (name, help, v) in store.stats().counters() {
            family(
                &mut out,
                &format!("profiledb_storage_{name}_total"),
                "counter",
                help,
                v,
            );
        }
        let g = store.gauges();
        family(
            &mut out,
            "profiledb_head_bytes",
            "gauge",
            "Approximate memory held by the head (including partitions being flushed).",
            g.head_bytes,
        );
        family(
            &mut out,
            "profiledb_head_partitions",
            "gauge",
            "Head partitions in memory.",
            g.head_partitions,
        );
        family(
            &mut out,
            "profiledb_head_rows",
            "gauge",
            "Aggregated (series, step, stack) rows in the head.",
            g.head_rows,
        );
        family(
            &mut out,
            "profiledb_segments",
            "gauge",
            "Live segments.",
            g.segments,
        );
        family(
            &mut out,
            "profiledb_segment_bytes",
            "gauge",
            "Bytes of live segment files.",
            g.segment_bytes,
        );
        family(
            &mut out,
            "profiledb_symbol_bases",
            "gauge",
            "Symbol base files (stack trees and symbols shared by a tenant's blocks), as of the last lifecycle run.",
            g.symbol_bases,
        );
        family(
            &mut out,
            "profiledb_symbol_base_bytes",
            "gauge",
            "Bytes of symbol base files, beside profiledb_segment_bytes.",
            g.symbol_base_bytes,
        );
        family(
            &mut out,
            "profiledb_symbol_base_cache_bytes",
            "gauge",
            "Bytes of symbol bases held in memory for decoding and writing segments (at most four bases).",
            g.symbol_base_cache_bytes,
        );
        family(
            &mut out,
            "profiledb_segment_cache_bytes",
            "gauge",
            "Approximate bytes of decoded segments held for queries (bounded by --segment-cache-mb).",
            g.segment_cache_bytes,
        );
        family(
            &mut out,
            "profiledb_summary_cache_bytes",
            "gauge",
            "Approximate bytes of segment summaries (labels and per-step totals) held for label and time-series queries; a share of --segment-cache-mb.",
            g.summary_cache_bytes,
        );
        family(
            &mut out,
            "profiledb_segment_cache_warming",
            "gauge",
            "1 while the segment cache is being warmed after start (newest segments decoded, the last day's rows decoded and its stacks resolved into the frame tree, in the background).",
            g.segment_cache_warming,
        );
        family(
            &mut out,
            "profiledb_segment_cache_recent_warm",
            "gauge",
            "1 once the warm-up after start is past the segments holding the last day (their rows decoded, stacks resolved, query scratch mapped in); /ready waits for it (--ready-warm-up-secs).",
            g.segment_cache_recent_warm,
        );
        family(
            &mut out,
            "profiledb_query_scratch_bytes",
            "gauge",
            "Bytes of the per-thread query scratch spaces kept between queries (at most 4, each sized by the largest segment read and the frame tree).",
            g.query_scratch_bytes,
        );
    }
    out
}
