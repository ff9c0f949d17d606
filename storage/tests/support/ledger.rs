//! Pushes whose fate can be checked: each has a stack of its own whose value
//! identifies it, so a merged answer tells whether it was counted once, twice or
//! not at all, against what its client was answered. Shared by the server's
//! cluster tests and the cluster bench through `#[path]`.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

pub const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";

/// What became of a push.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    Status(u16),
    /// No connection: nothing was sent.
    Refused,
    /// The connection broke mid-request: it may or may not be stored.
    Broken,
}

/// One push: a unique stack whose value identifies it.
#[derive(Clone, Debug)]
pub struct Push {
    pub id: usize,
    pub service: &'static str,
    pub host: &'static str,
    pub from: u64,
    /// What the pushing side was doing (the bench's fault kind).
    pub tag: usize,
}

impl Push {
    pub fn path(&self) -> String {
        format!(
            "/ingest?name={}.cpu{{host={}}}&from={}",
            self.service, self.host, self.from
        )
    }
    /// Its value in nanoseconds: `/ingest` takes samples at 100 Hz by default.
    pub fn value(&self) -> i64 {
        (self.id as i64 + 1) * 10_000_000
    }
    pub fn body(&self) -> String {
        format!("main;work;p{} {}\n", self.id, self.id + 1)
    }
    pub fn send(&self, client: &reqwest::blocking::Client, url: &str) -> Outcome {
        match client
            .post(format!("{url}{}", self.path()))
            .body(self.body())
            .timeout(Duration::from_secs(30))
            .send()
        {
            Ok(r) => Outcome::Status(r.status().as_u16()),
            Err(e) if e.is_connect() => Outcome::Refused,
            Err(_) => Outcome::Broken,
        }
    }
}

pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

pub fn merged(url: &str) -> BTreeMap<String, i64> {
    let resp = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/merge"))
        .query(&[
            ("query", format!("{CPU}{{}}").as_str()),
            ("from", "0"),
            ("until", "now+1d"),
            ("format", "folded"),
        ])
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200, "merge at {url}");
    resp.text()
        .unwrap()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// Pushes made, by what their clients were told.
#[derive(Default, Debug)]
pub struct Ledger {
    /// Answered 200: must be counted exactly once.
    pub acked: Vec<Push>,
    /// Refused before anything was stored (503, 429, no connection): must be
    /// absent.
    pub refused: Vec<Push>,
    /// The connection broke mid-request: once or not at all.
    pub uncertain: Vec<Push>,
    /// The tag of the pushes made from now on.
    pub tag: usize,
    next: usize,
}

impl Ledger {
    /// A push with an id no other push of this ledger has, at `from`.
    pub fn next_push(&mut self, from: u64) -> Push {
        self.next += 1;
        Push {
            id: self.next,
            service: if self.next.is_multiple_of(2) {
                "alpha"
            } else {
                "beta"
            },
            host: ["h1", "h2", "h3"][self.next % 3],
            from,
            tag: self.tag,
        }
    }

    /// Sends the next push to `url` and notes what became of it.
    pub fn push(&mut self, client: &reqwest::blocking::Client, url: &str) -> Outcome {
        let p = self.next_push(now_secs() - 30);
        let o = p.send(client, url);
        self.note(p, &o);
        o
    }

    pub fn note(&mut self, p: Push, o: &Outcome) {
        match o {
            Outcome::Status(200) => self.acked.push(p),
            Outcome::Status(429 | 503) | Outcome::Refused => self.refused.push(p),
            _ => self.uncertain.push(p),
        }
    }

    /// What `url` (a querier) answers for each push, against what its client
    /// was told: (lost, doubled, refused yet present, uncertain counted wrong).
    pub fn tally(&self, url: &str) -> Tally {
        self.tally_of(&merged(url), |_| true)
    }

    /// [`Ledger::tally`] of the pushes `pick` picks, against a merged answer.
    pub fn tally_of(&self, m: &BTreeMap<String, i64>, pick: impl Fn(&Push) -> bool) -> Tally {
        let seen = |p: &Push| m.get(&format!("main;work;p{}", p.id)).copied().unwrap_or(0);
        let mut t = Tally::default();
        for p in self.acked.iter().filter(|p| pick(p)) {
            match seen(p) {
                0 => t.lost.push(p.id),
                v if v == p.value() => {}
                _ => t.doubled.push(p.id),
            }
        }
        for p in self.refused.iter().filter(|p| pick(p)) {
            if seen(p) != 0 {
                t.refused_present.push(p.id);
            }
        }
        for p in self.uncertain.iter().filter(|p| pick(p)) {
            let v = seen(p);
            if v != 0 && v != p.value() {
                t.doubled.push(p.id);
            }
        }
        t
    }
}

/// How a ledger's pushes were counted.
#[derive(Default, Debug, PartialEq, Eq)]
pub struct Tally {
    pub lost: Vec<usize>,
    pub doubled: Vec<usize>,
    pub refused_present: Vec<usize>,
}

impl Tally {
    pub fn clean(&self) -> bool {
        *self == Tally::default()
    }
}
