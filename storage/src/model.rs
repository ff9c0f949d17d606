//! The data model every layer speaks: tenants, label sets, and write batches.
//!
//! A batch mirrors the shape of a pprof profile on purpose: it carries its own small
//! symbol tables (mappings, functions, locations) and stacks refer to locations by
//! index. Decoders can then hand over a profile without materialising one string per
//! frame per sample, and the head remaps each symbol once per batch.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Label carrying the profile type id (`name:sample_type:sample_unit:period_type:period_unit`).
pub const PROFILE_TYPE_LABEL: &str = "__profile_type__";
/// Label carrying the profile name part (`process_cpu`, `memory`, …).
pub const NAME_LABEL: &str = "__name__";
/// Label naming the service that produced the samples.
pub const SERVICE_NAME_LABEL: &str = "service_name";

/// Maximum length of a tenant id.
pub const MAX_TENANT_LEN: usize = 64;

/// A validated tenant id: 1–64 characters out of `[A-Za-z0-9_.-]`, not `.` or `..`.
///
/// Tenant ids become directory names, so anything that could escape the data
/// directory is rejected at construction.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TenantId(String);

/// Why a tenant id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid tenant id {id:?}: {reason}")]
pub struct InvalidTenant {
    pub id: String,
    pub reason: &'static str,
}

impl TenantId {
    /// The tenant used when a request names none (Pyroscope's convention).
    pub const DEFAULT: &'static str = "anonymous";

    pub fn new(id: impl Into<String>) -> Result<Self, InvalidTenant> {
        let id = id.into();
        let reason = if id.is_empty() {
            Some("must not be empty")
        } else if id.len() > MAX_TENANT_LEN {
            Some("longer than 64 characters")
        } else if id == "." || id == ".." {
            Some("must not be . or ..")
        } else if !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        {
            Some("only letters, digits, '_', '-' and '.' are allowed")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(InvalidTenant { id, reason }),
            None => Ok(TenantId(id)),
        }
    }

    pub fn default_tenant() -> Self {
        TenantId(Self::DEFAULT.to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for TenantId {
    fn default() -> Self {
        Self::default_tenant()
    }
}

impl TryFrom<String> for TenantId {
    type Error = InvalidTenant;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        TenantId::new(value)
    }
}

impl From<TenantId> for String {
    fn from(value: TenantId) -> Self {
        value.0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A series label set: pairs sorted by name, names unique, values non-empty.
///
/// Prometheus semantics: a label with an empty value is the same as an absent label,
/// so empty values are dropped on construction.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(from = "Vec<(String, String)>", into = "Vec<(String, String)>")]
pub struct Labels(Vec<(String, String)>);

impl Labels {
    /// Builds a label set; for duplicate names the last value wins.
    pub fn new<I, K, V>(pairs: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let mut v: Vec<(String, String)> = pairs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        // Stable sort keeps insertion order among equal names, so keeping the last of a
        // run implements "last wins".
        v.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(String, String)> = Vec::with_capacity(v.len());
        for (k, val) in v {
            match out.last_mut() {
                Some(last) if last.0 == k => last.1 = val,
                _ => out.push((k, val)),
            }
        }
        out.retain(|(_, v)| !v.is_empty());
        Labels(out)
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| k.as_str().cmp(name))
            .ok()
            .map(|i| self.0[i].1.as_str())
    }

    /// Sets `name` to `value` (removing it when `value` is empty).
    pub fn set(&mut self, name: impl Into<String>, value: impl Into<String>) {
        let name = name.into();
        let value = value.into();
        match self.0.binary_search_by(|(k, _)| k.as_str().cmp(&name)) {
            Ok(i) if value.is_empty() => {
                self.0.remove(i);
            }
            Ok(i) => self.0[i].1 = value,
            Err(_) if value.is_empty() => {}
            Err(i) => self.0.insert(i, (name, value)),
        }
    }

    pub fn remove(&mut self, name: &str) -> Option<String> {
        self.0
            .binary_search_by(|(k, _)| k.as_str().cmp(name))
            .ok()
            .map(|i| self.0.remove(i).1)
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The profile type id of this series, if the label is present.
    pub fn profile_type(&self) -> Option<&str> {
        self.get(PROFILE_TYPE_LABEL)
    }
}

impl From<Vec<(String, String)>> for Labels {
    fn from(v: Vec<(String, String)>) -> Self {
        Labels::new(v)
    }
}

impl From<Labels> for Vec<(String, String)> {
    fn from(l: Labels) -> Self {
        l.0
    }
}

impl fmt::Display for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{k}={v:?}")?;
        }
        f.write_str("}")
    }
}

/// A binary or shared library a frame belongs to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Mapping {
    /// Path or name of the mapped file (`/usr/lib/libc.so.6`).
    pub file: String,
    /// Hex build id, empty when unknown.
    pub build_id: String,
}

