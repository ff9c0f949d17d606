//! What a pprof file holds, read with prost straight from the file: the oracle the
//! query and UI tests compare the server's answers with. Nothing here asks the
//! server.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;

use prost::Message;

use crate::common::pprof::Profile;

/// A stack (root first, one frame per inlined line) and its value.
pub type Stacks = Vec<(Vec<String>, i64)>;

/// A fixture's profile (gzip'd or not).
pub fn decode(bytes: &[u8]) -> Profile {
    let raw = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .read_to_end(&mut out)
            .expect("gunzip");
        out
    } else {
        bytes.to_vec()
    };
    Profile::decode(raw.as_slice()).expect("a pprof profile")
}

/// The profile with its time set to `time_ms`, encoded (so fixtures recorded years
/// apart share one range).
pub fn retimed(p: &Profile, time_ms: i64) -> Vec<u8> {
    let mut p = p.clone();
    p.time_nanos = time_ms * 1_000_000;
    p.encode_to_vec()
}

fn string(p: &Profile, i: i64) -> String {
    p.string_table
        .get(i as usize)
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default()
}

/// The stacks of sample type `sample_type`, values × `scale`; samples with a
/// negative value are dropped, as Pyroscope's normalisation does.
pub fn stacks(p: &Profile, sample_type: &str, scale: i64) -> Stacks {
    let index = p
        .sample_type
        .iter()
        .position(|vt| string(p, vt.r#type) == sample_type)
        .unwrap_or_else(|| panic!("no sample type {sample_type}"));
    let functions: BTreeMap<u64, String> = p
        .function
        .iter()
        .map(|f| (f.id, string(p, f.name)))
        .collect();
    let locations: BTreeMap<u64, Vec<String>> = p
        .location
        .iter()
        .map(|l| {
            let names: Vec<String> = l
                .line
                .iter()
                .map(|x| functions[&x.function_id].clone())
                .collect();
            assert!(
                !names.is_empty(),
                "the oracle reads symbolized profiles only"
            );
            (l.id, names)
        })
        .collect();
    p.sample
        .iter()
        .filter(|s| s.value.iter().all(|&v| v >= 0) && s.value[index] != 0)
        .map(|s| {
            // Locations leaf first, each location's lines innermost first.
            let mut frames: Vec<String> = s
                .location_id
                .iter()
                .flat_map(|id| locations[id].iter().cloned())
                .collect();
            frames.reverse();
            (frames, s.value[index] * scale)
        })
        .collect()
}

pub fn sum(stacks: &Stacks) -> i64 {
    stacks.iter().map(|(_, v)| v).sum()
}

/// Self value per function: the stacks ending in it.
pub fn self_by_function(stacks: &Stacks) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for (frames, v) in stacks {
        if let Some(leaf) = frames.last() {
            *out.entry(leaf.clone()).or_insert(0) += v;
        }
    }
    out
}

/// Total value per function: the stacks containing it, each once.
pub fn total_by_function(stacks: &Stacks) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for (frames, v) in stacks {
        let distinct: BTreeSet<&String> = frames.iter().collect();
        for f in distinct {
            *out.entry(f.clone()).or_insert(0) += v;
        }
    }
    out
}

/// The value of the stacks with a frame `re` matches.
pub fn matching(stacks: &Stacks, re: &regex::Regex) -> i64 {
    stacks
        .iter()
        .filter(|(frames, _)| frames.iter().any(|f| re.is_match(f)))
        .map(|(_, v)| v)
        .sum()
}

/// Functions by self value, largest first (then total, then name): the order of
/// a top-functions table.
pub fn ranked(stacks: &Stacks) -> Vec<(String, i64, i64)> {
    let totals = total_by_function(stacks);
    let selfs = self_by_function(stacks);
    let mut rows: Vec<(String, i64, i64)> = totals
        .iter()
        .map(|(f, &t)| (f.clone(), selfs.get(f).copied().unwrap_or(0), t))
        .collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)).then(a.0.cmp(&b.0)));
    rows
}
