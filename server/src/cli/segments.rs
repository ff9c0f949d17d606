//! `profiledb segments`: lists a stopped server's segments.

use super::offline::{self, utc, OfflineArgs};
use crate::time::{format_duration, human_value};

#[derive(clap::Args, Clone, Debug)]
pub struct SegmentsArgs {
    #[command(flatten)]
    pub dir: OfflineArgs,
    /// Only this tenant.
    #[arg(long)]
    pub tenant: Option<String>,
}

impl SegmentsArgs {
    pub fn run(&self) -> anyhow::Result<()> {
        let tenant = self.tenant.as_deref().map(offline::tenant).transpose()?;
        let store = self.dir.open(false)?;
        let segs: Vec<_> = store
            .segments()
            .into_iter()
            .filter(|m| tenant.as_ref().is_none_or(|t| *t == m.tenant))
            .collect();
        println!(
            "{:>8} {:<16} {:<20} {:<20} {:>6} {:>5} {:>11} {:>8} {:>10}",
            "id",
            "tenant",
            "start (UTC)",
            "end (UTC)",
            "step",
            "level",
            "size",
            "series",
            "samples"
        );
        for m in &segs {
            println!(
                "{:>8} {:<16} {:<20} {:<20} {:>6} {:>5} {:>11} {:>8} {:>10}",
                m.id,
                m.tenant.as_str(),
                utc(m.min_time_ms),
                utc(m.max_time_ms + m.step_ms),
                format_duration(m.step_ms),
                m.level,
                human_value(m.size_bytes as f64, "bytes"),
                m.series,
                m.rows
            );
        }
        let bytes: u64 = segs.iter().map(|m| m.size_bytes).sum();
        println!(
            "{} segments, {} bytes ({})",
            segs.len(),
            bytes,
            human_value(bytes as f64, "bytes")
        );
        store.close_without_flush();
        Ok(())
    }
}
