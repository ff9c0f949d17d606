//! Merged call trees as pprof profiles (served as `google.v1.Profile` by Connect:
//! the same message as `perftools.profiles.Profile`).
//!
//! Each distinct frame name becomes one function and one location, so a sample's
//! location list is its stack, leaf first; the totals equal the flame graph's.

use profiledb_proto::gzip::Compression;
use profiledb_proto::pprof::Profile;
use profiledb_proto::ProfileBuilder;
use profiledb_storage::CallTree;

use crate::http::request::profile_type_parts;

pub fn profile_from_tree(
    tree: &CallTree,
    profile_type: &str,
    time_ms: i64,
    duration_ms: i64,
) -> Profile {
    let [_, st, su, pt, pu] = profile_type_parts(profile_type);
    let mut b = ProfileBuilder::new();
    b.add_sample_type(
        if st.is_empty() { "samples" } else { st },
        if su.is_empty() { "count" } else { su },
    );
    if !pt.is_empty() {
        b.set_period(pt, pu, 0);
    }
    b.set_time(
        time_ms.saturating_mul(1_000_000),
        duration_ms.max(0).saturating_mul(1_000_000),
    );
    let nodes = tree.nodes();
    // Tree name id → pprof location id (0 means "not yet"), so the builder hashes
    // each name once rather than once per frame.
    let mut ids: Vec<u64> = Vec::new();
    for (i, n) in nodes.iter().enumerate().skip(1) {
        if n.self_value == 0 {
            continue;
        }
        let mut stack = Vec::new();
        let mut cur = i as u32;
        while cur != 0 {
            let Some(node) = nodes.get(cur as usize) else {
                break;
            };
            let name = node.name as usize;
            if ids.len() <= name {
                ids.resize(name + 1, 0);
            }
            if ids[name] == 0 {
                let function = b.function(tree.name(node.name));
                ids[name] = b.location(0, 0, Some(function));
            }
            stack.push(ids[name]);
            cur = node.parent;
        }
        b.add_sample(stack, vec![n.self_value], []);
    }
    b.finish()
}

pub fn gzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    profiledb_proto::gzip::gzip(bytes, Compression::default())
}
