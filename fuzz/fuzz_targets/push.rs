//! Push bodies (binary and protojson) must never panic; accepted requests that also
//! decode to a batch must produce a valid one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profiledb_ingest::{decode_push, push_to_batch, Limits, PushEncoding};
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
    if let Ok(series) = decode_push(body, encoding, &limits) {
        if let Ok(batch) = push_to_batch(&series, TenantId::default(), 0, &limits) {
            assert_eq!(batch.validate(), Ok(()));
        }
    }
});
