//! The web UI in headless Chromium against a generated 1-day fleet: bytes of the
//! assets served (raw and gzip'd), time from navigation to a drawn flame graph for
//! one service over 1 day (cold: fresh browser and server caches; cached: the same
//! page again), and frames per second while zooming a 10,000-node flame graph.
//! Skips with a message where chromium or chromedriver is absent (fails instead
//! with `PROFILEDB_REQUIRE_EXTERNAL=1`).

#[path = "../../server/tests/suite/browser.rs"]
mod browser;
use crate::external;

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args as ClapArgs;
use serde_json::{json, Value};

use crate::fleet::{Fleet, FleetConfig, CPU_TYPE};
use crate::query_specs::percentile;
use crate::report::{self, human_bytes};
use crate::server::{push, Running};

#[derive(ClapArgs)]
pub struct Args {
    #[arg(long, default_value_t = 42)]
    seed: u64,
    #[arg(long, default_value_t = 20)]
    hosts: usize,
    #[arg(long, default_value_t = 5)]
    services: usize,
    /// Distinct stacks per service.
    #[arg(long, default_value_t = 5000)]
    stacks: usize,
    /// Seconds between pushes over the day.
    #[arg(long, default_value_t = 300)]
    interval: u64,
    /// Page loads timed with warm caches.
    #[arg(long, default_value_t = 10)]
    cached_loads: usize,
    /// Small run for CI.
    #[arg(long)]
    quick: bool,
}

const HOUR: i64 = 3_600_000;
const MAX_NODES: usize = 10_000;

pub fn run(mut args: Args) -> anyhow::Result<()> {
    if args.quick {
        args.hosts = args.hosts.min(3);
        args.services = args.services.min(2);
        args.stacks = args.stacks.min(1000);
        args.interval = args.interval.max(1800);
        args.cached_loads = args.cached_loads.min(3);
    }
    if args.interval == 0 || args.hosts == 0 || args.services == 0 {
        bail!("--interval, --hosts and --services must be positive");
    }
    let Some(b) = browser::Browser::start() else {
        println!("ui suite: skipped (no chromium/chromedriver)");
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    let t_end = now / HOUR * HOUR;
    let fleet = Fleet::new(FleetConfig {
        seed: args.seed,
        services: args.services,
        stacks_per_service: args.stacks,
        draws_per_profile: 100,
        zipf_s: 1.1,
        deploy_ms: t_end - HOUR / 2,
    });
    let server = Running::start(dir.path(), 0)?;
    let client = reqwest::blocking::Client::new();
    let mut pushes = 0;
    let mut t = t_end - 24 * HOUR;
    while t < t_end {
        for host in 0..args.hosts {
            push(
                &client,
                &server.url,
                &fleet.host_push(host, t, false, None).0,
            )?;
            pushes += 1;
        }
        t += args.interval as i64 * 1000;
    }
    // A restart flushes the head, so the day is read from segments as in production.
    server.stop()?;
    let server = Running::start(dir.path(), 0)?;
    println!(
        "ui suite: {} services × {} hosts over 1 day every {} s ({pushes} pushes)",
        args.services, args.hosts, args.interval
    );

    let assets = asset_sizes(&client, &server.url)?;
    let service = fleet.service_name(0).to_string();
    let range = format!("from={}&until={}", t_end - 24 * HOUR, t_end);
    let page = format!(
        "{}/ui/explore?type={CPU_TYPE}&service={service}&{range}",
        server.url
    );
    let cold = load(&b, &page)?;
    let mut cached: Vec<f64> = (0..args.cached_loads)
        .map(|_| load(&b, &page))
        .collect::<anyhow::Result<_>>()?;
    cached.sort_by(f64::total_cmp);
    let cached_p50 = percentile(&cached, 50.0);
    println!(
        "page load → drawn flame graph, {service}, 1 day: cold {cold:.0} ms, cached p50 {cached_p50:.0} ms (n={})",
        cached.len()
    );

    let big = format!(
        "{}/ui/explore?type={CPU_TYPE}&{range}&max_nodes={MAX_NODES}",
        server.url
    );
    load(&b, &big)?;
    let zoom = b.js_async("return await window.profiledbUI.flame.benchZoom(240);");
    if let Some(e) = zoom.get("error") {
        bail!("benchZoom failed: {e}");
    }
    println!(
        "zooming a {}-node flame graph: {:.1} frames/s over {} frames, {:.2} ms mean draw",
        zoom["nodes"],
        num(&zoom["fps"]),
        zoom["frames"],
        num(&zoom["drawMsMean"])
    );
    server.stop()?;
    let path = report::write(
        "ui",
        json!({
            "fleet": {"hosts": args.hosts, "services": args.services, "stacks": args.stacks,
                      "interval_s": args.interval, "pushes": pushes, "quick": args.quick},
            "assets": assets,
            "flame_drawn_ms": {"cold": cold, "cached_p50": cached_p50, "cached": cached},
            "zoom": zoom,
        }),
    )?;
    println!("wrote {}", path.display());
    Ok(())
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// Navigates to `url` and answers the page's own mark: ms from navigation start to
/// the flame graph drawn.
fn load(b: &browser::Browser, url: &str) -> anyhow::Result<f64> {
    b.goto(url);
    b.wait_idle(300);
    let err = b.error_text();
    if !err.is_empty() {
        bail!("the page shows an error: {err}");
    }
    b.js("return window.profiledbUI.timings.flameDrawn;", json!([]))
        .as_f64()
        .context("the page never marked flameDrawn")
}

/// Every file under `server/ui/` as served: raw and gzip'd bytes.
fn asset_sizes(client: &reqwest::blocking::Client, url: &str) -> anyhow::Result<Value> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../server/ui");
    let mut files = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d)? {
            let p = e?.path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                files.push(p.strip_prefix(&root)?.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    files.sort();
    let (mut raw, mut gz) = (0usize, 0usize);
    let mut each = Vec::new();
    for f in &files {
        let get = |enc: &str| -> anyhow::Result<usize> {
            let r = client
                .get(format!("{url}/ui/assets/{f}"))
                .header("Accept-Encoding", enc)
                .send()?;
            if !r.status().is_success() {
                bail!("{f}: {}", r.status());
            }
            Ok(r.bytes()?.len())
        };
        let (r, z) = (get("identity")?, get("gzip")?);
        raw += r;
        gz += z;
        each.push(json!({"path": f, "bytes": r, "gzip_bytes": z}));
    }
    println!(
        "assets: {} files, {} raw, {} gzip'd",
        files.len(),
        human_bytes(raw as f64),
        human_bytes(gz as f64)
    );
    Ok(json!({"files": each, "bytes": raw, "gzip_bytes": gz}))
}
