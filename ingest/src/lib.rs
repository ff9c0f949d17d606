//! profiledb's decoding layer: turns every wire format profiledb accepts into
//! [`profiledb_storage::Batch`]es, with no I/O and no HTTP.
//!
//! - [`pprof`]: `perftools.profiles.Profile` (gzip-framed or plain), one profile type
//!   per sample type, names inferred as Pyroscope does ([`profile_type`]).
//! - [`folded`]: collapsed stacks (`a;b;c 12`) and the `lines` format.
//! - [`pyroscope`]: the `/ingest` query parameters Pyroscope SDKs send.
//! - [`push`]: Pyroscope `push.v1.PushRequest` bodies, binary or protojson.
//! - [`time`]: the one parser of times (`from`, `until`, query windows).
//! - [`pipeline`]: the bounded queue and decoder pool between HTTP and storage.
//!
//! Every decoder is bounded by [`Limits`] and reports [`IngestError`]s that carry a
//! stable [`IngestError::code`] for the HTTP layer.

pub mod append;
pub mod error;
pub mod folded;
pub mod gzip;
pub mod label_rules;
pub mod limits;
pub mod pipeline;
pub mod pprof;
pub mod profile_type;
pub mod proto;
pub mod push;
pub mod pyroscope;
pub mod time;

pub use append::append_batch;
pub use error::IngestError;
pub use folded::{decode_folded, FoldedFormat, FoldedOptions, ValueScale};
pub use limits::Limits;
pub use pipeline::{Job, Payload, Pipeline, PipelineConfig, PipelineError, PipelineStats, Stored};
pub use pprof::{decode_pprof, PprofOptions};
pub use profile_type::{
    infer_profile_name, parse_sample_type_config, ProfileType, SampleTypeConfig, SampleTypeSettings,
};
pub use push::{decode_push, push_to_batch, PushEncoding, PushProfile, PushSeries};
pub use pyroscope::{decode_ingest, AppName, Format, IngestBody, IngestParams};
pub use time::{duration_unit_ms, parse_time};
