//! Stacks at source-line resolution: every frame as `(function, file, line)`,
//! frames kept as addresses symbolized (inlined calls expanded), summed per
//! distinct stack. What a pprof export with lines and a function's per-line view
//! need, and what the name-level frame tree (one frame per function) has dropped.
//!
//! Computed live on every call (no result cache): it is asked for one function or
//! one export at a time, and its size is bounded by `max_stacks`.

use std::borrow::Cow;

use rustc_hash::FxHashMap;

use profiledb_symbolize::Symbolizer;

use super::frames::location_frames;
use super::scratch::Scratch;
use super::Source;
use super::{node_values, selection, TimeRange};
use crate::error::{QueryError, Result};
use crate::selector::Selector;

/// One source frame.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LineFrame {
    /// Function name (an address's `module+0xoffset` when nothing names it).
    pub function: String,
    /// Empty when unknown.
    pub file: String,
    /// 0 when unknown.
    pub line: u32,
}

/// Distinct stacks of source frames with their summed values.
#[derive(Clone, Debug, Default)]
pub struct LineProfile {
    /// Frames, by id.
    pub frames: Vec<LineFrame>,
    frame_ids: FxHashMap<LineFrame, u32>,
    /// Stacks as frame ids, root first, and their values.
    pub stacks: FxHashMap<Vec<u32>, i64>,
}

/// One source line of a function: the value spent on it (self) and under it
/// (total: on it or in what it called).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LineValue {
    /// Source file (empty when unknown).
    pub file: String,
    /// Line in it (0 when unknown).
    pub line: u32,
    /// Value of the stacks whose leaf frame is this line.
    pub self_value: i64,
    /// Value of the stacks with a frame on this line (each counted once).
    pub total_value: i64,
}

/// A function's source lines, by file and line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FunctionLines {
    /// Its lines, by file then line.
    pub lines: Vec<LineValue>,
    /// The function's self value (the sum of its lines').
    pub self_value: i64,
    /// Its total value: every stack it is on, counted once.
    pub total_value: i64,
    /// Every stack's value: what the function's share is of.
    pub profile_total: i64,
}

impl LineProfile {
    fn frame_id(&mut self, f: LineFrame) -> u32 {
        if let Some(&id) = self.frame_ids.get(&f) {
            return id;
        }
        let id = self.frames.len() as u32;
        self.frame_ids.insert(f.clone(), id);
        self.frames.push(f);
        id
    }

    fn add(&mut self, stack: Vec<u32>, v: i64, max_stacks: usize) -> Result<()> {
        if !self.stacks.contains_key(&stack) && max_stacks > 0 && self.stacks.len() >= max_stacks {
            return Err(QueryError::tree_too_large(max_stacks).into());
        }
        let e = self.stacks.entry(stack).or_insert(0);
        *e = e.saturating_add(v);
        Ok(())
    }

    /// Adds `other`'s stacks (its frame ids renumbered into this profile's).
    pub(crate) fn merge(&mut self, other: LineProfile, max_stacks: usize) -> Result<()> {
        let ids: Vec<u32> = other.frames.into_iter().map(|f| self.frame_id(f)).collect();
        for (stack, v) in other.stacks {
            let mapped = stack.iter().map(|&f| ids[f as usize]).collect();
            self.add(mapped, v, max_stacks)?;
        }
        Ok(())
    }

    /// The sum of every stack.
    pub fn total(&self) -> i64 {
        self.stacks.values().fold(0i64, |a, &v| a.saturating_add(v))
    }

