//! Ad-hoc profiles: a profile file uploaded to look at (flame graph, top
//! functions) and to compare, with stored data or with another upload, without
//! writing it to the tenant's series.
//!
//! Uploads are decoded by the ingest decoders into one call tree per profile type
//! and held in this process's memory, per tenant, bounded by count and bytes
//! (per tenant and for the process) and forgotten after a time to live. They are
//! not durable: a restart forgets them, and in a cluster an upload lives on the
//! process that took it.

pub mod http;
mod profile;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use parking_lot::Mutex;
use profiledb_storage::TenantId;
use serde::Serialize;
use std::sync::Arc;

pub use profile::{AdhocProfile, TypedTree};

use crate::error::ApiError;

/// The bounds of the ad-hoc profiles a process holds.
#[derive(Clone, Debug)]
pub struct AdhocOptions {
    /// Profiles one tenant may hold at once.
    pub max_profiles: usize,
    /// Bytes one tenant's profiles may hold in memory (decoded).
    pub max_bytes: u64,
    /// Bytes every tenant's profiles together may hold.
    pub total_bytes: u64,
    /// Largest file accepted, as sent (before any decompression).
    pub max_file_bytes: usize,
    /// How long an upload is kept after it arrived.
    pub ttl: Duration,
}

impl Default for AdhocOptions {
    fn default() -> Self {
        AdhocOptions {
            max_profiles: 16,
            max_bytes: 128 << 20,
            total_bytes: 256 << 20,
            max_file_bytes: 32 << 20,
            ttl: Duration::from_secs(3600),
        }
    }
}

/// Why an ad-hoc profile was not found or not kept.
#[derive(Debug, thiserror::Error)]
pub enum AdhocError {
    #[error("no ad-hoc profile {0:?}: unknown, deleted or expired")]
    NotFound(String),
    #[error(
        "the tenant already holds {max} ad-hoc profiles (--adhoc-max-profiles): \
         delete one or wait for one to expire"
    )]
    TooMany { max: usize },
    #[error(
        "this profile needs {adding} bytes in memory and the tenant's ad-hoc profiles \
         hold {held} of at most {max} (--adhoc-max-mb): delete one or wait for one to expire"
    )]
    TenantBytes { held: u64, adding: u64, max: u64 },
    #[error(
        "this profile needs {adding} bytes in memory and the ad-hoc profiles of all \
         tenants hold {held} of at most {max} (--adhoc-total-mb)"
    )]
    TotalBytes { held: u64, adding: u64, max: u64 },
}

impl From<AdhocError> for ApiError {
    fn from(e: AdhocError) -> Self {
        let (status, code) = match e {
            AdhocError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            AdhocError::TooMany { .. } => (StatusCode::TOO_MANY_REQUESTS, "resource_exhausted"),
            AdhocError::TenantBytes { .. } | AdhocError::TotalBytes { .. } => {
                (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
            }
        };
        ApiError::new(status, code, e.to_string())
    }
}

/// What the API says about one held profile.
#[derive(Clone, Debug, Serialize)]
pub struct Meta {
    pub id: String,
    /// The name the upload gave (its file name in the UI).
    pub name: String,
    /// RFC 3339.
    pub created: String,
    pub expires: String,
    /// The file's size as sent.
    pub file_bytes: u64,
    /// Memory held for it (what the byte limits count).
    pub bytes: u64,
    pub profile_types: Vec<TypeMeta>,
}

/// One profile type of an upload.
#[derive(Clone, Debug, Serialize)]
pub struct TypeMeta {
    pub profile_type: String,
    pub total: i64,
    pub samples: u64,
}

struct Entry {
    meta: Meta,
    expires: Instant,
    profile: Arc<AdhocProfile>,
}

/// The ad-hoc profiles of every tenant.
pub struct AdhocProfiles {
    options: AdhocOptions,
    inner: Mutex<Inner>,
    /// Uploads read and decoded at once: each holds its file and its decoded batch
    /// (a gzip'd file decompresses up to the ingest limit), outside the memory
    /// budget's ingest share, so their number is bounded here.
    pub(crate) decoding: tokio::sync::Semaphore,
}

/// Uploads read and decoded at once (see [`AdhocProfiles::decoding`]).
pub const DECODING_AT_ONCE: usize = 2;

#[derive(Default)]
struct Inner {
    tenants: HashMap<TenantId, Vec<Entry>>,
    count: usize,
    bytes: u64,
}

impl Inner {
    /// Forgets every expired profile (of all tenants: a tenant that never comes
    /// back must not keep its memory).
    fn sweep(&mut self, now: Instant) {
        let (mut count, mut bytes) = (0, 0);
        self.tenants.retain(|_, list| {
            list.retain(|e| e.expires > now);
            count += list.len();
            bytes += list.iter().map(|e| e.meta.bytes).sum::<u64>();
            !list.is_empty()
        });
        (self.count, self.bytes) = (count, bytes);
    }
}

impl AdhocProfiles {
    pub fn new(options: AdhocOptions) -> Self {
        AdhocProfiles {
            options,
            inner: Mutex::new(Inner::default()),
            decoding: tokio::sync::Semaphore::new(DECODING_AT_ONCE),
        }
    }

    pub fn options(&self) -> &AdhocOptions {
        &self.options
    }

