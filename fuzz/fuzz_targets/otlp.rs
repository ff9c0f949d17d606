//! OTLP profiles export bodies (binary and JSON) must never panic; accepted requests
//! must decode to a valid batch.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profiledb_ingest::{decode_otlp, Limits, PushEncoding};
use profiledb_model::TenantId;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let encoding = if mode & 1 == 0 {
        PushEncoding::Proto
    } else {
        PushEncoding::Json
    };
    let limits = Limits {
        max_decompressed_bytes: 4 << 20,
        max_samples_per_profile: 100_000,
        ..Limits::default()
    };
    if let Ok(batch) = decode_otlp(body, encoding, TenantId::default(), 0, &limits) {
        assert_eq!(batch.validate(), Ok(()));
    }
});
