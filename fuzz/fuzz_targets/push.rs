//! Push bodies (binary and protojson) must never panic; accepted requests that also
//! decode to a batch must produce a valid one.
#![no_main]

mod body;

use libfuzzer_sys::fuzz_target;
use profiledb_ingest::{decode_push, push_to_batch};
use profiledb_model::TenantId;

fuzz_target!(|data: &[u8]| {
    let Some((encoding, body)) = body::split(data) else {
        return;
    };
    let limits = body::limits();
    // The decoder takes shared bytes: string fields borrow from the body.
    let body = bytes::Bytes::copy_from_slice(body);
    if let Ok(series) = decode_push(&body, encoding, &limits) {
        if let Ok(batch) = push_to_batch(&series, TenantId::default(), 0, &limits) {
            assert_eq!(batch.validate(), Ok(()));
        }
    }
});
