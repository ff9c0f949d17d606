//! How every query endpoint reads its request: one query-string extractor, one
//! profile type and selector parser, one time window rule, one `max_nodes` rule.
//!
//! Each endpoint parses its own wire form (query string, JSON body, Connect message)
//! and then resolves it here, so `now-1h`, a missing profile type or a selector
//! without braces mean the same thing, and get the same error, everywhere.
//!
//! **The time rule**: a window is half-open, `[from, until)` in milliseconds since
//! the epoch. `from` defaults to an hour before `until`, `until` to now; a window with
//! `until` before `from` is refused.

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use profiledb_storage::{now_ms, MatchOp, Matcher, Selector, TimeRange, PROFILE_TYPE_LABEL};
use serde::de::DeserializeOwned;
use tokio::runtime::RuntimeFlavor;

use crate::error::{ApiError, ApiResult};
use crate::time::parse_instant;

/// Pyroscope's default `max_nodes` when a request leaves it unset.
pub const DEFAULT_MAX_NODES: i64 = 8192;

/// The default window when a request names no `from`: the hour before `until`.
const DEFAULT_WINDOW_MS: i64 = 3_600_000;

/// What a profile type id looks like, for error messages.
const PROFILE_TYPE_FORM: &str =
    "expected name:sample_type:sample_unit:period_type:period_unit, e.g. process_cpu:cpu:nanoseconds:cpu:nanoseconds";

/// Query-string parameters, with a malformed query string answered as a JSON 400.
pub struct Params<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> ApiResult<Self> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(p)| Params(p))
            .map_err(|e| {
                ApiError::bad_request(format!("invalid query parameters: {}", e.body_text()))
            })
    }
}

/// Runs a store call where it may block: on the asking worker thread of the
/// server's multi-threaded runtime (its other tasks move to another thread), else
/// on the blocking pool. A panic is this request's 500, not the server's.
///
/// In place, a query skips the hand-off to a blocking thread and the wake-up of
/// the worker after it, which `bench ab` sees on sub-millisecond queries, most
/// after idle time, when both threads have gone to sleep
/// (docs/perf-log/2026-11-27-round-18-diff-without-stall.md).
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    let failed = |e: &dyn std::fmt::Display| ApiError::internal(format!("query task failed: {e}"));
    if tokio::runtime::Handle::current().runtime_flavor() == RuntimeFlavor::MultiThread {
        return tokio::task::block_in_place(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
                .unwrap_or_else(|_| Err(failed(&"panicked")))
        });
    }
    // The tenant's query limits follow the work onto the blocking thread.
    tokio::task::spawn_blocking(crate::tenancy::scope::carried(f))
        .await
        .map_err(|e| failed(&e))?
}

/// A time in a JSON body: milliseconds since the epoch, or text (`"now-1h"`,
/// RFC 3339, unix seconds).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(untagged)]
pub enum TimeArg {
    Ms(i64),
    Text(String),
}

impl TimeArg {
    pub fn resolve(&self, what: &'static str, now: i64) -> ApiResult<i64> {
        match self {
            TimeArg::Ms(v) => Ok(*v),
            TimeArg::Text(s) => Ok(parse_instant(what, s, now)?),
        }
    }
}

/// A validated profile type id: `name:sample_type:sample_unit:period_type:period_unit`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProfileTypeId(String);

