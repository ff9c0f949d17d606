//! Per-segment dictionaries: strings, mappings, functions, locations and the stack tree.
//!
//! A stack is stored as a path in a tree of `(parent, location)` nodes; the stack id is
//! its leaf node. Shared prefixes — the runtime, the RPC layer — are stored once, which
//! is where most of the space saving over pprof comes from. Nodes are numbered so a
//! parent always precedes its children; one forward pass over the nodes can therefore
//! map a whole tree, and one backward pass can push values up to the roots.

use rustc_hash::FxHashMap;

use crate::codec::{put_bytes, put_uvarint, Reader};
use crate::error::{Result, StorageError};

/// Marks a stack-tree node without a parent (a root frame).
pub const NO_PARENT: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MappingRec {
    pub file: u32,
    pub build_id: u32,
    pub range: MappingRange,
}

/// Where a mapping lay in its process: what turns a frame's address into a file
/// offset for symbolization (all zeros when the producer did not say).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MappingRange {
    pub start: u64,
    pub limit: u64,
    pub offset: u64,
}

impl MappingRange {
    pub fn of(m: &crate::model::Mapping) -> Self {
        MappingRange {
            start: m.start,
            limit: m.limit,
            offset: m.offset,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FunctionRec {
    pub name: u32,
    pub file: u32,
}

/// One frame. `function` and `mapping` are `None` when unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LocationRec {
    pub function: Option<u32>,
    pub mapping: Option<u32>,
    pub address: u64,
    pub line: u32,
}

/// The frozen tables. Ids are positions. Every id stored in one table is checked on
/// decode to be in range of the table it refers to, so readers may index freely.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dict {
    pub strings: Vec<String>,
    pub mappings: Vec<MappingRec>,
    pub functions: Vec<FunctionRec>,
    pub locations: Vec<LocationRec>,
    /// Parent of each stack node, [`NO_PARENT`] for roots. `parents[i] < i` otherwise.
    pub parents: Vec<u32>,
    /// Location of each stack node.
    pub node_locations: Vec<u32>,
}

impl Dict {
    pub fn str(&self, id: u32) -> &str {
        self.strings.get(id as usize).map_or("", |s| s.as_str())
    }

    /// Walks from `node` towards the root until `known` gives a value for a node,
    /// and returns it (`None` past the root). `path` receives the nodes passed on the
    /// way, leaf first, for the caller to fill in root-first. Parents precede their
    /// children (checked at decode), so the walk ends.
    pub fn climb_until<T>(
        &self,
        node: u32,
        path: &mut Vec<u32>,
        mut known: impl FnMut(u32) -> Option<T>,
    ) -> Option<T> {
        path.clear();
        let mut n = node;
        loop {
            if let Some(v) = known(n) {
                return Some(v);
            }
            path.push(n);
            match self.parents.get(n as usize) {
                Some(&p) if p != NO_PARENT && p < n => n = p,
                _ => return None,
            }
        }
    }

    pub fn node_count(&self) -> usize {
        self.parents.len()
    }

    /// The frames of stack `leaf`, root first.
    pub fn stack(&self, leaf: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut n = leaf;
        while let (Some(&loc), Some(&p)) = (
            self.node_locations.get(n as usize),
            self.parents.get(n as usize),
        ) {
            out.push(loc);
            if p == NO_PARENT {
                break;
            }
            n = p;
        }
        out.reverse();
        out
    }

    /// Rough heap footprint, used for the head's memory bound and cache weights.
    pub fn approx_bytes(&self) -> usize {
        self.strings.iter().map(|s| s.len() + 24).sum::<usize>()
            + self.mappings.len() * 8
            + self.functions.len() * 8
            + self.locations.len() * 24
            + self.parents.len() * 8
    }
}

/// A [`Dict`] under construction, with the reverse maps needed to intern.
#[derive(Default)]
pub struct DictBuilder {
    dict: Dict,
    string_ids: FxHashMap<String, u32>,
    /// The empty string's id once interned. It never goes through `string_ids`:
    /// see [`crate::byte_eq`].
    empty_id: Option<u32>,
    mapping_ids: FxHashMap<MappingRec, u32>,
    function_ids: FxHashMap<FunctionRec, u32>,
    location_ids: FxHashMap<LocationRec, u32>,
    children: FxHashMap<u64, u32>,
    /// Whole-stack shortcut: hash of a root-first location path → its leaf node.
    /// Verified against the tree on every hit, so a hash collision only costs a walk.
    stack_hashes: FxHashMap<u64, u32>,
    string_bytes: usize,
}

#[cfg(test)]
impl DictBuilder {
    /// A builder holding one stack: function `f` of `x.go` at address 1, line 1.
    /// Returns it and the stack's leaf node.
    pub(crate) fn with_one_stack() -> (DictBuilder, u32) {
        let mut b = DictBuilder::new();
        let f = b.function("f", "x.go");
        let l = b.location(LocationRec {
            function: Some(f),
            mapping: None,
            address: 1,
            line: 1,
        });
        let stack = b.stack(&[l]);
        (b, stack)
    }

