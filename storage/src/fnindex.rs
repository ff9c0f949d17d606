//! Function-name index: which functions of one segment match a regex.
//!
//! A segment's function names are laid end to end in one buffer, with where each
//! one starts. A pattern every match of which must contain one of a few literals (a
//! name, an alternation such as `deflate|^nothing5$`, or `^runtime\..*alloc`, which
//! cannot match without `runtime.`) is answered by searching the buffer for those
//! literals (`memchr::memmem`, SIMD) and checking only the names they fall in with
//! the `regex` crate; any other pattern is checked name by name. The index only
//! narrows the search, so it never changes an answer.
//!
//! Built once per segment on the first function filter that reads it, and kept in a
//! byte-bounded cache keyed by segment id (segments are immutable; an evicted index
//! is rebuilt from the dictionary). This replaced a per-segment tantivy index of
//! name trigrams, which took hundreds of times longer to build than the buffer
//! takes to lay out, on the query path of the first filter after a restart, for
//! each segment of the range, and answered no faster (figures:
//! docs/perf-log/2026-11-26-round-11-first-queries-no-index-mapping.md).

use memchr::memmem;
use regex::Regex;
use roaring::RoaringBitmap;

use crate::dict::Dict;

/// The function names of one dictionary, end to end.
pub struct FnIndex {
    /// Every function's name, in id order, each followed by a NUL so that a literal
    /// found across two names is rare (it is checked like any other candidate).
    names: String,
    /// `starts[f]`: where function `f`'s name begins in `names`.
    starts: Vec<usize>,
}

impl FnIndex {
    /// Lays out the function names of `dict`.
    pub fn build(dict: &Dict) -> FnIndex {
        let bytes: usize = dict
            .functions
            .iter()
            .map(|f| dict.str(f.name).len() + 1)
            .sum();
        let mut names = String::with_capacity(bytes);
        let mut starts = Vec::with_capacity(dict.functions.len());
        for f in &dict.functions {
            starts.push(names.len());
            names.push_str(dict.str(f.name));
            names.push('\0');
        }
        FnIndex { names, starts }
    }

    pub fn approx_bytes(&self) -> usize {
        self.names.capacity() + self.starts.capacity() * std::mem::size_of::<usize>() + 64
    }

    /// Function `f`'s name (without its NUL).
    fn name(&self, f: usize) -> &str {
        let end = self.starts.get(f + 1).map_or(self.names.len(), |&e| e);
        self.starts
            .get(f)
            .and_then(|&s| self.names.get(s..end.saturating_sub(1)))
            .unwrap_or("")
    }

    /// Ids of the functions whose name matches `re` (unanchored, like
    /// [`Regex::is_match`]). The literals are read from `re.as_str()`, so flags must
    /// be inline in the pattern (`(?i)`), not set on a `RegexBuilder`: the API
    /// compiles patterns with a size limit only.
    pub fn matching(&self, re: &Regex) -> RoaringBitmap {
        let mut out = RoaringBitmap::new();
        let Some(literals) = required_literals(re.as_str()) else {
            for f in 0..self.starts.len() {
                if re.is_match(self.name(f)) {
                    out.insert(f as u32);
                }
            }
            return out;
        };
        let names = self.names.as_bytes();
        for lit in &literals {
            let finder = memmem::Finder::new(lit);
            let mut from = 0;
            while let Some(at) = names.get(from..).and_then(|rest| finder.find(rest)) {
                // The name the literal starts in; the search goes on after it.
                let f = self.starts.partition_point(|&s| s <= from + at) - 1;
                if re.is_match(self.name(f)) {
                    out.insert(f as u32);
                }
                from = self.starts.get(f + 1).copied().unwrap_or(names.len());
            }
        }
        out
    }
}

/// Literals one of which every match of `pattern` contains, or `None` when the
/// pattern has none to offer (then every name is checked).
///
/// Each branch of a top-level alternation (or the whole pattern) must offer one:
/// the longest run of literal pieces in its top-level concatenation. Zero-width
/// assertions (`^`, `$`, `\b`) do not break a run, since the literals around them
/// are still adjacent in the name; anything else (classes, repetitions, groups,
/// case-insensitive flags) does, and is skipped. A branch without a literal, or
/// whose longest is empty, makes the whole answer `None`.
fn required_literals(pattern: &str) -> Option<Vec<Vec<u8>>> {
    use regex_syntax::hir::{Hir, HirKind};
    let hir = regex_syntax::Parser::new().parse(pattern).ok()?;
    let longest_run = |h: &Hir| -> Option<Vec<u8>> {
        let parts = match h.kind() {
            HirKind::Concat(parts) => &parts[..],
            _ => std::slice::from_ref(h),
        };
        let (mut best, mut run) = (Vec::new(), Vec::new());
        for p in parts {
            match p.kind() {
                HirKind::Literal(l) => run.extend_from_slice(&l.0),
                HirKind::Look(_) => {}
                _ => {
                    if run.len() > best.len() {
                        best = std::mem::take(&mut run);
                    }
                    run.clear();
                }
            }
        }
        if run.len() > best.len() {
            best = run;
        }
        (!best.is_empty()).then_some(best)
    };
    match hir.kind() {
        HirKind::Alternation(branches) => branches.iter().map(longest_run).collect(),
        _ => longest_run(&hir).map(|l| vec![l]),
    }
}

