//! Query: how long a query may run.

use std::time::Duration;

use crate::ServeOptions;

#[derive(clap::Args, Clone, Debug)]
#[command(next_help_heading = "Query")]
pub struct QueryArgs {
    /// Queries running longer than this many seconds fail with 503.
    #[arg(long, default_value_t = 60)]
    pub query_timeout_secs: u64,
}

impl QueryArgs {
    pub fn apply(&self, o: &mut ServeOptions) -> anyhow::Result<()> {
        o.query_limits.timeout = Duration::from_secs(self.query_timeout_secs);
        Ok(())
    }
}
