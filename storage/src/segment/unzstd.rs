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
}
