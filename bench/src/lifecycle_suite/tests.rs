use super::*;

fn answers_with(total: i64, stack_value: i64) -> Answers {
    let mut a = Answers {
        totals: BTreeMap::new(),
        folded: BTreeMap::new(),
    };
    for t in all_types() {
        a.totals.insert(t, total);
        a.folded
            .insert(t, BTreeMap::from([("main;work".to_string(), stack_value)]));
    }
    a
}

#[test]
fn changed_answers_fail_the_suite() {
    let before = answers_with(10, 10);
    assert!(same_answers("x", &before, &answers_with(10, 10)).is_ok());
    let e = same_answers("x", &before, &answers_with(11, 10)).unwrap_err();
    assert!(e.to_string().contains("merge total"), "{e}");
    let e = same_answers("x", &before, &answers_with(10, 9)).unwrap_err();
    assert!(e.to_string().contains("main;work"), "{e}");
}

#[test]
fn batches_carry_every_profile_type() {
    let fleet = Fleet::new(FleetConfig {
        seed: 1,
        services: 2,
        stacks_per_service: 50,
        draws_per_profile: 40,
        zipf_s: 1.1,
        deploy_ms: T0_MS + 30_000,
    });
    let (b, totals) = host_batch(&fleet, 3, T0_MS, T0_MS + 60_000, 40);
    b.validate().unwrap();
    assert!(totals.iter().all(|&t| t > 0), "{totals:?}");
    let mut types: Vec<&str> = b
        .series
        .iter()
        .filter_map(|s| s.labels.profile_type())
        .collect();
    types.sort_unstable();
    types.dedup();
    assert_eq!(types.len(), 4);
    // 2 services × 2 CPU types × (v1, v2) + 2 services × 2 heap types (one minute, at T0: v1).
    assert_eq!(b.series.len(), 12);
    let sum: i64 = b
        .series
        .iter()
        .flat_map(|s| &s.samples)
        .map(|x| x.value)
        .sum();
    assert_eq!(sum, totals.iter().sum::<i64>());
}
