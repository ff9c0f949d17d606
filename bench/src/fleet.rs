//! A deterministic, seeded fleet generator: services × hosts × time, CPU and heap
//! profiles whose stacks have a realistic shape, emitted as pprof (for pushes to a
//! running server) and as rows (CSV, converted to Parquet for the baseline database).
//!
//! Shape of a stack (root first): runtime entry frames, an RPC server layer, 4–40
//! frames of service-specific code, then a leaf layer drawn from the shared libraries
//! (allocator, compression, RPC client, runtime/GC) or the service's own code. Depth
//! is 10–60. Each service has `stacks_per_service` distinct stacks whose popularity is
//! Zipf-distributed; a profile draws `draws_per_profile` samples from it. After the
//! deploy time (`deploy_ms`) a service runs version `v2` and spends more time in
//! compression (so diffs across the deploy have something to find).
//!
//! Everything is a pure function of `(seed, service, host, timestamp)`, so any
//! thread order produces the same data.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use anyhow::Context;
use bytes::Bytes;
use profiledb_proto::gzip::{gunzip, is_gzip};
use profiledb_proto::pprof;
use profiledb_proto::push::v1::{PushRequest, RawProfileSeries, RawSample};
use profiledb_proto::types::v1::LabelPair;
use prost::Message;

use crate::pprof_writer::{
    field_len, optional_len, payload_len, string_field, uint_len, Message as Msg, Parts,
};

/// The profile type the query suites read.
pub const CPU_TYPE: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
/// The query suite's default fleet (the full-density one), which `bench ingest`
/// decodes too.
pub mod dense {
    pub const SEED: u64 = 42;
    pub const HOSTS: usize = 100;
    pub const SERVICES: usize = 10;
    pub const STACKS_PER_SERVICE: usize = 5000;
    pub const DRAWS_PER_PROFILE: usize = 100;
    /// Seconds between a host's pushes in the last hour.
    pub const INTERVAL_SECS: u64 = 10;
}

/// Whether a host's push at `ts_ms` carries heap profiles too: once a minute.
pub fn heap_due(ts_ms: i64) -> bool {
    ts_ms % 60_000 == 0
}

/// Function-name fragment only the compression layer's `deflate` frames contain.
pub const FILTER_FUNCTION: &str = "deflate";

/// splitmix64: small, fast and good enough for synthetic data.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for a tuple of ids, independent of call order.
    pub fn keyed(seed: u64, parts: &[u64]) -> Self {
        let mut r = Rng(seed ^ 0x9e37_79b9_7f4a_7c15);
        for p in parts {
            r.0 ^= p.wrapping_mul(0xbf58_476d_1ce4_e5b9);
            r.next_u64();
        }
        r
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * n as f64) as usize % n.max(1)
    }
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Clone, Debug)]
pub struct FleetConfig {
    pub seed: u64,
    pub services: usize,
    /// Distinct stacks per service (the fleet has `services ×` this many).
    pub stacks_per_service: usize,
    /// CPU samples drawn per profile (100 Hz × 10 s would be 1000 for a busy core).
    pub draws_per_profile: usize,
    /// Zipf exponent of stack popularity.
    pub zipf_s: f64,
    /// Hosts switch from v1 to v2 at this time (ms).
    pub deploy_ms: i64,
}

const REGIONS: [&str; 4] = ["us-east-1", "us-west-2", "eu-west-1", "ap-south-1"];

/// Hardware platforms hosts are spread over (round robin), with their clock in GHz.
const PLATFORMS: [(&str, &str); 3] = [("skylake", "2.0"), ("milan", "2.45"), ("graviton3", "2.6")];

/// Instructions one hardware-event sample stands for.
pub const HW_PERIOD: i64 = 1_000_000;