/// Ids of the functions of `dict` whose name matches `re`, without an index (used for
/// the head, whose dictionary grows).
pub fn scan_functions(dict: &Dict, re: &Regex) -> RoaringBitmap {
    dict.functions
        .iter()
        .enumerate()
        .filter(|(_, f)| re.is_match(dict.str(f.name)))
        .map(|(i, _)| i as u32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dict::DictBuilder;
    use proptest::strategy::Strategy;

    fn dict() -> Dict {
        let mut b = DictBuilder::new();
        for n in [
            "runtime.mallocgc",
            "main.work",
            "net/http.(*conn).serve",
            "main.idle",
            "std::vec::Vec<T>::push",
        ] {
            b.function(n, "x.go");
        }
        b.finish()
    }

    #[test]
    fn literal_regex_and_fallback() {
        let d = dict();
        let idx = FnIndex::build(&d);
        let m = |p: &str| {
            let re = Regex::new(p).expect("valid regex");
            let got: Vec<u32> = idx.matching(&re).iter().collect();
            assert_eq!(
                got,
                scan_functions(&d, &re).iter().collect::<Vec<_>>(),
                "{p}"
            );
            got
        };
        assert_eq!(m("malloc"), vec![0]);
        assert_eq!(m("main\\."), vec![1, 3]);
        assert_eq!(m("^main"), vec![1, 3]);
        assert_eq!(m("(work|serve)$"), vec![1, 2]);
        assert_eq!(m("Vec<T>"), vec![4]);
        assert_eq!(m("ma"), vec![0, 1, 3]);
        assert!(m("nothing-here").is_empty());
        // Alternations of literals, anchored or not, are searched as literals.
        assert_eq!(m("malloc|idle"), vec![0, 3]);
        assert_eq!(m("^main\\.idle$|serve|^nothing5$"), vec![2, 3]);
        assert_eq!(m("(?i)MALLOC|work"), vec![0, 1]);
        assert_eq!(m("malloc|ma"), vec![0, 1, 3]);
    }

    #[test]
    fn required_literals_of_patterns() {
        let lits = |p: &str| required_literals(p);
        let v = |xs: &[&str]| Some(xs.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>());
        assert_eq!(lits("deflate"), v(&["deflate"]));
        assert_eq!(lits("deflate|^nothing5$"), v(&["deflate", "nothing5"]));
        assert_eq!(lits("main\\.work"), v(&["main.work"]));
        assert_eq!(
            lits("a\\bc"),
            v(&["ac"]),
            "a zero-width assertion keeps a run"
        );
        assert_eq!(
            lits("^runtime\\..*alloc"),
            v(&["runtime."]),
            "the longest run"
        );
        assert_eq!(lits("def.*late"), v(&["late"]));
        assert_eq!(lits("(?i)x_y"), v(&["_"]), "case folds letters only");
        assert_eq!(lits("(?i)deflate"), None);
        assert_eq!(lits("deflate|.*"), None, "one branch without a literal");
        assert_eq!(lits("^$"), None);
        assert_eq!(lits(""), None);
        assert_eq!(
            lits("(work|serve)$"),
            None,
            "an alternation inside a concat"
        );
    }

    proptest::proptest! {
        /// The index answers like a check of every name, for alternations of
        /// branches made of literals, anchors, classes and repetitions, over names
        /// drawn from the same few characters (so literals are found across the ends
        /// of names too).
        #[test]
        fn matches_like_a_scan(
            names in proptest::collection::vec("[a-d.]{0,8}", 0..30),
            branches in proptest::collection::vec(
                proptest::collection::vec(
                    proptest::prop_oneof![
                        "[a-d.]{1,4}".prop_map(|l| regex::escape(&l)),
                        proptest::strategy::Just("^".to_string()),
                        proptest::strategy::Just("$".to_string()),
                        proptest::strategy::Just(".*".to_string()),
                        proptest::strategy::Just("[ab]".to_string()),
                        proptest::strategy::Just("(?i:c)".to_string()),
                    ],
                    1..5,
                ),
                1..4,
            ),
        ) {
            let mut b = DictBuilder::new();
            for n in &names {
                b.function(n, "x.c");
            }
            let d = b.finish();
            let idx = FnIndex::build(&d);
            let pattern = branches
                .iter()
                .map(|pieces| pieces.concat())
                .collect::<Vec<_>>()
                .join("|");
            let re = Regex::new(&pattern).expect("valid regex");
            let got: Vec<u32> = idx.matching(&re).iter().collect();
            let want: Vec<u32> = scan_functions(&d, &re).iter().collect();
            proptest::prop_assert_eq!(got, want, "{}", pattern);
        }
    }
}
