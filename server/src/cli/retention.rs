//! `profiledb retention`: sets a tenant's maximum age in a stopped server's
//! directory and deletes what is older.

use std::time::{Duration, Instant};

use indicatif::ProgressBar;

use super::offline::{self, utc, OfflineArgs};
use crate::time::{format_duration, format_max_age, human_value, parse_max_age};

#[derive(clap::Args, Clone, Debug)]
pub struct RetentionArgs {
    #[command(flatten)]
    pub dir: OfflineArgs,
    /// The tenant whose limit changes (`anonymous` when clients send no
    /// X-Scope-OrgID); a tenant with no data gets a warning.
    #[arg(long)]
    pub tenant: String,
    /// Maximum age, e.g. 30d, 12h, 90m; `forever` removes the limit.
    #[arg(long)]
    pub max_age: String,
    /// List the segments the age would delete, and change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

impl RetentionArgs {
    pub fn run(&self) -> anyhow::Result<()> {
        let started = Instant::now();
        let tenant = offline::tenant(&self.tenant)?;
        let age = parse_max_age("--max-age", &self.max_age)?;
        let store = self.dir.open(false)?;
        let preview = crate::retention::preview(&store, &tenant, age, profiledb_storage::now_ms());
        if let Some(w) = &preview.warning {
            eprintln!("warning: {w} in {}", self.dir.data_dir.display());
        }
        let doomed = &preview.expired;
        let age_text = format_max_age(age);
        if self.dry_run {
            store.close_without_flush();
            println!(
                "dry run: tenant {tenant} with max age {age_text} would delete {} segments ({}); nothing changed",
                doomed.len(),
                human_value(preview.bytes() as f64, "bytes")
            );
            for m in doomed {
                println!(
                    "  segment {:>8}  {} .. {}  {}",
                    m.id,
                    utc(m.min_time_ms),
                    utc(m.max_time_ms + m.step_ms),
                    human_value(m.size_bytes as f64, "bytes")
                );
            }
            return Ok(());
        }
        let s = store.set_retention(
            &tenant,
            age.map(|ms| Duration::from_millis(ms.unsigned_abs())),
        )?;
        let spinner = ProgressBar::new_spinner();
        spinner.set_message("deleting expired segments");
        spinner.enable_steady_tick(Duration::from_millis(100));
        let r = store.apply_retention()?;
        spinner.finish_and_clear();
        store.shutdown()?;
        match s.max_age_ms {
            Some(ms) => println!("tenant {tenant}: max age {}", format_duration(ms)),
            None => println!("tenant {tenant}: data kept forever"),
        }
        println!(
            "deleted {} segments ({}) in {:.2} s",
            r.deleted.len(),
            human_value(r.bytes_deleted as f64, "bytes"),
            started.elapsed().as_secs_f64()
        );
        println!("segments: {} -> {}", r.segments_before, r.segments_after);
        Ok(())
    }
}