/// The shared library layers.
const RUNTIME: [&str; 8] = [
    "runtime.main",
    "runtime.goexit",
    "runtime.mcall",
    "runtime.schedule",
    "runtime.findrunnable",
    "runtime.gcBgMarkWorker",
    "runtime.scanobject",
    "runtime.memmove",
];
const RPC_SERVER: [&str; 6] = [
    "grpc.(*Server).serveStreams",
    "grpc.(*Server).handleStream",
    "grpc.(*Server).processUnaryRPC",
    "http2.(*Framer).ReadFrame",
    "net/http.(*conn).serve",
    "net/http.serverHandler.ServeHTTP",
];
const LEAF_LIBS: [&[&str]; 4] = [
    &[
        "mallocgc",
        "runtime.(*mcache).nextFree",
        "runtime.(*mheap).alloc",
        "tcmalloc::Allocate",
        "tcmalloc::Sampler::RecordAllocation",
    ],
    &[
        "zlib.deflate",
        "zlib.deflate_slow",
        "zlib.longest_match",
        "zstd.ZSTD_compressBlock",
        "snappy.Compress",
        "zlib.inflate",
    ],
    &[
        "grpc.(*ClientConn).Invoke",
        "proto.Marshal",
        "proto.Unmarshal",
        "syscall.Syscall",
        "net.(*conn).Write",
        "crypto/tls.(*Conn).Write",
    ],
    &[
        "runtime.gcDrain",
        "runtime.futex",
        "runtime.usleep",
        "sync.(*Mutex).Lock",
    ],
];
const VERBS: [&str; 12] = [
    "Handle", "Process", "Load", "Store", "Encode", "Decode", "Merge", "Validate", "Render",
    "Fetch", "Index", "Plan",
];
const NOUNS: [&str; 12] = [
    "Request", "Batch", "Record", "Query", "Page", "Session", "Order", "Event", "Span", "Block",
    "Cache", "Token",
];

struct Service {
    name: String,
    /// Stacks as function ids, root first.
    stacks: Vec<Vec<u32>>,
    /// Cumulative Zipf weights over `stacks`.
    cdf: Vec<f64>,
    /// Stacks whose leaf is a compression frame: drawn more often after the deploy.
    compression: Vec<u32>,
    /// The records its profiles are written from.
    records: Records,
}

/// A service's pprof records, written once. Each of the service's functions has
/// one function and one location, both with id = its index in `functions` + 1 in
/// every profile (pprof ids are the producer's choice), so a location record and a
/// stack's location ids are the same bytes in every profile; a profile only picks
/// the ones its samples use ([`Fleet::pprof`]).
struct Records {
    /// Fleet function id of each of the service's functions.
    functions: Vec<u32>,
    /// Each function's location record (field 4, header included).
    locations: Vec<Vec<u8>>,
    /// Each stack's location ids, leaf first, as a sample's packed field 1.
    ids: Vec<Vec<u8>>,
    /// Each stack's functions, as a bit set of `words` words.
    used: Vec<u64>,
    words: usize,
}

impl Records {
    fn new(stacks: &[Vec<u32>]) -> Records {
        let mut index: HashMap<u32, u32> = HashMap::new();
        let mut functions = Vec::new();
        for &f in stacks.iter().flatten() {
            index.entry(f).or_insert_with(|| {
                functions.push(f);
                functions.len() as u32 - 1
            });
        }
        let words = functions.len().div_ceil(64);
        let mut used = vec![0u64; stacks.len() * words];
        let mut ids = Vec::with_capacity(stacks.len());
        for (s, st) in stacks.iter().enumerate() {
            let local: Vec<u64> = st.iter().rev().map(|f| u64::from(index[f])).collect();
            for &k in &local {
                used[s * words + k as usize / 64] |= 1 << (k % 64);
            }
            let ids_of = || local.iter().map(|k| k + 1);
            let mut field = Msg::default();
            field.packed(1, payload_len(ids_of()), ids_of());
            ids.push(field.buf);
        }
        let locations = functions
            .iter()
            .enumerate()
            .map(|(k, &f)| {
                let id = k as u64 + 1;
                let (line_no, address) = (u64::from(f % 500) + 1, 0x40_0000 + u64::from(f) * 64);
                let line_len = uint_len(1, id) + uint_len(2, line_no);
                let len = uint_len(1, id)
                    + uint_len(2, 1)
                    + uint_len(3, address)
                    + field_len(4, line_len);
                let mut record = Msg::default();
                record
                    .header(4, len)
                    .uint(1, id)
                    .uint(2, 1)
                    .uint(3, address)
                    .header(4, line_len)
                    .uint(1, id)
                    .uint(2, line_no);
                record.buf
            })
            .collect();
        Records {
            functions,
            locations,
            ids,
            used,
            words,
        }
    }

