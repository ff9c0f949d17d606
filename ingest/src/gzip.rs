//! Bounded decompression of upload bodies, reported as [`IngestError`]s.
//!
//! The decompression itself is [`profiledb_proto::gzip::decompress_bounded`] (framing
//! detected by magic bytes, output capped at the limit); this module names the
//! [`crate::Limits`] field that was exceeded, so the client learns which knob applies.

use std::borrow::Cow;

use profiledb_proto::gzip::{self, GunzipError};

use crate::error::IngestError;
use crate::limits::Limits;

pub use profiledb_proto::gzip::{is_gzip, peek};

/// Returns `data` decompressed if it is gzip-framed, or unchanged otherwise; either
/// way the result is at most `max_bytes` long (`limit` names the field for errors).
pub fn decompress_bounded<'a>(
    data: &'a [u8],
    max_bytes: usize,
    limit: &'static str,
) -> Result<Cow<'a, [u8]>, IngestError> {
    gzip::decompress_bounded(data, max_bytes).map_err(|e| match e {
        GunzipError::TooLarge { what, max_bytes } => IngestError::TooLarge {
            limit,
            max: max_bytes as u64,
            what,
        },
        GunzipError::Invalid(source) => IngestError::Gzip(source),
    })
}

/// [`decompress_bounded`] of an uploaded profile body, capped by
/// [`Limits::max_decompressed_bytes`].
pub fn decompress_body<'a>(data: &'a [u8], limits: &Limits) -> Result<Cow<'a, [u8]>, IngestError> {
    decompress_bounded(
        data,
        limits.max_decompressed_bytes,
        "max_decompressed_bytes",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::write::GzEncoder;
    use flate2::Compression;
    use std::io::Write;

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn plain_data_is_borrowed_unchanged() {
        let out = decompress_bounded(b"a;b 1", 100, "max_decompressed_bytes").unwrap();
        assert!(matches!(out, Cow::Borrowed(b"a;b 1")));
    }

    #[test]
    fn gzip_is_detected_by_magic_and_decompressed() {
        let data = gz(b"hello world");
        assert!(is_gzip(&data));
        let out = decompress_bounded(&data, 11, "max_decompressed_bytes").unwrap();
        assert_eq!(&*out, b"hello world");
    }

    #[test]
    fn gzip_bomb_stops_at_the_limit() {
        // 64 MiB of zeros compresses to ~64 KiB.
        let bomb = gz(&vec![0u8; 64 << 20]);
        assert!(bomb.len() < 1 << 20);
        let err = decompress_bounded(&bomb, 1 << 20, "max_decompressed_bytes").unwrap_err();
        assert_eq!(err.code(), "payload_too_large");
        assert_eq!(
            err.to_string(),
            "decompressed body exceeds the limit max_decompressed_bytes = 1048576"
        );
    }

    #[test]
    fn plain_body_over_the_limit_is_refused() {
        let err = decompress_bounded(&[1u8; 11], 10, "max_decompressed_bytes").unwrap_err();
        assert_eq!(
            err.to_string(),
            "body exceeds the limit max_decompressed_bytes = 10"
        );
    }

    #[test]
    fn truncated_gzip_is_an_error() {
        let data = gz(b"hello world hello world");
        let err = decompress_bounded(&data[..data.len() - 6], 1000, "m").unwrap_err();
        assert!(matches!(err, IngestError::Gzip(_)), "{err:?}");
        assert_eq!(err.code(), "invalid_argument");
    }
}
