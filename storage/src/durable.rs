//! Filesystem durability: what makes a rename or an unlink survive a crash.
//!
//! The bottom layer of the crate beside `error`: the WAL, segment writer and the
//! store's deletions all need it, and none of them should depend on another for it.

use std::fs::File;
use std::path::Path;

use crate::error::{IoContext, Result};

/// fsyncs a directory so a rename or unlink in it is durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|f| f.sync_all()).at(dir)
}
