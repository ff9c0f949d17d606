//! Gzip detection and bounded decompression.
//!
//! SDKs gzip bodies with and without `Content-Encoding: gzip`, so the framing is
//! detected from the magic bytes `1f 8b`, never from headers. Decompression stops
//! one byte past the limit, so a gzip bomb costs at most `limit` bytes of memory.

use std::borrow::Cow;
use std::io::Read;

use flate2::bufread::MultiGzDecoder;

use crate::error::IngestError;

const MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Whether `data` starts with the gzip magic bytes.
pub fn is_gzip(data: &[u8]) -> bool {
    data.starts_with(&MAGIC)
}

/// The first (at most) `n` bytes of `data`'s content: decompressed if it is
/// gzip-framed (a broken stream gives what decoded before the break), as is otherwise.
pub fn peek(data: &[u8], n: usize) -> Cow<'_, [u8]> {
    if !is_gzip(data) {
        return Cow::Borrowed(&data[..data.len().min(n)]);
    }
    let mut out = Vec::with_capacity(n);
    let mut decoder = MultiGzDecoder::new(data).take(n as u64);
    let mut buf = [0u8; 512];
    while let Ok(k) = decoder.read(&mut buf) {
        if k == 0 {
            break;
        }
        out.extend_from_slice(&buf[..k]);
    }
    Cow::Owned(out)
}

/// Returns `data` decompressed if it is gzip-framed, or unchanged otherwise; either
/// way the result is at most `max_bytes` long (`limit` names the field for errors).
pub fn decompress_bounded<'a>(
    data: &'a [u8],
    max_bytes: usize,
    limit: &'static str,
) -> Result<Cow<'a, [u8]>, IngestError> {
    let too_large = |what| IngestError::TooLarge {
        limit,
        max: max_bytes as u64,
        what,
    };
    if !is_gzip(data) {
        if data.len() > max_bytes {
            return Err(too_large("body"));
        }
        return Ok(Cow::Borrowed(data));
    }
    // Multi-member: concatenated gzip streams are valid gzip and some writers emit them.
    // The `bufread` decoder reads the slice in place instead of copying it through an
    // internal buffer.
    let decoder = MultiGzDecoder::new(data);
    let mut out = Vec::with_capacity(capacity_hint(data, max_bytes));
    let read_cap = (max_bytes as u64).saturating_add(1);
    decoder
        .take(read_cap)
        .read_to_end(&mut out)
        .map_err(IngestError::Gzip)?;
    if out.len() > max_bytes {
        return Err(too_large("decompressed body"));
    }
    Ok(Cow::Owned(out))
}

/// Output buffer size to reserve for gzip `data`: the ISIZE trailer (uncompressed
/// size mod 2^32 of the last member, exact for the usual single-member body) plus one
/// byte so `read_to_end` sees EOF without regrowing. ISIZE is only a hint from the
/// sender, so it is capped by the limit and by deflate's maximum ratio (~1032:1), and
/// a body whose ISIZE is useless falls back to a ratio guess.
fn capacity_hint(data: &[u8], max_bytes: usize) -> usize {
    const MAX_DEFLATE_RATIO: usize = 1032;
    let cap = data
        .len()
        .saturating_mul(MAX_DEFLATE_RATIO)
        .min(max_bytes.saturating_add(1));
    let isize = data
        .len()
        .checked_sub(4)
        .and_then(|at| data.get(at..))
        .and_then(|tail| <[u8; 4]>::try_from(tail).ok())
        .map(|tail| u32::from_le_bytes(tail) as usize)
        .filter(|&n| n >= data.len() / 2);
    match isize {
        Some(n) => n.saturating_add(1).min(cap),
        // Profiles compress ~4-8x.
        None => data.len().saturating_mul(6).min(cap),
    }
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
    fn capacity_hint_uses_isize_within_bounds() {
        let data = gz(&[7u8; 100_000]);
        assert_eq!(capacity_hint(&data, usize::MAX), 100_001);
        assert_eq!(capacity_hint(&data, 5_000), 5_001);
        // A lying trailer cannot reserve more than deflate can produce.
        let mut lie = data.clone();
        let n = lie.len();
        lie[n - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(capacity_hint(&lie, usize::MAX), n * 1032);
        assert_eq!(capacity_hint(&[0x1f, 0x8b], usize::MAX), 12);
        // Multi-member bodies still decode when the hint is too small.
        let mut two = gz(&[1u8; 50_000]);
        two.extend(gz(b"x"));
        assert_eq!(
            decompress_bounded(&two, 1 << 20, "m").unwrap().len(),
            50_001
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
