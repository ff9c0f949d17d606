//! Alert rules: the document users write (JSON through the API, YAML in `rules.yaml`)
//! and the validated form the evaluator runs. Validation is the only way from one to
//! the other, so an evaluated rule always has a compiled regex, positive windows and a
//! condition that fits what it watches.

use std::collections::BTreeMap;

use profiledb_storage::{Matcher, Selector, TenantId, PROFILE_TYPE_LABEL};
use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::time::{parse_duration, parse_instant};

/// The z-score a share change must reach before the default guard lets a rule fire.
/// 4 rather than the textbook 2–3: a rule is evaluated every interval, so a 3σ noise
/// excursion would fire once every few hundred evaluations.
pub const GUARD_Z: f64 = 4.0;

/// Why a rule or a rules file was refused: one failure for callers (the rule is not
/// stored), with a message naming the field and what it must be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidRule(pub String);

impl From<String> for InvalidRule {
    fn from(m: String) -> Self {
        InvalidRule(m)
    }
}

impl From<&str> for InvalidRule {
    fn from(m: &str) -> Self {
        InvalidRule(m.to_string())
    }
}

impl From<crate::time::TimeError> for InvalidRule {
    fn from(e: crate::time::TimeError) -> Self {
        InvalidRule(e.to_string())
    }
}

