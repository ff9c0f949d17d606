//! Tenant ids: the names under which a tenant's data is kept apart.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Maximum length of a tenant id.
pub const MAX_TENANT_LEN: usize = 64;

/// A validated tenant id: 1–64 characters out of `[A-Za-z0-9_.-]`, not `.` or `..`.
///
/// Tenant ids become directory names, so anything that could escape the data
/// directory is rejected at construction.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TenantId(String);

/// Why a tenant id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid tenant id {id:?}: {reason}")]
pub struct InvalidTenant {
    /// The refused id.
    pub id: String,
    /// Which rule it breaks.
    pub reason: &'static str,
}

impl TenantId {
    /// The tenant used when a request names none (Pyroscope's convention).
    pub const DEFAULT: &'static str = "anonymous";

    /// Validates `id`.
    pub fn new(id: impl Into<String>) -> Result<Self, InvalidTenant> {
        let id = id.into();
        let reason = if id.is_empty() {
            Some("must not be empty")
        } else if id.len() > MAX_TENANT_LEN {
            Some("longer than 64 characters")
        } else if id == "." || id == ".." {
            Some("must not be . or ..")
        } else if !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        {
            Some("only letters, digits, '_', '-' and '.' are allowed")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(InvalidTenant { id, reason }),
            None => Ok(TenantId(id)),
        }
    }

    /// The [`TenantId::DEFAULT`] tenant.
    pub fn default_tenant() -> Self {
        TenantId(Self::DEFAULT.to_string())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for TenantId {
    fn default() -> Self {
        Self::default_tenant()
    }
}

impl TryFrom<String> for TenantId {
    type Error = InvalidTenant;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        TenantId::new(value)
    }
}

impl From<TenantId> for String {
    fn from(value: TenantId) -> Self {
        value.0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_ids_reject_path_characters() {
        assert!(TenantId::new("team-a_1.prod").is_ok());
        for bad in ["", ".", "..", "a/b", "a\\b", "x y", &"a".repeat(65)] {
            assert!(TenantId::new(bad).is_err(), "{bad:?} accepted");
        }
    }
}
