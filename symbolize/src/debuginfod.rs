//! A debuginfod client: `GET <server>/buildid/<hex>/debuginfo`, then
//! `/executable` (a binary that was never stripped serves as its own debug file),
//! over each server of the space-separated `DEBUGINFOD_URLS` in turn.

use std::io::Read;
use std::time::Duration;

use crate::cache::SourceError;
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

    fn get(&self, url: &str) -> Result<Option<Vec<u8>>, FetchError> {
        let url = url.to_string();
        let mut resp = match self.agent.get(&url).call() {
            Ok(r) => r,
            Err(source) => return Err(FetchError::Transport { url, source }),
        };
        match resp.status().as_u16() {
            200 => {}
            404 => return Ok(None),
            status => return Err(FetchError::Status { url, status }),
        }
        let mut out = Vec::new();
        let read = resp
            .body_mut()
            .as_reader()
            .take(self.max_bytes + 1)
            .read_to_end(&mut out);
        if let Err(source) = read {
            return Err(FetchError::Read { url, source });
        }
        if out.len() as u64 > self.max_bytes {
            let max = self.max_bytes;
            return Err(FetchError::TooLarge { url, max });
        }
        Ok(Some(out))
    }
}

impl Source for Debuginfod {
    fn name(&self) -> &str {
        "debuginfod"
    }

    fn fetch(&self, build_id: &str) -> Result<Option<Vec<u8>>, SourceError> {
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
            Err(FetchError::Servers(errors).into())
        }
    }
}

/// Why a debuginfod server gave no file (a 404 is "not there", not an error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// No answer: connection, TLS, timeout.
    #[error("{url}: {source}")]
    Transport {
        url: String,
        #[source]
        source: ureq::Error,
    },
    /// An answer other than 200 or 404.
    #[error("{url} answered HTTP {status}")]
    Status { url: String, status: u16 },
    /// The body broke off.
    #[error("{url}: {source}")]
    Read {
        url: String,
        #[source]
        source: std::io::Error,
    },
    /// The file is over the upload limit.
    #[error("{url}: the file is above {max} bytes")]
    TooLarge { url: String, max: u64 },
    /// Every server that failed, each with its own error.
    #[error("{}", list(.0))]
    Servers(Vec<FetchError>),
}

fn list(errors: &[FetchError]) -> String {
    let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
    all.join("; ")
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
