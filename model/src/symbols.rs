//! A batch's symbol tables (mappings, functions, locations) and its stacks.

use serde::{Deserialize, Serialize};

use crate::batch::InvalidBatch;

/// A function's name or file: immutable UTF-8 that may share the buffer it was
/// decoded from. Every push repeats its profile's names, and a `String` per name
/// (an allocation, a copy and a free, each on memory gone cold) was the decoders'
/// largest single cost; a slice of the push body costs a reference count. What
/// outlives the batch (dictionaries, the interner) copies the text out, so a kept
/// name never holds a whole body.
pub type Name = bytestring::ByteString;

/// A binary or shared library a frame belongs to, and where it was mapped: what a
/// server-side symbolizer needs to turn a frame's address into a place in the file
/// (`address - start + offset` is the file offset, as pprof computes it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Mapping {
    /// Path or name of the mapped file (`/usr/lib/libc.so.6`).
    pub file: String,
    /// Hex build id, empty when unknown.
    pub build_id: String,
    /// First address of the mapping in the process (0 when unknown).
    pub start: u64,
    /// One past its last address (0 when unknown).
    pub limit: u64,
    /// File offset mapped at `start`.
    pub offset: u64,
}

impl Mapping {
    /// The file offset of `address` in this mapping (pprof's rule; a mapping of
    /// unknown range, all zeros, takes addresses as file offsets).
    pub fn file_offset(&self, address: u64) -> u64 {
        address.wrapping_sub(self.start).wrapping_add(self.offset)
    }

    /// The mapped file's base name (`libc.so.6`).
    pub fn base_name(&self) -> &str {
        self.file.rsplit('/').next().unwrap_or(&self.file)
    }
}

/// A function as a symbolizer names it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Function {
    /// Function name (demangled when the producer could).
    pub name: Name,
    /// Source file, empty when unknown.
    pub file: Name,
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
    /// Binaries, referred to by [`Location::mapping`].
    pub mappings: Vec<Mapping>,
    /// Functions, referred to by [`Location::function`].
    pub functions: Vec<Function>,
    /// Frames, referred to by the stacks.
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

    /// Room for `stacks` more stacks of `frames` frames in all.
    pub fn reserve(&mut self, stacks: usize, frames: usize) {
        self.offsets.reserve(stacks + 1);
        self.locations.reserve(frames);
    }

    /// Number of stacks.
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// Location references of all stacks together.
    pub fn frame_count(&self) -> usize {
        self.locations.len()
    }

    /// Whether there are no stacks.
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

    /// Every stack in index order, root first.
    pub fn iter(&self) -> impl Iterator<Item = &[u32]> {
        (0..self.len() as u32).filter_map(move |i| self.get(i))
    }

    /// Checks that every stack refers to one of `locations` locations and that the
    /// offsets are well formed (they arrive deserialized, from a WAL or a decoder).
    pub(crate) fn validate(&self, locations: u32) -> Result<(), InvalidBatch> {
        if let Some(bad) = self.locations.iter().find(|&&l| l >= locations) {
            return Err(InvalidBatch(format!(
                "a stack refers to missing location {bad}"
            )));
        }
        if self.offsets.windows(2).any(|w| w[0] > w[1])
            || self
                .offsets
                .last()
                .is_some_and(|&e| e as usize != self.locations.len())
        {
            return Err(InvalidBatch("malformed stack offsets".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
