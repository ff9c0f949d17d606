//! The auth file: tenants, the SHA-256 digests of their tokens, and optional limit
//! overrides. YAML:
//!
//! ```yaml
//! tenants:
//!   team-a:
//!     tokens:
//!       - sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae
//!     limits:
//!       max_active_series: 10000
//! ```
//!
//! Tokens are stored as SHA-256 digests, not with a slow password hash: the tokens
//! `profiledb auth add-tenant` makes carry 256 random bits (and tokens given by hand
//! must be at least [`MIN_TOKEN_LEN`] characters), so a leaked file cannot be
//! brute-forced, while a slow hash (argon2, bcrypt) would cost tens of milliseconds
//! on every request or need a cache of plain tokens in memory.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use base64::Engine;
use profiledb_storage::TenantId;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::limits::Limits;

/// Shortest token accepted from a person (16 characters of a random alphabet are
/// 80+ bits; shorter ones could be guessed from their digest).
pub const MIN_TOKEN_LEN: usize = 16;

const DIGEST_PREFIX: &str = "sha256:";

/// The file as written.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthFile {
    #[serde(default)]
    pub tenants: BTreeMap<String, TenantEntry>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantEntry {
    /// `sha256:<64 hex digits>` per token.
    #[serde(default)]
    pub tokens: Vec<String>,
    /// Limits that differ from the server's defaults (names as in [`Limits`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<serde_json::Value>,
}

#[derive(Debug, thiserror::Error)]
pub enum AuthFileError {
    #[error("cannot read the auth file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write the auth file {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the auth file {path} is not valid: {reason}")]
    Syntax { path: PathBuf, reason: String },
    #[error("tenant {tenant:?} in the auth file: {reason}")]
    Tenant { tenant: String, reason: String },
    #[error("the same token is listed for tenants {first:?} and {second:?}")]
    SharedToken { first: String, second: String },
    #[error("a token must be at least {MIN_TOKEN_LEN} characters long")]
    WeakToken,
}

pub type TokenDigest = [u8; 32];

/// A token's digest.
pub fn digest(token: &str) -> TokenDigest {
    Sha256::digest(token.as_bytes()).into()
}

/// `sha256:<hex>`, as the file stores a token.
pub fn hash_token(token: &str) -> Result<String, AuthFileError> {
    if token.chars().count() < MIN_TOKEN_LEN {
        return Err(AuthFileError::WeakToken);
    }
    let hex: String = digest(token).iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{DIGEST_PREFIX}{hex}"))
}

