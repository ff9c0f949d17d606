//! profiledb's decoding layer: turns every wire format profiledb accepts into
//! [`profiledb_model::Batch`]es. It is pure computation over bytes already read: no
//! I/O, no threads, no HTTP and no storage engine (the server's ingest pipeline runs
//! these decoders on its worker threads and writes the batches).
//!
//! - [`pprof`]: `perftools.profiles.Profile` (gzip-framed or plain), one profile type
//!   per sample type, names inferred as Pyroscope does ([`profile_type`]).
//! - [`folded`]: collapsed stacks (`a;b;c 12`) and the `lines` format.
//! - [`jfr`]: Java Flight Recorder recordings with the Pyroscope Java agent's
//!   labels snapshot.
//! - [`pyroscope`]: the `/ingest` query parameters Pyroscope SDKs send.
//! - [`otlp`]: OpenTelemetry profiles (`ExportProfilesServiceRequest`), binary or JSON.
//! - [`push`]: Pyroscope `push.v1.PushRequest` bodies, binary or protojson.
//! - [`time`]: the one parser of times (`from`, `until`, query windows).
//! - [`proto`]: the generated wire messages the decoders read (from `profiledb-proto`).
//!
//! Every decoder is bounded by [`Limits`] and reports [`IngestError`]s that carry a
//! stable [`IngestError::code`] for the HTTP layer.

// No unwrap() outside tests: a panic on bad input would take the process down.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]
#![deny(missing_docs)]

pub mod builder;
pub mod error;
pub mod folded;
pub mod gzip;
pub mod jfr;
pub mod label_rules;
pub mod limits;
pub mod otlp;
pub mod pprof;
pub mod profile_type;
pub mod push;
pub mod pyroscope;
pub mod time;

/// The generated wire messages the decoders read.
pub use profiledb_proto as proto;

pub use builder::BatchBuilder;
pub use error::IngestError;
pub use folded::{decode_folded, FoldedFormat, FoldedOptions, ValueScale};
pub use jfr::{decode_jfr, JfrOptions};
pub use limits::Limits;
pub use otlp::{decode_otlp, otlp_to_batch, OtlpError};
pub use pprof::{decode_pprof, decode_pprof_into, PprofOptions};
pub use profile_type::{
    infer_profile_name, parse_sample_type_config, ProfileType, SampleTypeConfig, SampleTypeSettings,
};
pub use push::{decode_push, push_to_batch, PushEncoding, PushProfile, PushSeries};
pub use pyroscope::{decode_ingest, AppName, Format, IngestBody, IngestParams};
pub use time::{duration_unit_ms, parse_time};
