//! `profiledb config check FILE` and `profiledb config print-defaults`.

use std::path::PathBuf;

use clap::CommandFactory;
use serde_norway::Value;

use super::config_file::{keys, sections, ConfigFile, Key};
use super::{Cli, Command};

#[derive(clap::Subcommand, Clone, Debug)]
pub enum ConfigCommand {
    /// Check a file as `serve --config FILE` reads it: sections, keys, values,
    /// the options they make together and the rules and auth files it names.
    /// Prints the settings it makes; exits 1 naming every problem.
    Check {
        /// The configuration file (YAML).
        file: PathBuf,
    },
    /// Print a configuration file with every key at its default, each under its
    /// flag's help: a starting point for `serve --config`.
    PrintDefaults,
}

impl ConfigCommand {
    pub fn run(&self) -> anyhow::Result<()> {
        match self {
            ConfigCommand::Check { file } => {
                for line in check(file)? {
                    println!("{line}");
                }
                Ok(())
            }
            ConfigCommand::PrintDefaults => {
                print!("{}", print_defaults(&Cli::command()));
                Ok(())
            }
        }
    }
}

/// What `config check` prints: the file is taken, then each setting it makes.
pub fn check(file: &std::path::Path) -> anyhow::Result<Vec<String>> {
    let config = ConfigFile::read(file, &Cli::command())?;
    let cli = Cli::try_parse_with(&config, &["profiledb".into(), "serve".into()])?;
    let Command::Serve(serve) = &cli.command else {
        anyhow::bail!("`profiledb serve` did not parse as serve");
    };
    let options = serve.options()?;
    // The auth file is read as the server reads it at start.
    crate::tenancy::Tenancy::open(options.tenancy.clone())?;
    let settings = config.settings;
    let mut out = vec![format!(
        "{}: ok, {} settings",
        file.display(),
        settings.len()
    )];
    out.extend(
        settings
            .iter()
            .map(|s| format!("  {} = {}", s.key.path(), s.values.join(", "))),
    );
    Ok(out)
}

/// Longest comment line of the printed file.
const WIDTH: usize = 80;

/// The file with every key of `cli` at its default, commented with its help.
pub fn print_defaults(cli: &clap::Command) -> String {
    let keys = keys(cli);
    let mut out = String::from(
        "# profiledb serve --config FILE\n\
         #\n\
         # Every key is a flag of `profiledb serve`, under the heading `serve --help`\n\
         # shows it in, with underscores: --max-body-mb is server.max_body_mb.\n\
         # A flag given on the command line wins over this file, and the file over\n\
         # the defaults; a key left out or set to null keeps its default.\n\
         # Written by `profiledb config print-defaults`; check with\n\
         # `profiledb config check FILE`.\n",
    );
    for section in sections(&keys) {
        out.push_str(&format!("\n{section}:\n"));
        for key in keys.iter().filter(|k| k.section == section) {
            for line in comment(key) {
                out.push_str(&format!(
                    "  #{}{line}\n",
                    if line.is_empty() { "" } else { " " }
                ));
            }
            out.push_str(&format!("  {}: {}\n", key.name(), default_value(key)));
        }
    }
    out
}

/// The flag's help, wrapped, and the values it takes.
fn comment(key: &Key) -> Vec<String> {
    let mut help = key
        .arg
        .get_long_help()
        .or(key.arg.get_help())
        .map(ToString::to_string)
        .unwrap_or_default();
    // clap drops the full stop of a one-line help; a comment keeps it.
    if !help.is_empty() && !help.ends_with('.') {
        help.push('.');
    }
    let mut lines = Vec::new();
    for paragraph in help.split("\n\n") {
        if !lines.is_empty() {
            lines.push(String::new());
        }
        lines.extend(wrap(&paragraph.replace('\n', " "), WIDTH - 4));
    }
    let values: Vec<String> = key
        .arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| v.get_name().to_string())
        .collect();
    if !values.is_empty() && !key.is_switch() {
        lines.push(format!("One of: {}.", values.join(", ")));
    }
    lines
}

fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// The flag's default as YAML: `null` for none, a list for a flag that repeats.
fn default_value(key: &Key) -> String {
    let d: Vec<String> = key
        .arg
        .get_default_values()
        .iter()
        .map(|v| scalar(&v.to_string_lossy()))
        .collect();
    match d.as_slice() {
        [] if key.takes_many() => "[]".into(),
        [] => "null".into(),
        [one] if !key.takes_many() => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// `s` bare when YAML reads it back as the same text (or as a number or a
/// boolean, which the flag reads as that text), quoted otherwise.
fn scalar(s: &str) -> String {
    match serde_norway::from_str::<Value>(s) {
        Ok(Value::String(t)) if t == s => s.to_string(),
        Ok(Value::Number(_) | Value::Bool(_)) => s.to_string(),
        _ => serde_norway::to_string(s)
            .map(|q| q.trim_end().to_string())
            .unwrap_or_else(|_| format!("{s:?}")),
    }
}
