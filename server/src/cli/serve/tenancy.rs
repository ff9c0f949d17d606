//! Tenancy: authentication (docs/tenancy.md).

use std::path::PathBuf;

use crate::ServeOptions;

#[derive(clap::Args, Clone, Debug)]
#[command(next_help_heading = "Tenancy")]
pub struct TenancyArgs {
    /// Turn authentication on with the tenants and hashed tokens of this file
    /// (YAML; `profiledb auth add-tenant` writes it). Reloaded on SIGHUP.
    #[arg(long, value_name = "FILE")]
    pub auth_file: Option<PathBuf>,
}

impl TenancyArgs {
    pub fn apply(&self, o: &mut ServeOptions) -> anyhow::Result<()> {
        o.tenancy.auth_file = self.auth_file.clone();
        Ok(())
    }
}
