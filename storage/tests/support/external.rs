//! Parts from outside the repository that tests and benches need (chromium and
//! chromedriver, moto, the Python SDK and OTLP virtualenvs, Alertmanager, curl, the
//! shared fixtures, a built `profiledb`): where one is missing the test says so
//! and skips, and with `PROFILEDB_REQUIRE_EXTERNAL=1` (CI sets it) it fails
//! instead, so a green CI run means every such test ran.
//!
//! One file, std only, declared once per test crate and in the bench (with
//! `#[path]` outside `storage/tests`); `moto.rs` and the server suite's
//! `browser.rs` reach it as `super::external`, so a module including them names
//! it there (`use crate::external;`). docs/testing.md has the convention.

#![allow(dead_code)]

use std::fmt::Display;
use std::io::Write;

/// The variable that turns a missing part into a failure.
pub const REQUIRE_EXTERNAL: &str = "PROFILEDB_REQUIRE_EXTERNAL";

/// Whether a missing part fails (`PROFILEDB_REQUIRE_EXTERNAL=1`) rather than skips.
pub fn required() -> bool {
    std::env::var_os(REQUIRE_EXTERNAL).is_some_and(|v| v == "1")
}

/// `part` is missing, for `why`: panics when [`required`], else prints a SKIP line
/// and the caller returns without testing. The line goes straight to stderr, past
/// the test harness's capture, so a skip shows in `cargo test`'s output.
#[track_caller]
pub fn missing(part: &str, why: impl Display) {
    if required() {
        panic!("{part} is missing and {REQUIRE_EXTERNAL}=1 makes that a failure: {why}");
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIP: {part} is missing: {why} ({REQUIRE_EXTERNAL}=1 makes this a failure)"
    );
}

/// The machine refuses what a test needs (`perf_event_open` in a container): not
/// an install CI could make, so a SKIP line whatever [`required`] says.
pub fn refused(what: &str, why: impl Display) {
    let _ = writeln!(
        std::io::stderr(),
        "SKIP: {what} is not permitted on this machine: {why}"
    );
}
