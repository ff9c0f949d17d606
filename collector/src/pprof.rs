//! Building pprof profiles and push requests from symbolized stacks.
//!
//! Per push interval the agent sends one pprof per event type. cpu-clock is the
//! profile `process_cpu` (`samples:count`, `cpu:nanoseconds`); a hardware event is its
//! own profile named after it, weighted by the kernel's sample periods, e.g.
//! `cycles:cycles:count:cycles:count` (the profile type the fleet CPI analysis reads).
//! Series-wide labels (`__name__`, `host`, `event`, `platform`, `--tag`s,
//! `service_name` when `--service` is given) go on the push series; per-process labels (`service_name` = comm, `pid`, `comm`,
//! `cgroup`) are pprof sample labels, which the server turns into series labels.

use std::collections::HashMap;

use profiledb_proto::gzip::{gzip, Compression};
use profiledb_proto::pprof::Profile;
use profiledb_proto::push::v1::{PushRequest, RawProfileSeries, RawSample};
use profiledb_proto::types::v1::LabelPair;
use profiledb_proto::{MappingInfo, ProfileBuilder};
use prost::Message;

use crate::symbolize::{Frame, ModuleRef};

/// Label pairs, sorted by name when built by this module.
pub type Labels = Vec<(String, String)>;

/// A symbolized stack with its labels and sample count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabeledStack {
    pub labels: Labels,
    /// Leaf first.
    pub frames: Vec<Frame>,
    pub count: u64,
    /// Sum of the samples' periods: events counted (hardware events) or nanoseconds
    /// (cpu-clock).
    pub weight: u64,
}

/// Static label configuration from the command line.
#[derive(Clone, Debug, Default)]
pub struct LabelConfig {
    pub host: String,
    /// `--service`: overrides the per-process `service_name`.
    pub service: Option<String>,
    /// CPU vendor/microarchitecture (see [`crate::platform`]).
    pub platform: Option<String>,
    pub tags: Labels,
}

/// The profile name of cpu-clock series.
pub const PROFILE_NAME: &str = "process_cpu";

/// The profile name (`__name__`) of an event's series.
pub fn profile_name(event: &str) -> &str {
    if event == "cpu-clock" {
        PROFILE_NAME
    } else {
        event
    }
}

/// What a profile's values measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure<'a> {
    /// cpu-clock: `samples:count` and `cpu:nanoseconds` = count × the period.
    Cpu { period_ns: i64 },
    /// A counted event: `samples:count` and `<event>:count` = the periods' sum.
    Event { name: &'a str },
}

impl LabelConfig {
    /// Labels of the push series of one event.
    pub fn series_labels(&self, event: &str) -> Labels {
        let mut l: Labels = vec![
            ("__name__".into(), profile_name(event).into()),
            ("host".into(), self.host.clone()),
            ("event".into(), event.into()),
        ];
        if let Some(p) = &self.platform {
            l.push(("platform".into(), p.clone()));
        }
        if let Some(s) = &self.service {
            l.push(("service_name".into(), s.clone()));
        }
        for (k, v) in &self.tags {
            if !l.iter().any(|(n, _)| n == k) {
                l.push((k.clone(), v.clone()));
            }
        }
        l.sort();
        l
    }

    /// Per-sample labels of one process.
    pub fn sample_labels(&self, pid: u32, comm: &str, cgroup: Option<&str>) -> Labels {
        let comm = if comm.is_empty() { "unknown" } else { comm };
        let mut l: Labels = vec![
            ("pid".into(), pid.to_string()),
            ("comm".into(), comm.to_string()),
            (
                "service_name".into(),
                self.service.clone().unwrap_or_else(|| comm.to_string()),
            ),
        ];
        if let Some(c) = cgroup.filter(|c| !c.is_empty()) {
            l.push(("cgroup".into(), c.to_string()));
        }
        l.sort();
        l
    }
}

/// Merges stacks with equal labels and frames.
pub fn merge_stacks(stacks: impl IntoIterator<Item = LabeledStack>) -> Vec<LabeledStack> {
    let mut idx: HashMap<(Labels, Vec<Frame>), usize> = HashMap::new();
    let mut out: Vec<LabeledStack> = Vec::new();
    for s in stacks {
        match idx.get(&(s.labels.clone(), s.frames.clone())) {
            Some(&i) => {
                out[i].count += s.count;
                out[i].weight += s.weight;
            }
            None => {
                idx.insert((s.labels.clone(), s.frames.clone()), out.len());
                out.push(s);
            }
        }
    }
    out
}

