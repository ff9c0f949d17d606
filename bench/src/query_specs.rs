//! The queries of the `query` suite: each one as an HTTP request to profiledb and
//! as SQL for the baselines, over the same rows, with the figure whose equality
//! the suite checks (the total).
//!
//! Two sets: the suite's fixed queries ([`specs`]: one service, or everything), and
//! the ad-hoc set ([`adhoc_specs`]): a label selector and a group-by never asked
//! before, drawn new on every run (one host of one service, one zone).

use std::time::Instant;

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::baselines::{Sql, Total};
use crate::fleet::{Fleet, Rng, CPU_TYPE, FILTER_FUNCTION};

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;

#[derive(Clone)]
pub(crate) enum Req {
    Get(String),
    Post(&'static str, Value),
}

pub(crate) struct QuerySpec {
    pub name: String,
    pub window: &'static str,
    /// The HTTP request with the range start moved `shift` ms earlier (no data lives
    /// there, so the answer is the same but the result-cache key differs).
    pub http: Box<dyn Fn(i64) -> Req>,
    /// Extracts the figure compared with each baseline's.
    pub total: fn(&Value) -> Option<f64>,
    pub sql: Sql,
    /// The ad-hoc run it belongs to (each run asks its own selection).
    pub run: Option<usize>,
}

impl QuerySpec {
    /// The key of its answers in the baselines' results and in the report.
    pub(crate) fn key(&self) -> String {
        match self.run {
            Some(r) => format!("{} #{r} [{}]", self.name, self.window),
            None => format!("{} [{}]", self.name, self.window),
        }
    }
}

pub(crate) fn send(
    client: &reqwest::blocking::Client,
    url: &str,
    r: &Req,
) -> anyhow::Result<Value> {
    let resp = match r {
        Req::Get(q) => client.get(format!("{url}{q}")).send()?,
        Req::Post(path, body) => client.post(format!("{url}{path}")).json(body).send()?,
    };
    let status = resp.status();
    let body = resp.bytes()?;
    if !status.is_success() {
        bail!("{status}: {}", String::from_utf8_lossy(&body));
    }
    serde_json::from_slice(&body).context("response is not JSON")
}

pub(crate) fn timed(
    client: &reqwest::blocking::Client,
    url: &str,
    r: &Req,
) -> anyhow::Result<(f64, Value)> {
    let t = Instant::now();
    let v = send(client, url, r)?;
    Ok((t.elapsed().as_secs_f64() * 1e3, v))
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub(crate) fn p50_p99(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (percentile(&v, 50.0), percentile(&v, 99.0))
}

fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A query window: its name, length and the time-series step that keeps an
/// answer to 60–120 points per series, as a dashboard would ask.
#[derive(Clone, Copy)]
struct Window {
    name: &'static str,
    len: i64,
    step_s: i64,
}

const WINDOWS: [Window; 4] = [
    Window {
        name: "1h",
        len: HOUR,
        step_s: 60,
    },
    Window {
        name: "1d",
        len: DAY,
        step_s: 900,
    },
    Window {
        name: "7d",
        len: 7 * DAY,
        step_s: 7200,
    },
    Window {
        name: "30d",
        len: 30 * DAY,
        step_s: 21_600,
    },
];

/// A label selection in both languages: `(label, baseline column, value)`.
#[derive(Clone, Default)]
struct Labels(Vec<(&'static str, &'static str, String)>);

impl Labels {
    fn of(pairs: &[(&'static str, &'static str, String)]) -> Self {
        Labels(pairs.to_vec())
    }

    /// profiledb's selector, e.g. `{service_name="a",host="b"}`.
    fn selector(&self) -> String {
        let inner: Vec<String> = self
            .0
            .iter()
            .map(|(l, _, v)| format!("{l}=\"{v}\""))
            .collect();
        format!("{{{}}}", inner.join(","))
    }

    /// The SQL predicate on `samples` columns prefixed by `alias` (`""` or `"s."`),
    /// each term preceded by `AND`.
    fn sql(&self, alias: &str) -> String {
        self.0
            .iter()
            .map(|(_, c, v)| format!(" AND {alias}{c} = '{v}'"))
            .collect()
    }
}

/// Which function filter a group-by applies.
#[derive(Clone, Copy, PartialEq)]
enum Filter {
    None,
    /// `deflate`, the same on every run.
    Fixed,
    /// `deflate` or a name that matches nothing, new on every request.
    Fresh,
}

fn merge(w: Window, t_end: i64, sel: &Labels, name: &str) -> QuerySpec {
    let start = t_end - w.len;
    let q = format!("{CPU_TYPE}{}", sel.selector());
    let time = format!("ts_ms >= {start} AND ts_ms < {t_end}");
    QuerySpec {
        name: name.to_string(),
        window: w.name,
        http: Box::new(move |shift| {
            Req::Get(format!(
                "/api/v1/flamegraph?query={}&from={}&until={t_end}&max_nodes=1024",
                enc(&q),
                start - shift,
            ))
        }),
        total: |v| v.get("total").and_then(Value::as_f64),
        sql: Sql::portable(format!(
            "SELECT k.stack, m.v FROM (SELECT stack_id, sum(value) AS v FROM samples \
             WHERE profile_type = '{CPU_TYPE}'{} AND {time} GROUP BY stack_id) m \
             JOIN stacks k USING (stack_id)",
            sel.sql("")
        )),
        run: None,
    }
}

fn group_by(w: Window, t_end: i64, sel: &Labels, filter: Filter, name: &str) -> QuerySpec {
    let start = t_end - w.len;
    let selector = sel.selector();
    let time = format!("ts_ms >= {start} AND ts_ms < {t_end}");
    let stacks = match filter {
        Filter::None => "stacks".to_string(),
        Filter::Fixed | Filter::Fresh => {
            format!("(SELECT stack_id, leaf FROM stacks WHERE stack LIKE '%{FILTER_FUNCTION}%')")
        }
    };
    QuerySpec {
        name: name.to_string(),
        window: w.name,
        http: Box::new(move |shift| {
            let mut body = json!({"profile_type": CPU_TYPE, "selector": selector,
               "start": start - shift, "end": t_end,
               "group_by": ["service_name", "function"], "limit": 100});
            let function = match filter {
                Filter::None => None,
                Filter::Fixed => Some(FILTER_FUNCTION.to_string()),
                Filter::Fresh => Some(format!("{FILTER_FUNCTION}|^nothing{shift}$")),
            };
            if let Some(f) = function {
                body["function"] = json!(f);
            }
            Req::Post("/api/v1/query", body)
        }),
        total: |v| v.get("total").and_then(Value::as_f64),
        sql: Sql::portable(format!(
            "SELECT s.service, k.leaf, sum(s.value) AS v FROM samples s \
             JOIN {stacks} k USING (stack_id) WHERE s.profile_type = '{CPU_TYPE}'{} \
             AND s.{time} GROUP BY 1, 2 ORDER BY v DESC",
            sel.sql("s.")
        )),
        run: None,
    }
}

fn time_series(w: Window, t_end: i64, sel: &Labels, name: &str) -> QuerySpec {
    let (start, step_s) = (t_end - w.len, w.step_s);
    let q = format!("{CPU_TYPE}{}", sel.selector());
    let time = format!("ts_ms >= {start} AND ts_ms < {t_end}");
    let step_ms = step_s * 1000;
    let pred = sel.sql("");
    // Integer division is `//` in DuckDB, intDiv in ClickHouse.
    let series = |bucket: String| {
        format!(
            "SELECT service, {bucket} AS bucket, sum(value) AS v FROM samples \
             WHERE profile_type = '{CPU_TYPE}'{pred} AND {time} GROUP BY 1, 2 ORDER BY 1, 2"
        )
    };
    QuerySpec {
        name: name.to_string(),
        window: w.name,
        http: Box::new(move |shift| {
            Req::Get(format!(
                "/api/v1/timeseries?query={}&from={}&until={t_end}&step={step_s}s&group_by=service_name&limit=100",
                enc(&q),
                start - shift,
            ))
        }),
        total: |v| {
            v.get("series")?
                .as_array()?
                .iter()
                .map(|s| s.get("total").and_then(Value::as_f64))
                .sum()
        },
        sql: Sql {
            duckdb: series(format!("ts_ms // {step_ms} * {step_ms}")),
            clickhouse: series(format!("intDiv(ts_ms, {step_ms}) * {step_ms}")),
            total: Total::Sum,
        },
        run: None,
    }
}

fn diff(w: Window, t_end: i64, sel: &Labels, name: &str) -> QuerySpec {
    let (start, mid) = (t_end - w.len, t_end - w.len / 2);
    let selector = sel.selector();
    let time = format!("ts_ms >= {start} AND ts_ms < {t_end}");
    QuerySpec {
        name: name.to_string(),
        window: w.name,
        http: Box::new(move |shift| {
            Req::Post(
                "/api/v1/diff",
                // The same flame graph size as the merge query draws.
                json!({"profile_type": CPU_TYPE, "selector": selector,
                   "base": {"start": start - shift, "end": mid},
                   "compare": {"start": mid, "end": t_end}, "top": 20,
                   "max_nodes": 1024}),
            )
        }),
        total: |v| {
            let s = v.get("stats")?;
            Some(s.get("samples_base")?.as_f64()? + s.get("samples_compare")?.as_f64()?)
        },
        sql: diff_sql(&sel.sql("s."), &time, mid),
        run: None,
    }
}

/// Leaf shares of each half and the 20 largest changes; the grand total on every
/// row. `pred`: more conditions on `samples s`, each starting with ` AND`.
fn diff_sql(pred: &str, time: &str, mid: i64) -> Sql {
    let duckdb = format!(
        "WITH side AS (SELECT k.leaf, (s.ts_ms >= {mid}) AS cmp, sum(s.value) AS v \
         FROM samples s JOIN stacks k USING (stack_id) WHERE s.profile_type = '{CPU_TYPE}'\
         {pred} AND s.{time} GROUP BY 1, 2), \
         tot AS (SELECT cmp, sum(v) AS t FROM side GROUP BY cmp), \
         shares AS (SELECT leaf, sum(CASE WHEN NOT side.cmp THEN v / t ELSE 0 END) AS b, \
         sum(CASE WHEN side.cmp THEN v / t ELSE 0 END) AS c FROM side JOIN tot USING (cmp) \
         GROUP BY leaf) \
         SELECT leaf, b, c, c - b AS delta, (SELECT sum(t) FROM tot) AS total \
         FROM shares ORDER BY abs(c - b) DESC LIMIT 20"
    );
    // ClickHouse inlines a CTE at every reference (the DuckDB form scans and joins
    // three times), so both halves are summed in one pass and the totals are windows.
    let clickhouse = format!(
        "SELECT leaf, b, c, c - b AS delta, total FROM (SELECT leaf, vb / sum(vb) OVER () AS b, \
         vc / sum(vc) OVER () AS c, sum(vb + vc) OVER () AS total FROM (SELECT k.leaf AS leaf, \
         sumIf(s.value, s.ts_ms < {mid}) AS vb, sumIf(s.value, s.ts_ms >= {mid}) AS vc \
         FROM samples s JOIN stacks k USING (stack_id) WHERE s.profile_type = '{CPU_TYPE}'\
         {pred} AND s.{time} GROUP BY leaf)) \
         ORDER BY abs(c - b) DESC LIMIT 20"
    );
    Sql {
        duckdb,
        clickhouse,
        total: Total::FirstRow,
    }
}

/// The suite's fixed queries: merge and diff of one service, group-bys and time
/// series of everything; each over the last 1 h, 1 d, 7 d and 30 d (the diff over
/// the two short windows only).
pub(crate) fn specs(t_end: i64, service: &str) -> Vec<QuerySpec> {
    let svc = Labels::of(&[("service_name", "service", service.to_string())]);
    let all = Labels::default();
    let mut out = Vec::new();
    for w in WINDOWS {
        out.push(merge(w, t_end, &svc, "merge"));
        out.push(group_by(
            w,
            t_end,
            &all,
            Filter::Fixed,
            "group-by service,function + function filter",
        ));
        // A filter never asked before on every run (an alternative that matches
        // nothing is appended): nothing of it is cached, so it is the cost of a
        // group-by computed from the decoded segments.
        out.push(group_by(
            w,
            t_end,
            &all,
            Filter::Fresh,
            "group-by, filter new on every run",
        ));
        out.push(group_by(
            w,
            t_end,
            &all,
            Filter::None,
            "group-by service,function",
        ));
        out.push(time_series(w, t_end, &all, "time series by service"));
        if w.len <= DAY {
            out.push(diff(w, t_end, &svc, "diff (two halves, top 20)"));
        }
    }
    out
}

/// What one ad-hoc run selects: a service and one of its hosts for the merge and
/// the diff, a zone for the group-bys and the time series.
pub(crate) struct AdHoc {
    pub service: String,
    pub host: String,
    pub zone: String,
}

impl AdHoc {
    /// `runs` selections, drawn with `seed` (the suite passes the clock, so every
    /// invocation asks new ones), distinct from one another where the fleet has
    /// enough services, hosts and zones, and never the fixed set's `svc-00`.
    pub(crate) fn draw(
        fleet: &Fleet,
        services: usize,
        hosts: usize,
        runs: usize,
        seed: u64,
    ) -> Vec<AdHoc> {
        let mut rng = Rng::keyed(seed, &[0xad, 0x40c]);
        let distinct = |rng: &mut Rng, n: usize, skip_first: bool| -> Vec<usize> {
            let lo = usize::from(skip_first && n > 1);
            let mut pool: Vec<usize> = (lo..n.max(1)).collect();
            (0..runs)
                .map(|_| {
                    if pool.is_empty() {
                        pool = (lo..n.max(1)).collect();
                    }
                    pool.swap_remove(rng.below(pool.len()))
                })
                .collect()
        };
        let zones = hosts.min(Fleet::ZONES);
        let (s, h, z) = (
            distinct(&mut rng, services, true),
            distinct(&mut rng, hosts, false),
            distinct(&mut rng, zones, false),
        );
        (0..runs)
            .map(|r| AdHoc {
                service: fleet.service_name(s[r]).to_string(),
                host: Fleet::host_name(h[r]),
                // Hosts 0..ZONES have every zone once.
                zone: Fleet::zone(z[r]),
            })
            .collect()
    }
}

/// The ad-hoc set of one run: the fixed set's queries over `a`'s selection
/// (`run` tells the runs apart in the baselines' keys).
pub(crate) fn adhoc_specs(t_end: i64, a: &AdHoc, run: usize) -> Vec<QuerySpec> {
    let host = Labels::of(&[
        ("service_name", "service", a.service.clone()),
        ("host", "host", a.host.clone()),
    ]);
    let zone = Labels::of(&[("zone", "zone", a.zone.clone())]);
    let mut out = Vec::new();
    for w in WINDOWS {
        out.push(merge(w, t_end, &host, "merge of one host"));
        out.push(group_by(
            w,
            t_end,
            &zone,
            Filter::Fixed,
            "group-by of a zone + function filter",
        ));
        out.push(group_by(
            w,
            t_end,
            &zone,
            Filter::None,
            "group-by of a zone",
        ));
        out.push(time_series(w, t_end, &zone, "time series of a zone"));
        if w.len <= DAY {
            out.push(diff(w, t_end, &host, "diff of one host"));
        }
    }
    for s in &mut out {
        s.run = Some(run);
    }
    out
}
