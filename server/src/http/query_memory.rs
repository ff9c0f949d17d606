//! Global query admission: every query reserves its estimated bytes from the query
//! share of the memory budget before it runs. A merge reserves its whole tree budget
//! (the most it may hold); label discovery a small fraction of that. When the share
//! is taken, a query waits up to the queue time, then gets 503 with `Retry-After`,
//! so concurrent queries never all build their trees at once.
//!
//! Per-tenant limits (concurrency, rates) are separate; this bounds the process.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::{Semaphore, SemaphorePermit};

use super::AppRef;
use crate::error::ApiError;

/// Units of the semaphore: 64 KiB, so a large share still fits its `u32` permits.
const UNIT: u64 = 64 << 10;

/// Label queries reserve this fraction of a merge's reservation.
const LIGHT_DIVISOR: u64 = 64;

pub struct Admission {
    permits: Semaphore,
    limit_units: u32,
    heavy_units: u32,
    light_units: u32,
    wait: Duration,
    reserved: AtomicU64,
}

/// A query's reservation; released when dropped.
pub struct Admitted<'a> {
    _permit: SemaphorePermit<'a>,
    units: u32,
    reserved: &'a AtomicU64,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.reserved
            .fetch_sub(u64::from(self.units) * UNIT, Ordering::Relaxed);
    }
}

/// How much a query is expected to hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weight {
    /// Merges, diffs, group-bys, time series: their whole per-query budget.
    Heavy,
    /// Label names, values, series, profile types.
    Light,
}

impl Admission {
    /// `limit_bytes` shared by queries reserving `per_query_bytes` each (merges);
    /// a query waits at most `wait` for room.
    pub fn new(limit_bytes: u64, per_query_bytes: u64, wait: Duration) -> Self {
        let units = |b: u64| u32::try_from(b.div_ceil(UNIT)).unwrap_or(u32::MAX).max(1);
        let limit_units = units(limit_bytes);
        let heavy_units = units(per_query_bytes).min(limit_units);
        Admission {
            permits: Semaphore::new(limit_units as usize),
            limit_units,
            heavy_units,
            light_units: (heavy_units / LIGHT_DIVISOR as u32).max(1),
            wait,
            reserved: AtomicU64::new(0),
        }
    }

    /// Waits for room for a query of `weight`; 503 with `Retry-After` when none
    /// frees up within the queue time.
    pub async fn admit(&self, weight: Weight) -> Result<Admitted<'_>, ApiError> {
        let units = match weight {
            Weight::Heavy => self.heavy_units,
            Weight::Light => self.light_units,
        };
        match tokio::time::timeout(self.wait, self.permits.acquire_many(units)).await {
            Ok(Ok(permit)) => {
                self.reserved
                    .fetch_add(u64::from(units) * UNIT, Ordering::Relaxed);
                Ok(Admitted {
                    _permit: permit,
                    units,
                    reserved: &self.reserved,
                })
            }
            _ => Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "resource_exhausted",
                format!(
                    "the query memory budget ({} MiB, --query-memory-mb) is taken by running queries; retry shortly",
                    self.limit_bytes() >> 20
                ),
            )),
        }
    }

    /// Bytes reserved by running queries.
    pub fn reserved_bytes(&self) -> u64 {
        self.reserved.load(Ordering::Relaxed)
    }

    /// The query share.
    pub fn limit_bytes(&self) -> u64 {
        u64::from(self.limit_units) * UNIT
    }
}

/// How much a request to `path` is expected to hold: label discovery, the query plan
/// (`AnalyzeQuery` reads only per-step totals) and the small services Grafana calls
/// beside the querier (version, feature flags, settings) are light; everything else
/// on the query routes (merges, diffs, group-bys, series over time, heatmaps,
/// renders) reserves a merge's budget.
pub fn weight_of(path: &str) -> Weight {
    const LIGHT: [&str; 11] = [
        "/api/v1/profile_types",
        "/api/v1/labels",
        "/api/v1/label_values",
        "/api/v1/series",
        "/querier.v1.QuerierService/ProfileTypes",
        "/querier.v1.QuerierService/LabelNames",
        "/querier.v1.QuerierService/LabelValues",
        "/querier.v1.QuerierService/Series",
        "/querier.v1.QuerierService/AnalyzeQuery",
        "/pyroscope/label-values",
        "/pyroscope/labels",
    ];
    const LIGHT_SERVICES: [&str; 3] = ["/version.v1.", "/capabilities.v1.", "/settings.v1."];
    if LIGHT.contains(&path) || LIGHT_SERVICES.iter().any(|s| path.starts_with(s)) {
        Weight::Light
    } else {
        Weight::Heavy
    }
}

/// Middleware of the query and label routes.
pub async fn admit(State(state): State<AppRef>, req: Request, next: Next) -> Response {
    let weight = weight_of(req.uri().path());
    match state.admission.admit(weight).await {
        Ok(_held) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn queries_past_the_share_wait_then_get_503() {
        let a = Admission::new(4 << 20, 2 << 20, Duration::from_millis(50));
        let first = a.admit(Weight::Heavy).await.unwrap();
        let second = a.admit(Weight::Heavy).await.unwrap();
        assert_eq!(a.reserved_bytes(), 4 << 20);
        let refused = a.admit(Weight::Light).await.err().unwrap();
        assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(refused.message.contains("4 MiB"), "{}", refused.message);
        drop(first);
        // Room again: a light query takes 1/64 of a heavy one's reservation.
        let light = a.admit(Weight::Light).await.unwrap();
        assert_eq!(a.reserved_bytes(), (2 << 20) + (32 << 10).max(UNIT));
        drop((second, light));
        assert_eq!(a.reserved_bytes(), 0);
    }

    #[test]
    fn merges_are_heavy_and_label_discovery_light() {
        assert_eq!(weight_of("/api/v1/merge"), Weight::Heavy);
        assert_eq!(
            weight_of("/querier.v1.QuerierService/SelectMergeStacktraces"),
            Weight::Heavy
        );
        assert_eq!(weight_of("/api/v1/labels"), Weight::Light);
        assert_eq!(weight_of("/pyroscope/labels"), Weight::Light);
        assert_eq!(weight_of("/settings.v1.SettingsService/Get"), Weight::Light);
        assert_eq!(weight_of("/version.v1.Version/Version"), Weight::Light);
        assert_eq!(
            weight_of("/querier.v1.QuerierService/SelectHeatmap"),
            Weight::Heavy
        );
        assert_eq!(
            weight_of("/querier.v1.QuerierService/LabelNames"),
            Weight::Light
        );
    }

    #[tokio::test]
    async fn a_waiting_query_runs_once_room_frees_up() {
        let a = std::sync::Arc::new(Admission::new(1 << 20, 1 << 20, Duration::from_secs(30)));
        let held = a.admit(Weight::Heavy).await.unwrap();
        let waiter = {
            let a = a.clone();
            tokio::spawn(async move { a.admit(Weight::Heavy).await.map(|_| ()).is_ok() })
        };
        tokio::task::yield_now().await;
        drop(held);
        assert!(waiter.await.unwrap());
    }
}
