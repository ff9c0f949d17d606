//! The YAML file of `profiledb serve --config FILE`.
//!
//! Its keys are not a second schema: each is a flag of `serve` (or the global
//! `--log-format`), under the section its heading in `--help` names, spelt with
//! underscores: `--max-body-mb` under "Server" is `server.max_body_mb`. So a new
//! flag is a new key with nothing more to write, and `print-defaults` takes each
//! key's comment and default from the flag's help.
//!
//! Precedence: the file's settings become the *defaults* of a second parse of the
//! command line ([`ConfigFile::apply`]), so a flag given on the command line wins
//! over the file, and the file over the built-in defaults. A key that is absent or
//! `null` keeps the built-in default.

use std::fmt;
use std::path::{Path, PathBuf};

use clap::error::{ContextKind, ContextValue};
use clap::{Arg, ArgAction, Command};
use serde_norway::Value;

/// One key the file may hold: a flag, under the section of its help heading.
#[derive(Clone, Debug)]
pub struct Key {
    /// The section: the flag's help heading in lower case (`Control` → `control`).
    pub section: String,
    pub arg: Arg,
    /// A global flag (`--log-format`), set on the top-level command.
    global: bool,
}

impl Key {
    /// The key within its section: the flag's name with underscores.
    pub fn name(&self) -> &str {
        self.arg.get_id().as_str()
    }

    /// `section.name`.
    pub fn path(&self) -> String {
        format!("{}.{}", self.section, self.name())
    }

    fn flag(&self) -> String {
        format!("--{}", self.arg.get_long().unwrap_or(self.name()))
    }

    pub(crate) fn is_switch(&self) -> bool {
        matches!(self.arg.get_action(), ArgAction::SetTrue)
    }

    pub(crate) fn takes_many(&self) -> bool {
        matches!(self.arg.get_action(), ArgAction::Append)
    }
}

/// Every key of the file, in `serve --help` order: the visible long flags of
/// `serve` and the global ones of `cli` (the whole command line) that have a help
/// heading. `--config` and `--help` have none.
pub fn keys(cli: &Command) -> Vec<Key> {
    let serve = cli
        .find_subcommand("serve")
        .into_iter()
        .flat_map(|s| s.get_arguments().map(|a| (a, false)));
    let global = cli
        .get_arguments()
        .filter(|a| a.is_global_set())
        .map(|a| (a, true));
    serve
        .chain(global)
        .filter(|(a, _)| !a.is_hide_set() && a.get_long().is_some())
        .filter_map(|(a, global)| {
            Some(Key {
                section: a.get_help_heading()?.to_lowercase().replace(' ', "_"),
                arg: a.clone(),
                global,
            })
        })
        .collect()
}

/// The sections of `keys`, each once, in order.
pub fn sections(keys: &[Key]) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for k in keys {
        if !out.contains(&k.section.as_str()) {
            out.push(&k.section);
        }
    }
    out
}

/// What is wrong with one key of a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// `section.key`, `section`, or `(file)` for the file as a whole.
    pub key: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// Why a configuration file is not taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not valid YAML: {source}", path.display())]
    Yaml {
        path: PathBuf,
        #[source]
        source: serde_norway::Error,
    },
    /// Unknown sections or keys, or values the flags do not take: every one found.
    #[error("{}:{}", path.display(), list(problems))]
    Invalid {
        path: PathBuf,
        problems: Vec<Problem>,
    },
}

fn list(problems: &[Problem]) -> String {
    match problems {
        [one] => format!(" {one}"),
        many => many.iter().map(|p| format!("\n  {p}")).collect(),
    }
}

/// A key the file sets, with its values as the flag would take them.
#[derive(Clone, Debug)]
pub struct Setting {
    pub key: Key,
    pub values: Vec<String>,
}

impl Setting {
    /// Whether the flag takes these values: the command line parsed with only
    /// them, so every value parser (numbers, addresses, enums) has its say.
    fn check(&self, cli: &Command) -> Result<(), clap::Error> {
        let mut argv = vec!["profiledb".to_string(), "serve".to_string()];
        if self.key.is_switch() {
            if self.values.iter().any(|v| v == "true") {
                argv.push(self.key.flag());
            }
        } else {
            argv.extend(
                self.values
                    .iter()
                    .map(|v| format!("{}={v}", self.key.flag())),
            );
        }
        cli.clone().try_get_matches_from(argv).map(drop)
    }
}

/// A refused value's [`Problem`] message: clap's first line, and the values the
/// flag takes when it names them.
fn reason(e: &clap::Error) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    let mut reason = first.trim_start_matches("error: ").to_string();
    if let Some(ContextValue::Strings(valid)) = e.get(ContextKind::ValidValue) {
        reason.push_str(&format!("; one of: {}", valid.join(", ")));
    }
    reason
}

/// A configuration file read and checked against the command line.
#[derive(Clone, Debug)]
pub struct ConfigFile {
    pub path: PathBuf,
    pub settings: Vec<Setting>,
}

