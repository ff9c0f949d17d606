//! OTLP profiles export bodies (binary and JSON) must never panic; accepted requests
//! must decode to a valid batch.
#![no_main]

mod body;

use libfuzzer_sys::fuzz_target;
use profiledb_ingest::decode_otlp;
use profiledb_model::TenantId;

fuzz_target!(|data: &[u8]| {
    let Some((encoding, body)) = body::split(data) else {
        return;
    };
    if let Ok(batch) = decode_otlp(body, encoding, TenantId::default(), 0, &body::limits()) {
        assert_eq!(batch.validate(), Ok(()));
    }
});
