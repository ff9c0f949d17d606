//! The Connect services Grafana calls besides the querier: `version.v1.Version`
//! (which query API generation we speak), `capabilities.v1.FeatureFlagsService` (which
//! optional features a client may use) and `settings.v1.SettingsService` (named values
//! stored per tenant; the Profiles Drilldown app keeps its preferences there).
//!
//! A POST to any other `package.vN.Service/Method` path answers Connect's
//! `unimplemented` naming it ([`unimplemented`], the router's fallback for such paths),
//! so a newer client learns what we lack instead of reading a generic 404.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::sync::Mutex;

use super::connect::{ConnectError, ConnectResult, Ctx, Unary};
use super::proto::{capabilities::v1 as caps, settings::v1 as set, version::v1 as ver};
use crate::http::request::blocking;
use crate::http::{tenant_of, AppRef};

/// The querier API generation we implement (Pyroscope's current one).
pub const QUERIER_API_VERSION: u64 = 1;

pub fn routes() -> Router<AppRef> {
    Router::new()
        .route("/version.v1.Version/{method}", post(version))
        .route(
            "/capabilities.v1.FeatureFlagsService/{method}",
            post(capabilities),
        )
        .route("/settings.v1.SettingsService/{method}", post(settings))
}

async fn unary<'a>(
    state: AppRef,
    headers: &'a HeaderMap,
    body: &'a Bytes,
) -> ConnectResult<Unary<'a>> {
    let tenant = tenant_of(headers)?;
    Ok(Unary {
        ctx: Ctx { state, tenant },
        headers,
        body,
    })
}

