//! zstd decompression with one context per thread.
//!
//! `zstd::bulk::decompress` creates a decompression context per call: an
//! allocation of about 100 KiB that zstd then initialises. A segment's row
//! columns are one zstd frame per chunk of 16 series, so a query reading a day
//! decompresses thousands of frames, and a first query after a restart spent a
//! visible share of its CPU in `ZSTD_createDCtx` alone
//! (docs/perf-log/2026-11-27-round-15-stack-ranks.md).
//! A context per thread, reset by zstd
//! at the start of each frame, does the same work without it.

use std::cell::RefCell;

thread_local! {
    static CONTEXT: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

/// The zstd frame `stored`, which must decompress to at most `capacity` bytes.
pub(crate) fn decompress(stored: &[u8], capacity: usize) -> std::io::Result<Vec<u8>> {
    CONTEXT.with(|cell| {
        // A re-entrant call (none today) would find the context borrowed: it gets
        // a context of its own rather than a panic.
        let Ok(mut slot) = cell.try_borrow_mut() else {
            return zstd::bulk::decompress(stored, capacity);
        };
        let ctx = match slot.as_mut() {
            Some(ctx) => ctx,
            None => slot.insert(zstd::bulk::Decompressor::new()?),
        };
        ctx.decompress(stored, capacity)
    })
}

/// The first `n` bytes (fewer when the content is shorter) the zstd frame
/// `stored` decompresses to, with `dict` as its dictionary if given: a section's
/// leading count, read without decompressing the section.
pub(crate) fn head(
    stored: &[u8],
    dict: Option<&zstd::dict::DecoderDictionary<'_>>,
    n: usize,
) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::with_capacity(n);
    match dict {
        Some(d) => zstd::stream::read::Decoder::with_prepared_dictionary(stored, d)?
            .single_frame()
            .take(n as u64)
            .read_to_end(&mut out)?,
        None => zstd::stream::read::Decoder::with_buffer(stored)?
            .single_frame()
            .take(n as u64)
            .read_to_end(&mut out)?,
    };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_context_decompresses_frame_after_frame_and_reports_bad_ones() {
        let frames: Vec<Vec<u8>> = (0..4u8)
            .map(|i| {
                (0..10_000u32)
                    .map(|j| (j % (7 + u32::from(i))) as u8)
                    .collect()
            })
            .collect();
        for raw in &frames {
            let stored = zstd::bulk::compress(raw, 3).unwrap();
            assert_eq!(&decompress(&stored, raw.len()).unwrap(), raw);
        }
        // A frame larger than the capacity it is read with is an error, and the
        // context is still good afterwards.
        let stored = zstd::bulk::compress(&frames[0], 3).unwrap();
        assert!(decompress(&stored, frames[0].len() - 1).is_err());
        assert!(decompress(b"not a zstd frame", 100).is_err());
        assert_eq!(decompress(&stored, frames[0].len()).unwrap(), frames[0]);
    }

    /// A frame's first bytes, with and without a dictionary, are the content's.
    #[test]
    fn head_reads_the_first_bytes_of_a_frame() {
        let raw: Vec<u8> = (0..200_000u32).map(|j| (j % 251) as u8).collect();
        let stored = zstd::bulk::compress(&raw, 3).unwrap();
        assert_eq!(head(&stored, None, 10).unwrap(), raw[..10]);
        let prefix: Vec<u8> = raw[..50_000].to_vec();
        let mut c = zstd::bulk::Compressor::with_dictionary(3, &prefix).unwrap();
        let on = c.compress(&raw).unwrap();
        let d = zstd::dict::DecoderDictionary::copy(&prefix);
        assert_eq!(head(&on, Some(&d), 7).unwrap(), raw[..7]);
        let short = zstd::bulk::compress(&raw[..3], 3).unwrap();
        assert_eq!(head(&short, None, 10).unwrap(), raw[..3]);
    }
}
