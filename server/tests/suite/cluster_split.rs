//! One query split across three queriers (issue #56), against a real S3-protocol
//! server (moto): a writer uploads six hours of generated pushes of two
//! tenants; a querier alone and a querier splitting across itself and two peers
//! answer every query kind that splits. Both are checked against totals
//! computed from the generated input (merge by stack, group-by by service and
//! function, time series by service and hour, both sides of a diff, label
//! values), and against each other. Then a peer is killed with SIGKILL while
//! queries run: every answer is still complete (its part asked elsewhere) or
//! refused, never short.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::cluster_procs::{role_flags, Proc, CPU};
use crate::common::{free_port, wait_for};
use crate::moto;

const PREFIX: &str = "split-test";
const HOURS: u64 = 6;
const SERVICES: [&str; 3] = ["alpha", "beta", "gamma"];
const HOSTS: [&str; 4] = ["h1", "h2", "h3", "h4"];
/// `/ingest` takes folded samples at 100 Hz: one sample is 10 ms of CPU.
const NS: i64 = 10_000_000;

/// One generated push: a tenant's service on a host at a time, with its stacks.
struct Gen {
    tenant: &'static str,
    service: &'static str,
    host: &'static str,
    at_s: u64,
    stacks: Vec<(String, i64)>,
}

/// Pushes spread over `HOURS` whole hours before the current one, with stacks
/// of uneven popularity; tenant `b` gets a stack of its own.
fn generate(hour0: u64) -> Vec<Gen> {
    let mut out = Vec::new();
    for i in 0..(HOURS as usize * 12) {
        let h = (i % HOURS as usize) as u64;
        let tenant = if i % 4 == 3 { "team-b" } else { "team-a" };
        let service = SERVICES[i % 3];
        let mut stacks = vec![
            (format!("main;{service}_serve;parse"), (i as i64 % 7) + 1),
            (format!("main;{service}_serve;encode"), (i as i64 % 3) + 2),
            ("main;gc".to_string(), 1 + (i as i64 % 2)),
        ];
        if tenant == "team-b" {
            stacks.push(("main;only_b".to_string(), 5));
        }
        out.push(Gen {
            tenant,
            service,
            host: HOSTS[i % 4],
            at_s: hour0 + h * 3600 + 60 + (i as u64 * 37) % 3000,
            stacks,
        });
    }
    out
}

/// What the generated input says a tenant's answers are.
#[derive(Default)]
struct Oracle {
    folded: BTreeMap<String, i64>,
    by_service_fn: BTreeMap<(String, String), i64>,
    by_service_hour: BTreeMap<(String, i64), i64>,
    hosts: Vec<String>,
}

fn oracle(gen: &[Gen], tenant: &str, window: (u64, u64)) -> Oracle {
    let mut o = Oracle::default();
    let mut hosts = std::collections::BTreeSet::new();
    for g in gen
        .iter()
        .filter(|g| g.tenant == tenant && g.at_s >= window.0 && g.at_s < window.1)
    {
        hosts.insert(g.host.to_string());
        for (stack, n) in &g.stacks {
            let v = n * NS;
            *o.folded.entry(stack.clone()).or_default() += v;
            let leaf = stack.rsplit(';').next().unwrap_or_default().to_string();
            *o.by_service_fn
                .entry((g.service.to_string(), leaf))
                .or_default() += v;
            let hour = (g.at_s / 3600 * 3600 * 1000) as i64;
            *o.by_service_hour
                .entry((g.service.to_string(), hour))
                .or_default() += v;
        }
    }
    o.hosts = hosts.into_iter().collect();
    o
}

struct Ask<'a> {
    url: &'a str,
    tenant: &'a str,
    client: reqwest::blocking::Client,
}