/// A rule as written by its author.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    pub name: String,
    /// `name:sample_type:sample_unit:period_type:period_unit`.
    pub profile_type: String,
    /// Label matchers, `{service_name="api"}`; empty selects every series of the type.
    #[serde(default)]
    pub selector: String,
    pub watch: WatchSpec,
    /// Length of the compare window, ending at the evaluation time (`1h`).
    pub window: String,
    pub baseline: BaselineSpec,
    pub condition: Condition,
    /// Samples each side needs before the rule may fire; computed from the condition
    /// when absent (see [`Rule::required_samples`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_samples: Option<u64>,
    /// Value of one sample in the profile type's unit; defaults to 10 ms (10⁷) for
    /// nanosecond types (Pyroscope's default 100 Hz) and 1 otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_value: Option<f64>,
    /// Also require the diff's distance to be above GWP's sampling noise for its
    /// sample counts (`crate::http::query::fleet`); absent, the sample guard alone
    /// decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub above_noise: Option<AboveNoise>,
    /// How long the condition must hold before the alert fires.
    #[serde(rename = "for", default = "zero")]
    pub for_duration: String,
    #[serde(default = "default_interval")]
    pub interval: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Tenant whose data the rule reads; the API fills it from `X-Scope-OrgID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

fn zero() -> String {
    "0s".into()
}

fn default_interval() -> String {
    "1m".into()
}

/// The noise requirement of a rule: the noise constant is fitted on the baseline
/// range by splitting the values of `host_label`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AboveNoise {
    /// The label naming machines (default `host`).
    #[serde(default = "default_host_label")]
    pub host_label: String,
    /// How many times the expected noise the distance must exceed (default 2).
    #[serde(default = "default_noise_margin")]
    pub margin: f64,
}

fn default_host_label() -> String {
    "host".into()
}

fn default_noise_margin() -> f64 {
    profiledb_storage::analysis::noise::DEFAULT_MARGIN
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum WatchSpec {
    /// The summed self share of the functions whose name matches this regex.
    Function(String),
    /// The k entries of the whole profile that moved most.
    TopK(usize),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum BaselineSpec {
    /// The compare window shifted back by this duration (`1d`, `7d`).
    Offset(String),
    /// A fixed range (RFC 3339 or unix time).
    Fixed { start: String, end: String },
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Condition {
    /// compare share − base share ≥ this many percentage points.
    ShareDeltaPp(f64),
    /// compare share / base share − 1 ≥ this fraction (0.5 = +50 %).
    RelativeIncrease(f64),
    /// Manhattan distance over the top-k entries ≥ this (0..2); needs `top_k`.
    Manhattan(f64),
}

#[derive(Clone, Debug)]
pub enum Watch {
    Function { regex: Regex },
    TopK { k: usize },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Baseline {
    Offset { ms: i64 },
    Fixed { start_ms: i64, end_ms: i64 },
}

/// Both time ranges of one evaluation, `[start, end)` in ms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ranges {
    pub base_start_ms: i64,
    pub base_end_ms: i64,
    pub compare_start_ms: i64,
    pub compare_end_ms: i64,
}

/// A validated rule.
#[derive(Clone, Debug)]
pub struct Rule {
    pub spec: RuleSpec,
    pub tenant: TenantId,
    pub selector: Selector,
    pub watch: Watch,
    pub window_ms: i64,
    pub baseline: Baseline,
    pub condition: Condition,
    pub sample_value: f64,
    pub for_ms: i64,
    pub interval_ms: i64,
}

/// Profile names the ingest paths produce (Pyroscope's names).
const KNOWN_PROFILE_NAMES: &[&str] = &[
    "process_cpu",
    "wall",
    "memory",
    "mutex",
    "block",
    "goroutines",
];

const MIN_INTERVAL_MS: i64 = 100;

fn valid_label_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

impl Rule {
    /// Checks everything and compiles the regex and selector. The message names the
    /// field at fault.
    pub fn validate(spec: RuleSpec) -> Result<Rule, InvalidRule> {
        let name = spec.name.trim();
        if name.is_empty() || name.len() > 128 {
            return Err(InvalidRule::from("name must be 1 to 128 characters"));
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))
        {
            return Err(InvalidRule::from(format!(
                "name {name:?} may only hold letters, digits and _ - . :"
            )));
        }
        let parts: Vec<&str> = spec.profile_type.split(':').collect();
        if parts.len() != 5 || parts.iter().any(|p| p.trim().is_empty()) {
            return Err(InvalidRule::from(format!(
                "unknown profile type {:?}: expected name:sample_type:sample_unit:period_type:period_unit, e.g. process_cpu:cpu:nanoseconds:cpu:nanoseconds",
                spec.profile_type
            )));
        }
        if !KNOWN_PROFILE_NAMES.contains(&parts[0]) {
            return Err(InvalidRule::from(format!(
                "unknown profile type {:?}: the name part must be one of {}",
                spec.profile_type,
                KNOWN_PROFILE_NAMES.join(", ")
            )));
        }
        let text = if spec.selector.trim().is_empty() {
            "{}"
        } else {
            spec.selector.as_str()
        };
        let selector = Selector::parse(text)
            .map_err(|e| format!("invalid selector: {e}"))?
            .with(Matcher::eq(PROFILE_TYPE_LABEL, &spec.profile_type));
        let tenant = match &spec.tenant {
            None => TenantId::default(),
            Some(t) => TenantId::new(t.as_str()).map_err(|e| format!("invalid tenant: {e}"))?,
        };
        let watch = match &spec.watch {
            WatchSpec::Function(re) if re.trim().is_empty() => {
                return Err(InvalidRule::from(
                    "watch.function must be a non-empty regex",
                ))
            }
            WatchSpec::Function(re) => Watch::Function {
                regex: regex::RegexBuilder::new(re)
                    .size_limit(1 << 20)
                    .build()
                    .map_err(|e| format!("invalid watch.function regex: {e}"))?,
            },
            WatchSpec::TopK(k) if !(1..=1000).contains(k) => {
                return Err(InvalidRule::from(format!(
                    "watch.top_k must be between 1 and 1000 (got {k})"
                )))
            }
            WatchSpec::TopK(k) => Watch::TopK { k: *k },
        };
        if let Some(n) = &spec.above_noise {
            if n.host_label.trim().is_empty() {
                return Err(InvalidRule::from(
                    "above_noise.host_label must not be empty",
                ));
            }
            if !(n.margin.is_finite() && n.margin > 0.0) {
                return Err(InvalidRule::from(format!(
                    "above_noise.margin must be a positive number (got {})",
                    n.margin
                )));
            }
        }
        let window_ms = parse_duration("window", &spec.window)?;
        if window_ms <= 0 {
            return Err(InvalidRule::from("window must be positive"));
        }
        let baseline = match &spec.baseline {
            BaselineSpec::Offset(o) => {
                let ms = parse_duration("baseline.offset", o)?;
                if ms < window_ms {
                    return Err(InvalidRule::from(format!(
                        "baseline.offset ({o}) must be at least the window ({}) so the two ranges do not overlap",
                        spec.window
                    )));
                }
                Baseline::Offset { ms }
            }
            BaselineSpec::Fixed { start, end } => {
                if start.trim().starts_with("now") || end.trim().starts_with("now") {
                    return Err(InvalidRule::from(
                        "baseline.fixed takes absolute times (RFC 3339 or unix); use baseline.offset for a moving baseline",
                    ));
                }
                let s = parse_instant("baseline.fixed.start", start, 0)?;
                let e = parse_instant("baseline.fixed.end", end, 0)?;
                if e <= s {
                    return Err(InvalidRule::from(
                        "baseline.fixed.end must be after its start",
                    ));
                }
                Baseline::Fixed {
                    start_ms: s,
                    end_ms: e,
                }
            }
        };
        let (what, v) = match spec.condition {
            Condition::ShareDeltaPp(v) => ("share_delta_pp", v),
            Condition::RelativeIncrease(v) => ("relative_increase", v),
            Condition::Manhattan(v) => ("manhattan", v),
        };
        if !v.is_finite() || v <= 0.0 {
            return Err(InvalidRule::from(format!(
                "condition.{what} must be a positive number"
            )));
        }
        match (spec.condition, &watch) {
            (Condition::ShareDeltaPp(v), _) if v > 100.0 => {
                return Err(InvalidRule::from(
                    "condition.share_delta_pp is in percentage points (at most 100)",
                ))
            }
            (Condition::Manhattan(v), _) if v > 2.0 => {
                return Err(InvalidRule::from(
                    "condition.manhattan is a distance between distributions (at most 2)",
                ))
            }
            (Condition::Manhattan(_), Watch::Function { .. }) => {
                return Err(InvalidRule::from(
                    "condition.manhattan compares whole profiles: use it with watch.top_k",
                ))
            }
            _ => {}
        }
        let sample_value = match spec.sample_value {
            Some(v) if !v.is_finite() || v <= 0.0 => {
                return Err(InvalidRule::from("sample_value must be a positive number"))
            }
            Some(v) => v,
            None if parts[2] == "nanoseconds" => 1e7,
            None => 1.0,
        };
        let for_ms = parse_duration("for", &spec.for_duration)?;
        let interval_ms = parse_duration("interval", &spec.interval)?;
        if interval_ms < MIN_INTERVAL_MS {
            return Err(InvalidRule::from(format!(
                "interval must be at least {MIN_INTERVAL_MS}ms"
            )));
        }
        for (k, _) in spec.labels.iter().chain(spec.annotations.iter()) {
            if !valid_label_name(k) {
                return Err(InvalidRule::from(format!(
                    "label/annotation name {k:?} is not a valid Prometheus label name"
                )));
            }
        }
        if spec.labels.contains_key("alertname") {
            return Err(InvalidRule::from(
                "labels.alertname is set from the rule name",
            ));
        }
        let spec = RuleSpec {
            name: name.to_string(),
            ..spec
        };
        let condition = spec.condition;
        Ok(Rule {
            spec,
            tenant,
            selector,
            watch,
            window_ms,
            baseline,
            condition,
            sample_value,
            for_ms,
            interval_ms,
        })
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The base and compare ranges of an evaluation at `now`.
    pub fn ranges(&self, now: i64) -> Ranges {
        let (cs, ce) = (now - self.window_ms, now);
        let (bs, be) = match self.baseline {
            Baseline::Offset { ms } => (cs - ms, ce - ms),
            Baseline::Fixed { start_ms, end_ms } => (start_ms, end_ms),
        };
        Ranges {
            base_start_ms: bs,
            base_end_ms: be,
            compare_start_ms: cs,
            compare_end_ms: ce,
        }
    }

    /// How many entries the diff must return.
    pub fn top_k(&self) -> usize {
        match self.watch {
            Watch::TopK { k } => k,
            Watch::Function { .. } => 10,
        }
    }

    /// Samples each side needs before a change can be told from sampling noise.
    ///
    /// A share p estimated from N samples has a standard error of √(p(1−p)/N); the
    /// difference of two independent sides of N samples each has √(2p(1−p)/N). A
    /// change of d (share units) stands GUARD_Z standard errors above noise when
    /// N ≥ 2·z²·p(1−p)/d². Per condition:
    /// - `share_delta_pp` x (d = x/100) at the worst case p = ½: N ≥ z²/(2d²);
    ///   10 pp → 800, 5 pp → 3200, 1 pp → 80 000.
    /// - `relative_increase` r (d = r·p, p = the measured base share, at least 1 %):
    ///   N ≥ 2z²(1−p)/(p·r²); doubling (r = 1) of a 5 % share → 608.
    /// - `manhattan` m over k entries: under no change E[M] ≤ √(4k/(πN)); requiring
    ///   m ≥ (z/2)·that bound gives N ≥ z²·k/(π·m²); k = 10, m = 0.2 → 1274.
    ///
    /// An explicit `min_samples` replaces the computed value.
    pub fn required_samples(&self, base_share: f64) -> u64 {
        if let Some(n) = self.spec.min_samples {
            return n;
        }
        let z2 = GUARD_Z * GUARD_Z;
        let n = match (self.condition, &self.watch) {
            (Condition::ShareDeltaPp(x), _) => {
                let d = x / 100.0;
                z2 / (2.0 * d * d)
            }
            (Condition::RelativeIncrease(r), _) => {
                let p = base_share.clamp(0.01, 0.99);
                2.0 * z2 * (1.0 - p) / (p * r * r)
            }
            (Condition::Manhattan(m), Watch::TopK { k }) => {
                z2 * (*k as f64) / (std::f64::consts::PI * m * m)
            }
            (Condition::Manhattan(_), Watch::Function { .. }) => 0.0,
        };
        n.ceil().min(1e15) as u64
    }
}

/// Reads YAML into the JSON data model, so YAML and JSON rules share one schema
/// (serde_norway would otherwise want `!tags` for enums such as `watch`).
pub fn yaml_to_json(text: &str) -> Result<serde_json::Value, InvalidRule> {
    let v: serde_norway::Value =
        serde_norway::from_str(text).map_err(|e| InvalidRule(e.to_string()))?;
    serde_json::to_value(v).map_err(|e| InvalidRule(format!("unsupported YAML: {e}")))
}

/// Parses and validates a rules file (YAML, so JSON too): a list of rules or
/// `{rules: [...]}`. The error names the rule (or its position) and what is wrong.
pub fn parse_rules_file(text: &str) -> Result<Vec<RuleSpec>, InvalidRule> {
    let v = yaml_to_json(text)?;
    let list = match v {
        serde_json::Value::Array(a) => a,
        serde_json::Value::Object(mut o) => match o.remove("rules") {
            Some(serde_json::Value::Array(a)) if o.is_empty() => a,
            _ => {
                return Err(InvalidRule::from(
                    "expected a list of rules or a map with only `rules: [...]`",
                ))
            }
        },
        serde_json::Value::Null => Vec::new(),
        _ => {
            return Err(InvalidRule::from(
                "expected a list of rules or `rules: [...]`",
            ))
        }
    };
    let mut rules = Vec::with_capacity(list.len());
    for (i, r) in list.into_iter().enumerate() {
        let name = r
            .get("name")
            .and_then(|n| n.as_str())
            .unwrap_or("")
            .to_string();
        let spec: RuleSpec =
            serde_json::from_value(r).map_err(|e| format!("rule {} ({name:?}): {e}", i + 1))?;
        rules.push(spec);
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, r) in rules.iter().enumerate() {
        Rule::validate(r.clone())
            .map_err(|e| InvalidRule(format!("rule {} ({:?}): {e}", i + 1, r.name)))?;
        if !seen.insert(r.name.trim().to_string()) {
            return Err(InvalidRule::from(format!(
                "rule {} ({:?}): the name is used twice",
                i + 1,
                r.name
            )));
        }
    }
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn spec() -> RuleSpec {
        RuleSpec {
            name: "zlib".into(),
            profile_type: "process_cpu:cpu:nanoseconds:cpu:nanoseconds".into(),
            selector: r#"{service_name="api"}"#.into(),
            watch: WatchSpec::Function("^zlib_".into()),
            window: "1h".into(),
            baseline: BaselineSpec::Offset("1d".into()),
            condition: Condition::ShareDeltaPp(10.0),
            min_samples: None,
            sample_value: None,
            above_noise: None,
            for_duration: "5m".into(),
            interval: "1m".into(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            tenant: None,
        }
    }

    #[test]
    fn valid_rule_and_ranges() {
        let r = Rule::validate(spec()).unwrap();
        assert_eq!(r.window_ms, 3_600_000);
        assert_eq!(r.for_ms, 300_000);
        assert_eq!(r.sample_value, 1e7);
        let g = r.ranges(100 * 86_400_000);
        assert_eq!(g.compare_end_ms - g.compare_start_ms, 3_600_000);
        assert_eq!(g.compare_start_ms - g.base_start_ms, 86_400_000);
        assert_eq!(r.required_samples(0.05), 800);
    }

    #[test]
    fn refusals_name_the_field() {
        let bad = |f: &dyn Fn(&mut RuleSpec), needle: &str| {
            let mut s = spec();
            f(&mut s);
            let e = Rule::validate(s).unwrap_err().to_string();
            assert!(e.contains(needle), "{e:?} lacks {needle:?}");
        };
        bad(&|s| s.profile_type = "cpu".into(), "unknown profile type");
        bad(
            &|s| s.profile_type = "nosuch:a:b:c:d".into(),
            "unknown profile type",
        );
        bad(&|s| s.watch = WatchSpec::Function("(".into()), "regex");
        bad(&|s| s.window = "-1h".into(), "negative");
        bad(
            &|s| s.baseline = BaselineSpec::Offset("-1d".into()),
            "negative",
        );
        bad(
            &|s| s.baseline = BaselineSpec::Offset("10m".into()),
            "overlap",
        );
        bad(&|s| s.condition = Condition::Manhattan(0.2), "top_k");
        bad(&|s| s.condition = Condition::ShareDeltaPp(-1.0), "positive");
        bad(&|s| s.interval = "1ms".into(), "interval");
        bad(&|s| s.selector = "{a=".into(), "selector");
        let noise = |margin: f64| AboveNoise {
            host_label: "host".into(),
            margin,
        };
        bad(&|s| s.above_noise = Some(noise(0.0)), "above_noise.margin");
        bad(
            &|s| s.above_noise = Some(noise(f64::NAN)),
            "above_noise.margin",
        );
        bad(
            &|s| {
                s.baseline = BaselineSpec::Fixed {
                    start: "2026-01-02T00:00:00Z".into(),
                    end: "2026-01-01T00:00:00Z".into(),
                }
            },
            "after",
        );
    }

    #[test]
    fn yaml_and_json_forms() {
        let y = r#"
name: zlib
profile_type: process_cpu:cpu:nanoseconds:cpu:nanoseconds
selector: '{service_name="api"}'
watch: {function: "^zlib_"}
window: 1h
baseline: {offset: 1d}
condition: {share_delta_pp: 10}
for: 5m
interval: 1m
"#;
        let s: RuleSpec = serde_json::from_value(yaml_to_json(y).unwrap()).unwrap();
        assert_eq!(s, spec());
        let with_noise = format!("{y}above_noise: {{margin: 3}}\n");
        let n: RuleSpec = serde_json::from_value(yaml_to_json(&with_noise).unwrap()).unwrap();
        let want = AboveNoise {
            host_label: "host".into(),
            margin: 3.0,
        };
        assert_eq!(n.above_noise, Some(want));
        let j = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<RuleSpec>(&j).unwrap(), s);
        let file = format!(
            "rules:\n{}",
            y.trim_start()
                .lines()
                .enumerate()
                .map(|(i, l)| format!("  {}{l}\n", if i == 0 { "- " } else { "  " }))
                .collect::<String>()
        );
        assert_eq!(parse_rules_file(&file).unwrap(), vec![spec()]);
        let e = parse_rules_file(&file.replace("^zlib_", "("))
            .unwrap_err()
            .to_string();
        assert!(e.contains("regex") && e.contains("zlib"), "{e}");
    }
}
