//! Query-string parsing must never panic on any input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profiledb_ingest::{IngestParams, Limits};

fuzz_target!(|data: &[u8]| {
    if let Ok(query) = std::str::from_utf8(data) {
        let _ = IngestParams::from_query(query, 1_700_000_000_000, &Limits::default());
    }
});