    /// The functions the drawn stacks use, as a bit set.
    fn used_by(&self, drawn: &Drawn) -> Vec<u64> {
        let mut used = vec![0u64; self.words];
        for &(stack, _) in &drawn.counts {
            let from = stack as usize * self.words;
            if let Some(bits) = self.used.get(from..from + self.words) {
                for (u, b) in used.iter_mut().zip(bits) {
                    *u |= b;
                }
            }
        }
        used
    }
}

/// The set bits of a bit set, in increasing order.
fn bits(set: &[u64]) -> impl Iterator<Item = usize> + '_ {
    set.iter().enumerate().flat_map(|(w, &word)| {
        // `successors` also computes what follows the last word, 0: wrapping.
        std::iter::successors(Some(word), |&b| Some(b & b.wrapping_sub(1)))
            .take_while(|&b| b != 0)
            .map(move |b| w * 64 + b.trailing_zeros() as usize)
    })
}

pub struct Fleet {
    pub cfg: FleetConfig,
    /// Function names; id = index.
    pub functions: Vec<String>,
    /// Each function name as a string-table entry (field 6), ready to copy.
    name_fields: Vec<Vec<u8>>,
    services: Vec<Service>,
}

/// One profile's aggregated values: (stack index within the service, count).
pub struct Drawn {
    pub counts: Vec<(u32, i64)>,
}

impl Fleet {
    pub fn new(cfg: FleetConfig) -> Fleet {
        let mut functions: Vec<String> = Vec::new();
        let mut ids: HashMap<String, u32> = HashMap::new();
        let mut intern = |s: &str, functions: &mut Vec<String>| -> u32 {
            if let Some(&i) = ids.get(s) {
                return i;
            }
            let i = functions.len() as u32;
            functions.push(s.to_string());
            ids.insert(s.to_string(), i);
            i
        };
        let runtime: Vec<u32> = RUNTIME.iter().map(|f| intern(f, &mut functions)).collect();
        let rpc: Vec<u32> = RPC_SERVER
            .iter()
            .map(|f| intern(f, &mut functions))
            .collect();
        let libs: Vec<Vec<u32>> = LEAF_LIBS
            .iter()
            .map(|l| l.iter().map(|f| intern(f, &mut functions)).collect())
            .collect();
        let mut services = Vec::with_capacity(cfg.services);
        for s in 0..cfg.services {
            let name = format!("svc-{s:02}");
            let mut rng = Rng::keyed(cfg.seed, &[1, s as u64]);
            // Service code: a few hundred functions in a few packages.
            let own: Vec<u32> = (0..300)
                .map(|i| {
                    let f = format!(
                        "{name}/pkg{}.(*{}).{}{}",
                        i % 7,
                        NOUNS[rng.below(NOUNS.len())],
                        VERBS[rng.below(VERBS.len())],
                        NOUNS[rng.below(NOUNS.len())]
                    );
                    intern(&f, &mut functions)
                })
                .collect();
            let mut stacks = Vec::with_capacity(cfg.stacks_per_service);
            let mut compression = Vec::new();
            let mut seen = std::collections::HashSet::new();
            while stacks.len() < cfg.stacks_per_service {
                let depth = 10 + rng.below(51); // 10..=60
                let mut st: Vec<u32> = Vec::with_capacity(depth);
                st.push(runtime[0]);
                st.push(rpc[rng.below(3)]);
                st.push(rpc[3 + rng.below(3)]);
                // Leaf layer: 0 allocator, 1 compression, 2 rpc client, 3 runtime, 4 own code.
                let layer = match rng.below(10) {
                    0..=1 => 0,
                    2 => 1,
                    3..=4 => 2,
                    5 => 3,
                    _ => 4,
                };
                let leaf_len = if layer == 4 { 0 } else { 1 + rng.below(3) };
                while st.len() + leaf_len < depth {
                    // Service code walks "down" its packages so stacks share prefixes.
                    let prev = st.len() as u64;
                    let pick = (rng.below(40) + prev as usize * 7) % own.len();
                    st.push(own[pick]);
                }
                if layer < 4 {
                    let lib = &libs[layer];
                    let start = rng.below(lib.len());
                    for k in 0..leaf_len {
                        st.push(lib[(start + k) % lib.len()]);
                    }
                }
                if seen.insert(st.clone()) {
                    if layer == 1 {
                        compression.push(stacks.len() as u32);
                    }
                    stacks.push(st);
                }
            }
            let mut cdf = Vec::with_capacity(stacks.len());
            let mut acc = 0.0;
            for r in 0..stacks.len() {
                acc += 1.0 / ((r + 1) as f64).powf(cfg.zipf_s);
                cdf.push(acc);
            }
            services.push(Service {
                name,
                records: Records::new(&stacks),
                stacks,
                cdf,
                compression,
            });
        }
        let name_fields = functions.iter().map(|f| string_field(6, f)).collect();
        Fleet {
            cfg,
            functions,
            name_fields,
            services,
        }
    }

