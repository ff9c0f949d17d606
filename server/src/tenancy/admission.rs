//! Admission against per-tenant limits: each tenant's token buckets, active series
//! and running queries, the limits in force for it, and the refusal counters
//! `/metrics` shows as `profiledb_limit_refusals_total{tenant, limit}`.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Instant;

use profiledb_storage::{Batch, TenantId};

use super::bucket::{Refusal, TokenBucket};
use super::limits::{LimitExceeded, LimitName, Limits};
use super::series::{fingerprint, ActiveSeries};
use crate::metrics::escape;

/// What one tenant has used.
#[derive(Debug, Default)]
struct Usage {
    bytes: Option<TokenBucket>,
    profiles: Option<TokenBucket>,
    series: ActiveSeries,
    /// Bytes (as sent) and profiles admitted, for the per-tenant ingest rate.
    admitted_bytes: u64,
    admitted_profiles: u64,
}

pub struct Admission {
    defaults: Limits,
    /// Tenants whose limits differ from the defaults (from the auth file).
    overrides: RwLock<HashMap<TenantId, Limits>>,
    usage: Mutex<HashMap<TenantId, Arc<Mutex<Usage>>>>,
    running: Mutex<HashMap<TenantId, Arc<AtomicU64>>>,
    refusals: Mutex<BTreeMap<(TenantId, LimitName), u64>>,
    /// How long a series counts as active after its last write.
    series_window_ms: i64,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("defaults", &self.defaults)
            .finish_non_exhaustive()
    }
}

/// A running query's slot; dropping it frees the slot.
#[derive(Debug)]
pub struct QueryPermit(Arc<AtomicU64>);

impl Drop for QueryPermit {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A poisoned lock only means another request panicked mid-update of counters;
/// the counters stay usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn secs_ceil(d: std::time::Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

impl Admission {
    pub fn new(defaults: Limits, series_window_ms: i64) -> Self {
        Admission {
            defaults,
            overrides: RwLock::default(),
            usage: Mutex::default(),
            running: Mutex::default(),
            refusals: Mutex::default(),
            series_window_ms: series_window_ms.max(1),
        }
    }

    /// Replaces every tenant's overrides (a reloaded auth file).
    pub fn set_overrides(&self, overrides: HashMap<TenantId, Limits>) {
        *self.overrides.write().unwrap_or_else(|p| p.into_inner()) = overrides;
    }

    /// The limits in force for `tenant`.
    pub fn limits(&self, tenant: &TenantId) -> Limits {
        let o = self.overrides.read().unwrap_or_else(|p| p.into_inner());
        o.get(tenant).unwrap_or(&self.defaults).clone()
    }

    fn usage(&self, tenant: &TenantId) -> Arc<Mutex<Usage>> {
        lock(&self.usage).entry(tenant.clone()).or_default().clone()
    }

    /// Counts the refusal and hands it back.
    fn refuse(
        &self,
        tenant: &TenantId,
        limit: LimitName,
        value: u64,
        what: String,
        retry_after_secs: Option<u64>,
    ) -> LimitExceeded {
        *lock(&self.refusals)
            .entry((tenant.clone(), limit))
            .or_default() += 1;
        LimitExceeded {
            tenant: tenant.clone(),
            limit,
            value,
            what,
            retry_after_secs,
        }
    }

    fn take(
        &self,
        tenant: &TenantId,
        slot: &mut Option<TokenBucket>,
        (limit, rate, burst): (LimitName, u64, u64),
        n: u64,
        unit: &str,
    ) -> Result<(), LimitExceeded> {
        if rate == 0 {
            *slot = None;
            return Ok(());
        }
        let now = Instant::now();
        let bucket = match slot {
            Some(b) if b.configured_as(rate, burst) => b,
            _ => slot.insert(TokenBucket::new(rate, burst, now)),
        };
        match bucket.take(n, now) {
            Ok(()) => Ok(()),
            Err(Refusal::Wait(d)) => Err(self.refuse(
                tenant,
                limit,
                rate,
                format!("{n} {unit} arrive faster than the tenant's rate"),
                Some(secs_ceil(d)),
            )),
            Err(Refusal::TooLarge) => Err(self.refuse(
                tenant,
                limit,
                rate,
                format!(
                    "{n} {unit} in one request exceed the burst of {}",
                    if burst == 0 { rate } else { burst }
                ),
                None,
            )),
        }
    }