/// Builds the pprof of one event (see [`Measure`] for its sample types).
pub fn build_profile(
    stacks: &[LabeledStack],
    measure: Measure<'_>,
    time_nanos: i64,
    duration_nanos: i64,
) -> Profile {
    let mut b = ProfileBuilder::new();
    b.add_sample_type("samples", "count");
    match measure {
        Measure::Cpu { period_ns } => {
            b.add_sample_type("cpu", "nanoseconds");
            b.set_period("cpu", "nanoseconds", period_ns);
        }
        Measure::Event { name } => {
            let (count, weight) = stacks
                .iter()
                .fold((0u64, 0u64), |(c, w), s| (c + s.count, w + s.weight));
            b.add_sample_type(name, "count");
            b.set_period(
                name,
                "count",
                i64::try_from(weight / count.max(1)).unwrap_or(i64::MAX),
            );
        }
    }
    b.set_time(time_nanos, duration_nanos);
    let mut mappings: HashMap<&ModuleRef, u64> = HashMap::new();
    for s in stacks {
        let mut location_id = Vec::with_capacity(s.frames.len());
        for f in &s.frames {
            let mapping_id = match &f.module {
                Some(m) => *mappings.entry(m).or_insert_with(|| {
                    b.add_mapping(&MappingInfo {
                        memory_start: m.start,
                        memory_limit: m.end,
                        file_offset: m.pgoff,
                        filename: &m.file.path,
                        build_id: m.build_id.as_deref().unwrap_or(""),
                        has_functions: true,
                    })
                }),
                None => 0,
            };
            let function_id = f.function.as_deref().map(|name| b.function(name));
            location_id.push(b.location(mapping_id, f.address, function_id));
        }
        let count = i64::try_from(s.count).unwrap_or(i64::MAX);
        let value = match measure {
            Measure::Cpu { period_ns } => count.saturating_mul(period_ns),
            Measure::Event { .. } => i64::try_from(s.weight).unwrap_or(i64::MAX),
        };
        b.add_sample(
            location_id,
            vec![count, value],
            s.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        );
    }
    b.finish()
}

/// One push series: labels plus an uncompressed pprof.
pub fn push_series(labels: &Labels, profile: &Profile) -> RawProfileSeries {
    RawProfileSeries {
        labels: labels
            .iter()
            .map(|(k, v)| LabelPair {
                name: k.clone(),
                value: v.clone(),
            })
            .collect(),
        samples: vec![RawSample {
            raw_profile: profile.encode_to_vec().into(),
            id: String::new(),
        }],
    }
}

