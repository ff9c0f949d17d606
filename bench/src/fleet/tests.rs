use super::*;

fn cfg() -> FleetConfig {
    FleetConfig {
        seed: 7,
        services: 2,
        stacks_per_service: 500,
        draws_per_profile: 200,
        zipf_s: 1.1,
        deploy_ms: 1_000_000,
    }
}

impl Fleet {
    /// The profile [`Fleet::pprof`] writes, built as `prost` structs and encoded
    /// by `prost`: the reference its bytes are checked against.
    fn pprof_by_prost(
        &self,
        service: usize,
        drawn: &Drawn,
        ts_ms: i64,
        period: (&str, &str, i64),
        types: &[(&str, &str, i64)],
    ) -> Vec<u8> {
        let Some(svc) = self.services.get(service) else {
            return Vec::new();
        };
        let mut strings: Vec<Bytes> = vec![Bytes::new()];
        let mut sidx: HashMap<String, i64> = HashMap::new();
        let mut s = |x: &str, strings: &mut Vec<Bytes>| -> i64 {
            if let Some(&i) = sidx.get(x) {
                return i;
            }
            let i = strings.len() as i64;
            strings.push(Bytes::copy_from_slice(x.as_bytes()));
            sidx.insert(x.to_string(), i);
            i
        };
        let sample_type = types
            .iter()
            .map(|(t, u, _)| pprof::ValueType {
                r#type: s(t, &mut strings),
                unit: s(u, &mut strings),
            })
            .collect();
        let period_type = Some(pprof::ValueType {
            r#type: s(period.0, &mut strings),
            unit: s(period.1, &mut strings),
        });
        // One function and one location per distinct function used, in the
        // order of their ids: the function's index in the service + 1.
        let id_of = |f: u32| {
            svc.records
                .functions
                .iter()
                .position(|&g| g == f)
                .map(|k| k as u64 + 1)
        };
        let mut used: Vec<(u64, u32)> = drawn
            .counts
            .iter()
            .filter_map(|&(stack, _)| svc.stacks.get(stack as usize))
            .flatten()
            .filter_map(|&f| Some((id_of(f)?, f)))
            .collect();
        used.sort_unstable();
        used.dedup();
        let mut functions = Vec::new();
        let mut locations = Vec::new();
        for &(id, f) in &used {
            let name_i = strings.len() as i64;
            strings.push(
                self.functions
                    .get(f as usize)
                    .map_or(Bytes::from_static(b"?"), |n| {
                        Bytes::copy_from_slice(n.as_bytes())
                    }),
            );
            functions.push(pprof::Function {
                id,
                name: name_i,
                system_name: name_i,
                filename: 0,
                start_line: 0,
            });
            locations.push(pprof::Location {
                id,
                mapping_id: 1,
                address: 0x40_0000 + u64::from(f) * 64,
                line: vec![pprof::Line {
                    function_id: id,
                    line: i64::from(f % 500) + 1,
                    column: 0,
                }],
                is_folded: false,
            });
        }
        let mut samples = Vec::with_capacity(drawn.counts.len());
        for &(stack, count) in &drawn.counts {
            let Some(st) = svc.stacks.get(stack as usize) else {
                continue;
            };
            samples.push(pprof::Sample {
                location_id: st.iter().rev().filter_map(|&f| id_of(f)).collect(),
                value: types.iter().map(|t| count * t.2).collect(),
                label: Vec::new(),
            });
        }
        let bin = strings.len() as i64;
        strings.push(Bytes::copy_from_slice(
            format!("/usr/bin/{}", svc.name).as_bytes(),
        ));
        let p = pprof::Profile {
            sample_type,
            sample: samples,
            mapping: vec![pprof::Mapping {
                id: 1,
                memory_start: 0x40_0000,
                memory_limit: 0x4000_0000,
                filename: bin,
                has_functions: true,
                ..Default::default()
            }],
            location: locations,
            function: functions,
            string_table: strings,
            time_nanos: ts_ms * 1_000_000,
            duration_nanos: 10_000_000_000,
            period_type,
            period: period.2,
            ..Default::default()
        };
        p.encode_to_vec()
    }
}

