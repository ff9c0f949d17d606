//! What a store's segment bytes are spent on: each file's sections summed into the
//! parts a reader thinks in (stack tree, dictionaries, sample columns, series,
//! label index), printed and returned as JSON by the suites that measure bytes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use profiledb_storage::{base_path, SectionKind, SegmentFile, SymbolBase};
use serde_json::{json, Value};

use crate::report::human_bytes;

/// The parts, in print order, and the sections each holds.
const PARTS: [(&str, &[SectionKind]); 5] = [
    ("stack tree", &[SectionKind::Stacks]),
    (
        "dictionaries",
        &[
            SectionKind::Strings,
            SectionKind::Mappings,
            SectionKind::Functions,
            SectionKind::Locations,
        ],
    ),
    (
        "sample columns",
        &[
            SectionKind::Times,
            SectionKind::StackIds,
            SectionKind::Values,
            SectionKind::StackRanks,
        ],
    ),
    (
        "series",
        &[
            SectionKind::Series,
            SectionKind::SeriesRows,
            SectionKind::SeriesTotals,
        ],
    ),
    ("label index", &[SectionKind::LabelIndex]),
];

/// Stored and decompressed bytes per part over a set of segment files, plus what
/// no section holds (head magic, footer, trailer), plus the symbol bases the
/// segments were written on (each counted once).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Breakdown {
    pub files: u64,
    /// Bytes of the segment files and of their bases.
    pub file_bytes: u64,
    /// `(stored, raw)` per entry of [`PARTS`].
    pub parts: [(u64, u64); PARTS.len()],
    /// The base files counted.
    pub bases: BTreeSet<PathBuf>,
    /// `(file bytes, decompressed bytes)` of those bases.
    pub base_bytes: (u64, u64),
}

impl Breakdown {
    /// Every `*.seg` file under `dir`, recursively.
    pub fn of_dir(dir: &Path) -> anyhow::Result<Breakdown> {
        let mut b = Breakdown::default();
        b.add_dir(dir)?;
        Ok(b)
    }

    fn add_dir(&mut self, dir: &Path) -> anyhow::Result<()> {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return Ok(());
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                self.add_dir(&p)?;
            } else if p.extension().is_some_and(|x| x == "seg") {
                self.add_file(&p)?;
            }
        }
        Ok(())
    }

    /// The given segment files.
    pub fn of_files<'a>(paths: impl IntoIterator<Item = &'a Path>) -> anyhow::Result<Breakdown> {
        let mut b = Breakdown::default();
        for p in paths {
            b.add_file(p)?;
        }
        Ok(b)
    }

    fn add_file(&mut self, path: &Path) -> anyhow::Result<()> {
        let file = SegmentFile::open(path)?;
        self.files += 1;
        self.file_bytes += file.meta.size_bytes;
        for s in file.sections() {
            if let Some(i) = PARTS.iter().position(|(_, kinds)| kinds.contains(&s.kind)) {
                self.parts[i].0 += s.stored_bytes;
                self.parts[i].1 += s.raw_bytes;
            }
        }
        if let Some(b) = file.meta.base {
            let path = base_path(path, b.id);
            if self.bases.insert(path.clone()) {
                let stored = std::fs::metadata(&path)?.len();
                let raw = SymbolBase::read(&path)?.approx_bytes() as u64;
                self.file_bytes += stored;
                self.base_bytes.0 += stored;
                self.base_bytes.1 += raw;
            }
        }
        Ok(())
    }

    /// Bytes outside every section and base.
    pub fn framing(&self) -> u64 {
        let stored: u64 = self.parts.iter().map(|p| p.0).sum::<u64>() + self.base_bytes.0;
        self.file_bytes.saturating_sub(stored)
    }

    /// Prints one line per part with its share of the files and, when `per` is
    /// given as `(count, unit)`, its bytes per unit.
    pub fn print(&self, indent: &str, per: Option<(u64, &str)>) {
        let total = self.file_bytes.max(1) as f64;
        let per_row = |b: u64| {
            per.map_or(String::new(), |(n, unit)| {
                format!("  {:>6.2} B/{unit}", b as f64 / n.max(1) as f64)
            })
        };
        for ((name, _), (stored, raw)) in PARTS.iter().zip(self.parts) {
            println!(
                "{indent}{name:<15} {:>11} {:>5.1} %  ({} decompressed){}",
                human_bytes(stored as f64),
                100.0 * stored as f64 / total,
                human_bytes(raw as f64),
                per_row(stored)
            );
        }
        if !self.bases.is_empty() {
            let (stored, raw) = self.base_bytes;
            println!(
                "{indent}{:<15} {:>11} {:>5.1} %  ({} decompressed, {} file(s)){}",
                "symbol bases",
                human_bytes(stored as f64),
                100.0 * stored as f64 / total,
                human_bytes(raw as f64),
                self.bases.len(),
                per_row(stored)
            );
        }
        println!(
            "{indent}{:<15} {:>11} {:>5.1} %{}",
            "footers",
            human_bytes(self.framing() as f64),
            100.0 * self.framing() as f64 / total,
            per_row(self.framing())
        );
    }

    pub fn to_json(&self) -> Value {
        let mut parts = serde_json::Map::new();
        for ((name, _), (stored, raw)) in PARTS.iter().zip(self.parts) {
            parts.insert(
                name.to_string(),
                json!({"stored_bytes": stored, "raw_bytes": raw}),
            );
        }
        parts.insert(
            "footers".to_string(),
            json!({"stored_bytes": self.framing()}),
        );
        parts.insert(
            "symbol bases".to_string(),
            json!({"stored_bytes": self.base_bytes.0, "raw_bytes": self.base_bytes.1, "files": self.bases.len()}),
        );
        json!({"files": self.files, "bytes": self.file_bytes, "parts": parts})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_section_kind_belongs_to_exactly_one_part() {
        for k in SectionKind::ALL.into_iter().chain(SectionKind::OPTIONAL) {
            let n = PARTS.iter().filter(|(_, ks)| ks.contains(&k)).count();
            assert_eq!(n, 1, "{k:?}");
        }
    }
}
