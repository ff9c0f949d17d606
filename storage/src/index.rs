//! Inverted label index: for each label name and value, the roaring bitmap of series
//! ids carrying it. Matchers resolve against the value list of one name — a regex is
//! run once per distinct value, never once per series or row.

use std::collections::BTreeMap;

use roaring::RoaringBitmap;

use crate::codec::{put_uvarint, Reader};
use crate::error::{Result, StorageError};
use crate::selector::{MatchOp, Matcher};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelIndex {
    postings: BTreeMap<String, BTreeMap<String, RoaringBitmap>>,
    all: RoaringBitmap,
}

impl LabelIndex {
    pub fn add(&mut self, series: u32, name: &str, value: &str) {
        self.all.insert(series);
        // Avoid allocating the key strings on the hot path when they already exist.
        if let Some(values) = self.postings.get_mut(name) {
            if let Some(bm) = values.get_mut(value) {
                bm.insert(series);
            } else {
                values.insert(value.to_owned(), RoaringBitmap::from_iter([series]));
            }
        } else {
            let mut values = BTreeMap::new();
            values.insert(value.to_owned(), RoaringBitmap::from_iter([series]));
            self.postings.insert(name.to_owned(), values);
        }
    }

    /// Registers a series id even when it carries no labels.
    pub fn add_series(&mut self, series: u32) {
        self.all.insert(series);
    }

    pub fn all(&self) -> &RoaringBitmap {
        &self.all
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.postings.keys().map(|s| s.as_str())
    }

    pub fn values(&self, name: &str) -> impl Iterator<Item = (&str, &RoaringBitmap)> {
        self.postings
            .get(name)
            .into_iter()
            .flat_map(|m| m.iter().map(|(k, v)| (k.as_str(), v)))
    }

    fn union_where(&self, name: &str, pred: impl Fn(&str) -> bool) -> RoaringBitmap {
        let mut out = RoaringBitmap::new();
        for (v, bm) in self.values(name) {
            if pred(v) {
                out |= bm;
            }
        }
        out
    }

    /// Series matched by one matcher. A series without the label is treated as having
    /// the empty value, as Prometheus does.
    pub fn select_one(&self, m: &Matcher) -> RoaringBitmap {
        if m.op == MatchOp::Eq && !m.value.is_empty() {
            return self
                .postings
                .get(&m.name)
                .and_then(|vals| vals.get(&m.value))
                .cloned()
                .unwrap_or_default();
        }
        let with_label = self.union_where(&m.name, |_| true);
        let mut out = self.union_where(&m.name, |v| m.matches(v));
        if m.matches("") {
            out |= &self.all - &with_label;
        }
        out
    }

    /// Series matched by all matchers.
    pub fn select(&self, matchers: &[Matcher]) -> RoaringBitmap {
        // Equality matchers are cheapest and most selective: apply them first.
        let mut order: Vec<&Matcher> = matchers.iter().collect();
        order.sort_by_key(|m| m.op != MatchOp::Eq || m.value.is_empty());
        let mut out = self.all.clone();
        for m in order {
            if out.is_empty() {
                break;
            }
            out &= self.select_one(m);
        }
        out
    }

