//! The sled catalog: segment metadata, tenant settings, alert rules and states, and
//! named client settings per tenant.
//!
//! The catalog is an index, not the source of truth: every segment's footer carries
//! its metadata, so [`crate::Store::open`] reconciles the catalog with the files and
//! can rebuild it from scratch if sled cannot open it. Alert rules and alert states
//! are the exception: they exist only here (a `rules.yaml` given to `serve` is the way
//! to restore rules after a rebuild). The catalog stores them as opaque JSON documents
//! keyed by rule name; the server owns their schema. Named client settings (what
//! Grafana's `settings.v1` API stores) are likewise only here, opaque documents keyed
//! by tenant and name.

use std::path::Path;

use serde::{Deserialize, Serialize};
use tracing::warn;

use crate::error::{Result, StorageError};
use crate::model::TenantId;
use crate::segment::SegmentMeta;

/// Per-tenant settings kept in the catalog.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct TenantSettings {
    /// Data older than this is deleted; `None` keeps it forever.
    #[serde(default)]
    pub max_age_ms: Option<i64>,
}

/// The sled catalog of one data directory (see the module docs).
pub struct Catalog {
    db: sled::Db,
    segments: sled::Tree,
    /// Per-tenant settings (retention): key = tenant id, value = JSON.
    tenants: sled::Tree,
    /// Alert rules: key = rule name, value = the rule as JSON.
    alert_rules: sled::Tree,
    /// Alert evaluation state and delivery bookkeeping: key = rule name, value = JSON.
    alert_state: sled::Tree,
    /// Client settings: key = tenant id, 0x00, setting name; value = a document.
    settings: sled::Tree,
}

fn err(e: impl std::fmt::Display) -> StorageError {
    StorageError::Catalog(e.to_string())
}

