//! A debuginfod client: `GET <server>/buildid/<hex>/debuginfo`, then
//! `/executable` (a binary that was never stripped serves as its own debug file),
//! over each server of the space-separated `DEBUGINFOD_URLS` in turn.

use std::io::Read;
use std::time::Duration;

use crate::Source;

/// The servers named by `DEBUGINFOD_URLS` (space-separated), empty when unset.
pub fn urls_from_env() -> Vec<String> {
    std::env::var("DEBUGINFOD_URLS")
        .map(|v| split_urls(&v))
        .unwrap_or_default()
}

/// Space-separated URLs, without trailing slashes.
pub fn split_urls(v: &str) -> Vec<String> {
    v.split_whitespace()
        .map(|u| u.trim_end_matches('/').to_string())
        .filter(|u| !u.is_empty())
        .collect()
}

/// Fetches debug files from debuginfod servers.
pub struct Debuginfod {
    urls: Vec<String>,
    agent: ureq::Agent,
    max_bytes: u64,
}

impl Debuginfod {
    /// A client of `urls`, each request given `timeout`, bodies capped at `max_bytes`.
    pub fn new(urls: Vec<String>, timeout: Duration, max_bytes: u64) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .build()
            .new_agent();
        Debuginfod {
            urls,
            agent,
            max_bytes,
        }
    }

    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    fn get(&self, url: &str) -> Result<Option<Vec<u8>>, String> {
        let mut resp = self
            .agent
            .get(url)
            .call()
            .map_err(|e| format!("{url}: {e}"))?;
        match resp.status().as_u16() {
            200 => {}
            404 => return Ok(None),
            code => return Err(format!("{url} answered HTTP {code}")),
        }
        let mut out = Vec::new();
        resp.body_mut()
            .as_reader()
            .take(self.max_bytes + 1)
            .read_to_end(&mut out)
            .map_err(|e| format!("{url}: {e}"))?;
        if out.len() as u64 > self.max_bytes {
            return Err(format!("{url}: the file is above {} bytes", self.max_bytes));
        }
        Ok(Some(out))
    }
}

impl Source for Debuginfod {
    fn name(&self) -> &str {
        "debuginfod"
    }

    fn fetch(&self, build_id: &str) -> Result<Option<Vec<u8>>, String> {
        let mut errors = Vec::new();
        for base in &self.urls {
            for kind in ["debuginfo", "executable"] {
                match self.get(&format!("{base}/buildid/{build_id}/{kind}")) {
                    Ok(Some(b)) => return Ok(Some(b)),
                    Ok(None) => {}
                    Err(e) => {
                        errors.push(e);
                        break;
                    }
                }
            }
        }
        if errors.is_empty() {
            Ok(None)
        } else {
            Err(errors.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_on_spaces_without_trailing_slashes() {
        assert_eq!(
            split_urls(" http://a:1/  https://b/x/ "),
            vec!["http://a:1".to_string(), "https://b/x".to_string()]
        );
        assert!(split_urls("   ").is_empty());
    }
}