    /// The stack of functions named by letters (`0` is `a`, in `x.rs`), every
    /// frame at `line`; returns its leaf node.
    pub(crate) fn letter_stack(&mut self, letters: &[u8], line: u32) -> u32 {
        let locs: Vec<u32> = letters
            .iter()
            .map(|&n| {
                let function = Some(self.function(&((b'a' + n) as char).to_string(), "x.rs"));
                self.location(LocationRec {
                    function,
                    mapping: None,
                    address: 0,
                    line,
                })
            })
            .collect();
        self.stack(&locs)
    }
}

impl DictBuilder {
    pub fn new() -> Self {
        let mut b = DictBuilder::default();
        // String 0 is the empty string, as in pprof, so "no file" costs nothing.
        b.intern("");
        b
    }

    /// A builder that goes on from `dict`, every id as it was: what a segment
    /// written on a symbol base numbers its symbols and nodes after.
    pub(crate) fn from_dict(dict: Dict) -> Self {
        let mut b = DictBuilder::default();
        for (i, s) in dict.strings.iter().enumerate() {
            if s.is_empty() {
                b.empty_id.get_or_insert(i as u32);
                continue;
            }
            b.string_ids.entry(s.clone()).or_insert(i as u32);
            b.string_bytes += s.len();
        }
        for (i, m) in dict.mappings.iter().enumerate() {
            b.mapping_ids.entry(*m).or_insert(i as u32);
        }
        for (i, f) in dict.functions.iter().enumerate() {
            b.function_ids.entry(*f).or_insert(i as u32);
        }
        for (i, l) in dict.locations.iter().enumerate() {
            b.location_ids.entry(*l).or_insert(i as u32);
        }
        b.children.reserve(dict.parents.len());
        for (i, (&p, &l)) in dict.parents.iter().zip(&dict.node_locations).enumerate() {
            let key = (u64::from(p) << 32) | u64::from(l);
            b.children.entry(key).or_insert(i as u32);
        }
        b.dict = dict;
        b
    }

    pub fn dict(&self) -> &Dict {
        &self.dict
    }

    pub fn finish(self) -> Dict {
        self.dict
    }

    pub fn intern(&mut self, s: &str) -> u32 {
        if s.is_empty() {
            if let Some(id) = self.empty_id {
                return id;
            }
        } else if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.dict.strings.len() as u32;
        self.dict.strings.push(s.to_owned());
        if s.is_empty() {
            self.empty_id = Some(id);
        } else {
            self.string_ids.insert(s.to_owned(), id);
        }
        self.string_bytes += s.len();
        id
    }

    pub fn mapping(&mut self, file: &str, build_id: &str, range: MappingRange) -> u32 {
        let rec = MappingRec {
            file: self.intern(file),
            build_id: self.intern(build_id),
            range,
        };
        self.mapping_rec(rec)
    }

    /// Interns a mapping whose string ids already belong to this builder.
    pub(crate) fn mapping_rec(&mut self, rec: MappingRec) -> u32 {
        *self.mapping_ids.entry(rec).or_insert_with(|| {
            self.dict.mappings.push(rec);
            (self.dict.mappings.len() - 1) as u32
        })
    }

    pub fn function(&mut self, name: &str, file: &str) -> u32 {
        let rec = FunctionRec {
            name: self.intern(name),
            file: self.intern(file),
        };
        self.function_rec(rec)
    }

    /// Interns a function whose string ids already belong to this builder.
    pub(crate) fn function_rec(&mut self, rec: FunctionRec) -> u32 {
        *self.function_ids.entry(rec).or_insert_with(|| {
            self.dict.functions.push(rec);
            (self.dict.functions.len() - 1) as u32
        })
    }

    /// Interns a location whose function/mapping ids already belong to this builder.
    pub fn location(&mut self, rec: LocationRec) -> u32 {
        *self.location_ids.entry(rec).or_insert_with(|| {
            self.dict.locations.push(rec);
            (self.dict.locations.len() - 1) as u32
        })
    }

