//! The lifecycle suite's generated fleet: the profile types a push decodes into and
//! one host's batch over an interval.

use super::*;

/// (series name, profile type id, value per drawn sample) — the series a push of the
/// fleet's CPU profile (every 10 s) and heap profile (every minute) decodes into.
pub(super) const CPU_TYPES: [(&str, &str, i64); 2] = [
    (
        "process_cpu",
        "process_cpu:samples:count:cpu:nanoseconds",
        1,
    ),
    (
        "process_cpu",
        "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
        10_000_000,
    ),
];
pub(super) const HEAP_TYPES: [(&str, &str, i64); 2] = [
    ("memory", "memory:alloc_objects:count:space:bytes", 3),
    ("memory", "memory:alloc_space:bytes:space:bytes", 524_288),
];

/// One batch: one host's CPU (and heap) profiles of every service over `[from, to)`.
pub(super) fn host_batch(
    fleet: &Fleet,
    host: usize,
    from: i64,
    to: i64,
    draws: usize,
) -> (Batch, [i64; 4]) {
    let mut b = Batch::new(TenantId::default());
    let mut totals = [0i64; 4];
    let mut functions: HashMap<u32, u32> = HashMap::new();
    let mut locations: HashMap<(usize, u32), u32> = HashMap::new();
    let mut stacks: HashMap<(usize, u32), u32> = HashMap::new();
    let mut series: HashMap<(usize, usize, &'static str), usize> = HashMap::new();
    let mut locs = Vec::new();
    for s in 0..fleet.cfg.services {
        b.symbols.mappings.push(Mapping {
            file: format!("/usr/bin/{}", fleet.service_name(s)),
            build_id: String::new(),
            ..Mapping::default()
        });
        let mapping = (b.symbols.mappings.len() - 1) as u32;
        let mut ts = from;
        while ts < to {
            let heap = ts % 60_000 == 0;
            let profiles = [
                Some((fleet.draw(s, host, ts, draws), &CPU_TYPES, 0)),
                heap.then(|| (fleet.draw(s, host, ts ^ 0x5a5a, draws / 4), &HEAP_TYPES, 2)),
            ];
            for (drawn, types, base) in profiles.into_iter().flatten() {
                for &(stack, count) in &drawn.counts {
                    let idx = match stacks.get(&(s, stack)) {
                        Some(&i) => i,
                        None => {
                            locs.clear();
                            for &f in fleet.stack(s, stack).unwrap_or(&[]) {
                                let loc = *locations.entry((s, f)).or_insert_with(|| {
                                    let function = *functions.entry(f).or_insert_with(|| {
                                        b.symbols.functions.push(Function {
                                            name: fleet.functions[f as usize].as_str().into(),
                                            file: Default::default(),
                                        });
                                        (b.symbols.functions.len() - 1) as u32
                                    });
                                    b.symbols.locations.push(Location {
                                        function: Some(function),
                                        mapping: Some(mapping),
                                        address: 0x40_0000 + u64::from(f) * 64,
                                        line: f % 500 + 1,
                                    });
                                    (b.symbols.locations.len() - 1) as u32
                                });
                                locs.push(loc);
                            }
                            let i = b.stacks.push(&locs);
                            stacks.insert((s, stack), i);
                            i
                        }
                    };
                    let version = fleet.version(ts);
                    for (k, &(name, ptype, scale)) in types.iter().enumerate() {
                        let si = *series.entry((s, base + k, version)).or_insert_with(|| {
                            let mut l = Labels::new(
                                fleet
                                    .labels(name, s, host, ts)
                                    .into_iter()
                                    .map(|p| (p.name, p.value)),
                            );
                            l.set(NAME_LABEL, name);
                            l.set(PROFILE_TYPE_LABEL, ptype);
                            b.series.push(SeriesSamples {
                                labels: l,
                                samples: Vec::new(),
                            });
                            b.series.len() - 1
                        });
                        let value = count * scale;
                        b.series[si].samples.push(Sample {
                            timestamp_ms: ts,
                            stack: idx,
                            value,
                        });
                        totals[base + k] += value;
                    }
                }
            }
            ts += STEP_MS;
        }
    }
    (b, totals)
}

pub(super) fn all_types() -> impl Iterator<Item = &'static str> {
    CPU_TYPES.iter().chain(&HEAP_TYPES).map(|t| t.1)
}
