//! A fleet's profiles on the wire: pprof bodies written straight to bytes, labels,
//! and the push requests of one host at one time.

use super::*;

impl Fleet {
    /// A pprof profile: sample types `types` (name, unit), one value column per type
    /// computed as `count × scale`. Written straight to bytes (see
    /// [`crate::pprof_writer`]); the same bytes as `prost` would write, in parts to
    /// be copied once, into a push body (or joined by [`Parts::to_vec`]).
    pub fn pprof<'a>(
        &self,
        service: usize,
        drawn: &Drawn,
        ts_ms: i64,
        period: (&'a str, &'a str, i64),
        types: &[(&'a str, &'a str, i64)],
    ) -> Parts {
        let Some(svc) = self.services.get(service) else {
            return Parts::default();
        };
        // The string table, written as it grows. The few type names come first and
        // are looked up in `named` (the i-th is string i + 1); the names of the
        // functions used follow.
        let mut strings = Msg::default();
        strings.bytes(6, b"");
        let mut n_strings = 1i64;
        let mut named: Vec<&'a str> = Vec::with_capacity(2 * types.len() + 2);
        let mut s = |x: &'a str, strings: &mut Msg, n: &mut i64| -> i64 {
            if let Some(i) = named.iter().position(|&y| y == x) {
                return i as i64 + 1;
            }
            named.push(x);
            strings.bytes(6, x.as_bytes());
            *n += 1;
            *n - 1
        };
        let mut head = Msg::default();
        let mut vt = Msg::default();
        for &(t, u, _) in types {
            vt.clear();
            vt.int(1, s(t, &mut strings, &mut n_strings))
                .int(2, s(u, &mut strings, &mut n_strings));
            head.bytes(1, &vt.buf);
        }
        let mut period_type = Msg::default();
        period_type
            .int(1, s(period.0, &mut strings, &mut n_strings))
            .int(2, s(period.1, &mut strings, &mut n_strings));
        // The functions the samples use, each with its location, in id order;
        // their names follow the type names in the string table.
        let records = &svc.records;
        let used: Vec<(usize, u32, &[u8])> = bits(&records.used_by(drawn))
            .filter_map(|k| {
                Some((
                    k,
                    *records.functions.get(k)?,
                    &records.locations.get(k)?[..],
                ))
            })
            .collect();
        // Each part sized once: growing them copied every byte again.
        let mut locations = Msg {
            buf: Vec::with_capacity(used.iter().map(|u| u.2.len()).sum()),
        };
        let mut functions = Msg {
            buf: Vec::with_capacity(used.len() * 16),
        };
        strings.buf.reserve(
            used.iter()
                .map(|&(_, f, _)| self.name_fields.get(f as usize).map_or(3, Vec::len))
                .sum::<usize>()
                + 64,
        );
        for (k, f, location) in used {
            let name = n_strings as u64;
            match self.name_fields.get(f as usize) {
                Some(entry) => strings.buf.extend_from_slice(entry),
                None => {
                    strings.bytes(6, b"?");
                }
            }
            n_strings += 1;
            let id = k as u64 + 1;
            let len = uint_len(1, id) + uint_len(2, name) + uint_len(3, name);
            functions
                .header(5, len)
                .uint(1, id)
                .uint(2, name)
                .uint(3, name);
            locations.buf.extend_from_slice(location);
        }
        // A sample: its stack's location ids as written once (`Records::ids`),
        // then its values packed in place, the record's length counted first.
        let mut samples = Msg {
            buf: Vec::with_capacity(
                drawn
                    .counts
                    .iter()
                    .map(|&(stack, _)| records.ids.get(stack as usize).map_or(0, Vec::len) + 32)
                    .sum(),
            ),
        };
        for &(stack, count) in &drawn.counts {
            let Some(ids) = records.ids.get(stack as usize) else {
                continue;
            };
            let values = types.iter().map(|t| (count * t.2) as u64);
            let values_len = payload_len(values.clone());
            samples.header(2, ids.len() + optional_len(2, values_len));
            samples.buf.extend_from_slice(ids);
            samples.packed(2, values_len, values);
        }
        let bin = n_strings;
        strings.bytes(6, format!("/usr/bin/{}", svc.name).as_bytes());
        let mut mapping = Msg::default();
        mapping
            .uint(1, 1)
            .uint(2, 0x40_0000)
            .uint(3, 0x4000_0000)
            .int(5, bin)
            .uint(7, 1);
        let mut mapping_field = Msg::default();
        mapping_field.bytes(3, &mapping.buf);
        let mut tail = Msg::default();
        tail.int(9, ts_ms * 1_000_000)
            .int(10, 10_000_000_000)
            .bytes(11, &period_type.buf)
            .int(12, period.2);
        // Fields in tag order, as prost writes them.
        Parts(vec![
            head.buf,
            samples.buf,
            mapping_field.buf,
            locations.buf,
            functions.buf,
            strings.buf,
            tail.buf,
        ])
    }

    /// The labels of one process's series.
    pub fn labels(&self, name: &str, service: usize, host: usize, ts_ms: i64) -> Vec<LabelPair> {
        let kv = |k: &str, v: String| LabelPair {
            name: k.into(),
            value: v,
        };
        vec![
            kv("__name__", name.into()),
            kv("service_name", self.service_name(service).into()),
            kv("host", Self::host_name(host)),
            kv("region", Self::region(host).into()),
            kv("zone", Self::zone(host)),
            kv("version", self.version(ts_ms).into()),
        ]
    }

    /// One host's push at `ts_ms`: a CPU profile per service (cpu ns and sample
    /// count), plus heap profiles when `heap`. CSV rows of the CPU ns values go to
    /// `rows` as `ts_ms,service,host,region,zone,version,stack_id,value`.
    pub fn host_push(
        &self,
        host: usize,
        ts_ms: i64,
        heap: bool,
        rows: Option<&mut Vec<u8>>,
    ) -> (PushRequest, u64) {
        let mut series = Vec::new();
        let values = self.host_profiles(host, ts_ms, heap, rows, |labels, profile| {
            series.push(RawProfileSeries {
                labels,
                samples: vec![RawSample {
                    raw_profile: profile.to_vec().into(),
                    id: String::new(),
                }],
            });
        });
        (PushRequest { series }, values)
    }

    /// [`Fleet::host_push`] as the bytes of its `PushRequest`, each profile copied
    /// once, from its parts into the body ([`Msg::series`]).
    pub fn host_push_body(
        &self,
        host: usize,
        ts_ms: i64,
        heap: bool,
        rows: Option<&mut Vec<u8>>,
    ) -> (Vec<u8>, u64) {
        let mut profiles = Vec::new();
        let values = self.host_profiles(host, ts_ms, heap, rows, |labels, profile| {
            profiles.push((labels, profile));
        });
        let mut body = Msg::default();
        body.buf.reserve_exact(
            profiles
                .iter()
                .map(|(labels, profile)| Msg::series_len(labels, profile))
                .sum(),
        );
        for (labels, profile) in &profiles {
            body.series(labels, profile);
        }
        (body.buf, values)
    }

    /// Each profile of [`Fleet::host_push`] with its series labels, in push order;
    /// returns the number of values.
    fn host_profiles(
        &self,
        host: usize,
        ts_ms: i64,
        heap: bool,
        rows: Option<&mut Vec<u8>>,
        mut each: impl FnMut(Vec<LabelPair>, Parts),
    ) -> u64 {
        let mut values = 0u64;
        let mut rows = rows;
        for s in 0..self.cfg.services {
            let d = self.draw(s, host, ts_ms, self.cfg.draws_per_profile);
            values += 2 * d.counts.len() as u64;
            let cpu = self.pprof(
                s,
                &d,
                ts_ms,
                ("cpu", "nanoseconds", 10_000_000),
                &[("samples", "count", 1), ("cpu", "nanoseconds", 10_000_000)],
            );
            if let Some(out) = rows.as_deref_mut() {
                for &(st, c) in &d.counts {
                    let _ = writeln!(
                        out,
                        "{ts_ms},{},{},{},{},{},{},{}",
                        self.service_name(s),
                        Self::host_name(host),
                        Self::region(host),
                        Self::zone(host),
                        self.version(ts_ms),
                        self.stack_gid(s, st),
                        c * 10_000_000
                    );
                }
            }
            each(self.labels("process_cpu", s, host, ts_ms), cpu);
            if heap {
                let d = self.draw(s, host, ts_ms ^ 0x5a5a, self.cfg.draws_per_profile / 4);
                values += 2 * d.counts.len() as u64;
                let mem = self.pprof(
                    s,
                    &d,
                    ts_ms,
                    ("space", "bytes", 524_288),
                    &[
                        ("alloc_objects", "count", 3),
                        ("alloc_space", "bytes", 524_288),
                    ],
                );
                each(self.labels("memory", s, host, ts_ms), mem);
            }
        }
        values
    }

    /// The hardware platform (CPU model) of a host, and its clock in GHz.
    pub fn platform(h: usize) -> (&'static str, &'static str) {
        PLATFORMS[h % PLATFORMS.len()]
    }

    /// Cycles per instruction of `service` on platform `p` (index into the platform
    /// table): a per-service base in [0.6, 1.8) times a per-(service, platform)
    /// affinity in [0.7, 1.5), rounded to 1/1000 so tests can compute exact ratios.
    pub fn cpi(&self, service: usize, p: usize) -> f64 {
        let mut base = Rng::keyed(self.cfg.seed, &[3, service as u64]);
        let mut affinity = Rng::keyed(self.cfg.seed, &[4, service as u64, p as u64]);
        let cpi = (0.6 + 1.2 * base.unit()) * (0.7 + 0.8 * affinity.unit());
        (cpi * 1000.0).round() / 1000.0
    }

    /// One host's hardware-event push at `ts_ms`: per service, a `cycles` and an
    /// `instructions` profile of the same draws (one sample = `HW_PERIOD`
    /// instructions, and CPI × that many cycles), labelled with the host's
    /// `platform` and `clock_ghz` besides the usual labels.
    pub fn host_hw_push(&self, host: usize, ts_ms: i64) -> PushRequest {
        let (platform, ghz) = Self::platform(host);
        let mut series = Vec::new();
        for s in 0..self.cfg.services {
            let d = self.draw(s, host, ts_ms ^ 0x4857, self.cfg.draws_per_profile);
            let cycles_per_sample = (self.cpi(s, host % PLATFORMS.len()) * HW_PERIOD as f64) as i64;
            for (event, scale) in [("cycles", cycles_per_sample), ("instructions", HW_PERIOD)] {
                let raw_profile = self
                    .pprof(
                        s,
                        &d,
                        ts_ms,
                        (event, "count", scale),
                        &[(event, "count", scale)],
                    )
                    .to_vec();
                let mut labels = self.labels(event, s, host, ts_ms);
                labels.push(LabelPair {
                    name: "platform".into(),
                    value: platform.into(),
                });
                labels.push(LabelPair {
                    name: "clock_ghz".into(),
                    value: ghz.into(),
                });
                series.push(RawProfileSeries {
                    labels,
                    samples: vec![RawSample {
                        raw_profile: raw_profile.into(),
                        id: String::new(),
                    }],
                });
            }
        }
        PushRequest { series }
    }
}
