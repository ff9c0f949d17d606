//! Series label sets and the reserved label names.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Label carrying the profile type id (`name:sample_type:sample_unit:period_type:period_unit`).
pub const PROFILE_TYPE_LABEL: &str = "__profile_type__";
/// Label carrying the profile name part (`process_cpu`, `memory`, …).
pub const NAME_LABEL: &str = "__name__";
/// Label naming the service that produced the samples.
pub const SERVICE_NAME_LABEL: &str = "service_name";

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

    /// A 64-bit fingerprint of the label set: FNV-1a over the length-prefixed names
    /// and values. It is fixed by this definition (not by a hasher that may change
    /// between releases), so identifiers built on it stay valid across restarts and
    /// versions; the length prefixes keep `{a="bc"}` and `{ab="c"}` apart.
    pub fn fingerprint(&self) -> u64 {
        const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
        const PRIME: u64 = 0x0000_0100_0000_01b3;
        let mut h = OFFSET;
        let mut eat = |bytes: &[u8]| {
            for b in (bytes.len() as u64).to_le_bytes().iter().chain(bytes) {
                h ^= u64::from(*b);
                h = h.wrapping_mul(PRIME);
            }
        };
        for (k, v) in &self.0 {
            eat(k.as_bytes());
            eat(v.as_bytes());
        }
        h
    }

    /// The value of label `name`, if present.
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

    /// Removes label `name`, returning its value.
    pub fn remove(&mut self, name: &str) -> Option<String> {
        self.0
            .binary_search_by(|(k, _)| k.as_str().cmp(name))
            .ok()
            .map(|i| self.0.remove(i).1)
    }

    /// `(name, value)` pairs, sorted by name.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Number of labels.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no labels.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_is_fnv1a_of_length_prefixed_pairs() {
        // Values computed independently (a few lines of Python over the same rule).
        assert_eq!(Labels::default().fingerprint(), 0xcbf2_9ce4_8422_2325);
        let shop = Labels::new([("service_name", "shop")]);
        assert_eq!(shop.fingerprint(), 0x6a6c_ca34_b64b_675e);
        assert_eq!(
            Labels::new([("a", "bc")]).fingerprint(),
            0xba1e_1f0e_0704_d8ea
        );
        assert_eq!(
            Labels::new([("ab", "c")]).fingerprint(),
            0x7e60_470b_f599_cad6
        );
        // Order of construction does not matter: the set is sorted first.
        let ab = Labels::new([("b", "2"), ("a", "1")]);
        assert_eq!(
            ab.fingerprint(),
            Labels::new([("a", "1"), ("b", "2")]).fingerprint()
        );
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
}