    /// Label names carried by at least one of `series`.
    pub fn names_in(&self, series: &RoaringBitmap) -> Vec<String> {
        self.postings
            .iter()
            .filter(|(_, vals)| vals.values().any(|bm| !bm.is_disjoint(series)))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Values of `name` carried by at least one of `series`.
    pub fn values_in(&self, name: &str, series: &RoaringBitmap) -> Vec<String> {
        self.values(name)
            .filter(|(_, bm)| !bm.is_disjoint(series))
            .map(|(v, _)| v.to_string())
            .collect()
    }

    pub fn approx_bytes(&self) -> usize {
        self.postings
            .iter()
            .map(|(k, vals)| {
                k.len()
                    + 48
                    + vals
                        .iter()
                        .map(|(v, bm)| v.len() + 48 + bm.serialized_size())
                        .sum::<usize>()
            })
            .sum::<usize>()
            + self.all.serialized_size()
    }

    /// Encodes with string ids from `intern` (the segment's string table).
    ///
    /// Layout: `count(names)`, then per name `name_sid, count(values)`, then per value
    /// `value_sid, len, roaring portable bytes`.
    pub fn encode(&self, mut sid: impl FnMut(&str) -> u32) -> Vec<u8> {
        let mut out = Vec::new();
        put_uvarint(&mut out, self.postings.len() as u64);
        let mut buf = Vec::new();
        for (name, vals) in &self.postings {
            put_uvarint(&mut out, sid(name).into());
            put_uvarint(&mut out, vals.len() as u64);
            for (v, bm) in vals {
                put_uvarint(&mut out, sid(v).into());
                buf.clear();
                // Writing into a Vec cannot fail.
                let _ = bm.serialize_into(&mut buf);
                put_uvarint(&mut out, buf.len() as u64);
                out.extend_from_slice(&buf);
            }
        }
        out
    }

    pub fn decode(bytes: &[u8], strings: &[String], series_count: u32) -> Result<Self> {
        let mut r = Reader::new(bytes, "label index section");
        let mut idx = LabelIndex::default();
        idx.all.insert_range(0..series_count);
        let get = |id: u32| {
            strings
                .get(id as usize)
                .cloned()
                .ok_or_else(|| StorageError::Corrupt("label index refers to missing string".into()))
        };
        let n = r.count(2)?;
        for _ in 0..n {
            let name = get(r.u32v()?)?;
            let nv = r.count(2)?;
            let mut vals = BTreeMap::new();
            for _ in 0..nv {
                let value = get(r.u32v()?)?;
                let raw = r.len_prefixed()?;
                let bm = RoaringBitmap::deserialize_from(raw).map_err(|e| {
                    StorageError::Corrupt(format!("label index bitmap for {name}={value}: {e}"))
                })?;
                if bm.max().is_some_and(|m| m >= series_count) {
                    return Err(StorageError::Corrupt(format!(
                        "label index bitmap for {name}={value} names series past the series table"
                    )));
                }
                vals.insert(value, bm);
            }
            idx.postings.insert(name, vals);
        }
        Ok(idx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::Selector;
    use proptest::prelude::*;

    fn labels_strategy() -> impl Strategy<Value = Vec<Vec<(u8, u8)>>> {
        prop::collection::vec(prop::collection::vec((0u8..4, 0u8..5), 0..4), 1..60)
    }

    proptest! {
        /// Every matcher kind, on random series, equals evaluating it label by label.
        #[test]
        fn index_answers_equal_brute_force(series in labels_strategy(), name in 0u8..4, value in 0u8..5, op in 0u8..4) {
            let mut idx = LabelIndex::default();
            let mut sets: Vec<BTreeMap<String, String>> = Vec::new();
            for (id, pairs) in series.iter().enumerate() {
                let mut m = BTreeMap::new();
                for (n, v) in pairs {
                    m.insert(format!("l{n}"), format!("v{v}"));
                }
                idx.add_series(id as u32);
                for (n, v) in &m {
                    idx.add(id as u32, n, v);
                }
                sets.push(m);
            }
            let op = [MatchOp::Eq, MatchOp::Ne, MatchOp::Re, MatchOp::Nre][op as usize];
            let val = if op == MatchOp::Re || op == MatchOp::Nre { format!("v[{value}-4]|") } else { format!("v{value}") };
            let m = Matcher::new(format!("l{name}"), op, val).unwrap();
            let sel = Selector::new(vec![m.clone(), Matcher::new("l0", MatchOp::Ne, "v1").unwrap()]);
            let got: Vec<u32> = idx.select(&sel.matchers).iter().collect();
            let want: Vec<u32> = sets.iter().enumerate()
                .filter(|(_, s)| sel.matches(|k| s.get(k).map(|x| x.as_str())))
                .map(|(i, _)| i as u32).collect();
            prop_assert_eq!(got, want);

            // Encoding keeps every answer.
            let mut strings: Vec<String> = Vec::new();
            let enc = idx.encode(|s| {
                if let Some(p) = strings.iter().position(|x| x == s) { p as u32 } else { strings.push(s.to_string()); (strings.len() - 1) as u32 }
            });
            let back = LabelIndex::decode(&enc, &strings, series.len() as u32).unwrap();
            prop_assert_eq!(back, idx);
        }
    }

    #[test]
    fn absent_label_counts_as_empty() {
        let mut idx = LabelIndex::default();
        idx.add(0, "env", "prod");
        idx.add_series(1);
        let sel = |s: &str| idx.select(&Selector::parse(s).unwrap().matchers);
        assert_eq!(sel(r#"{env=""}"#).iter().collect::<Vec<_>>(), vec![1]);
        assert_eq!(sel(r#"{env!="prod"}"#).iter().collect::<Vec<_>>(), vec![1]);
        assert_eq!(sel(r#"{env=~"prod|"}"#).len(), 2);
        assert_eq!(sel(r#"{env=~".+"}"#).iter().collect::<Vec<_>>(), vec![0]);
        assert_eq!(
            idx.names_in(&RoaringBitmap::from_iter([1])),
            Vec::<String>::new()
        );
        assert_eq!(idx.values_in("env", idx.all()), vec!["prod"]);
    }
}