    /// Interns the child of `parent` at `location` and returns its node id.
    pub fn child(&mut self, parent: u32, location: u32) -> u32 {
        let key = (u64::from(parent) << 32) | u64::from(location);
        *self.children.entry(key).or_insert_with(|| {
            self.dict.parents.push(parent);
            self.dict.node_locations.push(location);
            (self.dict.parents.len() - 1) as u32
        })
    }

    /// Interns a root-first stack of builder location ids; returns the leaf node id.
    /// An empty stack maps to a single "unknown" frame so its value is not lost.
    pub fn stack(&mut self, root_first: &[u32]) -> u32 {
        if root_first.is_empty() {
            let unknown = self.location(LocationRec {
                function: None,
                mapping: None,
                address: 0,
                line: 0,
            });
            return self.child(NO_PARENT, unknown);
        }
        let hash = {
            use std::hash::{Hash, Hasher};
            let mut h = rustc_hash::FxHasher::default();
            root_first.hash(&mut h);
            h.finish()
        };
        if let Some(&leaf) = self.stack_hashes.get(&hash) {
            if self.path_is(leaf, root_first) {
                return leaf;
            }
        }
        let mut node = NO_PARENT;
        for &loc in root_first {
            node = self.child(node, loc);
        }
        self.stack_hashes.insert(hash, node);
        node
    }

    /// Whether node `leaf` is exactly the root-first path `root_first`.
    fn path_is(&self, leaf: u32, root_first: &[u32]) -> bool {
        let d = &self.dict;
        let mut n = leaf;
        for &loc in root_first.iter().rev() {
            match (d.node_locations.get(n as usize), d.parents.get(n as usize)) {
                (Some(&l), Some(&p)) if l == loc => n = p,
                _ => return false,
            }
        }
        n == NO_PARENT
    }

    /// Stack-tree nodes so far (one per distinct stack prefix).
    pub fn node_count(&self) -> usize {
        self.dict.parents.len()
    }

    /// Heap footprint including the reverse maps (roughly twice the tables).
    pub fn approx_bytes(&self) -> usize {
        self.string_bytes * 2
            + self.dict.strings.len() * 56
            + self.dict.mappings.len() * 24
            + self.dict.functions.len() * 24
            + self.dict.locations.len() * 64
            + self.dict.parents.len() * 28
            + self.stack_hashes.len() * 20
    }
}

// ---- encoding -------------------------------------------------------------------

fn opt_id(v: Option<u32>) -> u64 {
    v.map_or(0, |x| u64::from(x) + 1)
}

/// The strings section of `strings` followed by `more` (label strings a segment
/// adds to its dictionary's table without copying the dictionary).
pub fn encode_string_table(strings: &[String], more: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    put_uvarint(&mut out, (strings.len() + more.len()) as u64);
    for s in strings.iter().chain(more) {
        put_bytes(&mut out, s.as_bytes());
    }
    out
}

/// Names first (as every version wrote them), then since format 7 a column of
/// address ranges, so a section of an older version decodes with ranges of zeros.
pub fn encode_mappings(d: &Dict) -> Vec<u8> {
    let mut out = Vec::new();
    put_uvarint(&mut out, d.mappings.len() as u64);
    for m in &d.mappings {
        put_uvarint(&mut out, m.file.into());
        put_uvarint(&mut out, m.build_id.into());
    }
    for m in &d.mappings {
        put_uvarint(&mut out, m.range.start);
        put_uvarint(&mut out, m.range.limit);
        put_uvarint(&mut out, m.range.offset);
    }
    out
}

pub fn encode_functions(d: &Dict) -> Vec<u8> {
    let mut out = Vec::new();
    put_uvarint(&mut out, d.functions.len() as u64);
    for f in &d.functions {
        put_uvarint(&mut out, f.name.into());
        put_uvarint(&mut out, f.file.into());
    }
    out
}

pub fn encode_locations(d: &Dict) -> Vec<u8> {
    let mut out = Vec::new();
    put_uvarint(&mut out, d.locations.len() as u64);
    for l in &d.locations {
        put_uvarint(&mut out, opt_id(l.function));
        put_uvarint(&mut out, opt_id(l.mapping));
        put_uvarint(&mut out, l.address);
        put_uvarint(&mut out, l.line.into());
    }
    out
}

/// Two columns: parent distances (`node - parent`, 0 for roots), then locations.
/// `parents[i] < i` for every non-root `i`.
pub fn encode_stacks(parents: &[u32], node_locations: &[u32]) -> Vec<u8> {
    let mut out = Vec::new();
    put_uvarint(&mut out, parents.len() as u64);
    for (i, &p) in parents.iter().enumerate() {
        let dist = if p == NO_PARENT {
            0
        } else {
            i as u64 - u64::from(p)
        };
        put_uvarint(&mut out, dist);
    }
    for &l in node_locations {
        put_uvarint(&mut out, l.into());
    }
    out
}

fn check(cond: bool, what: &str) -> Result<()> {
    if cond {
        Ok(())
    } else {
        Err(StorageError::Corrupt(what.to_string()))
    }
}

fn decode_opt_id(v: u64, len: usize, what: &str) -> Result<Option<u32>> {
    if v == 0 {
        return Ok(None);
    }
    check(v - 1 < len as u64, what)?;
    Ok(Some((v - 1) as u32))
}

/// The Strings section alone: what label names and values refer to.
pub(crate) fn decode_strings(bytes: &[u8]) -> Result<Vec<String>> {
    let mut r = Reader::new(bytes, "strings section");
    let n = r.count(1)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(r.str()?.to_owned());
    }
    Ok(out)
}

