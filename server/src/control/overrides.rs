//! Explicit overrides: an engineer turns profiling up (or off) on a host, a service
//! or for one event, until a time. Overrides win over the policy and expire by
//! themselves; newer ones are applied after older ones, so the newest wins a conflict.

use serde::{Deserialize, Serialize};

use super::policy::{check_event_name, check_hz};
use super::ControlError;

/// What a client sends to create an override.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverrideSpec {
    /// Only this host (exact); absent: every host.
    #[serde(default)]
    pub host: Option<String>,
    /// Only agents of this service; absent: every service.
    #[serde(default)]
    pub service: Option<String>,
    /// Sample this event (added to the plan, or its frequency changed); absent: the
    /// plan's events, at `frequency_hz` when given.
    #[serde(default)]
    pub event: Option<String>,
    #[serde(default)]
    pub frequency_hz: Option<u64>,
    /// `true` (default): profile for the whole period whatever machine sampling
    /// chose; `false`: do not profile.
    #[serde(default = "yes")]
    pub profile: bool,
    /// Expiry, Unix milliseconds, or RFC 3339 / relative (`"2h"`) through the API.
    pub until_ms: i64,
    #[serde(default)]
    pub reason: Option<String>,
}

fn yes() -> bool {
    true
}

/// A stored override.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Override {
    pub id: u64,
    pub created_ms: i64,
    #[serde(flatten)]
    pub spec: OverrideSpec,
}

impl OverrideSpec {
    /// Refuses an override that could match nothing useful or never expire.
    pub fn validate(&self, now_ms: i64) -> Result<(), ControlError> {
        let bad = |m: &str| Err(ControlError::Invalid(m.to_string()));
        if self.host.is_none() && self.service.is_none() {
            return bad("an override names a host, a service or both");
        }
        if self.host.as_deref().is_some_and(str::is_empty)
            || self.service.as_deref().is_some_and(str::is_empty)
        {
            return bad("host and service must not be empty when given");
        }
        if self.until_ms <= now_ms {
            return bad("until is in the past: the override would never apply");
        }
        if self.until_ms - now_ms > 30 * 24 * 3600 * 1000 {
            return bad("until is more than 30 days ahead: overrides are for investigations; change the policy instead");
        }
        if let Some(e) = &self.event {
            check_event_name("event", e)?;
        }
        if let Some(hz) = self.frequency_hz {
            check_hz("frequency_hz", hz)?;
        }
        Ok(())
    }
}

impl Override {
    pub fn active(&self, now_ms: i64) -> bool {
        now_ms < self.spec.until_ms
    }

    /// Whether this override is about an agent on `host` running `service`.
    pub fn matches(&self, host: &str, service: Option<&str>) -> bool {
        self.spec.host.as_deref().is_none_or(|h| h == host)
            && self
                .spec
                .service
                .as_deref()
                .is_none_or(|s| Some(s) == service)
    }

    /// One line for the plan's reason.
    pub fn describe(&self) -> String {
        let what = match (&self.spec.event, self.spec.frequency_hz, self.spec.profile) {
            (_, _, false) => "profiling off".to_string(),
            (Some(e), Some(hz), _) => format!("{e} at {hz} Hz"),
            (Some(e), None, _) => e.clone(),
            (None, Some(hz), _) => format!("{hz} Hz"),
            (None, None, _) => "profiling on".to_string(),
        };
        format!("override {} ({what})", self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(host: Option<&str>, service: Option<&str>) -> OverrideSpec {
        OverrideSpec {
            host: host.map(Into::into),
            service: service.map(Into::into),
            event: None,
            frequency_hz: None,
            profile: true,
            until_ms: 10_000,
            reason: None,
        }
    }

    #[test]
    fn matching_and_expiry() {
        let o = Override {
            id: 1,
            created_ms: 0,
            spec: spec(Some("h1"), Some("api")),
        };
        assert!(o.matches("h1", Some("api")));
        assert!(!o.matches("h1", Some("db")));
        assert!(!o.matches("h2", Some("api")));
        assert!(!o.matches("h1", None));
        assert!(o.active(9_999));
        assert!(!o.active(10_000));
        let any_host = Override {
            id: 2,
            created_ms: 0,
            spec: spec(None, Some("api")),
        };
        assert!(any_host.matches("h9", Some("api")));
    }

    #[test]
    fn validation() {
        assert!(spec(None, None).validate(0).is_err());
        assert!(spec(Some("h"), None).validate(10_000).is_err(), "expired");
        assert!(spec(Some("h"), None).validate(0).is_ok());
        let mut s = spec(Some("h"), None);
        s.event = Some("nope".into());
        assert!(s.validate(0).is_err());
        s.event = Some("cycles".into());
        s.frequency_hz = Some(0);
        assert!(s.validate(0).is_err());
    }
}
