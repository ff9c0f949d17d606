//! Filesystem durability: what makes a rename or an unlink survive a crash.
//!
//! The bottom layer of the crate beside `error`: the WAL, segment writer and the
//! store's deletions all need it, and none of them should depend on another for it.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use crate::error::{IoContext, Result};

/// fsyncs a directory so a rename or unlink in it is durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|f| f.sync_all()).at(dir)
}

/// Writes `bytes` to `path` so that a crash leaves either no file or all of it:
/// to `<name>.tmp` beside it (which opening a store deletes), fsynced, renamed
/// over `path`, and the directory fsynced.
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    {
        let mut f = File::create(&tmp).at(&tmp)?;
        f.write_all(bytes).at(&tmp)?;
        f.sync_all().at(&tmp)?;
    }
    fs::rename(&tmp, path).at(path)?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}
