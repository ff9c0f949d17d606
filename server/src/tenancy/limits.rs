//! Per-tenant limits: their names, values and defaults, how a tenant's overrides
//! apply over the defaults, and the refusal every exceeded limit answers with.

use std::fmt;

use axum::http::StatusCode;
use profiledb_storage::TenantId;
use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// One limit, named as in flags, the auth file, error messages and `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LimitName {
    IngestionRateBytes,
    IngestionRateProfiles,
    MaxActiveSeries,
    MaxLabelsPerSeries,
    MaxQueryRange,
    MaxNodes,
    MaxConcurrentQueries,
}

impl LimitName {
    pub const ALL: [LimitName; 7] = [
        LimitName::IngestionRateBytes,
        LimitName::IngestionRateProfiles,
        LimitName::MaxActiveSeries,
        LimitName::MaxLabelsPerSeries,
        LimitName::MaxQueryRange,
        LimitName::MaxNodes,
        LimitName::MaxConcurrentQueries,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LimitName::IngestionRateBytes => "ingestion_rate_bytes",
            LimitName::IngestionRateProfiles => "ingestion_rate_profiles",
            LimitName::MaxActiveSeries => "max_active_series",
            LimitName::MaxLabelsPerSeries => "max_labels_per_series",
            LimitName::MaxQueryRange => "max_query_range_secs",
            LimitName::MaxNodes => "max_nodes",
            LimitName::MaxConcurrentQueries => "max_concurrent_queries",
        }
    }

    /// Rates, the series count and concurrency pass with time (429, retry later);
    /// the others refuse the request itself (400: retrying cannot help).
    fn transient(self) -> bool {
        matches!(
            self,
            LimitName::IngestionRateBytes
                | LimitName::IngestionRateProfiles
                | LimitName::MaxActiveSeries
                | LimitName::MaxConcurrentQueries
        )
    }
}

impl fmt::Display for LimitName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tenant's limits. 0 means unlimited everywhere.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Request bytes (as sent, before decompression) per second, refilled steadily.
    pub ingestion_rate_bytes: u64,
    /// Bytes a tenant may send at once after being idle (the bucket size); 0 means
    /// the rate's one second.
    pub ingestion_burst_bytes: u64,
    /// Profiles per second (an `/ingest` upload is one; a Push counts its raw
    /// profiles).
    pub ingestion_rate_profiles: u64,
    /// Profiles at once after being idle; 0 means the rate's one second.
    pub ingestion_burst_profiles: u64,
    /// Distinct series (profile type + labels) written within the active window.
    pub max_active_series: u64,
    /// Labels of one series, the reserved ones included.
    pub max_labels_per_series: u64,
    /// Longest query window, in seconds.
    pub max_query_range_secs: u64,
    /// Largest `max_nodes` a query may ask for (a request without one gets
    /// `min(8192, max_nodes)`).
    pub max_nodes: u64,
    /// Queries of one tenant running at once.
    pub max_concurrent_queries: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            ingestion_rate_bytes: 64 << 20,
            ingestion_burst_bytes: 256 << 20,
            ingestion_rate_profiles: 1_000,
            ingestion_burst_profiles: 5_000,
            max_active_series: 100_000,
            max_labels_per_series: 30,
            max_query_range_secs: 0,
            max_nodes: 0,
            max_concurrent_queries: 32,
        }
    }
}

impl Limits {
    /// No limit at all.
    pub fn unlimited() -> Self {
        Limits {
            ingestion_rate_bytes: 0,
            ingestion_burst_bytes: 0,
            ingestion_rate_profiles: 0,
            ingestion_burst_profiles: 0,
            max_active_series: 0,
            max_labels_per_series: 0,
            max_query_range_secs: 0,
            max_nodes: 0,
            max_concurrent_queries: 0,
        }
    }

    /// These limits with some fields replaced (a tenant's `limits:` in the auth
    /// file); an unknown field or a value that is not a count is an error.
    pub fn with_overrides(&self, overrides: &serde_json::Value) -> Result<Limits, InvalidLimits> {
        let serde_json::Value::Object(fields) = overrides else {
            return Err(InvalidLimits::NotAMap);
        };
        let mut merged = serde_json::to_value(self)?;
        if let serde_json::Value::Object(base) = &mut merged {
            for (k, v) in fields {
                base.insert(k.clone(), v.clone());
            }
        }
        Ok(serde_json::from_value(merged)?)
    }
}

/// A tenant's `limits:` that do not apply.
#[derive(Debug, thiserror::Error)]
pub enum InvalidLimits {
    /// Not a map at all.
    #[error("limits must be a map of limit names to numbers")]
    NotAMap,
    /// A field no limit has, or a value that is not a count; serde says which.
    #[error(transparent)]
    Field(#[from] serde_json::Error),
}

/// A request refused by one of its tenant's limits.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what}: tenant {tenant} is limited to {limit} = {value}")]
pub struct LimitExceeded {
    pub tenant: TenantId,
    pub limit: LimitName,
    /// The limit's configured value.
    pub value: u64,
    /// What the request asked for, in words.
    pub what: String,
    /// Seconds until the request could pass, for the rate limits.
    pub retry_after_secs: Option<u64>,
}

impl From<LimitExceeded> for ApiError {
    fn from(e: LimitExceeded) -> Self {
        let transient = e.limit.transient();
        let retry = e.retry_after_secs;
        let err = if transient {
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "resource_exhausted",
                e.to_string(),
            )
        } else {
            ApiError::bad_request(e.to_string())
        };
        match retry {
            Some(s) => err.with_retry_after(s),
            None => err,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_replace_only_the_named_fields() {
        let base = Limits::default();
        let o = serde_json::json!({"max_active_series": 3, "max_nodes": 100});
        let l = base.with_overrides(&o).unwrap();
        assert_eq!((l.max_active_series, l.max_nodes), (3, 100));
        assert_eq!(l.ingestion_rate_bytes, base.ingestion_rate_bytes);
        let bad = base.with_overrides(&serde_json::json!({"max_series": 3}));
        let bad = bad.unwrap_err();
        assert!(matches!(bad, InvalidLimits::Field(_)), "{bad}");
        assert!(bad.to_string().contains("unknown field `max_series`"));
        let neg = base.with_overrides(&serde_json::json!({"max_nodes": -1}));
        assert!(matches!(neg, Err(InvalidLimits::Field(_))));
        let list = base.with_overrides(&serde_json::json!([3]));
        assert!(matches!(list, Err(InvalidLimits::NotAMap)));
    }

    #[test]
    fn refusals_answer_by_kind() {
        let e = LimitExceeded {
            tenant: TenantId::new("a").unwrap(),
            limit: LimitName::IngestionRateBytes,
            value: 100,
            what: "the upload of 300 bytes exceeds the rate".into(),
            retry_after_secs: Some(2),
        };
        let api = ApiError::from(e.clone());
        assert_eq!(api.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(api.retry_after_secs, Some(2));
        assert_eq!(
            api.message,
            "the upload of 300 bytes exceeds the rate: tenant a is limited to ingestion_rate_bytes = 100"
        );
        let nodes = ApiError::from(LimitExceeded {
            limit: LimitName::MaxNodes,
            retry_after_secs: None,
            ..e
        });
        assert_eq!(nodes.status, StatusCode::BAD_REQUEST);
        assert_eq!(nodes.retry_after_secs, None);
    }
}