    pub fn service_name(&self, s: usize) -> &str {
        self.services.get(s).map_or("", |x| x.name.as_str())
    }
    /// Distinct zones: hosts `0..ZONES` have one each.
    pub const ZONES: usize = REGIONS.len() * 3;
    pub fn host_name(h: usize) -> String {
        format!("host-{h:03}")
    }
    pub fn region(h: usize) -> &'static str {
        REGIONS[h % REGIONS.len()]
    }
    pub fn zone(h: usize) -> String {
        format!(
            "{}{}",
            Self::region(h),
            ["a", "b", "c"][(h / REGIONS.len()) % 3]
        )
    }
    pub fn version(&self, ts_ms: i64) -> &'static str {
        if ts_ms >= self.cfg.deploy_ms {
            "v2"
        } else {
            "v1"
        }
    }
    /// Stack `stack` of `service` as function ids (into `functions`), root first.
    pub fn stack(&self, service: usize, stack: u32) -> Option<&[u32]> {
        self.services
            .get(service)?
            .stacks
            .get(stack as usize)
            .map(Vec::as_slice)
    }
    /// Global stack id (unique over the fleet).
    pub fn stack_gid(&self, service: usize, stack: u32) -> u64 {
        (service * self.cfg.stacks_per_service) as u64 + u64::from(stack)
    }

    /// The CPU samples of one profile.
    pub fn draw(&self, service: usize, host: usize, ts_ms: i64, draws: usize) -> Drawn {
        let Some(svc) = self.services.get(service) else {
            return Drawn { counts: Vec::new() };
        };
        let mut rng = Rng::keyed(
            self.cfg.seed,
            &[2, service as u64, host as u64, ts_ms as u64],
        );
        // Host load jitter: ±30 %.
        let n = ((draws as f64) * (0.7 + 0.6 * rng.unit())).max(1.0) as usize;
        let total = svc.cdf.last().copied().unwrap_or(1.0);
        let regress = ts_ms >= self.cfg.deploy_ms && !svc.compression.is_empty();
        let mut drawn: Vec<u32> = (0..n)
            .map(|_| {
                if regress && rng.below(8) == 0 {
                    svc.compression[rng.below(svc.compression.len())]
                } else {
                    let x = rng.unit() * total;
                    svc.cdf
                        .partition_point(|&c| c < x)
                        .min(svc.stacks.len() - 1) as u32
                }
            })
            .collect();
        // Sorted, then counted by runs: no hash map per profile.
        drawn.sort_unstable();
        let mut counts: Vec<(u32, i64)> = Vec::with_capacity(n);
        for idx in drawn {
            match counts.last_mut() {
                Some((last, c)) if *last == idx => *c += 1,
                _ => counts.push((idx, 1)),
            }
        }
        Drawn { counts }
    }

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

    /// Writes the stack dimension as CSV: `stack_id,service,leaf,stack` (stack is the
    /// root-first `a;b;c` of function names, quoted).
    pub fn write_stacks_csv(&self, path: &Path) -> anyhow::Result<()> {
        let f =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut w = std::io::BufWriter::new(f);
        writeln!(w, "stack_id,service,leaf,stack")?;
        for (s, svc) in self.services.iter().enumerate() {
            for (i, st) in svc.stacks.iter().enumerate() {
                let names: Vec<&str> = st
                    .iter()
                    .map(|&f| self.functions.get(f as usize).map_or("?", |x| x.as_str()))
                    .collect();
                writeln!(
                    w,
                    "{},{},\"{}\",\"{}\"",
                    self.stack_gid(s, i as u32),
                    svc.name,
                    names.last().copied().unwrap_or(""),
                    names.join(";")
                )?;
            }
        }
        w.flush()?;
        Ok(())
    }
}

