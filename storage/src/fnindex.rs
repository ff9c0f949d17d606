//! Function-name index: resolves a function regex to function ids of one segment.
//!
//! Each segment gets a small in-memory tantivy index, built on first use and kept in
//! a byte-bounded cache keyed by segment id. Segments are immutable, so an index never
//! goes stale; a segment that goes away (compaction, retention, quarantine) simply
//! stops being asked for, and an evicted index is rebuilt from the segment's
//! dictionary on demand. Documents are functions: their id (fast field), their whole
//! name as one raw term (for regex queries over the term dictionary's FST), and the
//! name's character trigrams (for literal substrings, the classic trigram filter,
//! and alternations of literals: a name matching `deflate|^nothing$` contains one of
//! the two, so the candidates are the union of their trigram matches).
//! Every candidate is verified with the `regex` crate, so the index only narrows the
//! search and never changes the answer.

use regex::Regex;
use roaring::RoaringBitmap;
use tantivy::collector::DocSetCollector;
use tantivy::query::{BooleanQuery, Occur, Query, RegexQuery, TermQuery};
use tantivy::schema::{
    Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, FAST, STRING,
};
use tantivy::tokenizer::NgramTokenizer;
use tantivy::{Index, IndexReader, TantivyDocument, Term};

use crate::dict::Dict;
use crate::error::{Result, StorageError};

const TRIGRAM: &str = "trigram";
/// tantivy's smallest per-thread indexing arena.
const WRITER_BYTES: usize = 15_000_000;

fn tantivy_err(e: tantivy::TantivyError) -> StorageError {
    StorageError::Corrupt(format!("function index: {e}"))
}

/// The function-name index of one dictionary.
pub struct FnIndex {
    reader: IndexReader,
    name: Field,
    trigrams: Field,
    approx_bytes: usize,
}

impl FnIndex {
    /// Indexes every named function of `dict`.
    pub fn build(dict: &Dict) -> Result<FnIndex> {
        let mut sb = Schema::builder();
        let id = sb.add_u64_field("id", FAST);
        let name = sb.add_text_field("name", STRING);
        let trigrams = sb.add_text_field(
            "trigrams",
            TextOptions::default().set_indexing_options(
                TextFieldIndexing::default()
                    .set_tokenizer(TRIGRAM)
                    .set_index_option(IndexRecordOption::Basic),
            ),
        );
        let index = Index::create_in_ram(sb.build());
        index.tokenizers().register(
            TRIGRAM,
            NgramTokenizer::new(3, 3, false).map_err(tantivy_err)?,
        );
        let mut writer = index
            .writer_with_num_threads::<TantivyDocument>(1, WRITER_BYTES)
            .map_err(tantivy_err)?;
        let mut bytes = 0;
        for (fid, f) in dict.functions.iter().enumerate() {
            let n = dict.str(f.name);
            if n.is_empty() {
                continue;
            }
            bytes += n.len() * 4 + 32;
            let mut doc = TantivyDocument::default();
            doc.add_u64(id, fid as u64);
            doc.add_text(name, n);
            doc.add_text(trigrams, n);
            writer.add_document(doc).map_err(tantivy_err)?;
        }
        writer.commit().map_err(tantivy_err)?;
        let reader = index.reader().map_err(tantivy_err)?;
        Ok(FnIndex {
            reader,
            name,
            trigrams,
            approx_bytes: bytes + 64 * 1024,
        })
    }

    pub fn approx_bytes(&self) -> usize {
        self.approx_bytes
    }

    /// Candidate function ids for `re`, or `None` when the index cannot narrow the
    /// search (a pattern tantivy's regex dialect does not support, or a literal
    /// shorter than a trigram).
    fn candidates(&self, pattern: &str) -> Result<Option<RoaringBitmap>> {
        let query: Box<dyn Query> = match required_literals(pattern) {
            // Every match contains one of the literals: the union of their trigram
            // conjunctions (a literal, or an alternation such as `deflate|inflate`).
            Some(literals) => {
                let mut any: Vec<(Occur, Box<dyn Query>)> = Vec::with_capacity(literals.len());
                for lit in &literals {
                    match self.trigram_query(lit) {
                        Some(q) => any.push((Occur::Should, q)),
                        None => return Ok(None),
                    }
                }
                Box::new(BooleanQuery::new(any))
            }
            // tantivy's automaton matches whole terms; wrap to get `is_match` semantics.
            None => match RegexQuery::from_pattern(&format!(".*(?:{pattern}).*"), self.name) {
                Ok(q) => Box::new(q),
                Err(_) => return Ok(None),
            },
        };
        let searcher = self.reader.searcher();
        let docs = searcher
            .search(&*query, &DocSetCollector)
            .map_err(tantivy_err)?;
        let mut out = RoaringBitmap::new();
        let mut columns = Vec::new();
        for seg in searcher.segment_readers() {
            columns.push(seg.fast_fields().u64("id").map_err(tantivy_err)?);
        }
        for addr in docs {
            if let Some(v) = columns
                .get(addr.segment_ord as usize)
                .and_then(|c| c.first(addr.doc_id))
            {
                out.insert(v as u32);
            }
        }
        Ok(Some(out))
    }

