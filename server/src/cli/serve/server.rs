//! Server: where it listens and keeps its data, what a request may carry, when it
//! reports ready, who may use the admin API.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::mib;
use crate::cli::offline::DEFAULT_DATA_DIR;
use crate::ServeOptions;

#[derive(clap::Args, Clone, Debug)]
#[command(next_help_heading = "Server")]
pub struct ServerArgs {
    /// Directory holding the WAL, segments and catalog (created if missing).
    #[arg(long, default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:4040")]
    pub listen: SocketAddr,
    /// Largest request body accepted, in MiB, before decompression (413 above).
    #[arg(long, default_value_t = 64)]
    pub max_body_mb: u64,
    /// `/ready` answers 503 ("warming") until the segments holding the last
    /// day are decoded after a start, at most this many seconds; queries are
    /// answered meanwhile, the first ones over recent data slower. 0: ready
    /// as soon as the store is open.
    #[arg(long, default_value_t = 30)]
    pub ready_warm_up_secs: u64,
    /// Bearer token required by the /api/v1/admin endpoints (open when unset).
    #[arg(long)]
    pub admin_token: Option<String>,
}

impl ServerArgs {
    pub fn apply(&self, o: &mut ServeOptions) -> anyhow::Result<()> {
        o.data_dir = self.data_dir.clone();
        o.listen = self.listen;
        o.max_body_bytes = usize::try_from(mib(self.max_body_mb)).unwrap_or(usize::MAX);
        o.ready_warm_up = Duration::from_secs(self.ready_warm_up_secs);
        o.admin_token = self.admin_token.clone().filter(|t| !t.is_empty());
        Ok(())
    }
}