    /// Charges an upload's bytes (as sent) before it is decoded.
    pub fn admit_bytes(&self, tenant: &TenantId, bytes: u64) -> Result<(), LimitExceeded> {
        let l = self.limits(tenant);
        let usage = self.usage(tenant);
        let mut u = lock(&usage);
        self.take(
            tenant,
            &mut u.bytes,
            (
                LimitName::IngestionRateBytes,
                l.ingestion_rate_bytes,
                l.ingestion_burst_bytes,
            ),
            bytes,
            "bytes",
        )?;
        u.admitted_bytes += bytes;
        Ok(())
    }

    /// Checks a decoded upload of `profiles` profiles: labels per series, then the
    /// series limit, then the profile rate; records its series only when all pass,
    /// so a refused upload changes nothing.
    pub fn admit_batch(
        &self,
        tenant: &TenantId,
        batch: &Batch,
        profiles: u64,
        now_ms: i64,
    ) -> Result<(), LimitExceeded> {
        let l = self.limits(tenant);
        if l.max_labels_per_series > 0 {
            if let Some(s) = batch
                .series
                .iter()
                .find(|s| s.labels.len() as u64 > l.max_labels_per_series)
            {
                return Err(self.refuse(
                    tenant,
                    LimitName::MaxLabelsPerSeries,
                    l.max_labels_per_series,
                    format!("a series has {} labels", s.labels.len()),
                    None,
                ));
            }
        }
        // Without a series limit nothing is tracked, so the registry stays bounded
        // by the limit in every case.
        let fingerprints: Vec<u64> = if l.max_active_series > 0 {
            batch
                .series
                .iter()
                .map(|s| fingerprint(&s.labels))
                .collect()
        } else {
            Vec::new()
        };
        let usage = self.usage(tenant);
        let mut guard = lock(&usage);
        let u: &mut Usage = &mut guard;
        if let Err(total) = u.series.check(
            &fingerprints,
            now_ms,
            self.series_window_ms,
            l.max_active_series,
        ) {
            return Err(self.refuse(
                tenant,
                LimitName::MaxActiveSeries,
                l.max_active_series,
                format!("the upload would make {total} active series"),
                Some(secs_ceil(std::time::Duration::from_millis(
                    self.series_window_ms.unsigned_abs(),
                ))),
            ));
        }
        self.take(
            tenant,
            &mut u.profiles,
            (
                LimitName::IngestionRateProfiles,
                l.ingestion_rate_profiles,
                l.ingestion_burst_profiles,
            ),
            profiles,
            "profiles",
        )?;
        u.series.record(&fingerprints, now_ms);
        u.admitted_profiles += profiles;
        Ok(())
    }

    /// Takes one of the tenant's query slots.
    pub fn begin_query(&self, tenant: &TenantId) -> Result<QueryPermit, LimitExceeded> {
        let max = self.limits(tenant).max_concurrent_queries;
        let counter = lock(&self.running)
            .entry(tenant.clone())
            .or_default()
            .clone();
        let before = counter.fetch_add(1, Ordering::AcqRel);
        let permit = QueryPermit(counter);
        if max > 0 && before >= max {
            return Err(self.refuse(
                tenant,
                LimitName::MaxConcurrentQueries,
                max,
                format!("{} queries are already running", before),
                Some(1),
            ));
        }
        Ok(permit)
    }

    /// Refuses a query window longer than the tenant's limit.
    pub fn check_range(&self, tenant: &TenantId, range_ms: i64) -> Result<(), LimitExceeded> {
        let max = self.limits(tenant).max_query_range_secs;
        let secs = range_ms.unsigned_abs().div_ceil(1000);
        if max > 0 && secs > max {
            return Err(self.refuse(
                tenant,
                LimitName::MaxQueryRange,
                max,
                format!("the query window is {secs} s long"),
                None,
            ));
        }
        Ok(())
    }

