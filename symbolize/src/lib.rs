//! Server-side symbolization for profiledb: frames stored as addresses inside
//! mappings with a GNU build id get their function, file and line (inlined calls
//! expanded) at query time, from debug files uploaded to profiledb or fetched from
//! debuginfod servers.
//!
//! - [`elf`]: one debug file: build id, load segments, DWARF (`addr2line`), symbols.
//! - [`store`]: debug files by build id in the data directory.
//! - [`debuginfod`]: the debuginfod client (`DEBUGINFOD_URLS`).
//! - [`cache`]: the [`Symbolizer`]: a byte-bounded cache per build id, background
//!   fetches, and the generation that tells a store its names changed.
//!
//! The crate depends on no engine crate: the storage engine calls it, and the fuzz
//! target drives [`elf::DebugFile::parse`] alone.

pub mod cache;
pub mod debuginfod;
pub mod elf;
pub mod store;

pub use cache::{Config, Replica, Source, Stats, Symbolizer, UploadError, Uploaded};
pub use elf::{DebugFile, DebugFileError, Frame, Limits, MappingRange};
pub use store::{normalize_build_id, BadBuildId, DebugStore};
