use super::*;
use proptest::prelude::*;

proptest! {
    /// Splitting through the label index gives the groups the per-series
    /// lookup gives (series lacking a key, or with an empty value, together).
    #[test]
    fn index_split_equals_per_series(
        sets in prop::collection::vec(prop::collection::vec((0u8..3, 0u8..4), 0..4), 1..30),
        keys in prop::collection::vec(0u8..4, 0..3),
        selected in prop::collection::vec(any::<bool>(), 30),
    ) {
        let name = |n: u8| format!("k{n}");
        // Value 0 is the empty string.
        let value = |v: u8| if v == 0 { String::new() } else { format!("v{v}") };
        let mut index = LabelIndex::default();
        let mut labels = Vec::new();
        for (sid, set) in sets.iter().enumerate() {
            let pairs: std::collections::BTreeMap<String, String> =
                set.iter().map(|&(n, v)| (name(n), value(v))).collect();
            index.add_series(sid as u32);
            for (n, v) in &pairs {
                index.add(sid as u32, n, v);
            }
            labels.push(Labels::new(pairs));
        }
        let series: RoaringBitmap = (0..sets.len() as u32)
            .filter(|&s| selected[s as usize])
            .collect();
        let keys: Vec<String> = keys.iter().map(|&k| name(k)).collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let canon = |g: Vec<(Vec<String>, RoaringBitmap)>| {
            let mut m: std::collections::BTreeMap<Vec<String>, Vec<u32>> = Default::default();
            for (k, set) in g {
                m.entry(k).or_default().extend(set.iter());
            }
            for v in m.values_mut() {
                v.sort_unstable();
            }
            m
        };
        let want = canon(split_per_series(|s| labels.get(s as usize), &series, &keys));
        match split_by_index(&index, &series, &keys) {
            Some(got) => prop_assert_eq!(canon(got), want),
            // Only a key with more values than selected series falls back.
            None => prop_assert!(keys
                .iter()
                .any(|k| index.values(k).count() as u64 > series.len())),
        }
    }
}
