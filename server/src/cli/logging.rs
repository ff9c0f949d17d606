//! Where log lines go and how they look (`--log-format`).

use std::io::IsTerminal;

/// Log format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One line a record for people: time, level, message, fields.
    Text,
    /// One JSON object a line: `timestamp`, `level`, `message` and the record's
    /// fields at the top level, and the request's `span` (its `request_id`).
    Json,
}

/// Starts logging to stderr, so command output on stdout (tables, JSON) stays
/// clean. `RUST_LOG` filters as usual; the default is `info`.
pub fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        // object_store logs each retried request at info; the failure that
        // matters is logged once by the role that saw it.
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,object_store=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr);
    match format {
        // Colour codes only when a person watches a terminal.
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_span_list(false)
            .init(),
    }
}