    /// The node budget a query gets: what it asked for (`None`: the default, 0: no
    /// budget) within the tenant's limit; asking for more is refused.
    pub fn max_nodes(
        &self,
        tenant: &TenantId,
        asked: Option<usize>,
        default: usize,
    ) -> Result<usize, LimitExceeded> {
        let max = usize::try_from(self.limits(tenant).max_nodes).unwrap_or(usize::MAX);
        match asked {
            _ if max == 0 => Ok(asked.unwrap_or(default)),
            None => Ok(default.min(max)),
            Some(n) if n > 0 && n <= max => Ok(n),
            Some(n) => Err(self.refuse(
                tenant,
                LimitName::MaxNodes,
                max as u64,
                if n == 0 {
                    "the query asks for an unlimited number of nodes".to_string()
                } else {
                    format!("the query asks for {n} nodes")
                },
                None,
            )),
        }
    }

    /// `profiledb_limit_refusals_total`, `profiledb_active_series`,
    /// `profiledb_tenant_ingested_{bytes,profiles}_total` and
    /// `profiledb_queries_running`.
    pub fn render_metrics(&self, out: &mut String) {
        let refusals: Vec<(String, u64)> = lock(&self.refusals)
            .iter()
            .map(|((t, limit), n)| {
                (
                    format!("tenant=\"{}\",limit=\"{limit}\"", escape(t.as_str())),
                    *n,
                )
            })
            .collect();
        family(
            out,
            ("profiledb_limit_refusals_total", "counter"),
            "Requests refused by a per-tenant limit.",
            refusals,
        );
        let usage: Vec<(TenantId, Arc<Mutex<Usage>>)> = lock(&self.usage)
            .iter()
            .map(|(t, u)| (t.clone(), u.clone()))
            .collect();
        let (mut active, mut bytes, mut profiles) = (Vec::new(), Vec::new(), Vec::new());
        for (t, u) in usage {
            let u = lock(&u);
            active.push((tenant_label(&t), u.series.len() as u64));
            bytes.push((tenant_label(&t), u.admitted_bytes));
            profiles.push((tenant_label(&t), u.admitted_profiles));
        }
        family(
            out,
            ("profiledb_active_series", "gauge"),
            "Series written within the active-series window (tenants with a series limit).",
            active,
        );
        family(
            out,
            ("profiledb_tenant_ingested_bytes_total", "counter"),
            "Upload bytes (as sent, before decompression) the tenant's limits admitted.",
            bytes,
        );
        family(
            out,
            ("profiledb_tenant_ingested_profiles_total", "counter"),
            "Profiles the tenant's limits admitted.",
            profiles,
        );
        let running = lock(&self.running)
            .iter()
            .map(|(t, n)| (tenant_label(t), n.load(Ordering::Acquire)))
            .collect();
        family(
            out,
            ("profiledb_queries_running", "gauge"),
            "Queries of the tenant in flight.",
            running,
        );
    }
}

fn tenant_label(t: &TenantId) -> String {
    format!("tenant=\"{}\"", escape(t.as_str()))
}

/// One metric family: its help and type, then one sample per label set.
fn family(out: &mut String, (name, kind): (&str, &str), help: &str, samples: Vec<(String, u64)>) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, v) in samples {
        let _ = writeln!(out, "{name}{{{labels}}} {v}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(limits: serde_json::Value) -> (Admission, TenantId) {
        let a = Admission::new(Limits::default(), 60_000);
        let t = TenantId::new("t").unwrap();
        let l = Limits::default().with_overrides(&limits).unwrap();
        a.set_overrides(HashMap::from([(t.clone(), l)]));
        (a, t)
    }

    #[test]
    fn node_budgets_within_the_limit() {
        let (a, t) = admission(serde_json::json!({"max_nodes": 100}));
        assert_eq!(a.max_nodes(&t, None, 8192), Ok(100));
        assert_eq!(a.max_nodes(&t, Some(40), 8192), Ok(40));
        assert_eq!(a.max_nodes(&t, Some(101), 8192).unwrap_err().value, 100);
        assert_eq!(
            a.max_nodes(&t, Some(0), 8192).unwrap_err().limit,
            LimitName::MaxNodes
        );
        // Another tenant has the defaults: no node limit.
        let other = TenantId::new("u").unwrap();
        assert_eq!(a.max_nodes(&other, Some(0), 8192), Ok(0));
        assert_eq!(a.max_nodes(&other, None, 8192), Ok(8192));
    }

    #[test]
    fn query_slots_free_when_dropped() {
        let (a, t) = admission(serde_json::json!({"max_concurrent_queries": 2}));
        let one = a.begin_query(&t).unwrap();
        let two = a.begin_query(&t).unwrap();
        assert_eq!(
            a.begin_query(&t).unwrap_err().limit,
            LimitName::MaxConcurrentQueries
        );
        drop(one);
        let _three = a.begin_query(&t).unwrap();
        drop(two);
        let mut metrics = String::new();
        a.render_metrics(&mut metrics);
        assert!(metrics.lines().any(|l| l
            == "profiledb_limit_refusals_total{tenant=\"t\",limit=\"max_concurrent_queries\"} 1"));
    }

    #[test]
    fn ranges_round_up_to_seconds() {
        let (a, t) = admission(serde_json::json!({"max_query_range_secs": 60}));
        assert!(a.check_range(&t, 60_000).is_ok());
        let e = a.check_range(&t, 60_001).unwrap_err();
        assert_eq!(e.what, "the query window is 61 s long");
    }

    #[test]
    fn a_refused_batch_records_no_series() {
        let (a, t) =
            admission(serde_json::json!({"max_active_series": 1, "max_labels_per_series": 2}));
        let batch = |services: &[&str]| Batch {
            series: services
                .iter()
                .map(|s| profiledb_storage::SeriesSamples {
                    labels: profiledb_storage::Labels::new([("service_name", *s)]),
                    samples: Vec::new(),
                })
                .collect(),
            ..Batch::new(t.clone())
        };
        let e = a.admit_batch(&t, &batch(&["a", "b"]), 1, 0).unwrap_err();
        assert_eq!((e.limit, e.value), (LimitName::MaxActiveSeries, 1));
        assert_eq!(a.admit_batch(&t, &batch(&["b"]), 1, 0), Ok(()));
        let many = Batch {
            series: vec![profiledb_storage::SeriesSamples {
                labels: profiledb_storage::Labels::new([("a", "1"), ("b", "2"), ("c", "3")]),
                samples: Vec::new(),
            }],
            ..Batch::new(t.clone())
        };
        let e = a.admit_batch(&t, &many, 1, 0).unwrap_err();
        assert_eq!(e.what, "a series has 3 labels");
        // A tenant without a series limit is not tracked at all.
        let free = TenantId::new("free").unwrap();
        let a = Admission::new(Limits::unlimited(), 60_000);
        assert_eq!(a.admit_batch(&free, &batch(&["a", "b", "c"]), 1, 0), Ok(()));
        let mut metrics = String::new();
        a.render_metrics(&mut metrics);
        assert!(metrics
            .lines()
            .any(|l| l == "profiledb_active_series{tenant=\"free\"} 0"));
    }

    #[test]
    fn only_admitted_uploads_count_as_ingested() {
        let (a, t) = admission(serde_json::json!({
            "ingestion_rate_bytes": 100, "ingestion_burst_bytes": 100
        }));
        assert_eq!(a.admit_bytes(&t, 60), Ok(()));
        assert!(a.admit_bytes(&t, 60).is_err(), "past the burst");
        assert_eq!(a.admit_batch(&t, &Batch::new(t.clone()), 3, 0), Ok(()));
        let mut metrics = String::new();
        a.render_metrics(&mut metrics);
        for line in [
            "profiledb_tenant_ingested_bytes_total{tenant=\"t\"} 60",
            "profiledb_tenant_ingested_profiles_total{tenant=\"t\"} 3",
        ] {
            assert!(metrics.lines().any(|l| l == line), "{line} in {metrics}");
        }
    }
}
