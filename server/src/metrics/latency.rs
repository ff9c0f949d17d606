//! `profiledb_http_request_duration_seconds`: a latency histogram per route
//! template (`/api/v1/merge`, `/querier.v1.QuerierService/{method}`; never the raw
//! path, so the series are bounded by the router), method and status class.

use std::collections::HashMap;
use std::fmt::Write;
use std::time::Duration;

use parking_lot::Mutex;

use super::escape;

/// Upper bounds of the buckets, in seconds: from a cached answer (a millisecond)
/// to the default query timeout (a minute).
pub const BUCKETS: [f64; 15] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// The route label of a request no route matched (404s and their like).
pub const UNMATCHED: &str = "unmatched";

/// Methods the router serves; any other is counted as `other`, so a client
/// sending made-up methods cannot add series.
const METHODS: [&str; 7] = ["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"];

#[derive(Clone, Debug, Default)]
struct Histogram {
    /// Observations per bucket (not cumulative); the last is above every bound.
    buckets: [u64; BUCKETS.len() + 1],
    count: u64,
    sum: f64,
}

/// The status class label of a status code: `2xx`, `4xx`…
fn class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

/// One histogram of a route.
#[derive(Debug)]
struct Series {
    method: &'static str,
    class: &'static str,
    histogram: Histogram,
}

/// The histograms, keyed by route template, then method and status class.
#[derive(Debug, Default)]
pub struct RequestLatency {
    routes: Mutex<HashMap<String, Vec<Series>>>,
}

impl RequestLatency {
    /// Counts one request to `route` answered with `status` after `took`.
    pub fn observe(&self, route: &str, method: &str, status: u16, took: Duration) {
        let method = METHODS
            .iter()
            .find(|m| **m == method)
            .copied()
            .unwrap_or("other");
        let class = class(status);
        let secs = took.as_secs_f64();
        let bucket = BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(BUCKETS.len());
        let mut routes = self.routes.lock();
        if !routes.contains_key(route) {
            routes.insert(route.to_string(), Vec::new());
        }
        let Some(series) = routes.get_mut(route) else {
            return;
        };
        let i = match series
            .iter()
            .position(|s| s.method == method && s.class == class)
        {
            Some(i) => i,
            None => {
                series.push(Series {
                    method,
                    class,
                    histogram: Histogram::default(),
                });
                series.len() - 1
            }
        };
        let h = &mut series[i].histogram;
        h.buckets[bucket] += 1;
        h.count += 1;
        h.sum += secs;
    }

    /// Appends the histogram family in the Prometheus text format, series in
    /// a stable order.
    pub fn render(&self, out: &mut String) {
        const NAME: &str = "profiledb_http_request_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {NAME} Time from a request's arrival to its response's status and headers, \
             by route template, method and status class."
        );
        let _ = writeln!(out, "# TYPE {NAME} histogram");
        let routes = self.routes.lock();
        let mut names: Vec<&String> = routes.keys().collect();
        names.sort();
        for route in names {
            let mut series: Vec<&Series> = routes[route].iter().collect();
            series.sort_by_key(|s| (s.method, s.class));
            for Series {
                method,
                class,
                histogram: h,
            } in series
            {
                let labels = format!(
                    "route=\"{}\",method=\"{method}\",status_class=\"{class}\"",
                    escape(route)
                );
                let mut cumulative = 0;
                for (bound, n) in BUCKETS.iter().zip(&h.buckets) {
                    cumulative += n;
                    let _ = writeln!(out, "{NAME}_bucket{{{labels},le=\"{bound}\"}} {cumulative}");
                }
                let _ = writeln!(out, "{NAME}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
                let _ = writeln!(out, "{NAME}_sum{{{labels}}} {}", h.sum);
                let _ = writeln!(out, "{NAME}_count{{{labels}}} {}", h.count);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_their_bucket_route_method_and_class() {
        let l = RequestLatency::default();
        let ms = Duration::from_millis;
        l.observe("/api/v1/merge", "GET", 200, ms(3));
        l.observe("/api/v1/merge", "GET", 204, ms(70));
        l.observe("/api/v1/merge", "GET", 422, ms(1));
        l.observe("/api/v1/merge", "BREW", 405, ms(1));
        l.observe(UNMATCHED, "GET", 404, Duration::from_secs(100));
        let mut out = String::new();
        l.render(&mut out);
        let has = |line: &str| assert!(out.lines().any(|l| l == line), "{line}\n{out}");
        let merge = r#"route="/api/v1/merge",method="GET",status_class="2xx""#;
        has(&format!(
            "profiledb_http_request_duration_seconds_bucket{{{merge},le=\"0.0025\"}} 0"
        ));
        has(&format!(
            "profiledb_http_request_duration_seconds_bucket{{{merge},le=\"0.005\"}} 1"
        ));
        has(&format!(
            "profiledb_http_request_duration_seconds_bucket{{{merge},le=\"0.05\"}} 1"
        ));
        has(&format!(
            "profiledb_http_request_duration_seconds_bucket{{{merge},le=\"0.1\"}} 2"
        ));
        has(&format!(
            "profiledb_http_request_duration_seconds_count{{{merge}}} 2"
        ));
        let sum: f64 = out
            .lines()
            .find_map(|l| {
                l.strip_prefix(&format!(
                    "profiledb_http_request_duration_seconds_sum{{{merge}}} "
                ))
            })
            .unwrap()
            .parse()
            .unwrap();
        assert!((sum - 0.073).abs() < 1e-9, "{sum}");
        has(
            r#"profiledb_http_request_duration_seconds_count{route="/api/v1/merge",method="GET",status_class="4xx"} 1"#,
        );
        has(
            r#"profiledb_http_request_duration_seconds_count{route="/api/v1/merge",method="other",status_class="4xx"} 1"#,
        );
        // Above every bound: only in +Inf.
        has(
            r#"profiledb_http_request_duration_seconds_bucket{route="unmatched",method="GET",status_class="4xx",le="60"} 0"#,
        );
        has(
            r#"profiledb_http_request_duration_seconds_bucket{route="unmatched",method="GET",status_class="4xx",le="+Inf"} 1"#,
        );
    }
}