fn parse_digest(text: &str) -> Option<TokenDigest> {
    let hex = text.trim().strip_prefix(DIGEST_PREFIX)?;
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// A new token: `pdb_` and 256 random bits in URL-safe base64.
pub fn generate_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(format!(
        "pdb_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    ))
}

/// The file read and checked: who each digest belongs to and each tenant's limits.
#[derive(Debug, Default)]
pub struct Credentials {
    pub tenants: HashMap<TenantId, HashSet<TokenDigest>>,
    pub owner: HashMap<TokenDigest, TenantId>,
    pub limits: HashMap<TenantId, Limits>,
}

impl AuthFile {
    pub fn read(path: &Path) -> Result<AuthFile, AuthFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| AuthFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        if text.trim().is_empty() {
            return Ok(AuthFile::default());
        }
        serde_norway::from_str(&text).map_err(|e| AuthFileError::Syntax {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
    }

    /// Writes the file whole through a temporary file, so a reader (a reload)
    /// never sees half of it.
    pub fn write(&self, path: &Path) -> Result<(), AuthFileError> {
        let err = |source| AuthFileError::Write {
            path: path.to_path_buf(),
            source,
        };
        let text =
            serde_norway::to_string(self).map_err(|e| err(std::io::Error::other(e.to_string())))?;
        let tmp = path.with_extension("tmp");
        std::fs::write(
            &tmp,
            format!("# profiledb auth file (tokens are SHA-256 digests)\n{text}"),
        )
        .map_err(err)?;
        std::fs::rename(&tmp, path).map_err(err)
    }

    /// Adds `digest_text` to `tenant`, creating the tenant if it is new.
    pub fn add_token(&mut self, tenant: &str, digest_text: String) -> Result<(), AuthFileError> {
        TenantId::new(tenant).map_err(|e| AuthFileError::Tenant {
            tenant: tenant.to_string(),
            reason: e.to_string(),
        })?;
        self.tenants
            .entry(tenant.to_string())
            .or_default()
            .tokens
            .push(digest_text);
        Ok(())
    }

    /// Checks every entry and builds the lookup tables; `defaults` are the limits
    /// a tenant's overrides apply over.
    pub fn compile(&self, defaults: &Limits) -> Result<Credentials, AuthFileError> {
        let mut c = Credentials::default();
        for (name, entry) in &self.tenants {
            let bad = |reason: String| AuthFileError::Tenant {
                tenant: name.clone(),
                reason,
            };
            let tenant = TenantId::new(name).map_err(|e| bad(e.to_string()))?;
            let mut digests = HashSet::new();
            for t in &entry.tokens {
                let d = parse_digest(t).ok_or_else(|| {
                    bad(format!(
                        "{t:?} is not a token digest (sha256: and 64 hex digits; \
                         `profiledb auth hash-token` makes one)"
                    ))
                })?;
                if let Some(first) = c.owner.insert(d, tenant.clone()) {
                    if first != tenant {
                        return Err(AuthFileError::SharedToken {
                            first: first.to_string(),
                            second: name.clone(),
                        });
                    }
                }
                digests.insert(d);
            }
            if let Some(o) = &entry.limits {
                let l = defaults
                    .with_overrides(o)
                    .map_err(|e| bad(format!("invalid limits: {e}")))?;
                c.limits.insert(tenant.clone(), l);
            }
            c.tenants.insert(tenant, digests);
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_sha256_hex() {
        // SHA-256 of "0123456789abcdef".
        assert_eq!(
            hash_token("0123456789abcdef").unwrap(),
            "sha256:9f9f5111f7b27a781f1f1ddde5ebc2dd2b796bfc7365c9c28b548e564176929f"
        );
        assert!(matches!(hash_token("short"), Err(AuthFileError::WeakToken)));
        let t = generate_token().unwrap();
        assert!(t.starts_with("pdb_") && t.len() == 4 + 43, "{t}");
        assert_ne!(t, generate_token().unwrap());
    }

    #[test]
    fn a_file_compiles_to_owners_and_limits() {
        let a = hash_token("token-of-team-a-0001").unwrap();
        let yaml = format!(
            "tenants:\n  team-a:\n    tokens: ['{a}']\n    limits:\n      max_nodes: 64\n  team-b:\n    tokens: []\n"
        );
        let file: AuthFile = serde_norway::from_str(&yaml).unwrap();
        let c = file.compile(&Limits::default()).unwrap();
        let team_a = TenantId::new("team-a").unwrap();
        assert_eq!(c.owner.get(&digest("token-of-team-a-0001")), Some(&team_a));
        assert_eq!(c.limits[&team_a].max_nodes, 64);
        assert_eq!(c.tenants.len(), 2);

        let shared = format!("tenants:\n  x:\n    tokens: ['{a}']\n  y:\n    tokens: ['{a}']\n");
        let file: AuthFile = serde_norway::from_str(&shared).unwrap();
        assert!(matches!(
            file.compile(&Limits::default()),
            Err(AuthFileError::SharedToken { .. })
        ));
        let plain: AuthFile =
            serde_norway::from_str("tenants:\n  x:\n    tokens: ['my-plain-token-123']\n").unwrap();
        assert!(matches!(
            plain.compile(&Limits::default()),
            Err(AuthFileError::Tenant { .. })
        ));
        let limits: AuthFile =
            serde_norway::from_str("tenants:\n  x:\n    limits: {max_sries: 1}\n").unwrap();
        let e = limits.compile(&Limits::default()).unwrap_err().to_string();
        assert!(e.contains("max_sries"), "{e}");
    }
}