impl Catalog {
    /// Opens the catalog at `path`. If sled refuses (a damaged catalog), the directory
    /// is moved aside and an empty catalog is created; the caller then rebuilds it from
    /// the segment files.
    pub(crate) fn open(path: &Path) -> Result<(Catalog, bool)> {
        let open = |p: &Path| {
            sled::Config::new()
                .path(p)
                // The catalog is small; keep sled's cache and flush cadence modest.
                .cache_capacity(16 << 20)
                .flush_every_ms(Some(1000))
                .open()
        };
        // A catalog still locked by an instance that is shutting down in this process
        // (sled's flusher thread lets go of the lock shortly after the drop) is not a
        // damaged one: moving it aside would lose what only it holds (tenant
        // settings, alert rules). I/O errors are retried for a few seconds and then
        // reported; only sled's own corruption verdict leads to a rebuild.
        let mut attempt = 0;
        let first = loop {
            match open(path) {
                Err(sled::Error::Io(e)) if attempt < 50 => {
                    attempt += 1;
                    if attempt == 1 {
                        warn!(error = %e, "catalog busy; retrying");
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                other => break other,
            }
        };
        let (db, rebuilt) = match first {
            Ok(db) => (db, false),
            Err(e @ sled::Error::Io(_)) => {
                return Err(StorageError::Catalog(format!(
                    "cannot open the catalog at {}: {e}",
                    path.display()
                )))
            }
            Err(e) => {
                let aside = path.with_extension(format!(
                    "damaged-{}",
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs())
                ));
                warn!(error = %e, moved_to = %aside.display(), "catalog cannot be opened; rebuilding it from segment files");
                std::fs::rename(path, &aside).map_err(|e| StorageError::io(path, e))?;
                (open(path).map_err(err)?, true)
            }
        };
        let segments = db.open_tree("segments").map_err(err)?;
        let tenants = db.open_tree("tenants").map_err(err)?;
        let alert_rules = db.open_tree("alert_rules").map_err(err)?;
        let alert_state = db.open_tree("alert_state").map_err(err)?;
        let settings = db.open_tree("settings").map_err(err)?;
        Ok((
            Catalog {
                db,
                segments,
                tenants,
                alert_rules,
                alert_state,
                settings,
            },
            rebuilt,
        ))
    }

    pub(crate) fn insert(&self, meta: &SegmentMeta) -> Result<()> {
        let v = serde_json::to_vec(meta).map_err(err)?;
        self.segments
            .insert(meta.id.to_be_bytes(), v)
            .map_err(err)?;
        Ok(())
    }

    pub(crate) fn remove(&self, id: u64) -> Result<()> {
        self.segments.remove(id.to_be_bytes()).map_err(err)?;
        Ok(())
    }

    /// Makes every change so far durable.
    pub fn flush(&self) -> Result<()> {
        self.db.flush().map_err(err)?;
        Ok(())
    }

    /// All segment entries. Undecodable entries are dropped with a warning; the file
    /// scan at open re-adopts their segments.
    pub(crate) fn segments(&self) -> Result<Vec<SegmentMeta>> {
        let mut out = Vec::new();
        for kv in self.segments.iter() {
            let (k, v) = kv.map_err(err)?;
            match serde_json::from_slice::<SegmentMeta>(&v) {
                Ok(m) => out.push(m),
                Err(e) => {
                    warn!(key = ?k, error = %e, "dropping undecodable catalog entry");
                    self.segments.remove(k).map_err(err)?;
                }
            }
        }
        Ok(out)
    }

    /// Settings of `tenant` (defaults when none were stored).
    pub(crate) fn tenant_settings(&self, tenant: &TenantId) -> Result<TenantSettings> {
        match self.tenants.get(tenant.as_str()).map_err(err)? {
            None => Ok(TenantSettings::default()),
            Some(v) => serde_json::from_slice(&v).map_err(err),
        }
    }

    /// Stores the settings of `tenant` (durably).
    pub(crate) fn set_tenant_settings(&self, tenant: &TenantId, s: &TenantSettings) -> Result<()> {
        let v = serde_json::to_vec(s).map_err(err)?;
        self.tenants.insert(tenant.as_str(), v).map_err(err)?;
        self.flush()
    }

    /// Every tenant with stored settings. Undecodable entries are skipped with a
    /// warning (they behave as defaults).
    pub(crate) fn all_tenant_settings(&self) -> Result<Vec<(TenantId, TenantSettings)>> {
        let mut out = Vec::new();
        for kv in self.tenants.iter() {
            let (k, v) = kv.map_err(err)?;
            let name = String::from_utf8_lossy(&k).into_owned();
            match (
                TenantId::new(name.clone()),
                serde_json::from_slice::<TenantSettings>(&v),
            ) {
                (Ok(t), Ok(s)) => out.push((t, s)),
                _ => warn!(tenant = %name, "ignoring undecodable tenant settings"),
            }
        }
        Ok(out)
    }

    /// Every stored alert rule as (name, JSON document), ordered by name.
    pub fn alert_rules(&self) -> Result<Vec<(String, Vec<u8>)>> {
        documents(&self.alert_rules)
    }

    /// Stores (or replaces) the rule `name`, durably.
    pub fn put_alert_rule(&self, name: &str, json: &[u8]) -> Result<()> {
        self.alert_rules.insert(name, json).map_err(err)?;
        self.flush()
    }

    /// Removes the rule `name` and its state, durably. Returns whether it existed.
    pub fn remove_alert_rule(&self, name: &str) -> Result<bool> {
        let existed = self.alert_rules.remove(name).map_err(err)?.is_some();
        self.alert_state.remove(name).map_err(err)?;
        self.flush()?;
        Ok(existed)
    }

    /// Every stored alert state as (rule name, JSON document), ordered by name.
    pub fn alert_states(&self) -> Result<Vec<(String, Vec<u8>)>> {
        documents(&self.alert_state)
    }

    /// Stores the state of rule `name`, durably (flushed before returning, so a
    /// delivery recorded here survives a crash).
    pub fn put_alert_state(&self, name: &str, json: &[u8]) -> Result<()> {
        self.alert_state.insert(name, json).map_err(err)?;
        self.flush()
    }
}

/// Key of a tenant's setting: tenant ids cannot hold a NUL byte, so the prefix of one
/// tenant never covers another's.
fn setting_key(tenant: &TenantId, name: &str) -> Vec<u8> {
    let mut k = setting_prefix(tenant);
    k.extend_from_slice(name.as_bytes());
    k
}

fn setting_prefix(tenant: &TenantId) -> Vec<u8> {
    let mut k = tenant.as_str().as_bytes().to_vec();
    k.push(0);
    k
}

impl Catalog {
    /// Every setting of `tenant` as (name, document), ordered by name.
    pub fn settings(&self, tenant: &TenantId) -> Result<Vec<(String, Vec<u8>)>> {
        let prefix = setting_prefix(tenant);
        let mut out = Vec::new();
        for kv in self.settings.scan_prefix(&prefix) {
            let (k, v) = kv.map_err(err)?;
            let name = String::from_utf8_lossy(&k[prefix.len()..]).into_owned();
            out.push((name, v.to_vec()));
        }
        Ok(out)
    }

