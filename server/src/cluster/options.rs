//! What a process of a cluster runs with: its roles, when a writer acknowledges,
//! the bucket and the loops' intervals ([`ClusterOptions`], converted from the
//! `Cluster` flags of `profiledb serve` by `cli::serve::cluster`), and the node's id.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use profiledb_storage::{BucketConfig, MergePolicy};

/// Which roles a process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Roles {
    pub writer: bool,
    pub querier: bool,
    pub compactor: bool,
}

impl Roles {
    pub const ALL: Roles = Roles {
        writer: true,
        querier: true,
        compactor: true,
    };

    /// `all`, or a comma-separated list of `writer`, `querier`, `compactor`.
    pub fn parse(s: &str) -> anyhow::Result<Roles> {
        let mut r = Roles {
            writer: false,
            querier: false,
            compactor: false,
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "all" => r = Roles::ALL,
                "writer" => r.writer = true,
                "querier" => r.querier = true,
                "compactor" => r.compactor = true,
                other => bail!(
                    "unknown role {other:?} in --role {s:?}: use all, or a list of writer, querier, compactor"
                ),
            }
        }
        if !(r.writer || r.querier || r.compactor) {
            bail!("--role {s:?} names no role: use all, or a list of writer, querier, compactor");
        }
        Ok(r)
    }

    pub fn names(&self) -> String {
        let mut v = Vec::new();
        for (on, name) in [
            (self.writer, "writer"),
            (self.querier, "querier"),
            (self.compactor, "compactor"),
        ] {
            if on {
                v.push(name);
            }
        }
        v.join(",")
    }
}

/// When a writer acknowledges a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Ack {
    /// Once the segment holding it is in the bucket and its index (about one
    /// upload interval): losing the writer's disk loses nothing acknowledged.
    Bucket,
    /// Once it is in the writer's local WAL: faster, but a writer whose disk is
    /// lost for good loses up to one upload interval of acknowledged writes.
    Local,
}

/// The resolved cluster options.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    pub bucket: BucketConfig,
    pub roles: Roles,
    pub ack: Ack,
    pub upload_interval: Duration,
    pub sync_interval: Duration,
    pub querier_disk_bytes: u64,
    pub compaction_interval: Duration,
    pub merge: MergePolicy,
    pub gc_grace: Duration,
    pub lease_ttl: Duration,
    pub retention: Option<Duration>,
    pub compactor_pause: Option<Duration>,
    /// A querier older than this since its last good sync answers 503.
    pub max_sync_age: Duration,
    /// A querier's peers and when it splits a query across them.
    pub split: super::split::SplitOptions,
}

/// This process's name in object keys and leases: random at first start, kept in
/// the data directory so a restarted writer re-uploads under the same names.
pub fn node_id(data_dir: &Path) -> anyhow::Result<String> {
    let path = data_dir.join("NODE_ID");
    if let Ok(s) = std::fs::read_to_string(&path) {
        let s = s.trim();
        if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Ok(s.to_string());
        }
    }
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create {}", data_dir.display()))?;
    let id = random_id();
    let tmp = data_dir.join("NODE_ID.tmp");
    std::fs::write(&tmp, &id).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(id)
}

/// 16 hex digits from the clock and the process id, hashed: unique enough to
/// name a node (a collision would need two nodes started in the same nanosecond
/// with the same pid).
fn random_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_parse_lists_and_refuse_unknown_names() {
        assert_eq!(Roles::parse("all").unwrap(), Roles::ALL);
        let r = Roles::parse("writer, compactor").unwrap();
        assert!(r.writer && r.compactor && !r.querier);
        assert_eq!(r.names(), "writer,compactor");
        let e = Roles::parse("writer,reader").unwrap_err().to_string();
        assert!(e.contains("unknown role \"reader\""), "{e}");
        assert!(Roles::parse(",").is_err());
    }

    #[test]
    fn node_id_is_kept_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let a = node_id(dir.path()).unwrap();
        assert_eq!(a.len(), 16);
        assert_eq!(node_id(dir.path()).unwrap(), a);
        let other = tempfile::tempdir().unwrap();
        assert_ne!(node_id(other.path()).unwrap(), a);
    }
}