    /// The per-line view of `function` (frames whose function is exactly it).
    pub fn function_lines(&self, function: &str) -> FunctionLines {
        let mine: Vec<bool> = self.frames.iter().map(|f| f.function == function).collect();
        let mut lines: FxHashMap<(&str, u32), (i64, i64)> = FxHashMap::default();
        let mut out = FunctionLines::default();
        let mut seen: Vec<(&str, u32)> = Vec::new();
        for (stack, &v) in &self.stacks {
            out.profile_total = out.profile_total.saturating_add(v);
            seen.clear();
            for &f in stack {
                if !mine[f as usize] {
                    continue;
                }
                let fr = &self.frames[f as usize];
                let key = (fr.file.as_str(), fr.line);
                // A recursive function's line counts once per stack.
                if !seen.contains(&key) {
                    seen.push(key);
                    let e = lines.entry(key).or_default();
                    e.1 = e.1.saturating_add(v);
                }
            }
            if !seen.is_empty() {
                out.total_value = out.total_value.saturating_add(v);
            }
            if let Some(&leaf) = stack.last().filter(|&&l| mine[l as usize]) {
                let fr = &self.frames[leaf as usize];
                let e = lines.entry((fr.file.as_str(), fr.line)).or_default();
                e.0 = e.0.saturating_add(v);
                out.self_value = out.self_value.saturating_add(v);
            }
        }
        out.lines = lines
            .into_iter()
            .map(|((file, line), (s, t))| LineValue {
                file: file.to_string(),
                line,
                self_value: s,
                total_value: t,
            })
            .collect();
        out.lines
            .sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
        out
    }
}

/// Adds the selected rows of `src` to `acc` at line resolution.
pub fn lines_into(
    src: &dyn Source,
    sel: &Selector,
    range: TimeRange,
    symbols: Option<&Symbolizer>,
    max_stacks: usize,
    acc: &mut LineProfile,
    scratch: &mut Scratch,
) -> Result<()> {
    let Some((series, lo, hi)) = selection(src, sel, range) else {
        return Ok(());
    };
    node_values(src, &series, lo, hi, scratch)?;
    let dict = src.dict()?;
    // A location's frame ids, once per source.
    let mut by_location: FxHashMap<u32, Vec<u32>> = FxHashMap::default();
    for &(node, v) in &scratch.pairs {
        let mut stack = Vec::new();
        for loc in dict.stack(node) {
            let ids = by_location.entry(loc).or_insert_with(|| {
                location_frames(dict, loc, symbols)
                    .into_iter()
                    .map(|f| {
                        acc.frame_id(LineFrame {
                            function: Cow::into_owned(f.name),
                            file: Cow::into_owned(f.file),
                            line: f.line,
                        })
                    })
                    .collect()
            });
            stack.extend_from_slice(ids);
        }
        acc.add(stack, v, max_stacks)?;
    }
    scratch.pairs.clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(stacks: &[(&[(&str, u32)], i64)]) -> LineProfile {
        let mut p = LineProfile::default();
        for (st, v) in stacks {
            let ids = st
                .iter()
                .map(|&(f, line)| {
                    p.frame_id(LineFrame {
                        function: f.into(),
                        file: "a.c".into(),
                        line,
                    })
                })
                .collect();
            p.add(ids, *v, 0).unwrap();
        }
        p
    }

    #[test]
    fn a_functions_lines_have_self_and_total_values() {
        let p = profile(&[
            (&[("main", 10), ("work", 3)], 5),
            (&[("main", 10), ("work", 4), ("leaf", 1)], 7),
            (&[("main", 11), ("work", 3), ("work", 3)], 2),
            (&[("main", 12)], 1),
        ]);
        let w = p.function_lines("work");
        assert_eq!(w.self_value, 7);
        assert_eq!(w.total_value, 14);
        assert_eq!(w.profile_total, 15);
        let l: Vec<(u32, i64, i64)> = w
            .lines
            .iter()
            .map(|l| (l.line, l.self_value, l.total_value))
            .collect();
        assert_eq!(l, vec![(3, 7, 7), (4, 0, 7)]);
        let mut merged = LineProfile::default();
        merged.merge(p.clone(), 0).unwrap();
        merged.merge(p, 0).unwrap();
        assert_eq!(merged.function_lines("work").self_value, 14);
        assert_eq!(merged.total(), 30);
    }

    #[test]
    fn distinct_stacks_are_bounded() {
        let mut p = profile(&[(&[("a", 1)], 1)]);
        let b = p.frame_id(LineFrame {
            function: "b".into(),
            file: String::new(),
            line: 0,
        });
        assert!(p.add(vec![b], 1, 1).is_err());
        assert!(p.add(vec![0], 1, 1).is_ok(), "an existing stack still adds");
    }
}