/// Encodes a push request as a gzip'd protobuf body.
pub fn encode_push_body(req: &PushRequest) -> std::io::Result<Vec<u8>> {
    gzip(&req.encode_to_vec(), Compression::fast())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::procs::FileId;

    fn frame(name: Option<&str>, addr: u64, module: Option<&ModuleRef>) -> Frame {
        Frame {
            function: name.map(Arc::from),
            address: addr,
            module: module.cloned(),
        }
    }

    #[test]
    fn labels() {
        let c = LabelConfig {
            host: "h1".into(),
            service: None,
            platform: None,
            tags: vec![
                ("env".into(), "prod".into()),
                ("host".into(), "ignored".into()),
            ],
        };
        let s = c.series_labels("cpu-clock");
        assert_eq!(
            s,
            vec![
                ("__name__".to_string(), "process_cpu".to_string()),
                ("env".into(), "prod".into()),
                ("event".into(), "cpu-clock".into()),
                ("host".into(), "h1".into()),
            ]
        );
        let l = c.sample_labels(42, "busy", Some("/system.slice/x.service"));
        assert_eq!(
            l,
            vec![
                ("cgroup".to_string(), "/system.slice/x.service".to_string()),
                ("comm".into(), "busy".into()),
                ("pid".into(), "42".into()),
                ("service_name".into(), "busy".into()),
            ]
        );
        let c2 = LabelConfig {
            service: Some("api".into()),
            ..c
        };
        assert!(c2
            .series_labels("cycles")
            .contains(&("service_name".into(), "api".into())));
        let l2 = c2.sample_labels(1, "", None);
        assert!(l2.contains(&("service_name".into(), "api".into())));
        assert!(l2.contains(&("comm".into(), "unknown".into())));
        assert_eq!(l2.len(), 3);
    }

    #[test]
    fn pprof_round_trip() {
        let m = ModuleRef {
            file: Arc::new(FileId {
                path: "/bin/busy".into(),
                dev: 1,
                ino: 2,
            }),
            build_id: Some("abcd".into()),
            start: 0x1000,
            end: 0x9000,
            pgoff: 0,
        };
        let labels = vec![("pid".to_string(), "7".to_string())];
        let stacks = merge_stacks(vec![
            LabeledStack {
                labels: labels.clone(),
                frames: vec![
                    frame(Some("leaf"), 0x1100, Some(&m)),
                    frame(Some("main"), 0x1200, Some(&m)),
                ],
                count: 3,
                weight: 0,
            },
            LabeledStack {
                labels: labels.clone(),
                frames: vec![
                    frame(Some("leaf"), 0x1100, Some(&m)),
                    frame(Some("main"), 0x1200, Some(&m)),
                ],
                count: 2,
                weight: 0,
            },
            LabeledStack {
                labels: labels.clone(),
                frames: vec![
                    frame(None, 0x1300, Some(&m)),
                    frame(Some("main"), 0x1200, Some(&m)),
                ],
                count: 1,
                weight: 0,
            },
        ]);
        assert_eq!(stacks.len(), 2);
        let p = build_profile(
            &stacks,
            Measure::Cpu {
                period_ns: 52_631_578,
            },
            1_000,
            10_000_000_000,
        );
        let bytes = p.encode_to_vec();
        let d = Profile::decode(&bytes[..]).expect("decodes");
        assert_eq!(d, p);
        let s = |i: i64| std::str::from_utf8(&d.string_table[i as usize]).unwrap();
        assert!(d.string_table[0].is_empty());
        assert_eq!(s(d.sample_type[0].r#type), "samples");
        assert_eq!(s(d.sample_type[1].unit), "nanoseconds");
        assert_eq!(d.period, 52_631_578);
        assert_eq!(d.sample.len(), 2);
        assert_eq!(d.sample[0].value, vec![5, 5 * 52_631_578]);
        assert_eq!(d.mapping.len(), 1);
        assert_eq!(s(d.mapping[0].build_id), "abcd");
        assert_eq!(d.location.len(), 3);
        assert_eq!(d.function.len(), 2);
        // leaf first, names resolve through location → line → function
        let leaf = &d.location[(d.sample[0].location_id[0] - 1) as usize];
        let f = &d.function[(leaf.line[0].function_id - 1) as usize];
        assert_eq!(s(f.name), "leaf");
        // the unsymbolized frame keeps address + mapping, no line
        let unk = &d.location[(d.sample[1].location_id[0] - 1) as usize];
        assert!(unk.line.is_empty());
        assert_eq!(unk.address, 0x1300);
        assert_eq!(unk.mapping_id, 1);
        assert_eq!(s(d.sample[0].label[0].key), "pid");
        assert_eq!(s(d.sample[0].label[0].str), "7");

        // push body: gzip'd PushRequest whose raw_profile is the pprof
        let req = PushRequest {
            series: vec![push_series(
                &LabelConfig::default().series_labels("cpu-clock"),
                &p,
            )],
        };
        let body = encode_push_body(&req).expect("encodes");
        assert_eq!(&body[..2], &[0x1f, 0x8b]);
        let raw = profiledb_proto::gzip::gunzip(&body, 1 << 20).expect("gunzips");
        let back = PushRequest::decode(&raw[..]).expect("decodes");
        assert_eq!(back, req);
        assert_eq!(
            Profile::decode(&back.series[0].samples[0].raw_profile[..]).expect("decodes"),
            p
        );
    }

    #[test]
    fn hardware_events_are_their_own_profile_weighted_by_periods() {
        let c = LabelConfig {
            host: "h".into(),
            platform: Some("intel/skylake".into()),
            ..Default::default()
        };
        let l = c.series_labels("cycles");
        assert!(l.contains(&("__name__".into(), "cycles".into())));
        assert!(l.contains(&("platform".into(), "intel/skylake".into())));
        let stacks = vec![
            LabeledStack {
                labels: vec![],
                frames: vec![frame(Some("a"), 1, None)],
                count: 2,
                weight: 3_000_000,
            },
            LabeledStack {
                labels: vec![],
                frames: vec![frame(Some("b"), 2, None)],
                count: 1,
                weight: 1_000_000,
            },
        ];
        let p = build_profile(&stacks, Measure::Event { name: "cycles" }, 0, 1);
        let s = |i: i64| {
            std::str::from_utf8(&p.string_table[i as usize])
                .unwrap()
                .to_string()
        };
        assert_eq!(s(p.sample_type[1].r#type), "cycles");
        assert_eq!(s(p.sample_type[1].unit), "count");
        assert_eq!(s(p.period_type.as_ref().map_or(0, |t| t.r#type)), "cycles");
        assert_eq!(p.period, 4_000_000 / 3);
        assert_eq!(p.sample[0].value, vec![2, 3_000_000]);
        assert_eq!(p.sample[1].value, vec![1, 1_000_000]);
    }
}
