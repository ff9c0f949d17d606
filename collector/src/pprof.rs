//! Building pprof profiles and push requests from symbolized stacks.
//!
//! Per push interval the agent sends one pprof per event type. Series-wide labels
//! (`__name__`, `host`, `event`, `--tag`s, `service_name` when `--service` is given)
//! go on the push series; per-process labels (`service_name` = comm, `pid`, `comm`,
//! `cgroup`) are pprof sample labels, which the server turns into series labels.

use std::collections::HashMap;
use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
use prost::Message;

use crate::proto::pprof::{Function, Label, Line, Location, Mapping, Profile, Sample, ValueType};
use crate::proto::push::v1::{PushRequest, RawProfileSeries, RawSample};
use crate::proto::types::v1::LabelPair;
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
}

/// Static label configuration from the command line.
#[derive(Clone, Debug, Default)]
pub struct LabelConfig {
    pub host: String,
    /// `--service`: overrides the per-process `service_name`.
    pub service: Option<String>,
    pub tags: Labels,
}

/// The profile name every series carries.
pub const PROFILE_NAME: &str = "process_cpu";

impl LabelConfig {
    /// Labels of the push series of one event.
    pub fn series_labels(&self, event: &str) -> Labels {
        let mut l: Labels = vec![
            ("__name__".into(), PROFILE_NAME.into()),
            ("host".into(), self.host.clone()),
            ("event".into(), event.into()),
        ];
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
            Some(&i) => out[i].count += s.count,
            None => {
                idx.insert((s.labels.clone(), s.frames.clone()), out.len());
                out.push(s);
            }
        }
    }
    out
}

#[derive(Default)]
struct Strings {
    table: Vec<String>,
    idx: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Self::default();
        s.get("");
        s
    }

    fn get(&mut self, v: &str) -> i64 {
        if let Some(&i) = self.idx.get(v) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(v.to_string());
        self.idx.insert(v.to_string(), i);
        i
    }
}

/// Builds the pprof of one event: sample types `samples:count` and `cpu:nanoseconds`
/// (count × `period_ns`), period type `cpu:nanoseconds`.
pub fn build_profile(
    stacks: &[LabeledStack],
    period_ns: i64,
    time_nanos: i64,
    duration_nanos: i64,
) -> Profile {
    let mut strings = Strings::new();
    let mut p = Profile {
        sample_type: vec![
            ValueType {
                r#type: strings.get("samples"),
                unit: strings.get("count"),
            },
            ValueType {
                r#type: strings.get("cpu"),
                unit: strings.get("nanoseconds"),
            },
        ],
        period_type: Some(ValueType {
            r#type: strings.get("cpu"),
            unit: strings.get("nanoseconds"),
        }),
        period: period_ns,
        time_nanos,
        duration_nanos,
        ..Default::default()
    };
    let mut mappings: HashMap<ModuleRef, u64> = HashMap::new();
    let mut functions: HashMap<String, u64> = HashMap::new();
    let mut locations: HashMap<(u64, u64, u64), u64> = HashMap::new();
    for s in stacks {
        let mut location_id = Vec::with_capacity(s.frames.len());
        for f in &s.frames {
            let mapping_id = match &f.module {
                Some(m) => match mappings.get(m) {
                    Some(&id) => id,
                    None => {
                        let id = p.mapping.len() as u64 + 1;
                        p.mapping.push(Mapping {
                            id,
                            memory_start: m.start,
                            memory_limit: m.end,
                            file_offset: m.pgoff,
                            filename: strings.get(&m.file.path),
                            build_id: strings.get(m.build_id.as_deref().unwrap_or("")),
                            has_functions: true,
                            ..Default::default()
                        });
                        mappings.insert(m.clone(), id);
                        id
                    }
                },
                None => 0,
            };
            let function_id = match &f.function {
                Some(name) => match functions.get(&**name) {
                    Some(&id) => id,
                    None => {
                        let id = p.function.len() as u64 + 1;
                        let n = strings.get(name);
                        p.function.push(Function {
                            id,
                            name: n,
                            system_name: n,
                            ..Default::default()
                        });
                        functions.insert(name.to_string(), id);
                        id
                    }
                },
                None => 0,
            };
            let key = (mapping_id, f.address, function_id);
            let loc = match locations.get(&key) {
                Some(&id) => id,
                None => {
                    let id = p.location.len() as u64 + 1;
                    p.location.push(Location {
                        id,
                        mapping_id,
                        address: f.address,
                        line: if function_id != 0 {
                            vec![Line {
                                function_id,
                                line: 0,
                                column: 0,
                            }]
                        } else {
                            Vec::new()
                        },
                        is_folded: false,
                    });
                    locations.insert(key, id);
                    id
                }
            };
            location_id.push(loc);
        }
        let count = i64::try_from(s.count).unwrap_or(i64::MAX);
        p.sample.push(Sample {
            location_id,
            value: vec![count, count.saturating_mul(period_ns)],
            label: s
                .labels
                .iter()
                .map(|(k, v)| Label {
                    key: strings.get(k),
                    str: strings.get(v),
                    ..Default::default()
                })
                .collect(),
        });
    }
    p.string_table = strings.table.into_iter().map(String::into_bytes).collect();
    p
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
            raw_profile: profile.encode_to_vec(),
            id: String::new(),
        }],
    }
}

/// Encodes a push request as a gzip'd protobuf body.
pub fn encode_push_body(req: &PushRequest) -> std::io::Result<Vec<u8>> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    gz.write_all(&req.encode_to_vec())?;
    gz.finish()
}

#[cfg(test)]
mod tests {
    use std::io::Read;
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
            },
            LabeledStack {
                labels: labels.clone(),
                frames: vec![
                    frame(Some("leaf"), 0x1100, Some(&m)),
                    frame(Some("main"), 0x1200, Some(&m)),
                ],
                count: 2,
            },
            LabeledStack {
                labels: labels.clone(),
                frames: vec![
                    frame(None, 0x1300, Some(&m)),
                    frame(Some("main"), 0x1200, Some(&m)),
                ],
                count: 1,
            },
        ]);
        assert_eq!(stacks.len(), 2);
        let p = build_profile(&stacks, 52_631_578, 1_000, 10_000_000_000);
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
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_end(&mut raw)
            .expect("gunzips");
        let back = PushRequest::decode(&raw[..]).expect("decodes");
        assert_eq!(back, req);
        assert_eq!(
            Profile::decode(&back.series[0].samples[0].raw_profile[..]).expect("decodes"),
            p
        );
    }
}