/// A function as a symbolizer names it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Function {
    pub name: String,
    /// Source file, empty when unknown.
    pub file: String,
}

/// One frame of a stack. An inlined pprof location expands to several of these.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Location {
    /// Index into [`Symbols::functions`]; `None` for an unsymbolized frame.
    pub function: Option<u32>,
    /// Index into [`Symbols::mappings`].
    pub mapping: Option<u32>,
    /// Instruction address; kept so unsymbolized frames can be symbolized later.
    pub address: u64,
    /// Source line, 0 when unknown.
    pub line: u32,
}

/// Symbol tables of one batch. Indices are positions in the vectors.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Symbols {
    pub mappings: Vec<Mapping>,
    pub functions: Vec<Function>,
    pub locations: Vec<Location>,
}

/// Stacks of one batch, stored flat. Each stack is a list of location indices,
/// **root first**.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stacks {
    offsets: Vec<u32>,
    locations: Vec<u32>,
}

impl Stacks {
    /// Appends a stack (root first) and returns its index.
    pub fn push(&mut self, root_first: &[u32]) -> u32 {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        self.locations.extend_from_slice(root_first);
        self.offsets.push(self.locations.len() as u32);
        (self.offsets.len() - 2) as u32
    }

    /// Appends a stack given leaf first (pprof order) and returns its index.
    pub fn push_leaf_first(&mut self, leaf_first: impl DoubleEndedIterator<Item = u32>) -> u32 {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        let start = self.locations.len();
        self.locations.extend(leaf_first);
        self.locations[start..].reverse();
        self.offsets.push(self.locations.len() as u32);
        (self.offsets.len() - 2) as u32
    }

    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The stack at `index`, root first; `None` when out of range or malformed.
    pub fn get(&self, index: u32) -> Option<&[u32]> {
        let i = index as usize;
        let start = *self.offsets.get(i)? as usize;
        let end = *self.offsets.get(i + 1)? as usize;
        self.locations.get(start..end)
    }

    pub fn iter(&self) -> impl Iterator<Item = &[u32]> {
        (0..self.len() as u32).filter_map(move |i| self.get(i))
    }
}

/// One observation: at `timestamp_ms` the stack was seen with `value`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// Milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    /// Index into [`Batch::stacks`].
    pub stack: u32,
    pub value: i64,
}

/// Samples of one series (profile type + labels).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeriesSamples {
    /// Must contain [`PROFILE_TYPE_LABEL`].
    pub labels: Labels,
    pub samples: Vec<Sample>,
}

/// A unit of writing: everything one request carries for one tenant.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    pub tenant: TenantId,
    pub symbols: Symbols,
    pub stacks: Stacks,
    pub series: Vec<SeriesSamples>,
}

impl Batch {
    pub fn new(tenant: TenantId) -> Self {
        Batch {
            tenant,
            ..Default::default()
        }
    }

