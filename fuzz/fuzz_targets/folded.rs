//! The folded and lines decoders must never panic, and what they accept must be a
//! valid batch. The first byte picks the format.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profiledb_ingest::{decode_folded, FoldedFormat, FoldedOptions, Limits};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let opts = FoldedOptions {
        format: if mode & 1 == 0 {
            FoldedFormat::Folded
        } else {
            FoldedFormat::Lines
        },
        limits: Limits {
            max_decompressed_bytes: 4 << 20,
            ..Limits::default()
        },
        ..FoldedOptions::default()
    };
    if let Ok(batch) = decode_folded(body, &opts) {
        assert_eq!(batch.validate(), Ok(()));
    }
});