impl ProfileTypeId {
    /// Parses an id; names, sample types and units must be present, period parts may
    /// be empty (some profilers send none).
    pub fn parse(text: &str) -> ApiResult<Self> {
        let t = text.trim();
        let parts: Vec<&str> = t.split(':').collect();
        let well_formed = parts.len() == 5
            && parts[..3].iter().all(|p| !p.is_empty())
            && parts.iter().all(|p| {
                p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'))
            });
        if well_formed {
            return Ok(ProfileTypeId(t.to_string()));
        }
        if t.contains(['=', '~', '"']) {
            return Err(ApiError::bad_request(format!(
                "invalid query {t:?}: label matchers go inside braces after the profile type, \
                 e.g. process_cpu:cpu:nanoseconds:cpu:nanoseconds{{service_name=\"myapp\"}}"
            )));
        }
        Err(ApiError::bad_request(format!(
            "unknown profile type {t:?}: {PROFILE_TYPE_FORM}"
        )))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `[name, sample_type, sample_unit, period_type, period_unit]`.
    pub fn parts(&self) -> [&str; 5] {
        profile_type_parts(&self.0)
    }

    /// The unit values are counted in (`nanoseconds`, `bytes`, `count`, …).
    pub fn sample_unit(&self) -> &str {
        self.parts()[2]
    }
}

/// `name:sample_type:sample_unit:period_type:period_unit` → its five parts (empty
/// where missing), for ids read back from storage as well as validated ones.
pub fn profile_type_parts(id: &str) -> [&str; 5] {
    let mut it = id.split(':');
    std::array::from_fn(|_| it.next().unwrap_or(""))
}

/// A query's text split into its optional profile type prefix and its matchers.
/// `{…}` is required around matchers; `<type>` alone means every series of it.
pub fn parse_query(text: &str) -> ApiResult<(Option<ProfileTypeId>, Selector)> {
    let t = text.trim();
    let (prefix, body) = match t.find('{') {
        Some(i) => (t[..i].trim(), &t[i..]),
        None => (t, ""),
    };
    let profile_type = if prefix.is_empty() {
        None
    } else {
        Some(ProfileTypeId::parse(prefix)?)
    };
    let selector = if body.is_empty() {
        Selector::default()
    } else {
        Selector::parse(body).map_err(ApiError::from)?
    };
    Ok((profile_type, selector))
}

/// Matchers for label discovery: a profile type is optional and, when given, one
/// more matcher.
pub fn discovery_selector(query: Option<&str>) -> ApiResult<Selector> {
    let (pt, sel) = parse_query(query.unwrap_or(""))?;
    Ok(match pt {
        Some(pt) => sel.with(Matcher::eq(PROFILE_TYPE_LABEL, pt.as_str())),
        None => sel,
    })
}

/// What a merge, group-by, time series or diff reads: exactly one profile type and
/// the series selector restricted to it. Summing two profile types would add
/// nanoseconds to bytes, so a query without one is refused.
#[derive(Clone, Debug)]
pub struct Selection {
    pub profile_type: ProfileTypeId,
    /// The matchers, including the `__profile_type__` one.
    pub selector: Selector,
}

impl Selection {
    /// From a `<type>{matchers}` query string.
    pub fn from_query(query: Option<&str>) -> ApiResult<Self> {
        Self::from_parts("", query.unwrap_or(""))
    }

    /// From a separate profile type field (may be empty) and a selector that may
    /// carry a type prefix too; both, when present, must agree.
    pub fn from_parts(profile_type: &str, selector: &str) -> ApiResult<Self> {
        Self::from_all(profile_type, &[selector])
    }

