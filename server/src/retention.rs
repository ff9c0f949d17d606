//! What a retention age would do before it is set: the segments it deletes and a
//! warning when the tenant has no data (most likely a misspelt name, which would
//! otherwise be saved silently). The admin API's dry run and `profiledb retention
//! --dry-run` both read it.

use profiledb_storage::segment::SegmentMeta;
use profiledb_storage::{Store, TenantId};

/// The effect of a maximum age on one tenant at one instant.
pub struct Preview {
    /// Segments the age deletes (all of their data is older than it).
    pub expired: Vec<SegmentMeta>,
    /// Set when the tenant has no data here.
    pub warning: Option<String>,
}

impl Preview {
    pub fn bytes(&self) -> u64 {
        self.expired.iter().map(|m| m.size_bytes).sum()
    }
}

/// What `max_age_ms` (`None`: keep forever) would delete of `tenant` at `now_ms`.
pub fn preview(store: &Store, tenant: &TenantId, max_age_ms: Option<i64>, now_ms: i64) -> Preview {
    let known = store.tenants();
    let warning = (!known.contains(tenant)).then(|| {
        let names: Vec<&str> = known.iter().map(|t| t.as_str()).collect();
        format!(
            "tenant {:?} has no data (tenants with data: {})",
            tenant.as_str(),
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        )
    });
    let expired = match max_age_ms {
        None => Vec::new(),
        Some(age) => store
            .segments()
            .into_iter()
            .filter(|m| m.tenant == *tenant && m.expired(age, now_ms))
            .collect(),
    };
    Preview { expired, warning }
}