#[test]
fn pprof_bytes_are_what_prost_writes() {
    let f = Fleet::new(cfg());
    let cpu = ("cpu", "nanoseconds", 10_000_000);
    let cpu_types = [("samples", "count", 1), ("cpu", "nanoseconds", 10_000_000)];
    // A type whose unit repeats an earlier string, and one sample type only.
    let heap_types = [("alloc_space", "bytes", 524_288), ("inuse", "bytes", 1)];
    let mut checked = 0;
    for service in 0..2 {
        for (host, ts) in [(0, 20_000), (3, 2_000_000), (9, 7)] {
            let d = f.draw(service, host, ts, 300);
            assert!(!d.counts.is_empty());
            for types in [&cpu_types[..], &heap_types[..], &cpu_types[..1]] {
                assert_eq!(
                    f.pprof(service, &d, ts, cpu, types).to_vec(),
                    f.pprof_by_prost(service, &d, ts, cpu, types),
                    "service {service}, host {host}, {types:?}"
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 18);
    let empty = Drawn { counts: Vec::new() };
    assert_eq!(
        f.pprof(1, &empty, 5, cpu, &cpu_types).to_vec(),
        f.pprof_by_prost(1, &empty, 5, cpu, &cpu_types)
    );
}

/// What the server decodes from a generated profile is the drawn stacks, by
/// name, each with its count × scale, whatever ids the profile gives them.
#[test]
fn decoded_profiles_hold_the_drawn_stacks() {
    use profiledb_ingest::{decode_pprof, PprofOptions};
    let f = Fleet::new(cfg());
    let types = [("samples", "count", 1), ("cpu", "nanoseconds", 10_000_000)];
    for (service, host, ts) in [(0, 0, 20_000), (1, 3, 2_000_000)] {
        let d = f.draw(service, host, ts, 300);
        let raw = f
            .pprof(service, &d, ts, ("cpu", "nanoseconds", 10_000_000), &types)
            .to_vec();
        let batch = decode_pprof(&raw, &PprofOptions::default()).unwrap();
        let mut want: Vec<(Vec<String>, i64)> = d
            .counts
            .iter()
            .map(|&(stack, count)| {
                let names = f.services[service].stacks[stack as usize]
                    .iter()
                    .map(|&g| f.functions[g as usize].clone())
                    .collect();
                (names, count * 10_000_000)
            })
            .collect();
        let cpu = batch
            .series
            .iter()
            .find(|s| s.labels.get("__profile_type__") == Some(CPU_TYPE))
            .unwrap();
        let mut got: Vec<(Vec<String>, i64)> = cpu
            .samples
            .iter()
            .map(|s| (batch.frame_names(s.stack).unwrap(), s.value))
            .collect();
        want.sort();
        got.sort();
        assert!(want.len() > 10);
        assert_eq!(got, want, "service {service}");
    }
}

#[test]
fn push_bodies_are_what_prost_writes() {
    let f = Fleet::new(cfg());
    for (host, ts, heap) in [(0, 20_000, false), (3, 2_000_000, true), (9, 7, true)] {
        let (mut rows_a, mut rows_b) = (Vec::new(), Vec::new());
        let (req, va) = f.host_push(host, ts, heap, Some(&mut rows_a));
        let (body, vb) = f.host_push_body(host, ts, heap, Some(&mut rows_b));
        assert_eq!(body, req.encode_to_vec(), "host {host}, {ts}, heap {heap}");
        assert_eq!((va, &rows_a), (vb, &rows_b));
        assert!(va > 0 && !rows_a.is_empty());
    }
}

#[test]
fn deterministic_and_well_shaped() {
    let a = Fleet::new(cfg());
    let b = Fleet::new(cfg());
    let (pa, _) = a.host_push(1, 20_000, true, None);
    let (pb, _) = b.host_push(1, 20_000, true, None);
    assert_eq!(pa.encode_to_vec(), pb.encode_to_vec());
    for svc in &a.services {
        assert_eq!(svc.stacks.len(), 500);
        assert!(svc.stacks.iter().all(|s| (10..=60).contains(&s.len())));
    }
    let opts = profiledb_ingest::PprofOptions::default();
    let raw = &pa.series[0].samples[0].raw_profile;
    let batch = profiledb_ingest::decode_pprof(raw, &opts).expect("decodes");
    assert!(batch.sample_count() > 0);
}

#[test]
fn hardware_events_carry_the_cpi() {
    let f = Fleet::new(cfg());
    let req = f.host_hw_push(1, 20_000);
    assert_eq!(req.series.len(), 4, "cycles and instructions per service");
    let opts = profiledb_ingest::PprofOptions::default();
    let total = |i: usize| -> i64 {
        let raw = &req.series[i].samples[0].raw_profile;
        let batch = profiledb_ingest::decode_pprof(raw, &opts).expect("decodes");
        batch
            .series
            .iter()
            .flat_map(|s| &s.samples)
            .map(|s| s.value)
            .sum()
    };
    let (cycles, instructions) = (total(0), total(1));
    let cpi = f.cpi(0, 1);
    assert!((0.42..2.7).contains(&cpi), "{cpi}");
    assert_eq!(
        cycles,
        instructions / HW_PERIOD * (cpi * HW_PERIOD as f64) as i64
    );
    let platform = req.series[0].labels.iter().find(|l| l.name == "platform");
    assert_eq!(platform.map(|l| l.value.as_str()), Some("milan"));
}

#[test]
fn zipf_is_skewed() {
    let f = Fleet::new(cfg());
    let d = f.draw(0, 0, 0, 5000);
    let top = d.counts.iter().find(|c| c.0 == 0).map_or(0, |c| c.1);
    let total: i64 = d.counts.iter().map(|c| c.1).sum();
    assert!(top * 20 > total, "top {top} of {total}");
}