async fn version(
    State(state): State<AppRef>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> ConnectResult<Response> {
    let u = unary(state, &headers, &body).await?;
    match method.as_str() {
        "Version" => {
            u.run("version.v1.VersionRequest", "version.v1.VersionResponse", {
                |_: Ctx, _: ver::VersionRequest| async {
                    Ok(ver::VersionResponse {
                        querier_api: QUERIER_API_VERSION,
                    })
                }
            })
            .await
        }
        other => Err(unimplemented(&format!("version.v1.Version/{other}"))),
    }
}

/// Every optional Pyroscope feature a client may ask about, and whether we have it.
/// We implement neither the v2 storage layer nor the ruler; label names are limited
/// to Prometheus' `[a-zA-Z_][a-zA-Z0-9_]*`.
const FEATURES: [(&str, bool, &str); 4] = [
    ("v2StorageLayer", false, "Pyroscope's v2 storage layer"),
    (
        "pyroscopeRuler",
        false,
        "Recording rules that export metrics from profiles",
    ),
    (
        "pyroscopeRulerFunctions",
        false,
        "Per-function recording rules",
    ),
    ("utf8LabelNames", false, "UTF-8 label names"),
];

async fn capabilities(
    State(state): State<AppRef>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> ConnectResult<Response> {
    let u = unary(state, &headers, &body).await?;
    match method.as_str() {
        "GetFeatureFlags" => {
            u.run(
                "capabilities.v1.GetFeatureFlagsRequest",
                "capabilities.v1.GetFeatureFlagsResponse",
                |_: Ctx, _: caps::GetFeatureFlagsRequest| async {
                    Ok(caps::GetFeatureFlagsResponse {
                        feature_flags: FEATURES
                            .iter()
                            .map(|&(name, enabled, about)| caps::FeatureFlag {
                                name: name.into(),
                                enabled,
                                description: Some(about.into()),
                                documentation_url: None,
                            })
                            .collect(),
                    })
                },
            )
            .await
        }
        other => Err(unimplemented(&format!(
            "capabilities.v1.FeatureFlagsService/{other}"
        ))),
    }
}

async fn settings(
    State(state): State<AppRef>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> ConnectResult<Response> {
    let u = unary(state, &headers, &body).await?;
    match method.as_str() {
        "Get" => {
            u.run(
                "settings.v1.GetSettingsRequest",
                "settings.v1.GetSettingsResponse",
                get_settings,
            )
            .await
        }
        "Set" => {
            u.run(
                "settings.v1.SetSettingsRequest",
                "settings.v1.SetSettingsResponse",
                set_setting,
            )
            .await
        }
        "Delete" => {
            u.run(
                "settings.v1.DeleteSettingsRequest",
                "settings.v1.DeleteSettingsResponse",
                delete_setting,
            )
            .await
        }
        other => Err(unimplemented(&format!(
            "settings.v1.SettingsService/{other}"
        ))),
    }
}

/// A setting as the catalog stores it.
#[derive(Serialize, Deserialize)]
struct Stored {
    value: String,
    modified_at: i64,
}

/// Longest setting value accepted; the Drilldown app stores a small JSON document.
pub const MAX_SETTING_BYTES: usize = 64 * 1024;

/// Serialises read-compare-write of settings, so of two concurrent writes of one
/// setting the older cannot land after the newer.
static WRITES: Mutex<()> = Mutex::new(());

async fn get_settings(
    ctx: Ctx,
    _: set::GetSettingsRequest,
) -> ConnectResult<set::GetSettingsResponse> {
    let (store, tenant) = (ctx.state.store()?, ctx.tenant);
    let docs = blocking(move || Ok(store.catalog().settings(&tenant)?)).await?;
    let settings = docs
        .into_iter()
        .filter_map(|(name, doc)| {
            let s: Stored = serde_json::from_slice(&doc).ok()?;
            Some(set::Setting {
                name,
                value: s.value,
                modified_at: s.modified_at,
            })
        })
        .collect();
    Ok(set::GetSettingsResponse { settings })
}

async fn set_setting(
    ctx: Ctx,
    r: set::SetSettingsRequest,
) -> ConnectResult<set::SetSettingsResponse> {
    let Some(mut s) = r.setting else {
        return Err(ConnectError::invalid("setting is required"));
    };
    if s.name.is_empty() {
        return Err(ConnectError::invalid("setting.name must not be empty"));
    }
    if s.value.len() > MAX_SETTING_BYTES {
        return Err(ConnectError::invalid(format!(
            "setting {:?} is {} bytes; at most {MAX_SETTING_BYTES} are stored",
            s.name,
            s.value.len()
        )));
    }
    if s.modified_at <= 0 {
        s.modified_at = profiledb_storage::now_ms();
    }
    let (store, tenant) = (ctx.state.store()?, ctx.tenant);
    blocking(move || {
        let _one_writer = WRITES
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let catalog = store.catalog();
        let newer = catalog
            .setting(&tenant, &s.name)?
            .and_then(|doc| serde_json::from_slice::<Stored>(&doc).ok())
            .filter(|old| old.modified_at > s.modified_at);
        if let Some(old) = newer {
            return Ok(Err(ConnectError::new(
                "already_exists",
                format!(
                    "setting {:?} was modified at {} ms, after this write's {} ms: \
                     read it again and retry",
                    s.name, old.modified_at, s.modified_at
                ),
            )));
        }
        let doc = Stored {
            value: s.value.clone(),
            modified_at: s.modified_at,
        };
        let json = serde_json::to_vec(&doc)
            .map_err(|e| crate::error::ApiError::internal(e.to_string()))?;
        catalog.put_setting(&tenant, &s.name, &json)?;
        Ok(Ok(set::SetSettingsResponse { setting: Some(s) }))
    })
    .await?
}

async fn delete_setting(
    ctx: Ctx,
    r: set::DeleteSettingsRequest,
) -> ConnectResult<set::DeleteSettingsResponse> {
    if r.name.is_empty() {
        return Err(ConnectError::invalid("name must not be empty"));
    }
    let (store, tenant) = (ctx.state.store()?, ctx.tenant);
    blocking(move || {
        let _one_writer = WRITES
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        Ok(store.catalog().remove_setting(&tenant, &r.name)?)
    })
    .await?;
    Ok(set::DeleteSettingsResponse {})
}

/// Whether `path` names a Connect procedure: `/package.vN.Service/Method`.
pub fn is_procedure(path: &str) -> bool {
    let Some((service, method)) = path.trim_start_matches('/').split_once('/') else {
        return false;
    };
    let mut parts = service.split('.');
    let ident =
        |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    let Some(name) = parts.next_back() else {
        return false;
    };
    let packages: Vec<&str> = parts.collect();
    ident(method)
        && !method.contains('/')
        && ident(name)
        && name.starts_with(|c: char| c.is_ascii_uppercase())
        && packages.len() >= 2
        && packages.iter().all(|p| ident(p))
}

/// The answer to a procedure we do not serve.
pub fn unimplemented(path: &str) -> ConnectError {
    ConnectError::new(
        "unimplemented",
        format!("{} is not implemented", path.trim_start_matches('/')),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn procedure_paths_are_recognised() {
        for p in [
            "/vcs.v1.VCSService/GetFile",
            "/adhocprofiles.v1.AdHocProfileService/Upload",
            "/settings.v1.RecordingRulesService/ListRecordingRules",
        ] {
            assert!(is_procedure(p), "{p}");
        }
        for p in [
            "/api/v1/render",
            "/pyroscope/render",
            "/ingest",
            "/Service/Method",
            "/a.b.Service/Method/extra",
            "/a.v1.service/Method",
        ] {
            assert!(!is_procedure(p), "{p}");
        }
        let e = unimplemented("/vcs.v1.VCSService/GetFile");
        assert_eq!(e.code, "unimplemented");
        assert_eq!(e.message, "vcs.v1.VCSService/GetFile is not implemented");
    }
}
