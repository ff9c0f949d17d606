//! The ingest suite's fleet phase: the server's decode path on the full-density
//! fleet's push bodies, without HTTP and without the load generator.
//!
//! End to end, the push clients share the two cores with the server, and a run
//! takes two minutes; this phase times what one decoder thread does per push
//! (`decode_push`, `push_to_batch`, then `Store::submit`, which validates,
//! interns and encodes the WAL record; what the write no longer needs is freed on
//! this thread, as the server's decoders free it) on bodies
//! generated before the clock starts, while the store's writer commits on the other
//! core. The thread's own CPU time is counted, and the cheapest of several rounds
//! kept: the VM's speed drifts by ±10 % within a minute, more than most changes
//! this phase is run to judge.

use std::time::Instant;

use profiledb_ingest::{decode_push, push_to_batch, Limits, PushEncoding};
use profiledb_storage::{Store, StoreConfig, TenantId, WriteError, WriteRemains};
use serde_json::{json, Value};

use crate::fleet::{dense, heap_due, Fleet, FleetConfig};
use crate::thread_cpu;

const HOUR: i64 = 3_600_000;

/// What the phase measured.
pub struct FleetDecode {
    pub pushes: usize,
    /// Times the pushes were decoded; the figures are the cheapest round's.
    pub rounds: usize,
    pub body_bytes: u64,
    pub values: u64,
    /// `decode_push` + `push_to_batch`.
    pub decode_secs: f64,
    /// `Store::submit`: validation, interning, the WAL record.
    pub submit_secs: f64,
}

impl FleetDecode {
    fn per_value_us(&self, secs: f64) -> f64 {
        secs * 1e6 / self.values.max(1) as f64
    }

    pub fn to_json(&self) -> Value {
        json!({
            "pushes": self.pushes,
            "rounds": self.rounds,
            "push_body_bytes": self.body_bytes,
            "values": self.values,
            "decode_us_per_value": self.per_value_us(self.decode_secs),
            "submit_us_per_value": self.per_value_us(self.submit_secs),
            "values_per_second_one_core": self.values as f64 / (self.decode_secs + self.submit_secs),
        })
    }

    pub fn describe(&self) -> String {
        format!(
            "{} pushes (the cheapest of {} rounds), {:.1} M values, {:.0} MB: decode {:.3} µs/value, submit {:.3} µs/value, {:.0} k values/s on one core",
            self.pushes,
            self.rounds,
            self.values as f64 / 1e6,
            self.body_bytes as f64 / 1e6,
            self.per_value_us(self.decode_secs),
            self.per_value_us(self.submit_secs),
            self.values as f64 / (self.decode_secs + self.submit_secs) / 1e3
        )
    }
}

/// Generates `pushes` bodies of the dense hour (one per host per tick, heap
/// profiles every minute, as the query suite sends them), then decodes and submits
/// each into a store in `dir`.
pub fn measure(dir: &std::path::Path, pushes: usize, rounds: usize) -> anyhow::Result<FleetDecode> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    let t0 = now_ms / HOUR * HOUR - HOUR;
    let fleet = Fleet::new(FleetConfig {
        seed: dense::SEED,
        services: dense::SERVICES,
        stacks_per_service: dense::STACKS_PER_SERVICE,
        draws_per_profile: dense::DRAWS_PER_PROFILE,
        zipf_s: 1.1,
        deploy_ms: t0 + HOUR / 2,
    });
    let mut values = 0u64;
    let t = Instant::now();
    let bodies: Vec<bytes::Bytes> = (0..pushes)
        .map(|i| {
            let ts = t0 + (i / dense::HOSTS) as i64 * dense::INTERVAL_SECS as i64 * 1000;
            let (body, v) = fleet.host_push_body(i % dense::HOSTS, ts, heap_due(ts), None);
            values += v;
            body.into()
        })
        .collect();
    let body_bytes = bodies.iter().map(|b| b.len() as u64).sum();
    println!(
        "fleet pushes: {pushes} bodies generated in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    let store = Store::open(dir, StoreConfig::default())?;
    let limits = Limits::default();
    let (tx, rx) = std::sync::mpsc::channel::<(Result<(), WriteError>, WriteRemains)>();
    // The round that spent least: the VM's speed drifts by more than most
    // changes this phase is run to judge.
    let (mut decode_secs, mut submit_secs) = (f64::INFINITY, 0.0);
    for _ in 0..rounds.max(1) {
        let (mut decode, mut submit) = (0.0, 0.0);
        for body in &bodies {
            // As the server's decoders do, what a write no longer needs is freed on
            // this thread, which allocated it (`WriteRemains`), untimed.
            for (r, spent) in rx.try_iter() {
                r?;
                drop(spent);
            }
            let t = thread_cpu::this_thread_secs();
            let series = decode_push(body, PushEncoding::Proto, &limits)?;
            let batch = push_to_batch(&series, TenantId::default(), now_ms, &limits)?;
            let t1 = thread_cpu::this_thread_secs();
            let tx = tx.clone();
            store.submit(
                batch,
                Box::new(move |r, spent| {
                    let _ = tx.send((r.map(|_| ()), spent));
                }),
            );
            decode += t1 - t;
            submit += thread_cpu::this_thread_secs() - t1;
        }
        if decode + submit < decode_secs + submit_secs {
            (decode_secs, submit_secs) = (decode, submit);
        }
    }
    drop(tx);
    for (r, _) in rx {
        r?;
    }
    store.shutdown()?;
    Ok(FleetDecode {
        pushes,
        rounds: rounds.max(1),
        body_bytes,
        values,
        decode_secs,
        submit_secs,
    })
}
