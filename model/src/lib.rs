//! profiledb's profile model: the types every layer speaks.
//!
//! Decoders (ingest) produce [`Batch`]es, the storage engine writes and queries them,
//! and the server names tenants and time ranges with them. The crate does no I/O and
//! depends on no engine, so a decoder or a fuzz target gets a `Batch` without
//! compiling the storage engine.
//!
//! - [`TenantId`]: a validated tenant name.
//! - [`Labels`] and the reserved label names ([`PROFILE_TYPE_LABEL`], …).
//! - [`Batch`]: a unit of writing, shaped like a pprof profile ([`Symbols`],
//!   [`Stacks`], [`SeriesSamples`]).
//! - [`TimeRange`]: the half-open time range of a query.

// No unwrap() outside tests: a panic on bad input would take the process down.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]
#![deny(missing_docs)]

mod batch;
mod labels;
mod symbols;
mod tenant;
mod time_range;

pub use batch::{Batch, InvalidBatch, Sample, SeriesSamples};
pub use labels::{Labels, NAME_LABEL, PROFILE_TYPE_LABEL, SERVICE_NAME_LABEL};
pub use symbols::{Function, Location, Mapping, Name, Stacks, Symbols};
pub use tenant::{InvalidTenant, TenantId, MAX_TENANT_LEN};
pub use time_range::TimeRange;