/// Decodes the five dictionary sections and checks every cross reference.
pub fn decode(
    strings: &[u8],
    mappings: &[u8],
    functions: &[u8],
    locations: &[u8],
    stacks: &[u8],
) -> Result<Dict> {
    decode_on(
        decode_strings(strings)?,
        mappings,
        functions,
        locations,
        stacks,
    )
}

/// [`decode`] with the string table decoded already (a segment decodes it at
/// load for its labels, and its other tables when a query first needs them).
pub fn decode_on(
    strings: Vec<String>,
    mappings: &[u8],
    functions: &[u8],
    locations: &[u8],
    stacks: &[u8],
) -> Result<Dict> {
    let mut d = Dict {
        strings,
        ..Dict::default()
    };
    let ns = d.strings.len() as u64;

    // Counts are bounded by their section's bytes (`count`), so reserving them
    // up front is safe, and saves the regrowth copies of a first query's decode.
    let mut r = Reader::new(mappings, "mappings section");
    let n = r.count(2)?;
    d.mappings.reserve(n);
    for _ in 0..n {
        let (file, build_id) = (r.uvarint()?, r.uvarint()?);
        check(
            file < ns && build_id < ns,
            "mapping refers to missing string",
        )?;
        d.mappings.push(MappingRec {
            file: file as u32,
            build_id: build_id as u32,
            range: MappingRange::default(),
        });
    }
    // Format 7 on: the ranges column; a section of an older file ends here.
    if !r.is_empty() {
        for m in &mut d.mappings {
            m.range = MappingRange {
                start: r.uvarint()?,
                limit: r.uvarint()?,
                offset: r.uvarint()?,
            };
        }
    }

    let mut r = Reader::new(functions, "functions section");
    let n = r.count(2)?;
    d.functions.reserve(n);
    for _ in 0..n {
        let (name, file) = (r.uvarint()?, r.uvarint()?);
        check(name < ns && file < ns, "function refers to missing string")?;
        d.functions.push(FunctionRec {
            name: name as u32,
            file: file as u32,
        });
    }

    let mut r = Reader::new(locations, "locations section");
    let n = r.count(4)?;
    d.locations.reserve(n);
    for _ in 0..n {
        let function = decode_opt_id(
            r.uvarint()?,
            d.functions.len(),
            "location refers to missing function",
        )?;
        let mapping = decode_opt_id(
            r.uvarint()?,
            d.mappings.len(),
            "location refers to missing mapping",
        )?;
        let address = r.uvarint()?;
        let line = r.u32v()?;
        d.locations.push(LocationRec {
            function,
            mapping,
            address,
            line,
        });
    }

    let mut r = Reader::new(stacks, "stack tree section");
    let n = r.count(2)?;
    d.parents.reserve(n);
    for i in 0..n as u64 {
        let dist = r.uvarint()?;
        check(dist <= i, "stack node parent out of order")?;
        d.parents.push(if dist == 0 {
            NO_PARENT
        } else {
            (i - dist) as u32
        });
    }
    let nl = d.locations.len() as u64;
    d.node_locations.reserve(n);
    for _ in 0..n {
        let l = r.uvarint()?;
        check(l < nl, "stack node refers to missing location")?;
        d.node_locations.push(l as u32);
    }
    Ok(d)
}

#[cfg(test)]
mod tests;
