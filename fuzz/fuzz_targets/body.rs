//! What the body-decoding targets share: the first input byte picks the encoding,
//! and limits small enough that the fuzzer explores shapes rather than sizes.

use profiledb_ingest::{Limits, PushEncoding};

/// Splits the fuzzer's input into an encoding (from its first byte) and a body.
pub fn split(data: &[u8]) -> Option<(PushEncoding, &[u8])> {
    let (&mode, body) = data.split_first()?;
    let encoding = if mode & 1 == 0 {
        PushEncoding::Proto
    } else {
        PushEncoding::Json
    };
    Some((encoding, body))
}

pub fn limits() -> Limits {
    Limits {
        max_decompressed_bytes: 4 << 20,
        max_samples_per_profile: 100_000,
        ..Limits::default()
    }
}