    /// Ids of the functions of `dict` (the dictionary this index was built from)
    /// whose name matches `re` (unanchored, like [`Regex::is_match`]).
    pub fn matching(&self, dict: &Dict, re: &Regex) -> Result<RoaringBitmap> {
        match self.candidates(re.as_str())? {
            Some(c) => Ok(c
                .iter()
                .filter(|&f| {
                    dict.functions
                        .get(f as usize)
                        .is_some_and(|f| re.is_match(dict.str(f.name)))
                })
                .collect()),
            None => Ok(scan_functions(dict, re)),
        }
    }

    /// The names containing `lit`: all of its trigrams (`None` under three chars).
    fn trigram_query(&self, lit: &str) -> Option<Box<dyn Query>> {
        let chars: Vec<char> = lit.chars().collect();
        if chars.len() < 3 {
            return None;
        }
        let terms: Vec<(Occur, Box<dyn Query>)> = chars
            .windows(3)
            .map(|w| {
                let t: String = w.iter().collect();
                let q: Box<dyn Query> = Box::new(TermQuery::new(
                    Term::from_field_text(self.trigrams, &t),
                    IndexRecordOption::Basic,
                ));
                (Occur::Must, q)
            })
            .collect();
        Some(Box::new(BooleanQuery::new(terms)))
    }
}

/// Literals one of which every match of `pattern` contains, when the pattern is a
/// literal or an alternation of literals, each possibly anchored (`^`, `$`, `\b`:
/// zero-width, so the literal's pieces around them are still contiguous in the
/// name); `None` for anything else (classes, repetition, case-insensitive flags).
fn required_literals(pattern: &str) -> Option<Vec<String>> {
    use regex_syntax::hir::{Hir, HirKind};
    let hir = regex_syntax::Parser::new().parse(pattern).ok()?;
    let literal = |h: &Hir| -> Option<String> {
        let mut bytes = Vec::new();
        let parts = match h.kind() {
            HirKind::Concat(parts) => &parts[..],
            _ => std::slice::from_ref(h),
        };
        for p in parts {
            match p.kind() {
                HirKind::Literal(l) => bytes.extend_from_slice(&l.0),
                HirKind::Look(_) => {}
                _ => return None,
            }
        }
        String::from_utf8(bytes).ok()
    };
    match hir.kind() {
        HirKind::Alternation(branches) => branches.iter().map(literal).collect(),
        _ => literal(&hir).map(|l| vec![l]),
    }
}

/// Ids of the functions of `dict` whose name matches `re`, without an index (used for
/// the head, whose dictionary grows, and as the fallback).
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
        let idx = FnIndex::build(&d).expect("index builds");
        let m = |p: &str| {
            let re = Regex::new(p).expect("valid regex");
            let got: Vec<u32> = idx.matching(&d, &re).expect("query").iter().collect();
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
        // Alternations of literals, anchored or not, narrow through the trigrams.
        assert_eq!(m("malloc|idle"), vec![0, 3]);
        assert_eq!(m("^main\\.idle$|serve|^nothing5$"), vec![2, 3]);
        assert_eq!(m("(?i)MALLOC|work"), vec![0, 1]);
        assert_eq!(m("malloc|ma"), vec![0, 1, 3]);
    }

    #[test]
    fn required_literals_of_patterns() {
        let lits = |p: &str| required_literals(p);
        let v = |xs: &[&str]| Some(xs.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(lits("deflate"), v(&["deflate"]));
        assert_eq!(lits("deflate|^nothing5$"), v(&["deflate", "nothing5"]));
        assert_eq!(lits("main\\.work"), v(&["main.work"]));
        assert_eq!(lits("a\\bc"), v(&["ac"]));
        assert_eq!(lits("(?i)deflate"), None);
        assert_eq!(lits("def.*late"), None);
        assert_eq!(
            lits("(work|serve)$"),
            None,
            "an alternation inside a concat"
        );
    }

    proptest::proptest! {
        /// The index answers every alternation of literals (with anchors) exactly
        /// like a scan of the names.
        #[test]
        fn alternations_match_like_a_scan(
            names in proptest::collection::vec("[a-d.]{1,8}", 1..30),
            branches in proptest::collection::vec(("[a-d.]{1,5}", proptest::bool::ANY, proptest::bool::ANY), 1..4),
        ) {
            let mut b = DictBuilder::new();
            for n in &names {
                b.function(n, "x.c");
            }
            let d = b.finish();
            let idx = FnIndex::build(&d).expect("index builds");
            let pattern = branches
                .iter()
                .map(|(lit, start, end)| {
                    format!("{}{}{}", if *start { "^" } else { "" }, regex::escape(lit), if *end { "$" } else { "" })
                })
                .collect::<Vec<_>>()
                .join("|");
            let re = Regex::new(&pattern).expect("valid regex");
            let got: Vec<u32> = idx.matching(&d, &re).expect("query").iter().collect();
            let want: Vec<u32> = scan_functions(&d, &re).iter().collect();
            proptest::prop_assert_eq!(got, want, "{}", pattern);
        }
    }
}
