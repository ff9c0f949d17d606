//! Prometheus-style series selectors: `process_cpu:cpu:nanoseconds:cpu:nanoseconds{service_name="api", env=~"prod|stage"}`.

use std::fmt;

use regex::Regex;

use crate::error::InvalidSelector;
use crate::model::PROFILE_TYPE_LABEL;

type Result<T, E = InvalidSelector> = std::result::Result<T, E>;

/// Longest selector text accepted, so parsing cost is bounded by a constant.
pub const MAX_SELECTOR_LEN: usize = 16 * 1024;
/// Upper bound on a compiled matcher regex, guarding against pathological patterns.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// How a [`Matcher`] compares a label value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchOp {
    /// `=`: equal.
    Eq,
    /// `!=`: not equal (also matches an absent label).
    Ne,
    /// `=~`: matches the anchored regex.
    Re,
    /// `!~`: does not match the anchored regex.
    Nre,
}

impl MatchOp {
    /// The operator as written in a selector.
    pub fn as_str(self) -> &'static str {
        match self {
            MatchOp::Eq => "=",
            MatchOp::Ne => "!=",
            MatchOp::Re => "=~",
            MatchOp::Nre => "!~",
        }
    }
}

/// One label matcher. Regexes are fully anchored, as in Prometheus.
#[derive(Clone, Debug)]
pub struct Matcher {
    /// The label name.
    pub name: String,
    /// The comparison.
    pub op: MatchOp,
    /// The value or regex source.
    pub value: String,
    regex: Option<Regex>,
}

impl PartialEq for Matcher {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.op == other.op && self.value == other.value
    }
}

impl Matcher {
    /// A matcher; fails on an invalid label name or regex.
    pub fn new(name: impl Into<String>, op: MatchOp, value: impl Into<String>) -> Result<Self> {
        let name = name.into();
        let value = value.into();
        if !is_label_name(&name) {
            return Err(InvalidSelector(format!(
                "invalid label name {name:?} in matcher"
            )));
        }
        let regex = match op {
            MatchOp::Re | MatchOp::Nre => Some(
                regex::RegexBuilder::new(&format!("^(?:{value})$"))
                    .size_limit(REGEX_SIZE_LIMIT)
                    .build()
                    .map_err(|e| {
                        InvalidSelector(format!("invalid regex {value:?} for {name}: {e}"))
                    })?,
            ),
            _ => None,
        };
        Ok(Matcher {
            name,
            op,
            value,
            regex,
        })
    }

    /// `name = value`, the name unchecked (for names known to be valid; [`Matcher::new`]
    /// checks).
    pub fn eq(name: impl Into<String>, value: impl Into<String>) -> Self {
        Matcher {
            name: name.into(),
            op: MatchOp::Eq,
            value: value.into(),
            regex: None,
        }
    }

    /// Whether a series whose label has value `v` (`""` when absent) is selected.
    pub fn matches(&self, v: &str) -> bool {
        match (self.op, &self.regex) {
            (MatchOp::Eq, _) => v == self.value,
            (MatchOp::Ne, _) => v != self.value,
            (MatchOp::Re, Some(r)) => r.is_match(v),
            (MatchOp::Nre, Some(r)) => !r.is_match(v),
            (_, None) => false,
        }
    }
}

impl fmt::Display for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}{:?}", self.name, self.op.as_str(), self.value)
    }
}

pub fn is_label_name(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.')
}

/// A conjunction of matchers. The empty selector selects every series.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selector {
    /// Every matcher must hold.
    pub matchers: Vec<Matcher>,
}

impl Selector {
    /// The selector of `matchers`.
    pub fn new(matchers: Vec<Matcher>) -> Self {
        Selector { matchers }
    }

    /// Parses `{a="b", c=~"d"}`, optionally prefixed by a profile type id, which
    /// becomes a `__profile_type__` matcher.
    pub fn parse(input: &str) -> Result<Self> {
        if input.len() > MAX_SELECTOR_LEN {
            return Err(InvalidSelector(format!(
                "selector longer than {MAX_SELECTOR_LEN} bytes"
            )));
        }
        let input = input.trim();
        let (prefix, body) = match input.find('{') {
            Some(i) => (&input[..i], &input[i..]),
            None => (input, ""),
        };
        let mut matchers = Vec::new();
        let prefix = prefix.trim();
        if !prefix.is_empty() {
            matchers.push(Matcher::eq(PROFILE_TYPE_LABEL, prefix));
        }
        if !body.is_empty() {
            Parser::new(body).parse_into(&mut matchers)?;
        }
        Ok(Selector { matchers })
    }

    /// This selector and `m`.
    pub fn with(mut self, m: Matcher) -> Self {
        self.matchers.push(m);
        self
    }

    /// This selector narrowed to one group: each of `labels` equal to the value at
    /// the same place in `values` (the fleet analyses' groups).
    pub fn narrowed_to(&self, labels: &[String], values: &[String]) -> Selector {
        labels
            .iter()
            .zip(values)
            .fold(self.clone(), |acc, (l, v)| acc.with(Matcher::eq(l, v)))
    }

