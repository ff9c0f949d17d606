//! The layer list at the head of `storage/src/lib.rs` is the rule newcomers read: a
//! module uses only modules of its own layer or of layers listed before it. This test
//! reads that list and every module's source, so the list and the code cannot drift
//! apart: a new module must be placed in the list, and an upward import fails here.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Module name → layer number, from the numbered `# Layers` list in lib.rs's docs.
fn layers(lib: &str) -> BTreeMap<String, usize> {
    let doc: Vec<&str> = lib.lines().filter_map(|l| l.strip_prefix("//!")).collect();
    numbered_list(&doc, "# Layers")
}

/// Module name → layer number from the numbered list under `heading` (lines without
/// their comment markers); backticked words are names, crate names (with a dash) not.
fn numbered_list(lines: &[&str], heading: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    let mut layer = 0;
    let mut in_list = false;
    for raw in lines {
        let raw = raw.strip_prefix(' ').unwrap_or(raw);
        let doc = raw.trim();
        // A paragraph after the list (text at the margin that is no item) ends it.
        let item = doc
            .split_once(". ")
            .is_some_and(|(n, _)| n.parse::<usize>().is_ok());
        if layer > 0 && !doc.is_empty() && !raw.starts_with(' ') && !item {
            break;
        }
        if doc == heading {
            in_list = true;
            continue;
        }
        if !in_list {
            continue;
        }
        if doc.starts_with('#') {
            break;
        }
        if let Some((n, _)) = doc.split_once(". ") {
            if let Ok(n) = n.parse::<usize>() {
                layer = n;
            }
        }
        if layer == 0 {
            continue;
        }
        // Backticked words; crate names (with a dash) are not modules.
        for (i, word) in doc.split('`').enumerate() {
            if i % 2 == 1 && !word.contains('-') {
                out.insert(word.to_string(), layer);
            }
        }
    }
    out
}

/// The crate's top-level modules: a file or directory under src/ each, plus the
/// inline ones lib.rs declares.
fn top_modules() -> Vec<String> {
    let mut out: Vec<String> = fs::read_dir(src())
        .expect("storage/src")
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let name = name.strip_suffix(".rs").unwrap_or(&name).to_string();
            (name != "lib").then_some(name)
        })
        .collect();
    out.push("model".into());
    out.sort();
    out.dedup();
    out
}

/// Every `.rs` file of a top-level module, test files left out.
fn files_of(module: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let file = src().join(format!("{module}.rs"));
    if file.exists() {
        out.push(file);
    }
    let mut dirs = vec![src().join(module)];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.filter_map(|e| e.ok()) {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                dirs.push(p);
            } else if name.ends_with(".rs") && name != "tests.rs" && !name.ends_with("_tests.rs") {
                out.push(p);
            }
        }
    }
    out
}

/// The top-level modules a source file names through `crate::` (also inside a
/// `use crate::{…}` group over several lines), outside comments and its inline
/// `#[cfg(test)]` module.
fn uses(source: &str) -> Vec<String> {
    let mut code = String::new();
    let mut lines = source.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|next| next.trim_end().ends_with('{'))
        {
            break;
        }
        code.push_str(trimmed.split("//").next().unwrap_or(""));
        code.push('\n');
    }
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    for part in code.split("crate::").skip(1) {
        let Some(group) = part.strip_prefix('{') else {
            out.push(ident(part));
            continue;
        };
        // The group's items at depth 0 are top-level modules.
        let mut depth = 0;
        let mut item_start = true;
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => item_start = true,
                c if item_start && !c.is_whitespace() => {
                    out.push(ident(&group[i..]));
                    item_start = false;
                }
                _ => {}
            }
        }
    }
    out.retain(|n| !n.is_empty());
    out
}

#[test]
fn every_module_is_in_the_layer_list() {
    let lib = fs::read_to_string(src().join("lib.rs")).expect("lib.rs");
    let layers = layers(&lib);
    assert!(
        layers.len() > 10,
        "no layer list found in lib.rs: {layers:?}"
    );
    let missing: Vec<_> = top_modules()
        .into_iter()
        .filter(|m| !layers.contains_key(m))
        .collect();
    assert!(
        missing.is_empty(),
        "storage/src/lib.rs's `# Layers` list does not place {missing:?}"
    );
    let stale: Vec<_> = layers
        .keys()
        .filter(|m| !top_modules().contains(m))
        .collect();
    assert!(stale.is_empty(), "the layer list names no module {stale:?}");
}

#[test]
fn no_module_uses_a_later_layer() {
    let lib = fs::read_to_string(src().join("lib.rs")).expect("lib.rs");
    let layers = layers(&lib);
    let mut upward = Vec::new();
    for module in top_modules() {
        let Some(&own) = layers.get(&module) else {
            continue;
        };
        for file in files_of(&module) {
            let source = fs::read_to_string(&file).expect("source file");
            for used in uses(&source) {
                if let Some(&theirs) = layers.get(&used) {
                    if theirs > own {
                        upward.push(format!(
                            "{} (layer {own}) uses `{used}` (layer {theirs})",
                            file.strip_prefix(src()).unwrap_or(&file).display()
                        ));
                    }
                }
            }
        }
    }
    upward.sort();
    upward.dedup();
    assert!(
        upward.is_empty(),
        "imports against the layer list:\n{}",
        upward.join("\n")
    );
}

#[test]
fn architecture_md_lists_the_same_layers() {
    let lib = fs::read_to_string(src().join("lib.rs")).expect("lib.rs");
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/architecture.md");
    let doc = fs::read_to_string(&doc_path).expect("docs/architecture.md");
    let lines: Vec<&str> = doc.lines().collect();
    let modules = top_modules();
    // The page also names submodules in passing (`frames`, `tree`): only the crate's
    // top-level modules are compared.
    let listed: BTreeMap<String, usize> = numbered_list(&lines, "## Layers inside storage")
        .into_iter()
        .filter(|(m, _)| modules.contains(m))
        .collect();
    assert_eq!(
        listed,
        layers(&lib),
        "docs/architecture.md's \"Layers inside storage\" disagrees with storage/src/lib.rs"
    );
}

#[test]
fn the_parser_sees_what_it_must() {
    // The checks above are only as good as these two readers.
    let lib = "//! # Layers\n//!\n//! 1. `error`, `model` (the `profiledb-model` crate)\n\
               //!    and `cache`.\n//! 2. `head` — memory.\n//!\n//! # Next\n//! 3. `nope`\n";
    let l = layers(lib);
    assert_eq!(l.get("error"), Some(&1));
    assert_eq!(l.get("cache"), Some(&1));
    assert_eq!(l.get("head"), Some(&2));
    assert!(!l.contains_key("profiledb-model") && !l.contains_key("nope"));
    let src = "use crate::{\n    dict::{Dict, Symbols},\n    error,\n};\n\
               // crate::store in a comment\nfn f() { crate::head::x(); } // crate::wal\n\
               #[cfg(test)]\nmod tests {\n    use crate::querier;\n}\n";
    let mut u = uses(src);
    u.sort();
    assert_eq!(u, ["dict", "error", "head"]);
}
