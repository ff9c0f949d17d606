//! Any bytes uploaded as a debug file must either be refused with an error or
//! parse into a file whose lookups return (possibly empty) frames: no panic, no
//! hang, and memory bounded by the limits (a section claiming more decompressed
//! bytes than `max_section_bytes` is refused before it is inflated). Run with
//! `-rss_limit_mb=512`: the limits below keep a parse far under it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profiledb_symbolize::{DebugFile, Limits, MappingRange};

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_file_bytes: 16 << 20,
        max_section_bytes: 32 << 20,
        max_dwarf_bytes: 64 << 20,
        max_line_rows: 1_000_000,
    };
    let Ok(file) = DebugFile::parse(data, None, &limits, true) else {
        return;
    };
    assert!(!file.build_id().is_empty());
    let m = MappingRange {
        start: 0x40_0000,
        limit: 0x50_0000,
        offset: 0,
    };
    for a in [0u64, 0x40_1000, 0x40_1234, u64::MAX] {
        if let Some(v) = file.vaddr(m, a) {
            let _ = file.frames_at(v);
        }
        let _ = file.frames_at(a);
    }
});
