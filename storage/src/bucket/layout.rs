//! Where each kind of object lives, relative to the bucket prefix:
//!
//! ```text
//! tenants/<tenant>/index/log/<generation>.json         one change to the index, written once
//! tenants/<tenant>/index/checkpoint/<generation>.json  the index as of a generation
//! tenants/<tenant>/index.json                          the index of releases before the log (read once, as a checkpoint)
//! tenants/<tenant>/segments/<name>.seg                 a segment (docs/format.md), written once
//! leases/<name>.json                                   a compactor's claim on some work
//! ```
//! A tenant's objects share its prefix, so a tenant can be listed, copied or
//! deleted alone. Generations are written with 20 digits, so key order is
//! generation order and a LIST after a key returns the newer ones.

/// The prefix under which every tenant has its own.
pub const TENANTS: &str = "tenants/";

/// The key of segment `name` of `tenant`.
pub fn segment_key(tenant: &str, name: &str) -> String {
    format!("{TENANTS}{tenant}/segments/{name}.seg")
}

/// The key of `tenant`'s index document of releases before the log.
pub fn index_key(tenant: &str) -> String {
    format!("{TENANTS}{tenant}/index.json")
}

/// The prefix of `tenant`'s log entries.
pub(super) fn log_prefix(tenant: &str) -> String {
    format!("{TENANTS}{tenant}/index/log/")
}

/// The key of generation `g` of `tenant`'s log.
pub(super) fn log_key(tenant: &str, g: u64) -> String {
    format!("{}{g:020}.json", log_prefix(tenant))
}

/// The prefix of `tenant`'s checkpoints.
pub(super) fn checkpoint_prefix(tenant: &str) -> String {
    format!("{TENANTS}{tenant}/index/checkpoint/")
}

/// The key of `tenant`'s checkpoint at generation `g`.
pub(super) fn checkpoint_key(tenant: &str, g: u64) -> String {
    format!("{}{g:020}.json", checkpoint_prefix(tenant))
}

/// The generation a log or checkpoint key names.
pub(super) fn generation_of(key: &str) -> Option<u64> {
    key.rsplit('/').next()?.strip_suffix(".json")?.parse().ok()
}

/// The key of lease `name`.
pub fn lease_key(name: &str) -> String {
    format!("leases/{name}.json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_put_each_tenant_under_its_own_prefix() {
        assert_eq!(segment_key("t1", "w-01"), "tenants/t1/segments/w-01.seg");
        assert_eq!(index_key("t1"), "tenants/t1/index.json");
        assert_eq!(lease_key("compact/t1/0"), "leases/compact/t1/0.json");
        assert_eq!(
            log_key("t1", 42),
            "tenants/t1/index/log/00000000000000000042.json"
        );
        assert_eq!(generation_of(&log_key("t1", 42)), Some(42));
        assert_eq!(generation_of(&checkpoint_key("t1", 7)), Some(7));
        // Key order is generation order.
        assert!(log_key("t", 9) < log_key("t", 10));
    }
}
