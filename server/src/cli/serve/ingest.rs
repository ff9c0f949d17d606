//! Ingest: the decoder queue and which sample times are taken.

use crate::ServeOptions;

#[derive(clap::Args, Clone, Debug)]
#[command(next_help_heading = "Ingest")]
pub struct IngestArgs {
    /// Uploads waiting for a decoder before clients get 429.
    #[arg(long, default_value_t = 64)]
    pub ingest_queue: usize,
    /// Refuse samples more than this many seconds in the future.
    #[arg(long, default_value_t = 600)]
    pub max_future_skew_secs: i64,
    /// Refuse samples older than this many seconds (off by default: history
    /// imports are welcome).
    #[arg(long)]
    pub ingestion_window_secs: Option<i64>,
}

impl IngestArgs {
    pub fn apply(&self, o: &mut ServeOptions) -> anyhow::Result<()> {
        o.ingest.queue = self.ingest_queue;
        o.ingest.max_future_skew_ms = self.max_future_skew_secs.saturating_mul(1000);
        o.ingest.max_age_ms = self.ingestion_window_secs.map(|s| s.saturating_mul(1000));
        Ok(())
    }
}