impl Ask<'_> {
    fn send(&self, r: reqwest::blocking::RequestBuilder) -> Result<Value, u16> {
        let r = r
            .header("X-Scope-OrgID", self.tenant)
            .send()
            .map_err(|_| 0u16)?;
        match r.status().as_u16() {
            200 => Ok(r.json().unwrap()),
            s => Err(s),
        }
    }
    fn get(&self, path: &str, q: &[(&str, String)]) -> Result<Value, u16> {
        self.send(self.client.get(format!("{}{path}", self.url)).query(q))
    }
    fn post(&self, path: &str, body: Value) -> Result<Value, u16> {
        self.send(self.client.post(format!("{}{path}", self.url)).json(&body))
    }

    fn folded(&self, window: (u64, u64)) -> Result<BTreeMap<String, i64>, u16> {
        let v = self.get(
            "/api/v1/merge",
            &[
                ("query", format!("{CPU}{{}}")),
                ("from", window.0.to_string()),
                ("until", window.1.to_string()),
                ("format", "json".into()),
            ],
        )?;
        Ok(v["stacks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let stack: Vec<&str> = s["stack"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| f.as_str().unwrap())
                    .collect();
                (stack.join(";"), s["value"].as_i64().unwrap())
            })
            .collect())
    }

    /// Every answer the oracle checks, and the raw answers compared across
    /// queriers.
    fn check(&self, gen: &[Gen], window: (u64, u64)) -> Value {
        let want = oracle(gen, self.tenant, window);
        let (lo, hi) = window;
        assert_eq!(
            self.folded(window).unwrap(),
            want.folded,
            "merge at {}",
            self.url
        );
        let gb = self
            .post(
                "/api/v1/query",
                json!({"profile_type": CPU, "selector": "{}", "start": lo * 1000,
                       "end": hi * 1000, "group_by": ["service_name", "function"]}),
            )
            .unwrap();
        let rows: BTreeMap<(String, String), i64> = gb["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let k = &r["key"];
                let key = (k[0].as_str().unwrap().into(), k[1].as_str().unwrap().into());
                (key, r["value"].as_i64().unwrap())
            })
            .collect();
        assert_eq!(rows, want.by_service_fn, "group-by at {}", self.url);
        let ts = self
            .get(
                "/api/v1/timeseries",
                &[
                    ("query", format!("{CPU}{{}}")),
                    ("from", lo.to_string()),
                    ("until", hi.to_string()),
                    ("step", "1h".into()),
                    ("group_by", "service_name".into()),
                ],
            )
            .unwrap();
        let mut points = BTreeMap::new();
        for s in ts["series"].as_array().unwrap() {
            let svc = s["labels"]["service_name"].as_str().unwrap().to_string();
            for p in s["points"].as_array().unwrap() {
                let (t, v) = (p[0].as_i64().unwrap(), p[1].as_i64().unwrap_or(0));
                if v != 0 {
                    points.insert((svc.clone(), t), v);
                }
            }
        }
        assert_eq!(points, want.by_service_hour, "time series at {}", self.url);
        let mid = lo + (hi - lo) / 2;
        let diff = self
            .post(
                "/api/v1/diff",
                json!({"profile_type": CPU, "selector": "{}",
                       "base": {"start": lo.to_string(), "end": mid.to_string()},
                       "compare": {"start": mid.to_string(), "end": hi.to_string()},
                       "max_nodes": 64, "top": 5}),
            )
            .unwrap();
        let half = |w| oracle(gen, self.tenant, w).folded.values().sum::<i64>();
        assert_eq!(diff["stats"]["samples_base"], json!(half((lo, mid))));
        assert_eq!(diff["stats"]["samples_compare"], json!(half((mid, hi))));
        let hosts = self
            .get(
                "/api/v1/label_values",
                &[
                    ("name", "host".into()),
                    ("from", lo.to_string()),
                    ("until", hi.to_string()),
                ],
            )
            .unwrap();
        assert_eq!(hosts, json!(want.hosts), "host values at {}", self.url);
        let names = self
            .get(
                "/api/v1/labels",
                &[("from", lo.to_string()), ("until", hi.to_string())],
            )
            .unwrap();
        let fg = &diff["flamegraph"];
        let mut top = diff["top"].as_array().cloned().unwrap_or_default();
        top.sort_by_key(|t| t.to_string());
        json!({"group_by": gb, "series": ts, "names": names,
               "diff": {"left": fg["leftTicks"], "right": fg["rightTicks"], "total": fg["total"],
                        "levels": fg["levels"].as_array().map(Vec::len), "top": top}})
    }
}