    /// Evaluates the selector against a label lookup function.
    pub fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.matchers
            .iter()
            .all(|m| m.matches(get(&m.name).unwrap_or("")))
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, m) in self.matchers.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{m}")?;
        }
        f.write_str("}")
    }
}

struct Parser<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn new(s: &'a str) -> Self {
        Parser { s, pos: 0 }
    }

    fn err(&self, what: &str) -> InvalidSelector {
        InvalidSelector(format!(
            "invalid selector {:?}: {what} at offset {}",
            self.s, self.pos
        ))
    }

    fn peek(&self) -> Option<char> {
        self.s[self.pos..].chars().next()
    }

    fn skip_ws(&mut self) {
        while let Some(c) = self.peek() {
            if !c.is_whitespace() {
                break;
            }
            self.pos += c.len_utf8();
        }
    }

    fn expect(&mut self, c: char) -> Result<()> {
        self.skip_ws();
        if self.peek() == Some(c) {
            self.pos += c.len_utf8();
            Ok(())
        } else {
            Err(self.err(&format!("expected {c:?}")))
        }
    }

    fn parse_into(&mut self, out: &mut Vec<Matcher>) -> Result<()> {
        self.expect('{')?;
        loop {
            self.skip_ws();
            match self.peek() {
                Some('}') => {
                    self.pos += 1;
                    break;
                }
                None => return Err(self.err("unterminated selector")),
                _ => {}
            }
            let name = self.ident()?;
            self.skip_ws();
            let rest = &self.s[self.pos..];
            let op = if rest.starts_with("=~") {
                MatchOp::Re
            } else if rest.starts_with("!~") {
                MatchOp::Nre
            } else if rest.starts_with("!=") {
                MatchOp::Ne
            } else if rest.starts_with('=') {
                MatchOp::Eq
            } else {
                return Err(self.err("expected one of = != =~ !~"));
            };
            self.pos += if op == MatchOp::Eq { 1 } else { 2 };
            self.skip_ws();
            let value = self.string()?;
            out.push(Matcher::new(name, op, value)?);
            self.skip_ws();
            match self.peek() {
                Some(',') => self.pos += 1,
                Some('}') => {}
                _ => return Err(self.err("expected ',' or '}'")),
            }
        }
        self.skip_ws();
        if self.pos != self.s.len() {
            return Err(self.err("unexpected text after '}'"));
        }
        Ok(())
    }

    fn ident(&mut self) -> Result<String> {
        let start = self.pos;
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
                self.pos += 1;
            } else {
                break;
            }
        }
        let id = &self.s[start..self.pos];
        if !is_label_name(id) {
            return Err(self.err("expected a label name"));
        }
        Ok(id.to_string())
    }

    fn string(&mut self) -> Result<String> {
        let quote = match self.peek() {
            Some(q @ ('"' | '\'' | '`')) => q,
            _ => return Err(self.err("expected a quoted value")),
        };
        self.pos += 1;
        let mut out = String::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(self.err("unterminated string"));
            };
            self.pos += c.len_utf8();
            if c == quote {
                return Ok(out);
            }
            if c == '\\' && quote != '`' {
                let Some(e) = self.peek() else {
                    return Err(self.err("unterminated escape"));
                };
                self.pos += e.len_utf8();
                match e {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    '\\' | '"' | '\'' | '`' => out.push(e),
                    // Keep unknown escapes intact so regex escapes like \d survive.
                    other => {
                        out.push('\\');
                        out.push(other);
                    }
                }
            } else {
                out.push(c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_type_prefix_and_all_operators() {
        let s = Selector::parse(
            r#"process_cpu:cpu:nanoseconds:cpu:nanoseconds{service_name="api", env=~"prod|stage" ,host!='a',x!~`\d+`}"#,
        )
        .unwrap();
        let got: Vec<String> = s.matchers.iter().map(|m| m.to_string()).collect();
        assert_eq!(
            got,
            vec![
                r#"__profile_type__="process_cpu:cpu:nanoseconds:cpu:nanoseconds""#,
                r#"service_name="api""#,
                r#"env=~"prod|stage""#,
                r#"host!="a""#,
                r#"x!~"\\d+""#,
            ]
        );
        assert!(s.matchers[2].matches("stage"));
        assert!(!s.matchers[2].matches("prod2"), "regexes are anchored");
        assert!(s.matchers[4].matches("abc"));
        assert!(!s.matchers[4].matches("123"));
    }

    #[test]
    fn empty_and_bare_selectors() {
        assert!(Selector::parse("{}").unwrap().matchers.is_empty());
        assert!(Selector::parse("").unwrap().matchers.is_empty());
        assert_eq!(Selector::parse("a:b:c:d:e").unwrap().matchers.len(), 1);
    }

    #[test]
    fn rejects_malformed_selectors() {
        for bad in [
            "{a=b}",
            "{a=\"b\"",
            "{=\"b\"}",
            "{a==\"b\"}",
            "{a=\"b\"} x",
            "{a=~\"(\"}",
            "{1a=\"b\"}",
        ] {
            let e = Selector::parse(bad).unwrap_err();
            assert!(!e.0.is_empty(), "{bad}: {e}");
        }
    }
}
