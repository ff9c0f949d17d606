//! What a location stands for as source frames: the function, file and line the
//! producer named, or, for a frame kept as an address in a mapping with a build id,
//! what the store's [`Symbolizer`] finds in the debug file (several frames when
//! calls were inlined), or else `module+0xoffset`.

use std::borrow::Cow;

use profiledb_symbolize::{MappingRange, Symbolizer};

use crate::dict::{Dict, LocationRec, MappingRec};

/// One source frame of a location.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFrame<'a> {
    pub name: Cow<'a, str>,
    /// Source file, empty when unknown.
    pub file: Cow<'a, str>,
    /// Source line, 0 when unknown.
    pub line: u32,
}

fn range(m: &MappingRec) -> MappingRange {
    MappingRange {
        start: m.range.start,
        limit: m.range.limit,
        offset: m.range.offset,
    }
}

/// The name of a frame nothing names: the mapped file's base name and the
/// address's offset in it, or the bare address.
fn address_name(dict: &Dict, l: &LocationRec) -> String {
    let mapping = l.mapping.and_then(|m| dict.mappings.get(m as usize));
    let binary = mapping
        .map(|m| dict.str(m.file))
        .map(|f| f.rsplit('/').next().unwrap_or(f))
        .unwrap_or("");
    let offset = mapping.map_or(l.address, |m| {
        l.address
            .wrapping_sub(m.range.start)
            .wrapping_add(m.range.offset)
    });
    match (binary.is_empty(), l.address) {
        (true, 0) => "[unknown]".into(),
        (true, a) => format!("0x{a:x}"),
        (false, _) => format!("{binary}+0x{offset:x}"),
    }
}

/// The source frames of location `loc`, outermost first (never empty).
pub fn location_frames<'a>(
    dict: &'a Dict,
    loc: u32,
    symbols: Option<&Symbolizer>,
) -> Vec<SourceFrame<'a>> {
    let Some(l) = dict.locations.get(loc as usize) else {
        return vec![SourceFrame {
            name: "[unknown]".into(),
            file: "".into(),
            line: 0,
        }];
    };
    if let Some(f) = l.function.and_then(|f| dict.functions.get(f as usize)) {
        let name = dict.str(f.name);
        if !name.is_empty() {
            return vec![SourceFrame {
                name: name.into(),
                file: dict.str(f.file).into(),
                line: l.line,
            }];
        }
    }
    let mapping = l.mapping.and_then(|m| dict.mappings.get(m as usize));
    if let (Some(sym), Some(m)) = (symbols, mapping) {
        let build_id = dict.str(m.build_id);
        if !build_id.is_empty() {
            if let Some(frames) = sym.frames(build_id, range(m), l.address) {
                let fallback = address_name(dict, l);
                return frames
                    .into_iter()
                    .map(|f| SourceFrame {
                        name: if f.function.is_empty() {
                            fallback.clone().into()
                        } else {
                            f.function.into()
                        },
                        file: f.file.into(),
                        line: f.line,
                    })
                    .collect();
            }
        }
    }
    vec![SourceFrame {
        name: address_name(dict, l).into(),
        file: "".into(),
        line: 0,
    }]
}