    /// A refusal when `tenant` already holds as many profiles as it may.
    pub fn check_count(&self, tenant: &TenantId) -> Result<(), AdhocError> {
        let mut inner = self.inner.lock();
        inner.sweep(Instant::now());
        let held = inner.tenants.get(tenant).map_or(0, Vec::len);
        match held >= self.options.max_profiles {
            true => Err(AdhocError::TooMany {
                max: self.options.max_profiles,
            }),
            false => Ok(()),
        }
    }

    /// Keeps `profile` for `tenant` if the limits allow, under a new id.
    pub fn insert(
        &self,
        tenant: &TenantId,
        name: String,
        file_bytes: u64,
        profile: AdhocProfile,
    ) -> Result<Meta, AdhocError> {
        let now = Instant::now();
        let adding = profile.heap_bytes();
        let o = &self.options;
        let mut inner = self.inner.lock();
        inner.sweep(now);
        let held = inner.tenants.get(tenant).map_or(&[][..], |l| &l[..]);
        let tenant_bytes: u64 = held.iter().map(|e| e.meta.bytes).sum();
        if held.len() >= o.max_profiles {
            return Err(AdhocError::TooMany {
                max: o.max_profiles,
            });
        }
        if tenant_bytes + adding > o.max_bytes {
            return Err(AdhocError::TenantBytes {
                held: tenant_bytes,
                adding,
                max: o.max_bytes,
            });
        }
        if inner.bytes + adding > o.total_bytes {
            return Err(AdhocError::TotalBytes {
                held: inner.bytes,
                adding,
                max: o.total_bytes,
            });
        }
        let created = profiledb_storage::now_ms();
        let ttl_ms = i64::try_from(o.ttl.as_millis()).unwrap_or(i64::MAX);
        let meta = Meta {
            id: new_id(),
            name,
            created: crate::time::rfc3339(created),
            expires: crate::time::rfc3339(created.saturating_add(ttl_ms)),
            file_bytes,
            bytes: adding,
            profile_types: profile
                .types
                .iter()
                .map(|t| TypeMeta {
                    profile_type: t.profile_type.clone(),
                    total: t.tree.total(),
                    samples: t.samples,
                })
                .collect(),
        };
        inner.count += 1;
        inner.bytes += adding;
        inner
            .tenants
            .entry(tenant.clone())
            .or_default()
            .push(Entry {
                meta: meta.clone(),
                // A TTL past what an Instant holds never expires in practice.
                expires: now
                    .checked_add(o.ttl)
                    .unwrap_or(now + Duration::from_secs(u64::from(u32::MAX))),
                profile: Arc::new(profile),
            });
        Ok(meta)
    }

    /// The profile `id` of `tenant`.
    pub fn get(
        &self,
        tenant: &TenantId,
        id: &str,
    ) -> Result<(Meta, Arc<AdhocProfile>), AdhocError> {
        let mut inner = self.inner.lock();
        inner.sweep(Instant::now());
        inner
            .tenants
            .get(tenant)
            .and_then(|l| l.iter().find(|e| e.meta.id == id))
            .map(|e| (e.meta.clone(), e.profile.clone()))
            .ok_or_else(|| AdhocError::NotFound(id.to_string()))
    }

    /// Every profile `tenant` holds, oldest first.
    pub fn list(&self, tenant: &TenantId) -> Vec<Meta> {
        let mut inner = self.inner.lock();
        inner.sweep(Instant::now());
        inner
            .tenants
            .get(tenant)
            .map(|l| l.iter().map(|e| e.meta.clone()).collect())
            .unwrap_or_default()
    }

    /// Forgets the profile `id` of `tenant`.
    pub fn remove(&self, tenant: &TenantId, id: &str) -> Result<(), AdhocError> {
        let mut inner = self.inner.lock();
        let list = inner
            .tenants
            .get_mut(tenant)
            .ok_or_else(|| AdhocError::NotFound(id.to_string()))?;
        let before = list.len();
        list.retain(|e| e.meta.id != id);
        if list.len() == before {
            return Err(AdhocError::NotFound(id.to_string()));
        }
        inner.sweep(Instant::now());
        Ok(())
    }

    /// Profiles and bytes held, all tenants (after forgetting the expired ones).
    pub fn held(&self) -> (usize, u64) {
        let mut inner = self.inner.lock();
        inner.sweep(Instant::now());
        (inner.count, inner.bytes)
    }

    pub fn render_metrics(&self, out: &mut String) {
        let (count, bytes) = self.held();
        crate::metrics::family(
            out,
            "profiledb_adhoc_profiles",
            "gauge",
            "Ad-hoc profiles held in memory, all tenants (bounded by --adhoc-max-profiles per tenant).",
            count as u64,
        );
        crate::metrics::family(
            out,
            "profiledb_adhoc_bytes",
            "gauge",
            "Bytes of ad-hoc profiles held in memory, all tenants (bounded by --adhoc-total-mb).",
            bytes,
        );
    }
}

/// 16 random hex digits: ids are scoped by tenant, and not guessable across
/// uploads.
fn new_id() -> String {
    let mut b = [0u8; 8];
    if getrandom::fill(&mut b).is_err() {
        // No entropy source: still unique within the process.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        b = (n ^ profiledb_storage::now_ms() as u64).to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}
