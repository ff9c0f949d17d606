//! Asking a running server, for the commands that do (`diff`, `fleet`).

use std::time::Duration;

use anyhow::Context;
use serde_json::Value;

/// An HTTP client for asking a server: generous timeout, error statuses returned
/// as answers (their JSON message is the useful part).
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(120)))
        .http_status_as_error(false)
        .build()
        .new_agent()
}

/// A server's JSON answer, or its error message as the error.
pub fn read_answer(url: &str, mut resp: ureq::http::Response<ureq::Body>) -> anyhow::Result<Value> {
    let status = resp.status();
    let text = resp
        .body_mut()
        .read_to_string()
        .with_context(|| format!("cannot read the answer of {url}"))?;
    let v: Value = serde_json::from_str(&text)
        .with_context(|| format!("{url} answered HTTP {status} with non-JSON: {text:.200}"))?;
    if !status.is_success() {
        let msg = v["message"].as_str().unwrap_or(&text);
        anyhow::bail!("{url} answered HTTP {status}: {msg}");
    }
    Ok(v)
}