/// A stand-in for a fixture profile when `../shared/fixtures` is absent: one busy
/// process's 10 s CPU profile from the generator (5,000 stacks, 20,000 draws).
pub fn generated_profile() -> Vec<u8> {
    let f = Fleet::new(FleetConfig {
        seed: 1,
        services: 1,
        stacks_per_service: 5000,
        draws_per_profile: 20_000,
        zipf_s: 1.1,
        deploy_ms: i64::MAX,
    });
    let ts = 1_700_000_000_000;
    let d = f.draw(0, 0, ts, 20_000);
    f.pprof(
        0,
        &d,
        ts,
        ("cpu", "nanoseconds", 10_000_000),
        &[("samples", "count", 1), ("cpu", "nanoseconds", 10_000_000)],
    )
    .to_vec()
}

/// The bytes of `path`, or a generated profile (with a note) when it does not exist.
pub fn profile_or_generated(path: &Path) -> anyhow::Result<Vec<u8>> {
    if path.exists() {
        return std::fs::read(path).with_context(|| format!("reading {}", path.display()));
    }
    println!(
        "profile {} not found: using a generated CPU profile instead",
        path.display()
    );
    Ok(generated_profile())
}

/// Real fixture profiles replayed across hosts: each push re-encodes a fixture with
/// the push's timestamp and its sample values scaled by a per-host jitter (±25 %).
pub struct Replay {
    profiles: Vec<(String, pprof::Profile)>,
}

impl Replay {
    /// Loads every decodable pprof file in `dir`; `None` when there is none.
    pub fn load(dir: &Path) -> Option<Replay> {
        let mut profiles = Vec::new();
        let mut entries: Vec<_> = std::fs::read_dir(dir).ok()?.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let Ok(raw) = std::fs::read(e.path()) else {
                continue;
            };
            let plain = if is_gzip(&raw) {
                match gunzip(&raw, usize::MAX) {
                    Ok(out) => out,
                    Err(_) => continue,
                }
            } else {
                raw
            };
            if let Ok(p) = pprof::Profile::decode(Bytes::from(plain)) {
                if !p.sample.is_empty() {
                    profiles.push((e.file_name().to_string_lossy().into_owned(), p));
                }
            }
        }
        (!profiles.is_empty()).then_some(Replay { profiles })
    }

    pub fn len(&self) -> usize {
        self.profiles.len()
    }

    /// The push of replay host `host` at `ts_ms`, under profile name `fixture`.
    pub fn push(&self, seed: u64, host: usize, ts_ms: i64) -> Option<RawProfileSeries> {
        let (name, base) = self.profiles.get(host % self.profiles.len())?;
        let mut rng = Rng::keyed(seed, &[3, host as u64, ts_ms as u64]);
        let mut p = base.clone();
        for s in &mut p.sample {
            let j = 0.75 + 0.5 * rng.unit();
            for v in &mut s.value {
                *v = ((*v as f64) * j) as i64;
            }
        }
        p.time_nanos = ts_ms * 1_000_000;
        let kv = |k: &str, v: String| LabelPair {
            name: k.into(),
            value: v,
        };
        Some(RawProfileSeries {
            labels: vec![
                kv("__name__", "fixture".into()),
                kv("service_name", format!("replay-{}", name.replace('.', "_"))),
                kv("host", format!("replay-{host:03}")),
            ],
            samples: vec![RawSample {
                raw_profile: p.encode_to_vec().into(),
                id: String::new(),
            }],
        })
    }
}

#[cfg(test)]
mod tests {
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
}
