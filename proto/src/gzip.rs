//! gzip framing: compression for what we send, and the one bounded decompression for
//! what we receive (ingest bodies, Connect requests).
//!
//! SDKs gzip bodies with and without `Content-Encoding: gzip`, so
//! [`decompress_bounded`] detects the framing from the magic bytes `1f 8b`, never from
//! headers. Decompression stops one byte past the limit, so a gzip bomb costs at most
//! `max_bytes` of memory.

use std::borrow::Cow;
use std::io::{Read, Write};

use flate2::bufread::MultiGzDecoder;
use flate2::write::GzEncoder;

pub use flate2::Compression;

const MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Why a body could not be decompressed within its limit.
#[derive(Debug, thiserror::Error)]
pub enum GunzipError {
    /// The body, or what it decompresses to, is longer than the limit.
    #[error("{what} exceeds {max_bytes} bytes")]
    TooLarge {
        /// What was measured: `"body"` (plain input) or `"decompressed body"`.
        what: &'static str,
        /// The limit that was exceeded.
        max_bytes: usize,
    },
    /// The bytes are not a valid gzip stream (bad header, corrupt or truncated data).
    #[error("invalid gzip data: {0}")]
    Invalid(#[source] std::io::Error),
}

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
/// way the result is at most `max_bytes` long.
pub fn decompress_bounded(data: &[u8], max_bytes: usize) -> Result<Cow<'_, [u8]>, GunzipError> {
    if is_gzip(data) {
        return gunzip(data, max_bytes).map(Cow::Owned);
    }
    if data.len() > max_bytes {
        return Err(GunzipError::TooLarge {
            what: "body",
            max_bytes,
        });
    }
    Ok(Cow::Borrowed(data))
}

/// Decompresses gzip `data` (framing required) into at most `max_bytes`.
pub fn gunzip(data: &[u8], max_bytes: usize) -> Result<Vec<u8>, GunzipError> {
    // Multi-member: concatenated gzip streams are valid gzip and some writers emit them.
    // The `bufread` decoder reads the slice in place instead of copying it through an
    // internal buffer.
    let decoder = MultiGzDecoder::new(data);
    let mut out = Vec::with_capacity(capacity_hint(data, max_bytes));
    let read_cap = (max_bytes as u64).saturating_add(1);
    decoder
        .take(read_cap)
        .read_to_end(&mut out)
        .map_err(GunzipError::Invalid)?;
    if out.len() > max_bytes {
        return Err(GunzipError::TooLarge {
            what: "decompressed body",
            max_bytes,
        });
    }
    Ok(out)
}

/// gzip-frames `data` at `level`.
pub fn gzip(data: &[u8], level: Compression) -> std::io::Result<Vec<u8>> {
    let mut encoder = GzEncoder::new(Vec::new(), level);
    encoder.write_all(data)?;
    encoder.finish()
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

    fn gz(data: &[u8]) -> Vec<u8> {
        gzip(data, Compression::default()).unwrap()
    }

    #[test]
    fn plain_data_is_borrowed_unchanged() {
        let out = decompress_bounded(b"a;b 1", 100).unwrap();
        assert!(matches!(out, Cow::Borrowed(b"a;b 1")));
    }

    #[test]
    fn gzip_round_trips_at_every_level() {
        for level in [Compression::fast(), Compression::default()] {
            let framed = gzip(b"hello world", level).unwrap();
            assert!(is_gzip(&framed));
            assert_eq!(gunzip(&framed, 11).unwrap(), b"hello world");
            assert_eq!(&*decompress_bounded(&framed, 11).unwrap(), b"hello world");
        }
    }

    #[test]
    fn gzip_bomb_stops_at_the_limit() {
        // 64 MiB of zeros compresses to ~64 KiB.
        let bomb = gz(&vec![0u8; 64 << 20]);
        assert!(bomb.len() < 1 << 20);
        let err = gunzip(&bomb, 1 << 20).unwrap_err();
        assert!(
            matches!(
                err,
                GunzipError::TooLarge {
                    what: "decompressed body",
                    max_bytes: 1_048_576
                }
            ),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "decompressed body exceeds 1048576 bytes");
    }

    #[test]
    fn plain_body_over_the_limit_is_refused() {
        let err = decompress_bounded(&[1u8; 11], 10).unwrap_err();
        assert_eq!(err.to_string(), "body exceeds 10 bytes");
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
        assert_eq!(gunzip(&two, 1 << 20).unwrap().len(), 50_001);
    }

    #[test]
    fn peek_reads_the_head_of_plain_gzip_and_broken_bodies() {
        assert_eq!(&*peek(b"hello world", 5), b"hello");
        assert_eq!(&*peek(b"hi", 5), b"hi");
        let framed = gz(b"hello world");
        assert_eq!(&*peek(&framed, 5), b"hello");
        assert_eq!(&*peek(&framed, 100), b"hello world");
        let long = gz(&[b'x'; 4096]);
        assert_eq!(peek(&long[..long.len() - 8], 1024).len(), 1024);
    }

    #[test]
    fn truncated_or_unframed_input_is_invalid() {
        let data = gz(b"hello world hello world");
        let err = gunzip(&data[..data.len() - 6], 1000).unwrap_err();
        assert!(matches!(err, GunzipError::Invalid(_)), "{err:?}");
        let err = gunzip(b"not gzip at all", 1000).unwrap_err();
        assert!(matches!(err, GunzipError::Invalid(_)), "{err:?}");
    }
}
