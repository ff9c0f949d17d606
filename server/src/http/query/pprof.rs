//! Merged call trees as pprof profiles (`google.v1.Profile`, pprof's field numbers).
//!
//! Each distinct frame name becomes one function and one location, so a sample's
//! location list is its stack, leaf first; the totals equal the flame graph's.

use std::io::Write;

use profiledb_storage::CallTree;
use std::collections::HashMap as FxHashMap;

use super::proto::google::v1 as pb;

struct Strings {
    table: Vec<String>,
    ids: FxHashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Strings {
            table: Vec::new(),
            ids: FxHashMap::new(),
        };
        s.id("");
        s
    }

    fn id(&mut self, v: &str) -> i64 {
        if let Some(&i) = self.ids.get(v) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(v.to_string());
        self.ids.insert(v.to_string(), i);
        i
    }
}

/// `name:sample_type:sample_unit:period_type:period_unit` → its five parts.
pub fn profile_type_parts(id: &str) -> [&str; 5] {
    let mut p = id.split(':');
    let mut out = [""; 5];
    for slot in out.iter_mut() {
        *slot = p.next().unwrap_or("");
    }
    out
}

pub fn profile_from_tree(
    tree: &CallTree,
    profile_type: &str,
    time_ms: i64,
    duration_ms: i64,
) -> pb::Profile {
    let [_, st, su, pt, pu] = profile_type_parts(profile_type);
    let mut s = Strings::new();
    let sample_type = vec![pb::ValueType {
        r#type: s.id(if st.is_empty() { "samples" } else { st }),
        unit: s.id(if su.is_empty() { "count" } else { su }),
    }];
    let period_type = (!pt.is_empty()).then(|| pb::ValueType {
        r#type: s.id(pt),
        unit: s.id(pu),
    });
    let nodes = tree.nodes();
    // Tree name id → pprof function/location id (1-based; 0 means "not yet").
    let mut ids: Vec<u64> = Vec::new();
    let mut functions = Vec::new();
    let mut locations = Vec::new();
    let mut samples = Vec::new();
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
                let id = functions.len() as u64 + 1;
                let sid = s.id(tree.name(node.name));
                functions.push(pb::Function {
                    id,
                    name: sid,
                    system_name: sid,
                    ..Default::default()
                });
                locations.push(pb::Location {
                    id,
                    line: vec![pb::Line {
                        function_id: id,
                        ..Default::default()
                    }],
                    ..Default::default()
                });
                ids[name] = id;
            }
            stack.push(ids[name]);
            cur = node.parent;
        }
        samples.push(pb::Sample {
            location_id: stack,
            value: vec![n.self_value],
            label: Vec::new(),
        });
    }
    pb::Profile {
        sample_type,
        sample: samples,
        location: locations,
        function: functions,
        string_table: s.table,
        time_nanos: time_ms.saturating_mul(1_000_000),
        duration_nanos: duration_ms.max(0).saturating_mul(1_000_000),
        period_type,
        period: 0,
        ..Default::default()
    }
}

pub fn gzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes)?;
    enc.finish()
}
