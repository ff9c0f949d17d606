//! Our flame graph layout against Pyroscope's golden `SelectMergeStacktraces` JSON
//! (`../shared/fixtures/pyroscope/flamegraph.json`): rebuilding the tree from its
//! levels and laying it out again must give the same levels, node for node.

use std::path::PathBuf;

use profiledb_storage::{flamegraph, tree_from_levels};

#[path = "support/external.rs"]
mod external;

#[test]
fn golden_flamegraph_layout() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/pyroscope/flamegraph.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) => {
            return external::missing("the shared fixtures", format!("{}: {e}", path.display()))
        }
    };
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let fg = &v["flamegraph"];
    let names: Vec<String> = fg["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect();
    let levels: Vec<Vec<i64>> = fg["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            l["values"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|x| x.as_str().unwrap().parse().unwrap())
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect();
    let total: i64 = fg["total"].as_str().unwrap().parse().unwrap();
    let max_self: i64 = fg["maxSelf"].as_str().unwrap().parse().unwrap();

    let tree = tree_from_levels(&names, &levels).expect("fixture levels are consistent");
    let ours = flamegraph(&tree, 0);
    assert_eq!(ours.total, total);
    assert_eq!(ours.max_self, max_self);
    assert_eq!(ours.levels.len(), levels.len());
    // Name indexes are assigned in different orders; compare by name.
    for (d, (a, b)) in ours.levels.iter().zip(&levels).enumerate() {
        assert_eq!(a.len(), b.len(), "level {d}");
        for (qa, qb) in a.chunks(4).zip(b.chunks(4)) {
            assert_eq!(&qa[..3], &qb[..3], "level {d}");
            assert_eq!(
                ours.names[qa[3] as usize], names[qb[3] as usize],
                "level {d}"
            );
        }
    }
}
