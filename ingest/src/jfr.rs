//! Java Flight Recorder recordings (async-profiler, the Pyroscope Java agent, JDK
//! Flight Recorder) → [`Batch`].
//!
//! A small reader of the JFR chunk format written for this crate rather than a
//! crate from crates.io: `jfrs` (the maintained Rust reader) sizes allocations
//! from counts in the input and recurses without a limit, so a hostile upload
//! could abort the server. This one is bounded throughout: counts are capped by
//! the bytes left, nesting by fixed depths, and total decoding work by
//! [`MAX_VALUES_PER_BYTE`] values per input byte.
//!
//! - [`chunk`]: chunk headers; [`metadata`]: the type table; [`value`]: decoding a
//!   value of any declared type; [`pool`]: constant pools and symbol lookups;
//!   [`events`]: the profiling events; [`labels`]: the agent's `LabelsSnapshot`;
//!   [`convert`]: Pyroscope's rules from events to profile types; [`symbols`]:
//!   stable names for JVM-generated classes.

pub mod chunk;
pub mod convert;
pub mod cursor;
pub mod error;
pub mod events;
pub mod labels;
pub mod metadata;
pub mod pool;
pub mod symbols;
pub mod value;

#[cfg(test)]
mod tests;

use std::collections::HashMap;

use profiledb_model::{Batch, Labels, TenantId};

use crate::error::IngestError;
use crate::gzip::decompress_body;
use crate::limits::Limits;

pub use chunk::is_jfr;
pub use error::JfrError;
pub use labels::LabelsSnapshot;

use convert::{ChunkTables, Converter};
use events::{Event, Events};
use metadata::Metadata;
use pool::Pools;
use value::Decoder;

/// Values decoded per input byte before a recording is refused: real recordings
/// decode about one value per three bytes.
pub const MAX_VALUES_PER_BYTE: u64 = 4;

/// What the caller knows about a JFR upload besides its bytes.
#[derive(Clone, Debug, Default)]
pub struct JfrOptions {
    /// Whose data it is.
    pub tenant: TenantId,
    /// `service_name` and the query's tags.
    pub base_labels: Labels,
    /// Time of the samples whose event has none (ms).
    pub time_ms: i64,
    /// The `sampleRate` parameter (Hz), when the upload has one: CPU and wall
    /// samples then weigh 1 s / rate, else the recording's own period.
    pub sample_rate: Option<u32>,
    /// Bounds on the body, stacks and labels.
    pub limits: Limits,
}

/// Decodes a recording (gzip'd or plain) and the optional `labels` part.
pub fn decode_jfr(
    data: &[u8],
    labels: Option<&[u8]>,
    opts: &JfrOptions,
) -> Result<Batch, IngestError> {
    let limits = &opts.limits;
    let data = decompress_body(data, limits)?;
    let snapshot = match labels.filter(|l| !l.is_empty()) {
        Some(l) => {
            let l = decompress_body(l, limits)?;
            Some(LabelsSnapshot::decode_bytes(&l)?)
        }
        None => None,
    };
    let period_ns = opts
        .sample_rate
        .map(|r| 1_000_000_000 / i64::from(r.max(1)));
    let mut conv = Converter::new(
        Batch::new(opts.tenant.clone()),
        period_ns,
        snapshot.as_ref(),
        limits,
    );
    let max_values = (data.len() as u64).saturating_mul(MAX_VALUES_PER_BYTE);
    let mut budget = max_values;
    let mut events_seen = 0usize;
    for chunk in chunk::chunks(&data) {
        let (header, bytes) = chunk?;
        let meta = Metadata::parse(bytes, header.metadata_offset, header.compressed)?;
        let mut dec = Decoder::new(&meta, &mut budget, max_values);
        let pools = Pools::parse(
            bytes,
            header.constant_pool_offset,
            header.compressed,
            &mut dec,
        )?;
        let mut tables = ChunkTables {
            meta: &meta,
            pools: &pools,
            stack_cache: HashMap::new(),
            header,
        };
        let execution_sample = meta.by_name("jdk.ExecutionSample").map(|c| c.id);
        let mut events = Events::new(bytes, header.compressed, &meta);
        while let Some(ev) = events.next(&mut dec, &pools)? {
            match ev {
                Event::Setting { id, name, value } => {
                    let of_execution = id.is_some() && id == execution_sample;
                    conv.setting(&name, &value, of_execution)
                }
                Event::Profile(o) => {
                    events_seen += 1;
                    limits.check_samples(events_seen, "events in recording")?;
                    conv.observe(&o, &mut tables)?;
                }
            }
        }
        conv.end_chunk();
    }
    conv.finish(&opts.base_labels, opts.time_ms, limits)
}
