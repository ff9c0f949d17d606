//! Symbolization: where debug files for frames kept as addresses come from, and
//! how much of them is kept parsed.

use profiledb_storage::symbolize::debuginfod;

use crate::ServeOptions;

#[derive(clap::Args, Clone, Debug)]
#[command(next_help_heading = "Symbolization")]
pub struct SymbolizationArgs {
    /// debuginfod server asked for debug files by build id (repeatable); added to
    /// the space-separated DEBUGINFOD_URLS variable.
    #[arg(long = "debuginfod-url")]
    pub debuginfod_url: Vec<String>,
    /// Parsed debug files kept in memory for symbolization, in MiB.
    #[arg(long, default_value_t = 256)]
    pub symbol_cache_mb: u64,
    /// Largest debug file accepted (upload or debuginfod), in MiB.
    #[arg(long, default_value_t = 1024)]
    pub max_debuginfo_mb: u64,
}

impl SymbolizationArgs {
    pub fn apply(&self, o: &mut ServeOptions) -> anyhow::Result<()> {
        let d = &mut o.debuginfo;
        d.debuginfod_urls = debuginfod::urls_from_env();
        for u in &self.debuginfod_url {
            d.debuginfod_urls.extend(debuginfod::split_urls(u));
        }
        d.cache_bytes = super::mib(self.symbol_cache_mb);
        d.max_file_bytes = super::mib(super::positive(self.max_debuginfo_mb, "max-debuginfo-mb")?);
        Ok(())
    }
}
