//! Ad-hoc profiles: files uploaded to be viewed and compared without being
//! stored, held in memory within these bounds.

use crate::time::parse_duration;
use crate::ServeOptions;

const MIB: f64 = (1u64 << 20) as f64;

#[derive(clap::Args, Clone, Debug)]
#[command(next_help_heading = "Adhoc")]
pub struct AdhocArgs {
    /// Ad-hoc profiles one tenant may hold at once.
    #[arg(long, default_value_t = 16)]
    pub adhoc_max_profiles: u64,
    /// Memory one tenant's ad-hoc profiles may hold (decoded), in MiB.
    #[arg(long, default_value_t = 128.0)]
    pub adhoc_max_mb: f64,
    /// Memory the ad-hoc profiles of all tenants may hold together, in MiB.
    #[arg(long, default_value_t = 256.0)]
    pub adhoc_total_mb: f64,
    /// Largest ad-hoc profile file accepted, as sent, in MiB.
    #[arg(long, default_value_t = 32.0)]
    pub adhoc_max_file_mb: f64,
    /// How long an ad-hoc profile is kept after its upload, e.g. 1h or 30m.
    #[arg(long, default_value = "1h")]
    pub adhoc_ttl: String,
}

fn bytes(v: f64, flag: &str) -> anyhow::Result<u64> {
    if !(v.is_finite() && v > 0.0) {
        anyhow::bail!("--{flag} must be a positive number of MiB (got {v})");
    }
    Ok((v * MIB).round() as u64)
}

impl AdhocArgs {
    pub fn apply(&self, o: &mut ServeOptions) -> anyhow::Result<()> {
        let ttl_ms = parse_duration("--adhoc-ttl", &self.adhoc_ttl)?;
        if ttl_ms <= 0 {
            anyhow::bail!("--adhoc-ttl must be positive");
        }
        let a = &mut o.adhoc;
        a.max_profiles = usize::try_from(super::positive(
            self.adhoc_max_profiles,
            "adhoc-max-profiles",
        )?)?;
        a.max_bytes = bytes(self.adhoc_max_mb, "adhoc-max-mb")?;
        a.total_bytes = bytes(self.adhoc_total_mb, "adhoc-total-mb")?;
        a.max_file_bytes = usize::try_from(bytes(self.adhoc_max_file_mb, "adhoc-max-file-mb")?)?;
        a.ttl = std::time::Duration::from_millis(ttl_ms as u64);
        Ok(())
    }
}