    /// From a profile type field and several selectors that all apply (a diff's
    /// shared selector and a side's own): their matchers are ANDed, and every
    /// profile type they name must agree.
    pub fn from_all(profile_type: &str, selectors: &[&str]) -> ApiResult<Self> {
        let field = match profile_type.trim() {
            "" => None,
            t => Some(ProfileTypeId::parse(t)?),
        };
        let mut prefixes = Vec::new();
        let mut sel = Selector::default();
        for text in selectors {
            let (prefix, part) = parse_query(text)?;
            prefixes.extend(prefix);
            for m in part.matchers {
                sel = sel.with(m);
            }
        }
        let selector = selectors.join(" ");
        let selector = selector.as_str();
        let in_matchers = sel
            .matchers
            .iter()
            .filter(|m| m.name == PROFILE_TYPE_LABEL && m.op == MatchOp::Eq)
            .map(|m| ProfileTypeId::parse(&m.value))
            .collect::<ApiResult<Vec<_>>>()?;
        let named: Vec<ProfileTypeId> = field
            .into_iter()
            .chain(prefixes)
            .chain(in_matchers)
            .collect();
        let Some(first) = named.first().cloned() else {
            return Err(ApiError::bad_request(format!(
                "the query names no profile type: a merge, group-by, time series or diff reads \
                 exactly one, e.g. process_cpu:cpu:nanoseconds:cpu:nanoseconds{{service_name=\"myapp\"}} \
                 (GET /api/v1/profile_types lists them); selector was {:?}",
                selector.trim()
            )));
        };
        if let Some(other) = named.iter().find(|t| **t != first) {
            return Err(ApiError::bad_request(format!(
                "the query names two profile types, {:?} and {:?}: name exactly one",
                first.as_str(),
                other.as_str()
            )));
        }
        if !sel
            .matchers
            .iter()
            .any(|m| m.name == PROFILE_TYPE_LABEL && m.op == MatchOp::Eq)
        {
            sel = sel.with(Matcher::eq(PROFILE_TYPE_LABEL, first.as_str()));
        }
        Ok(Selection {
            profile_type: first,
            selector: sel,
        })
    }
}

/// The half-open window `[from, until)` of textual times (any form
/// [`parse_instant`] reads); `from` defaults to an hour before `until`, `until` to now.
pub fn window(
    (from_name, from): (&'static str, Option<&str>),
    (until_name, until): (&'static str, Option<&str>),
) -> ApiResult<TimeRange> {
    let now = now_ms();
    let parse = |name, t| parse_instant(name, t, now);
    let until_ms = until.map(|u| parse(until_name, u)).transpose()?;
    let from_ms = from.map(|f| parse(from_name, f)).transpose()?;
    window_defaulted(from_ms, until_ms, now, (from_name, until_name))
}

/// The same window of times in a JSON body (`start`, `end`: ms or text).
pub fn window_args(start: Option<&TimeArg>, end: Option<&TimeArg>) -> ApiResult<TimeRange> {
    let now = now_ms();
    let end_ms = end.map(|t| t.resolve("end", now)).transpose()?;
    let start_ms = start.map(|t| t.resolve("start", now)).transpose()?;
    window_defaulted(start_ms, end_ms, now, ("start", "end"))
}

/// The defaults of the rule: `until` now, `from` an hour before `until`.
fn window_defaulted(
    from: Option<i64>,
    until: Option<i64>,
    now: i64,
    names: (&str, &str),
) -> ApiResult<TimeRange> {
    let until = until.unwrap_or(now);
    let from = from.unwrap_or(until.saturating_sub(DEFAULT_WINDOW_MS));
    window_ms(from, until, names)
}

/// The half-open window of two millisecond times; `until = 0` means now (as in
/// Pyroscope's Connect API).
pub fn window_ms(from: i64, until: i64, names: (&str, &str)) -> ApiResult<TimeRange> {
    let until = if until == 0 { now_ms() } else { until };
    if until < from {
        return Err(ApiError::bad_request(format!(
            "{} ({until}) is before {} ({from})",
            names.1, names.0
        )));
    }
    crate::tenancy::scope::check_window(until.saturating_sub(from))?;
    Ok(TimeRange::new(from, until))
}

/// A native request's node budget: unset or 0 is Pyroscope's default, a positive
/// number that many nodes at most; a negative one is refused. The tenant's
/// `max_nodes` limit caps the default and refuses more.
pub fn max_nodes(v: Option<i64>) -> ApiResult<usize> {
    if let Some(n) = v.filter(|&n| n < 0) {
        return Err(ApiError::bad_request(format!(
            "max_nodes must be a number of nodes, at least 1 (or 0 for the default,              {DEFAULT_MAX_NODES}); got {n}"
        )));
    }
    pyroscope_max_nodes(v)
}

/// The node budget of a Pyroscope-compatible request (Connect, `/pyroscope/render`):
/// as [`max_nodes`], but a negative number asks for every node, as in Pyroscope.
pub fn pyroscope_max_nodes(v: Option<i64>) -> ApiResult<usize> {
    let asked = match v {
        None | Some(0) => None,
        Some(n) if n < 0 => Some(0),
        Some(n) => Some(usize::try_from(n).unwrap_or(usize::MAX)),
    };
    crate::tenancy::scope::max_nodes(asked, DEFAULT_MAX_NODES as usize)
}

impl From<crate::time::TimeError> for ApiError {
    fn from(e: crate::time::TimeError) -> Self {
        ApiError::bad_request(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(r: ApiResult<impl std::fmt::Debug>) -> String {
        r.expect_err("should be refused").message
    }

    /// A store call runs in place on the server's runtime and on the blocking pool
    /// on a single-threaded one; either way its answer comes back and a panic is
    /// this request's 500.
    #[test]
    fn blocking_calls_answer_and_contain_panics() {
        for rt in [
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .build(),
            tokio::runtime::Builder::new_current_thread().build(),
        ] {
            let rt = rt.unwrap();
            // Spawned, so the call is on a runtime thread, as a handler's is.
            let on = |f: fn() -> ApiResult<bool>| {
                rt.block_on(rt.spawn(async move {
                    let here = std::thread::current().id();
                    blocking(move || f().map(|v| v && std::thread::current().id() == here)).await
                }))
                .expect("the task ends")
            };
            let in_place = rt.handle().runtime_flavor() == RuntimeFlavor::MultiThread;
            assert_eq!(on(|| Ok(true)).unwrap(), in_place);
            let e = on(|| panic!("boom")).expect_err("a panic is an error");
            assert_eq!(e.status, axum::http::StatusCode::INTERNAL_SERVER_ERROR);
            assert!(e.message.starts_with("query task failed"), "{}", e.message);
            // The runtime still serves after it.
            assert!(on(|| Ok(true)).is_ok());
        }
    }

    #[test]
    fn profile_types_are_checked() {
        let t = ProfileTypeId::parse("process_cpu:cpu:nanoseconds:cpu:nanoseconds").unwrap();
        assert_eq!(t.sample_unit(), "nanoseconds");
        assert_eq!(t.parts()[0], "process_cpu");
        assert!(ProfileTypeId::parse("memory:alloc_space:bytes::").is_ok());
        assert!(err(ProfileTypeId::parse("cpu")).contains("unknown profile type \"cpu\""));
        assert!(err(ProfileTypeId::parse("a:b::c:d")).contains("expected name:"));
        assert!(err(ProfileTypeId::parse("service_name=\"x\"")).contains("inside braces"));
    }

    #[test]
    fn a_selection_names_exactly_one_type() {
        let pt = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
        let s = Selection::from_query(Some(&format!("{pt}{{service_name=\"a\"}}"))).unwrap();
        assert_eq!(s.profile_type.as_str(), pt);
        assert_eq!(s.selector.matchers.len(), 2);
        let s = Selection::from_parts(pt, "{service_name=\"a\"}").unwrap();
        assert_eq!(s.selector.matchers.len(), 2);
        let s = Selection::from_parts("", &format!("{{__profile_type__=\"{pt}\"}}")).unwrap();
        assert_eq!(s.profile_type.as_str(), pt);
        assert_eq!(s.selector.matchers.len(), 1);
        assert!(err(Selection::from_query(Some("{service_name=\"a\"}")))
            .contains("names no profile type"));
        assert!(err(Selection::from_query(None)).contains("names no profile type"));
        assert!(err(Selection::from_query(Some("cpu{service_name=\"a\"}")))
            .contains("unknown profile type \"cpu\""));
        assert!(err(Selection::from_query(Some("service_name=\"a\""))).contains("inside braces"));
        assert!(err(Selection::from_parts(
            "memory:alloc_space:bytes:space:bytes",
            &format!("{pt}{{}}")
        ))
        .contains("two profile types"));
    }

    #[test]
    fn selectors_of_one_request_combine() {
        let pt = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
        let s = Selection::from_all(pt, &["{service_name=\"a\"}", "{version=\"v1\"}"]).unwrap();
        let names: Vec<&str> = s
            .selector
            .matchers
            .iter()
            .map(|m| m.name.as_str())
            .collect();
        assert_eq!(names, ["service_name", "version", "__profile_type__"]);
        assert!(err(Selection::from_all(
            "",
            &[
                &format!("{pt}{{}}"),
                "memory:alloc_space:bytes:space:bytes{}"
            ]
        ))
        .contains("two profile types"));
    }

    #[test]
    fn windows_are_half_open_and_ordered() {
        let r = window(("from", Some("1000")), ("until", Some("2000"))).unwrap();
        assert_eq!((r.start_ms, r.end_ms), (1_000_000, 2_000_000));
        let r = window(("from", None), ("until", Some("7200"))).unwrap();
        assert_eq!((r.start_ms, r.end_ms), (3_600_000, 7_200_000));
        assert!(err(window(("from", Some("2000")), ("until", Some("1000")))).contains("before"));
        assert!(err(window(("start", Some("yesterday")), ("end", None))).contains("start"));
        let r = window_ms(5, 9, ("start", "end")).unwrap();
        assert_eq!((r.start_ms, r.end_ms), (5, 9));
    }

    #[test]
    fn max_nodes_defaults() {
        assert_eq!(max_nodes(None).unwrap(), 8192);
        assert_eq!(max_nodes(Some(0)).unwrap(), 8192);
        assert!(err(max_nodes(Some(-1))).contains("max_nodes must be"));
        assert_eq!(pyroscope_max_nodes(Some(-1)).unwrap(), 0);
        assert_eq!(max_nodes(Some(16)).unwrap(), 16);
    }
}
