//! Control: the fleet controller agents ask for sampling plans.

use crate::ServeOptions;

#[derive(clap::Args, Clone, Debug)]
#[command(next_help_heading = "Control")]
pub struct ControlArgs {
    /// Seed of the fleet controller's machine sampling: servers with the same
    /// seed choose the same machines in each period.
    #[arg(long, default_value_t = 0)]
    pub control_seed: u64,
    /// Agents (hosts) the fleet controller remembers; a new host past it gets 429
    /// until an agent has been silent for a day.
    #[arg(long, default_value_t = 100_000)]
    pub control_max_agents: usize,
}

impl ControlArgs {
    pub fn apply(&self, o: &mut ServeOptions) -> anyhow::Result<()> {
        o.control.seed = self.control_seed;
        o.control.max_agents = self.control_max_agents.max(1);
        Ok(())
    }
}
