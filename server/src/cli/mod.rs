//! The `profiledb` command line. Arguments are parsed once, by clap, into one
//! struct per command (the flags `compact`, `segments` and `retention` share are
//! [`offline::OfflineArgs`]); `serve`'s are then converted once into
//! [`crate::ServeOptions`] by [`serve::ServeArgs::options`], which the tests call
//! directly. `serve --config FILE` reads the file first and parses again with its
//! settings as the defaults ([`config_file`]).
//!
//! Each command lives in its own module; the binary only calls [`main`].

pub mod auth;
pub mod client;
pub mod compact;
pub mod config;
pub mod config_file;
pub mod debuginfo;
pub mod diff;
pub mod doctor;
pub mod fleet;
mod logging;
pub mod offline;
pub mod retention;
pub mod segments;
pub mod serve;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

pub use config_file::{ConfigError, ConfigFile};
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
    /// Check a configuration file for `serve --config`, or print one with every
    /// setting at its default.
    Config {
        #[command(subcommand)]
        command: config::ConfigCommand,
    },
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
    /// Check a data directory (present, writable, free disk against the WAL
    /// budget) and a bucket (reachable, writable, conditional writes, clock skew)
    /// before a server runs there; exits 1 when a check fails. Example:
    ///   profiledb doctor --data-dir /var/lib/profiledb --storage s3://profiles/prod \
    ///     --s3-endpoint http://minio.internal:9000 --memory-mb 8192
    #[command(verbatim_doc_comment)]
    Doctor(doctor::DoctorArgs),
    /// Debug files for server-side symbolization.
    Debuginfo {
        #[command(subcommand)]
        command: debuginfo::DebuginfoCommand,
    },
}

/// Why the command line was not taken.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// A flag clap refused, or `--help`/`--version` (which clap prints).
    #[error(transparent)]
    Clap(#[from] clap::Error),
    /// The file of `serve --config`.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl Cli {
    /// Parses `argv` (program name first). With `serve --config FILE` the file's
    /// settings become the defaults of a second parse of the same `argv`: a flag
    /// given on the command line wins over the file, the file over the built-in
    /// defaults.
    pub fn try_parse_args<I, T>(argv: I) -> Result<Cli, ParseError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let argv: Vec<OsString> = argv.into_iter().map(Into::into).collect();
        let cli = Cli::try_parse_from(&argv)?;
        let Command::Serve(serve) = &cli.command else {
            return Ok(cli);
        };
        let Some(path) = &serve.config else {
            return Ok(cli);
        };
        let file = ConfigFile::read(path, &Cli::command())?;
        Ok(Cli::try_parse_with(&file, &argv)?)
    }

    /// Parses `argv` with `file`'s settings as the defaults.
    pub fn try_parse_with(file: &ConfigFile, argv: &[OsString]) -> Result<Cli, clap::Error> {
        let matches = file.apply(Cli::command()).try_get_matches_from(argv)?;
        Cli::from_arg_matches(&matches)
    }
}

/// Exit status when the data directory is held by another process.
const EXIT_LOCKED: u8 = 3;
/// Exit status of a command line or configuration file that is not taken
/// (clap's own).
const EXIT_USAGE: u8 = 2;

/// The `profiledb` binary: parse, start logging, run the command.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse_args(std::env::args_os()) {
        Ok(cli) => cli,
        Err(ParseError::Clap(e)) => e.exit(),
        Err(ParseError::Config(e)) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    logging::init(cli.log_format);
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(locked) = e.downcast_ref::<DirectoryInUse>() {
                eprintln!("error: {locked}");
                return ExitCode::from(EXIT_LOCKED);
            }
            if let Some(failed) = e.downcast_ref::<doctor::ChecksFailed>() {
                eprintln!("error: {failed}");
                return ExitCode::FAILURE;
            }
            match e.downcast_ref::<ConfigError>() {
                // `config check`: the problems are the whole message.
                Some(c) => eprintln!("error: {c}"),
                None => eprintln!("Error: {e:?}"),
            }
            ExitCode::FAILURE
        }
    }
}

/// Runs a parsed command.
pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => args.run(),
        Command::Config { command } => command.run(),
        Command::Auth { command } => command.run(),
        Command::Diff(args) => args.run(),
        Command::Fleet(args) => args.run(),
        Command::Compact(args) => args.run(),
        Command::Segments(args) => args.run(),
        Command::Retention(args) => args.run(),
        Command::Doctor(args) => args.run(),
        Command::Debuginfo { command } => command.run(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }
}
