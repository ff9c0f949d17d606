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

mod encode;
mod replay;

pub use replay::{profile_or_generated, Replay};

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

#[cfg(test)]
mod tests;