impl ConfigFile {
    /// Reads and checks `path` against `cli` (the whole command line).
    pub fn read(path: &Path, cli: &Command) -> Result<ConfigFile, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(path, &text, cli)
    }

    /// Checks `text`, read from `path`: every problem is reported, not just the
    /// first.
    pub fn parse(path: &Path, text: &str, cli: &Command) -> Result<ConfigFile, ConfigError> {
        let doc: Value = serde_norway::from_str(text).map_err(|source| ConfigError::Yaml {
            path: path.to_path_buf(),
            source,
        })?;
        let keys = keys(cli);
        let mut problems = Vec::new();
        let mut settings = Vec::new();
        let mut problem = |key: String, message: String| problems.push(Problem { key, message });
        let top = match doc {
            Value::Null => Default::default(),
            Value::Mapping(m) => m,
            _ => {
                problem("(file)".into(), "must be a map of sections".into());
                Default::default()
            }
        };
        for (section, body) in top {
            let Some(section) = section.as_str() else {
                problem(
                    format!("{section:?}"),
                    "a section's name must be text".into(),
                );
                continue;
            };
            let own: Vec<&Key> = keys.iter().filter(|k| k.section == section).collect();
            if own.is_empty() {
                problem(section.into(), unknown_section(section, &keys));
                continue;
            }
            let body = match body {
                Value::Null => continue,
                Value::Mapping(m) => m,
                _ => {
                    problem(section.into(), "must be a map of settings".into());
                    continue;
                }
            };
            for (name, value) in body {
                let Some(name) = name.as_str() else {
                    problem(format!("{section}.{name:?}"), "a key must be text".into());
                    continue;
                };
                let path = format!("{section}.{name}");
                let Some(key) = own.iter().find(|k| k.name() == name) else {
                    problem(path, unknown_key(section, name, &own, &keys));
                    continue;
                };
                match values(key, value) {
                    Ok(None) => {}
                    Ok(Some(values)) => {
                        let s = Setting {
                            key: (*key).clone(),
                            values,
                        };
                        match s.check(cli) {
                            Ok(()) => settings.push(s),
                            Err(e) => problem(path, reason(&e)),
                        }
                    }
                    Err(e) => problem(path, e),
                }
            }
        }
        if !problems.is_empty() {
            return Err(ConfigError::Invalid {
                path: path.to_path_buf(),
                problems,
            });
        }
        Ok(ConfigFile {
            path: path.to_path_buf(),
            settings,
        })
    }

    /// `cli` with this file's settings as its defaults.
    pub fn apply(&self, mut cli: Command) -> Command {
        for s in &self.settings {
            let values = s.values.clone();
            let set = move |a: Arg| a.default_values(values);
            let id = s.key.name().to_string();
            cli = if s.key.global {
                cli.mut_arg(id, set)
            } else {
                cli.mut_subcommand("serve", move |c| c.mut_arg(id, set))
            };
        }
        cli
    }
}

/// A YAML value as the flag's values; `None` for `null` (the default stays).
fn values(key: &Key, value: Value) -> Result<Option<Vec<String>>, String> {
    let scalar = |v: Value| match v {
        Value::Bool(b) => Ok(b.to_string()),
        Value::Number(n) => Ok(n.to_string()),
        Value::String(s) => Ok(s),
        Value::Null => Err("a list item cannot be null".to_string()),
        Value::Sequence(_) | Value::Mapping(_) => Err(format!(
            "takes {}, not a nested list or map",
            if key.takes_many() {
                "a list of values"
            } else {
                "one value"
            }
        )),
        Value::Tagged(_) => Err("takes a plain value, not a tagged one".to_string()),
    };
    match value {
        Value::Null => Ok(None),
        Value::Bool(b) if key.is_switch() => Ok(Some(vec![b.to_string()])),
        _ if key.is_switch() => Err("must be true or false".into()),
        Value::Sequence(items) if key.takes_many() => items
            .into_iter()
            .map(scalar)
            .collect::<Result<_, _>>()
            .map(Some),
        Value::Sequence(_) => Err("takes one value, not a list".into()),
        other => scalar(other).map(|v| Some(vec![v])),
    }
}

fn unknown_section(section: &str, keys: &[Key]) -> String {
    let all = sections(keys);
    match closest(section, all.iter().copied()) {
        Some(s) => format!("unknown section; did you mean {s}?"),
        None => format!("unknown section; the sections are {}", all.join(", ")),
    }
}

fn unknown_key(section: &str, name: &str, own: &[&Key], keys: &[Key]) -> String {
    if let Some(k) = keys.iter().find(|k| k.name() == name) {
        return format!("unknown field in {section}; it is {}", k.path());
    }
    match closest(name, own.iter().map(|k| k.name())) {
        Some(n) => format!("unknown field; did you mean {section}.{n}?"),
        None => format!(
            "unknown field; {section} takes {}",
            own.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// The candidate most like `name`, if any is close (as clap suggests flags).
fn closest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let name = name.replace('-', "_");
    candidates
        .map(|c| (strsim::jaro_winkler(&name, c), c))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests;
