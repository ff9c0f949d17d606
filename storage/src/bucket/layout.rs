//! Where each kind of object lives, relative to the bucket prefix:
//!
//! ```text
//! tenants/<tenant>/index.json            the tenant's segment index
//! tenants/<tenant>/segments/<name>.seg   a segment (docs/format.md), written once
//! leases/<name>.json                     a compactor's claim on some work
//! ```
//! A tenant's objects share its prefix, so a tenant can be listed, copied or
//! deleted alone.

/// The prefix under which every tenant has its own.
pub const TENANTS: &str = "tenants/";

/// The key of segment `name` of `tenant`.
pub fn segment_key(tenant: &str, name: &str) -> String {
    format!("{TENANTS}{tenant}/segments/{name}.seg")
}

/// The key of `tenant`'s index.
pub fn index_key(tenant: &str) -> String {
    format!("{TENANTS}{tenant}/index.json")
}

/// The key of lease `name`.
pub fn lease_key(name: &str) -> String {
    format!("leases/{name}.json")
}

/// The tenant a key under [`TENANTS`] belongs to.
pub(super) fn tenant_of(key: &str) -> Option<&str> {
    key.strip_prefix(TENANTS)?.split('/').next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_put_each_tenant_under_its_own_prefix() {
        assert_eq!(segment_key("t1", "w-01"), "tenants/t1/segments/w-01.seg");
        assert_eq!(index_key("t1"), "tenants/t1/index.json");
        assert_eq!(lease_key("compact/t1/0"), "leases/compact/t1/0.json");
        assert_eq!(tenant_of(&segment_key("t1", "x")), Some("t1"));
        assert_eq!(tenant_of("leases/x.json"), None);
    }
}
