//! Which queriers a split query's parts can go to: `--querier-peers`, a static
//! list of base URLs whose host names are resolved again at every query, so one
//! DNS name with an address per querier (a Kubernetes headless service) follows
//! the queriers as they come and go. No membership protocol: every querier
//! already sees the same blocks through the bucket index, so an asker only needs
//! addresses, and a peer that is gone fails its part, which is asked elsewhere.

use std::collections::BTreeSet;
use std::net::{SocketAddr, ToSocketAddrs};

use anyhow::{bail, Context};

/// One entry of `--querier-peers`: host (a name or an address) and port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    host: String,
    port: u16,
}

impl Peer {
    /// `http://host:port` (a trailing `/` allowed; no path, no https: peers are
    /// queriers of one cluster on its internal network).
    pub fn parse(url: &str) -> anyhow::Result<Peer> {
        let rest = url
            .trim()
            .strip_prefix("http://")
            .with_context(|| format!("querier peer {url:?} must start with http://"))?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains('/') {
            bail!("querier peer {url:?} must be a base URL (http://host:port), without a path");
        }
        let (host, port) = rest
            .rsplit_once(':')
            .with_context(|| format!("querier peer {url:?} needs a port (http://host:port)"))?;
        let port: u16 = port
            .parse()
            .with_context(|| format!("querier peer {url:?}: {port:?} is not a port"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            bail!("querier peer {url:?} names no host");
        }
        Ok(Peer {
            host: host.to_string(),
            port,
        })
    }

    /// Every address the entry names now (a DNS name may name many).
    fn resolve(&self) -> Vec<SocketAddr> {
        match (self.host.as_str(), self.port).to_socket_addrs() {
            Ok(a) => a.collect(),
            Err(e) => {
                tracing::warn!(host = %self.host, error = %e, "cannot resolve a querier peer");
                Vec::new()
            }
        }
    }
}

/// The comma-separated `--querier-peers` list.
pub fn parse_list(list: &str) -> anyhow::Result<Vec<Peer>> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(Peer::parse)
        .collect()
}

/// The addresses of `peers` now, without `exclude` (this querier, once known),
/// sorted and without repeats.
pub fn resolve_all(peers: &[Peer], exclude: &BTreeSet<SocketAddr>) -> Vec<SocketAddr> {
    let all: BTreeSet<SocketAddr> = peers.iter().flat_map(Peer::resolve).collect();
    all.into_iter().filter(|a| !exclude.contains(a)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_parse_base_urls_and_refuse_the_rest() {
        let p = parse_list("http://q1:4040, http://127.0.0.1:4041/,").unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].host, "q1");
        assert_eq!(p[1].port, 4041);
        for bad in [
            "q1:4040",
            "http://q1",
            "http://q1:x",
            "http://q1:1/api",
            "https://q1:1",
        ] {
            assert!(Peer::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_name_resolves_to_its_addresses_and_the_excluded_one_is_left_out() {
        let p = parse_list("http://localhost:4040,http://127.0.0.1:4041").unwrap();
        let me: BTreeSet<SocketAddr> = ["127.0.0.1:4041".parse().unwrap()].into();
        let got = resolve_all(&p, &me);
        assert!(got.contains(&"127.0.0.1:4040".parse().unwrap()), "{got:?}");
        assert!(!got.contains(&"127.0.0.1:4041".parse().unwrap()));
    }
}
