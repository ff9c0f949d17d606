//! Alerts: rules stored at start and where notifications go (docs/alerts.md).

use std::path::PathBuf;

use anyhow::Context;

use super::nonempty;
use crate::alerts::rule::parse_rules_file;
use crate::ServeOptions;

#[derive(clap::Args, Clone, Debug)]
#[command(next_help_heading = "Alerts")]
pub struct AlertArgs {
    /// Alert rules to store at start (YAML; replaces stored rules of the same
    /// name). An invalid file stops the server with the reason.
    #[arg(long, value_name = "FILE")]
    pub rules: Option<PathBuf>,
    /// Prometheus Alertmanager base URL; alerts go to <URL>/api/v2/alerts.
    #[arg(long, value_name = "URL")]
    pub alertmanager_url: Option<String>,
    /// URL receiving alert notifications as JSON (one POST per firing and per
    /// resolved alert).
    #[arg(long, value_name = "URL")]
    pub alert_webhook_url: Option<String>,
    /// Base URL of this server in the links alerts carry (default
    /// http://<listen address>).
    #[arg(long, value_name = "URL")]
    pub external_url: Option<String>,
}

impl AlertArgs {
    /// Reads and checks the rules file, if any.
    pub fn apply(&self, o: &mut ServeOptions) -> anyhow::Result<()> {
        let rules = match &self.rules {
            None => Vec::new(),
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read rules file {}", path.display()))?;
                parse_rules_file(&text)
                    .map_err(|e| anyhow::anyhow!("invalid rules file {}: {e}", path.display()))?
            }
        };
        o.alerts.rules = rules;
        o.alerts.alertmanager_url = nonempty(&self.alertmanager_url);
        o.alerts.webhook_url = nonempty(&self.alert_webhook_url);
        o.alerts.external_url = nonempty(&self.external_url);
        Ok(())
    }
}
