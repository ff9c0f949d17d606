//! Strings numbered densely in first-seen order, for the frame tree's names and the
//! group-by's key values.

use rustc_hash::FxHashMap;

#[derive(Clone, Debug, Default)]
pub struct Interner {
    strs: Vec<String>,
    ids: FxHashMap<String, u32>,
    /// Approximate heap bytes, kept as strings are added so reading it is free.
    bytes: usize,
}

impl Interner {
    /// The id of `s`, numbering it if new.
    pub fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.strs.len() as u32;
        self.strs.push(s.to_string());
        self.ids.insert(s.to_string(), id);
        // Two copies of the text, two `String` headers, the id and hash slot.
        self.bytes += 2 * s.len() + 2 * std::mem::size_of::<String>() + 16;
        id
    }

    /// Approximate heap bytes held.
    pub fn approx_bytes(&self) -> usize {
        self.bytes
    }

    /// The id of `s`, if it was interned.
    pub fn id(&self, s: &str) -> Option<u32> {
        self.ids.get(s).copied()
    }

    /// The string of `id` (empty for an unknown id).
    pub fn get(&self, id: u32) -> &str {
        self.strs.get(id as usize).map_or("", String::as_str)
    }
}
