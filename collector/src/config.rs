//! Command-line value parsing shared by the binary and tests.

use std::time::Duration;

use thiserror::Error;

/// A value given on the command line that could not be understood.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("bad duration {0:?}: expected a number with a unit such as 500ms, 10s, 5m or 1h")]
    Duration(String),
    #[error("bad tag {0:?}: expected key=value with key matching [A-Za-z_][A-Za-z0-9_.]*")]
    Tag(String),
    #[error("unknown event {0:?}: expected cpu-clock, cycles, instructions, cache-references, cache-misses, branch-instructions or branch-misses")]
    Event(String),
}

/// Parses `500ms`, `10s`, `5m`, `1h` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, ConfigError> {
    let t = s.trim();
    let err = || ConfigError::Duration(s.to_string());
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| err())?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(err()),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(err());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Whether `name` is a label name the server accepts: `[A-Za-z_][A-Za-z0-9_.]*`.
pub fn is_valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

/// Parses one `--tag k=v`.
pub fn parse_tag(s: &str) -> Result<(String, String), ConfigError> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| ConfigError::Tag(s.to_string()))?;
    let k = k.trim();
    if !is_valid_label_name(k) || k.starts_with("__") {
        return Err(ConfigError::Tag(s.to_string()));
    }
    Ok((k.to_string(), v.trim().to_string()))
}

/// The events the agent can sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    CpuClock,
    Cycles,
    Instructions,
    CacheReferences,
    CacheMisses,
    BranchInstructions,
    BranchMisses,
}

impl EventKind {
    /// The name used on the command line and in the `event` label.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::CpuClock => "cpu-clock",
            EventKind::Cycles => "cycles",
            EventKind::Instructions => "instructions",
            EventKind::CacheReferences => "cache-references",
            EventKind::CacheMisses => "cache-misses",
            EventKind::BranchInstructions => "branch-instructions",
            EventKind::BranchMisses => "branch-misses",
        }
    }

    /// Every event, in the order the server's control plane lists them.
    pub const ALL: [EventKind; 7] = [
        EventKind::CpuClock,
        EventKind::Cycles,
        EventKind::Instructions,
        EventKind::CacheReferences,
        EventKind::CacheMisses,
        EventKind::BranchInstructions,
        EventKind::BranchMisses,
    ];

    /// The event named `name` (as on the command line or in a plan).
    pub fn parse(name: &str) -> Result<EventKind, ConfigError> {
        Ok(match name.trim() {
            "cpu-clock" | "cpu" => EventKind::CpuClock,
            "cycles" | "cpu-cycles" => EventKind::Cycles,
            "instructions" => EventKind::Instructions,
            "cache-references" => EventKind::CacheReferences,
            "cache-misses" => EventKind::CacheMisses,
            "branch-instructions" | "branches" => EventKind::BranchInstructions,
            "branch-misses" => EventKind::BranchMisses,
            other => return Err(ConfigError::Event(other.to_string())),
        })
    }

    /// Whether the event needs a hardware PMU.
    pub fn is_hardware(self) -> bool {
        self != EventKind::CpuClock
    }
}

/// Parses a comma-separated event list (`--event cycles,instructions`), deduplicated.
pub fn parse_events(s: &str) -> Result<Vec<EventKind>, ConfigError> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let e = EventKind::parse(part)?;
        if !out.contains(&e) {
            out.push(e);
        }
    }
    if out.is_empty() {
        return Err(ConfigError::Event(s.to_string()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn tags_and_events() {
        assert_eq!(parse_tag("env=prod"), Ok(("env".into(), "prod".into())));
        assert!(parse_tag("noeq").is_err());
        assert!(parse_tag("1a=b").is_err());
        assert!(parse_tag("__name__=x").is_err());
        assert_eq!(
            parse_events("cycles, instructions,cycles"),
            Ok(vec![EventKind::Cycles, EventKind::Instructions])
        );
        assert!(parse_events("bogus").is_err());
    }
}
