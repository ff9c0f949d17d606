//! Property tests: generated profiles decode to the samples an independent
//! aggregation of the input gives.

use super::*;

fn arb_profile() -> impl Strategy<Value = Profile> {
    let n_types = 1usize..4;
    let n_funcs = 1usize..6;
    (n_types, n_funcs).prop_flat_map(|(n_types, n_funcs)| {
        let locations =
            prop::collection::vec(prop::collection::vec(1..=n_funcs as u64, 0..3), 1..8);
        locations.prop_flat_map(move |locs| {
            let n_locs = locs.len() as u64;
            let sample = (
                prop::collection::vec(1..=n_locs, 0..6),
                prop::collection::vec(prop_oneof![Just(0i64), -1000i64..1000], n_types),
                prop::option::of(0usize..3),
            );
            let samples = prop::collection::vec(sample, 0..20);
            (Just(locs), samples).prop_map(move |(locs, samples)| {
                let mut b = Builder::new();
                let types = ["cpu", "alloc_space", "contentions"];
                for t in types.iter().take(n_types) {
                    b = b.sample_type(t, "count");
                }
                for f in 1..=n_funcs as u64 {
                    b = b.function(f, &format!("f{f}"), "");
                }
                for (i, lines) in locs.iter().enumerate() {
                    let lines: Vec<(u64, i64)> = lines.iter().map(|&f| (f, 1)).collect();
                    // Ids are deliberately not positions.
                    b = b.location(100 + i as u64 * 3, 0, i as u64, &lines);
                }
                for (stack, values, label) in samples {
                    let stack: Vec<u64> = stack.iter().map(|&l| 100 + (l - 1) * 3).collect();
                    let labels: Vec<(&str, &str)> = match label {
                        Some(0) => vec![("k", "a")],
                        Some(1) => vec![("k", "b"), ("span_id", "s")],
                        Some(_) => vec![("j", "a")],
                        None => vec![],
                    };
                    b = b.labeled_sample(&stack, &values, &labels);
                }
                b.p
            })
        })
    })
}

/// A sample's kept string labels as (key, value) string indices.
type KeptLabels = Vec<(i64, i64)>;

proptest! {
    #[test]
    fn totals_per_type_match_a_direct_sum(profile in arb_profile()) {
        let batch = decode_pprof(&profile.encode_to_vec(), &opts()).unwrap();
        prop_assert_eq!(batch.validate(), Ok(()));
        let mut expected: BTreeMap<String, i64> = BTreeMap::new();
        let mut expected_frames: BTreeMap<String, usize> = BTreeMap::new();
        let depth = |ids: &[u64]| -> usize {
            ids.iter()
                .map(|id| {
                    let loc = profile.location.iter().find(|l| l.id == *id).unwrap();
                    loc.line.len().max(1)
                })
                .sum()
        };
        for (i, vt) in profile.sample_type.iter().enumerate() {
            let t = std::str::from_utf8(&profile.string_table[vt.r#type as usize]).unwrap();
            let name = infer_profile_name(
                profile
                    .sample_type
                    .iter()
                    .map(|v| std::str::from_utf8(&profile.string_table[v.r#type as usize]).unwrap()),
                None,
            );
            let id = format!("{name}:{t}:count::");
            // Pyroscope's rule: samples with a negative value are dropped, samples
            // with equal locations and kept string labels summed into one.
            let mut groups: BTreeMap<(Vec<u64>, KeptLabels), i64> = BTreeMap::new();
            for s in profile.sample.iter().filter(|s| s.value.iter().all(|&v| v >= 0)) {
                let labels = s
                    .label
                    .iter()
                    .filter(|l| profile.string_table[l.key as usize] != "span_id")
                    .map(|l| (l.key, l.str))
                    .collect();
                *groups.entry((s.location_id.clone(), labels)).or_default() += s.value[i];
            }
            for ((ids, _), sum) in groups {
                if sum != 0 {
                    *expected.entry(id.clone()).or_default() += sum;
                    *expected_frames.entry(id.clone()).or_default() += depth(&ids);
                }
            }
        }
        let mut got: BTreeMap<String, i64> = BTreeMap::new();
        let mut got_frames: BTreeMap<String, usize> = BTreeMap::new();
        for s in &batch.series {
            let id = s.labels.profile_type().unwrap().to_string();
            for x in &s.samples {
                *got.entry(id.clone()).or_default() += x.value;
                *got_frames.entry(id.clone()).or_default() += batch.stacks.get(x.stack).unwrap().len();
            }
            prop_assert!(s.labels.get("span_id").is_none());
        }
        prop_assert_eq!(got, expected);
        prop_assert_eq!(got_frames, expected_frames);
    }
}

/// Pyroscope's normalisation: samples with the same locations and string labels
/// become one (values summed; numeric labels such as Go heap's `bytes` do not
/// separate them), and a sample with any negative value is dropped whole.
#[test]
fn duplicate_stacks_merge_and_negative_samples_drop() {
    let b = Builder::new()
        .sample_type("alloc_objects", "count")
        .sample_type("alloc_space", "bytes")
        .period("space", "bytes", 524_288)
        .time_nanos(T0_NANOS)
        .function(1, "main", "main.go")
        .function(2, "alloc", "alloc.go")
        .location(1, 0, 0x1000, &[(1, 10)])
        .location(2, 0, 0x2000, &[(2, 20)])
        .sample(&[2, 1], &[3, 96])
        .sample(&[2, 1], &[1, 1024])
        .labeled_sample(&[2, 1], &[5, 500], &[("pod", "a")])
        .labeled_sample(&[2, 1], &[7, 700], &[("pod", "a")])
        .sample(&[2, 1], &[-1, 4096])
        .sample(&[1], &[2, 64])
        // Go heap samples differ only in a numeric `bytes` label.
        .num_label(1, "bytes", 1024);
    let batch = decode(&b).unwrap();
    let mut got: Vec<(String, Option<String>, Vec<String>, i64)> = Vec::new();
    for s in &batch.series {
        for x in &s.samples {
            got.push((
                s.labels.profile_type().unwrap().to_string(),
                s.labels.get("pod").map(str::to_string),
                names(&batch, x.stack),
                x.value,
            ));
        }
    }
    got.sort();
    let objects = "memory:alloc_objects:count:space:bytes".to_string();
    let space = "memory:alloc_space:bytes:space:bytes".to_string();
    let pod = Some("a".to_string());
    assert_eq!(
        got,
        vec![
            (objects.clone(), None, strs(&["main"]), 2),
            (objects.clone(), None, strs(&["main", "alloc"]), 4),
            (objects, pod.clone(), strs(&["main", "alloc"]), 12),
            (space.clone(), None, strs(&["main"]), 64),
            (space.clone(), None, strs(&["main", "alloc"]), 1120),
            (space, pod, strs(&["main", "alloc"]), 1200),
        ]
    );
}
