//! The `profiledb` command line. Arguments are parsed once, by clap, into one
//! struct per command (the flags `compact`, `segments` and `retention` share are
//! [`offline::OfflineArgs`]); `serve`'s are then converted once into
//! [`crate::ServeOptions`] by [`serve::ServeArgs::options`], which the tests call
//! directly.
//!
//! Each command lives in its own module; the binary only calls [`main`].

pub mod auth;
pub mod client;
pub mod compact;
pub mod diff;
pub mod fleet;
mod logging;
pub mod offline;
pub mod retention;
pub mod segments;
pub mod serve;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use logging::LogFormat;
pub use offline::DirectoryInUse;

#[derive(Parser, Debug)]
#[command(
    name = "profiledb",
    version,
    about = "A time-series database for continuous profiling",
    long_about = "profiledb stores CPU and memory profiles from whole fleets and answers \
                  flame graph, group-by and diff queries over them.\n\n\
                  Start it with `profiledb serve`: data goes to ./data, the API listens on \
                  http://127.0.0.1:4040."
)]
pub struct Cli {
    /// Log format (JSON: one object a line, for Loki, Elasticsearch and the like).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true, help_heading = "Logging")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once at start-up and matched at once: the size of `Serve` costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the server.
    Serve(serve::ServeArgs),
    /// Manage the auth file: tenants and their tokens.
    Auth {
        #[command(subcommand)]
        command: auth::AuthCommand,
    },
    /// Print the functions whose share moved most between two time ranges, with the
    /// Manhattan distance, entropies and sample counts (asks a running server).
    ///
    /// Times are RFC 3339 (2026-01-02T15:04:05Z), unix seconds/ms, or relative to now
    /// (now-2h). Example:
    ///   profiledb diff --selector '{service_name="api"}' \
    ///     --base-from now-25h --base-until now-24h --compare-from now-1h
    #[command(verbatim_doc_comment)]
    Diff(diff::DiffArgs),
    /// Ask a running server for a fleet analysis: hottest shared code, CPI per
    /// (service, platform), the platform assignment, or variance hunting. Example:
    ///   profiledb fleet hottest --param 'query=process_cpu:cpu:nanoseconds:cpu:nanoseconds{}' \
    ///     --param from=now-1d --param price_per_core_hour=0.05
    #[command(verbatim_doc_comment)]
    Fleet(fleet::FleetArgs),
    /// Compact (and downsample) the segments of a data directory offline, merging
    /// UTC days over for two hours into day blocks, the 6-hour parts of a day not
    /// yet over into part blocks, and weeks over into wide blocks (for tenants
    /// kept 28 days or more). Refuses to run while a server uses the directory.
    Compact(compact::CompactArgs),
    /// List the segments of a data directory offline (times in UTC).
    Segments(segments::SegmentsArgs),
    /// Set a tenant's maximum data age and delete what is older, offline.
    Retention(retention::RetentionArgs),
}

impl Cli {
    /// Parses `argv` (program name first).
    pub fn try_parse_args<I, T>(argv: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        Cli::try_parse_from(argv)
    }
}

/// Exit status when the data directory is held by another process.
const EXIT_LOCKED: u8 = 3;

/// The `profiledb` binary: parse, start logging, run the command.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse_args(std::env::args_os()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    logging::init(cli.log_format);
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(locked) = e.downcast_ref::<DirectoryInUse>() {
                eprintln!("error: {locked}");
                return ExitCode::from(EXIT_LOCKED);
            }
            eprintln!("Error: {e:?}");
            ExitCode::FAILURE
        }
    }
}

/// Runs a parsed command.
pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => args.run(),
        Command::Auth { command } => command.run(),
        Command::Diff(args) => args.run(),
        Command::Fleet(args) => args.run(),
        Command::Compact(args) => args.run(),
        Command::Segments(args) => args.run(),
        Command::Retention(args) => args.run(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }
}