#[test]
fn a_query_split_across_three_queriers_answers_what_one_does_and_survives_a_killed_peer() {
    let Some(s3) = moto::MotoServer::start() else {
        return;
    };
    let cfg = s3.config(PREFIX);
    let (endpoint, url) = (s3.endpoint(), cfg.url.clone());
    let tmp = tempfile::tempdir().unwrap();
    // PROFILEDB_KEEP_TEST_DIR keeps the processes' logs for a post-mortem.
    let root = match std::env::var_os("PROFILEDB_KEEP_TEST_DIR") {
        Some(_) => tmp.keep(),
        None => tmp.path().to_path_buf(),
    };
    let d = |n: &str| root.join(n);
    let flags = |role: &str, extra: &[&str]| role_flags(&endpoint, &url, role, extra);

    let w = Proc::start(&d("w"), &flags("writer", &[]));
    let alone = Proc::start(&d("alone"), &flags("querier", &[]));
    let ports = [free_port(), free_port(), free_port()];
    // Every splitting querier is given all three addresses, its own among them.
    let peers = ports
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let split_flags = flags(
        "querier",
        &["--querier-peers", &peers, "--split-min-blocks", "2"],
    );
    let mut qs: Vec<Proc> = ["qa", "qb", "qc"]
        .iter()
        .zip(ports)
        .map(|(n, p)| Proc::start_on(&d(n), &split_flags, p, true))
        .collect();

    let hour0 = (crate::cluster_procs::now_secs() / 3600 - HOURS - 1) * 3600;
    let gen = generate(hour0);
    let client = reqwest::blocking::Client::new();
    for g in &gen {
        let body: String = g.stacks.iter().map(|(s, n)| format!("{s} {n}\n")).collect();
        let r = client
            .post(format!("{}/ingest", w.url))
            .query(&[
                ("name", format!("{}.cpu{{host={}}}", g.service, g.host)),
                ("from", g.at_s.to_string()),
            ])
            .header("X-Scope-OrgID", g.tenant)
            .body(body)
            .send()
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().unwrap_or_default());
    }
    let window = (hour0, hour0 + HOURS * 3600);
    // Every querier sees both tenants' pushes before the first split, so no peer
    // refuses a part for a view of the index older than the asker's.
    for tenant in ["team-a", "team-b"] {
        let want = oracle(&gen, tenant, window).folded;
        for q in [&alone, &qs[0], &qs[1], &qs[2]] {
            let ask = Ask {
                url: &q.url,
                tenant,
                client: client.clone(),
            };
            wait_for(60, "every push visible", || {
                (ask.folded(window).ok()? == want).then_some(())
            });
        }
    }

    // Both tenants, through the querier alone and through a split: the oracle's
    // answers, and equal to each other.
    for tenant in ["team-a", "team-b"] {
        let one = Ask {
            url: &alone.url,
            tenant,
            client: client.clone(),
        }
        .check(&gen, window);
        let split = Ask {
            url: &qs[0].url,
            tenant,
            client: client.clone(),
        }
        .check(&gen, window);
        assert_eq!(
            one, split,
            "tenant {tenant}: one querier and a split differ"
        );
    }
    let (coord, a, b) = (&qs[0], &qs[1], &qs[2]);
    let (splits, by_peers) = (
        coord.metric("profiledb_query_split_total"),
        coord.metric("profiledb_query_split_parts_by_peers_total"),
    );
    assert!(
        splits >= 10 && by_peers >= splits,
        "splits {splits}, parts by peers {by_peers}"
    );
    // A part is computed locally only after every peer refused it: the one race
    // left is a peer whose periodic sync ran later than the asker's (a refusal it
    // counts), never a peer that failed to answer.
    let refused = a.metric("profiledb_query_parts_refused_total")
        + b.metric("profiledb_query_parts_refused_total");
    let local = coord.metric("profiledb_query_split_parts_local_total");
    assert!(
        local <= refused,
        "{local} parts computed locally, {refused} refused by peers"
    );
    assert!(a.metric("profiledb_query_parts_served_total") >= 12);
    assert!(b.metric("profiledb_query_parts_served_total") >= 12);
    assert_eq!(alone.metric("profiledb_query_split_total"), 0);

    // A part whose tenant header and body disagree is refused by the peer.
    let r = client
        .post(format!("{}/internal/v1/partial", a.url))
        .header("X-Scope-OrgID", "team-a")
        .json(&json!({"tenant": "team-b", "start_ms": window.0 * 1000,
                      "end_ms": window.1 * 1000, "expect": [], "kind": "label_names",
                      "selector": "{}"}))
        .send()
        .unwrap();
    assert_eq!(r.status(), 400);

    // SIGKILL a peer while queries run: each answer is whole or refused.
    let runner = {
        let (url, gen_window) = (coord.url.clone(), window);
        let want = oracle(&gen, "team-a", window).folded;
        std::thread::spawn(move || {
            let ask = Ask {
                url: &url,
                tenant: "team-a",
                client: reqwest::blocking::Client::new(),
            };
            let mut whole = 0;
            for _ in 0..30 {
                match ask.folded(gen_window) {
                    Ok(got) => {
                        assert_eq!(got, want, "an answer after the kill is short");
                        whole += 1;
                    }
                    Err(s) => assert_eq!(s, 503, "a query failed with {s}"),
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            whole
        })
    };
    std::thread::sleep(Duration::from_millis(150));
    qs[2].kill9();
    assert!(
        runner.join().unwrap() > 0,
        "no answer was whole after the kill"
    );
    let coord = &qs[0];
    let ask = Ask {
        url: &coord.url,
        tenant: "team-b",
        client: client.clone(),
    };
    ask.check(&gen, window);
    assert!(
        coord.metric("profiledb_query_split_parts_retried_total")
            + coord.metric("profiledb_query_split_parts_local_total")
            > 0,
        "no part was asked again after the kill"
    );
    drop(w);
}
