//! The 68-byte chunk header and the split of a recording into chunks.
//!
//! A recording is one or more chunks back to back; each starts with `FLR\0`, a
//! version, its own size, and the offsets (from the chunk's start) of its first
//! constant-pool checkpoint and of its metadata.

use super::error::JfrError;

/// Size of a chunk header.
pub const HEADER_SIZE: usize = 68;
const MAGIC: &[u8; 4] = b"FLR\0";

/// Whether `data` starts like a JFR recording.
pub fn is_jfr(data: &[u8]) -> bool {
    data.starts_with(MAGIC)
}

/// What a chunk header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Size of the whole chunk, header included.
    pub size: usize,
    /// Offset of the newest constant-pool checkpoint.
    pub constant_pool_offset: usize,
    /// Offset of the metadata event.
    pub metadata_offset: usize,
    /// Wall-clock start of the chunk, ns since the epoch.
    pub start_nanos: i64,
    /// The tick count at `start_nanos`: events carry their times in ticks.
    pub start_ticks: i64,
    /// Ticks per second (0 in a header that does not say).
    pub ticks_per_second: i64,
    /// Integers are varints (feature bit 0).
    pub compressed: bool,
}

fn be(b: &[u8], at: usize, n: usize) -> u64 {
    b.get(at..at + n)
        .unwrap_or_default()
        .iter()
        .fold(0, |acc, &x| (acc << 8) | u64::from(x))
}

impl Header {
    /// Parses the header of the chunk starting at `at`.
    pub fn parse(data: &[u8], at: usize) -> Result<Header, JfrError> {
        let h = data
            .get(at..)
            .and_then(|d| d.get(..HEADER_SIZE))
            .ok_or(JfrError::Truncated {
                at,
                what: "chunk header",
            })?;
        if !is_jfr(h) {
            return Err(JfrError::BadMagic { at });
        }
        let (major, minor) = (be(h, 4, 2) as u16, be(h, 6, 2) as u16);
        if major != 2 {
            return Err(JfrError::UnsupportedVersion { major, minor });
        }
        let size = be(h, 8, 8);
        let available = (data.len() - at) as u64;
        if size < HEADER_SIZE as u64 || size > available {
            return Err(JfrError::malformed(format!(
                "chunk at byte {at} declares {size} bytes but {available} remain"
            )));
        }
        let offset = |pos: usize, what: &str| -> Result<usize, JfrError> {
            let o = be(h, pos, 8);
            if o < HEADER_SIZE as u64 || o >= size {
                return Err(JfrError::malformed(format!(
                    "{what} offset {o} is outside the chunk of {size} bytes"
                )));
            }
            Ok(o as usize)
        };
        Ok(Header {
            size: size as usize,
            constant_pool_offset: offset(16, "constant pool")?,
            metadata_offset: offset(24, "metadata")?,
            start_nanos: be(h, 32, 8) as i64,
            start_ticks: be(h, 48, 8) as i64,
            ticks_per_second: be(h, 56, 8) as i64,
            compressed: be(h, 64, 4) & 1 == 1,
        })
    }
}

impl Header {
    /// The wall-clock time, ms since the epoch, of an event at `ticks`; `None` when
    /// the header gives no tick rate or the time does not fit.
    pub fn time_ms(&self, ticks: i64) -> Option<i64> {
        if self.ticks_per_second <= 0 {
            return None;
        }
        let since = i128::from(ticks) - i128::from(self.start_ticks);
        let nanos = i128::from(self.start_nanos)
            + since * 1_000_000_000 / i128::from(self.ticks_per_second);
        i64::try_from(nanos.div_euclid(1_000_000)).ok()
    }
}

/// The chunks of a recording, as (header, chunk bytes) pairs.
pub fn chunks(data: &[u8]) -> impl Iterator<Item = Result<(Header, &[u8]), JfrError>> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= data.len() {
            return None;
        }
        Some(Header::parse(data, at).map(|h| {
            let chunk = &data[at..at + h.size];
            at += h.size;
            (h, chunk)
        }))
    })
    .scan(false, |failed, r| {
        // Stop after the first error instead of re-reading the same bytes.
        if *failed {
            return None;
        }
        *failed = r.is_err();
        Some(r)
    })
}