    /// `tenant`'s setting `name`, if stored.
    pub fn setting(&self, tenant: &TenantId, name: &str) -> Result<Option<Vec<u8>>> {
        let v = self.settings.get(setting_key(tenant, name)).map_err(err)?;
        Ok(v.map(|v| v.to_vec()))
    }

    /// Stores (or replaces) `tenant`'s setting `name`, durably.
    pub fn put_setting(&self, tenant: &TenantId, name: &str, doc: &[u8]) -> Result<()> {
        self.settings
            .insert(setting_key(tenant, name), doc)
            .map_err(err)?;
        self.flush()
    }

    /// Removes `tenant`'s setting `name`, durably. Returns whether it existed.
    pub fn remove_setting(&self, tenant: &TenantId, name: &str) -> Result<bool> {
        let existed = self
            .settings
            .remove(setting_key(tenant, name))
            .map_err(err)?
            .is_some();
        self.flush()?;
        Ok(existed)
    }
}

fn documents(tree: &sled::Tree) -> Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    for kv in tree.iter() {
        let (k, v) = kv.map_err(err)?;
        out.push((String::from_utf8_lossy(&k).into_owned(), v.to_vec()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_per_tenant_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog");
        let (a, b) = (TenantId::new("a").unwrap(), TenantId::new("ab").unwrap());
        {
            let (c, _) = Catalog::open(&path).unwrap();
            c.put_setting(&a, "x", b"1").unwrap();
            c.put_setting(&a, "y", b"2").unwrap();
            c.put_setting(&b, "x", b"3").unwrap();
            c.put_setting(&a, "x", b"4").unwrap();
        }
        let (c, _) = Catalog::open(&path).unwrap();
        let got = c.settings(&a).unwrap();
        assert_eq!(
            got,
            vec![("x".into(), b"4".to_vec()), ("y".into(), b"2".to_vec())]
        );
        assert_eq!(c.settings(&b).unwrap(), vec![("x".into(), b"3".to_vec())]);
        assert_eq!(c.setting(&a, "x").unwrap(), Some(b"4".to_vec()));
        assert_eq!(c.setting(&b, "y").unwrap(), None);
        assert!(c.remove_setting(&a, "x").unwrap());
        assert!(!c.remove_setting(&a, "x").unwrap());
        assert_eq!(c.settings(&a).unwrap().len(), 1);
        assert!(c
            .settings(&TenantId::new("none").unwrap())
            .unwrap()
            .is_empty());
    }

    #[test]
    fn alert_documents_survive_reopen_and_removal_takes_the_state() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog");
        {
            let (c, _) = Catalog::open(&path).unwrap();
            c.put_alert_rule("b", br#"{"name":"b"}"#).unwrap();
            c.put_alert_rule("a", br#"{"name":"a"}"#).unwrap();
            c.put_alert_state("a", b"{}").unwrap();
        }
        let (c, rebuilt) = Catalog::open(&path).unwrap();
        assert!(!rebuilt);
        let names: Vec<String> = c
            .alert_rules()
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(
            c.alert_states().unwrap(),
            vec![("a".to_string(), b"{}".to_vec())]
        );
        assert!(c.remove_alert_rule("a").unwrap());
        assert!(!c.remove_alert_rule("a").unwrap());
        assert!(c.alert_states().unwrap().is_empty());
    }
}