    /// Number of samples across all series.
    pub fn sample_count(&self) -> usize {
        self.series.iter().map(|s| s.samples.len()).sum()
    }

    /// Checks every index and label rule, so the head never sees a dangling reference.
    pub fn validate(&self) -> Result<(), String> {
        let syms = &self.symbols;
        for (i, loc) in syms.locations.iter().enumerate() {
            if let Some(f) = loc.function {
                if f as usize >= syms.functions.len() {
                    return Err(format!("location {i} refers to missing function {f}"));
                }
            }
            if let Some(m) = loc.mapping {
                if m as usize >= syms.mappings.len() {
                    return Err(format!("location {i} refers to missing mapping {m}"));
                }
            }
        }
        let nlocs = syms.locations.len() as u32;
        if let Some(bad) = self.stacks.locations.iter().find(|&&l| l >= nlocs) {
            return Err(format!("a stack refers to missing location {bad}"));
        }
        if self.stacks.offsets.windows(2).any(|w| w[0] > w[1])
            || self
                .stacks
                .offsets
                .last()
                .is_some_and(|&e| e as usize != self.stacks.locations.len())
        {
            return Err("malformed stack offsets".into());
        }
        let nstacks = self.stacks.len() as u32;
        for s in &self.series {
            if s.labels.profile_type().is_none() {
                return Err(format!(
                    "series {} has no {PROFILE_TYPE_LABEL} label",
                    s.labels
                ));
            }
            if let Some(bad) = s.samples.iter().find(|x| x.stack >= nstacks) {
                return Err(format!("a sample refers to missing stack {}", bad.stack));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_ids_reject_path_characters() {
        assert!(TenantId::new("team-a_1.prod").is_ok());
        for bad in ["", ".", "..", "a/b", "a\\b", "x y", &"a".repeat(65)] {
            assert!(TenantId::new(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn labels_sort_dedup_and_drop_empty() {
        let l = Labels::new([("b", "1"), ("a", "x"), ("b", "2"), ("c", "")]);
        assert_eq!(l.iter().collect::<Vec<_>>(), vec![("a", "x"), ("b", "2")]);
        let mut l = l;
        l.set("c", "3");
        l.set("a", "");
        assert_eq!(l.iter().collect::<Vec<_>>(), vec![("b", "2"), ("c", "3")]);
        assert_eq!(l.to_string(), r#"{b="2", c="3"}"#);
    }

    #[test]
    fn stacks_round_trip_both_orders() {
        let mut s = Stacks::default();
        assert_eq!(s.push(&[1, 2, 3]), 0);
        assert_eq!(s.push_leaf_first([6, 5, 4].into_iter()), 1);
        assert_eq!(s.push(&[]), 2);
        assert_eq!(s.get(0), Some(&[1, 2, 3][..]));
        assert_eq!(s.get(1), Some(&[4, 5, 6][..]));
        assert_eq!(s.get(2), Some(&[][..]));
        assert_eq!(s.get(3), None);
    }

    #[test]
    fn validate_catches_dangling_indices() {
        let mut b = Batch::new(TenantId::default());
        b.symbols.locations.push(Location {
            function: Some(3),
            ..Default::default()
        });
        assert!(b.validate().unwrap_err().contains("missing function"));
        b.symbols.locations[0].function = None;
        let st = b.stacks.push(&[0]);
        b.series.push(SeriesSamples {
            labels: Labels::new([("service_name", "x")]),
            samples: vec![Sample {
                timestamp_ms: 0,
                stack: st,
                value: 1,
            }],
        });
        assert!(b.validate().unwrap_err().contains(PROFILE_TYPE_LABEL));
        b.series[0].labels.set(PROFILE_TYPE_LABEL, "a:b:c:d:e");
        b.series[0].samples[0].stack = 9;
        assert!(b.validate().unwrap_err().contains("missing stack"));
        b.series[0].samples[0].stack = 0;
        assert_eq!(b.validate(), Ok(()));
    }
}
