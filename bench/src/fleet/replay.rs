//! Profiles from outside the generator: real fixtures replayed across hosts, and a
//! generated stand-in where a fixture is absent.

use super::*;

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
