//! CPU time of this process's threads, by role.
//!
//! The suites run the server and its load generator in one process on the same
//! two cores, so "values per second" alone hides how much of the machine the
//! generator took. Each thread's user + system time from `/proc/self/task` is
//! sampled before and after a phase; the server's threads carry the names it gives
//! them (`profiledb-*`, tokio's `tokio-rt-worker`); the rest of the
//! process's time (`/proc/self/stat`, which keeps the time of threads that have
//! ended, such as the push clients) is the suite's own. The machine's own count
//! (`/proc/stat`) is taken beside them, so a phase says whether the cores were
//! saturated, idle, or taken by the hypervisor (steal), which the threads' sum
//! cannot tell apart from a slow server.

use std::collections::BTreeMap;

use serde_json::{json, Value};

/// CPU seconds of the calling thread so far (user + system), read without
/// `/proc`: what it spent, whichever core it ran on and whatever else the machine
/// ran meanwhile.
pub fn this_thread_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// CPU seconds per thread id, with the thread's name.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    threads: BTreeMap<u32, (String, f64)>,
    /// The whole process, ended threads included.
    process: f64,
    /// The machine's CPU seconds over all cores.
    machine: Machine,
}

/// Seconds of all cores by state, from the first line of `/proc/stat`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Machine {
    /// user, nice, system, irq, softirq.
    busy: f64,
    /// idle and iowait.
    idle: f64,
    /// Taken by the hypervisor for other guests.
    steal: f64,
}

impl Machine {
    /// Parses the aggregate `cpu` line; `None` for any other line.
    fn parse(line: &str, hz: f64) -> Option<Machine> {
        let mut f = line.split_whitespace();
        if f.next()? != "cpu" {
            return None;
        }
        let v: Vec<f64> = f.map(|x| x.parse::<f64>().unwrap_or(0.0) / hz).collect();
        let at = |i: usize| v.get(i).copied().unwrap_or(0.0);
        Some(Machine {
            busy: at(0) + at(1) + at(2) + at(5) + at(6),
            idle: at(3) + at(4),
            steal: at(7),
        })
    }

    fn now(hz: f64) -> Machine {
        std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| s.lines().next().and_then(|l| Machine::parse(l, hz)))
            .unwrap_or_default()
    }

    fn minus(&self, before: &Machine) -> Machine {
        Machine {
            busy: (self.busy - before.busy).max(0.0),
            idle: (self.idle - before.idle).max(0.0),
            steal: (self.steal - before.steal).max(0.0),
        }
    }

    /// Share of the cores' time that was busy.
    fn busy_share(&self) -> f64 {
        let all = self.busy + self.idle + self.steal;
        if all > 0.0 {
            self.busy / all
        } else {
            0.0
        }
    }
}

/// The kernel's clock tick (`USER_HZ`), which `/proc/*/stat` times are counted in.
pub(crate) fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions; it returns -1 for an unknown name.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// `(name, utime + stime ticks)` from one `/proc/.../stat` line. The name is in
/// parentheses and may itself hold spaces or parentheses, so it ends at the last `)`.
fn parse_stat(line: &str) -> Option<(String, u64)> {
    let name = line.get(line.find('(')? + 1..line.rfind(')')?)?.to_string();
    Some((name, profiledb_agent::guard::parse_cpu_ticks(line)?))
}

impl Snapshot {
    /// The threads alive now; empty where `/proc` cannot say.
    pub fn now() -> Snapshot {
        let hz = ticks_per_second();
        let mut threads = BTreeMap::new();
        let machine = Machine::now(hz);
        let process = crate::agent_suite::cpu_seconds(std::process::id()).unwrap_or(0.0);
        let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
            return Snapshot::default();
        };
        for e in dir.flatten() {
            let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(line) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            if let Some((name, ticks)) = parse_stat(&line) {
                threads.insert(tid, (name, ticks as f64 / hz));
            }
        }
        Snapshot {
            threads,
            process,
            machine,
        }
    }

    /// CPU seconds each role spent since `before`, threads started since included.
    /// A thread that ended in between is only in the process total, so it counts
    /// as the client's: right for the push clients, wrong for a server thread that
    /// ended (the server's long-lived writer, decoders, flusher and runtime do not).
    pub fn since(&self, before: &Snapshot) -> Usage {
        let mut by_role: BTreeMap<&'static str, f64> = BTreeMap::new();
        for (tid, (name, secs)) in &self.threads {
            let start = before.threads.get(tid).map_or(0.0, |t| t.1);
            let r = role(name);
            if r != CLIENT {
                *by_role.entry(r).or_default() += (secs - start).max(0.0);
            }
        }
        let server: f64 = by_role.values().sum();
        by_role.insert(CLIENT, (self.process - before.process - server).max(0.0));
        Usage {
            by_role,
            machine: self.machine.minus(&before.machine),
        }
    }
}

/// Which part of the suite a thread belongs to, by its name.
fn role(name: &str) -> &'static str {
    match name {
        "profiledb-write" => "server writer (WAL, head)",
        "profiledb-inges" => "server decoders",
        "profiledb-flush" => "server flusher",
        "tokio-rt-worker" => "server HTTP",
        n if n.starts_with("profiledb") => "server other",
        _ => CLIENT,
    }
}

/// Everything in the process that is not the server.
const CLIENT: &str = "push clients and bench";

/// CPU seconds by role over one phase.
#[derive(Clone, Debug, Default)]
pub struct Usage {
    by_role: BTreeMap<&'static str, f64>,
    /// The whole machine over the same phase.
    machine: Machine,
}

impl Usage {
    /// CPU seconds of the server's threads.
    pub fn server_secs(&self) -> f64 {
        self.by_role
            .iter()
            .filter(|(r, _)| **r != CLIENT)
            .map(|(_, s)| s)
            .sum()
    }

    /// CPU seconds of everything else in the process (the load generator).
    pub fn client_secs(&self) -> f64 {
        self.by_role.get(CLIENT).copied().unwrap_or(0.0)
    }

    /// One line: the server's CPU per value, then each role's seconds.
    pub fn describe(&self, values: u64) -> String {
        let per = |s: f64| s * 1e6 / values.max(1) as f64;
        let roles: Vec<String> = self
            .by_role
            .iter()
            .map(|(r, s)| format!("{r} {s:.1} s"))
            .collect();
        let m = &self.machine;
        format!(
            "server CPU {:.1} s = {:.2} µs/value, load generator {:.1} s = {:.2} µs/value ({}); \
             machine: {:.0} % busy (busy {:.1} s, idle {:.1} s, steal {:.1} s)",
            self.server_secs(),
            per(self.server_secs()),
            self.client_secs(),
            per(self.client_secs()),
            roles.join(", "),
            100.0 * m.busy_share(),
            m.busy,
            m.idle,
            m.steal
        )
    }

    pub fn to_json(&self, values: u64) -> Value {
        let per = |s: f64| s * 1e6 / values.max(1) as f64;
        json!({
            "server_cpu_seconds": self.server_secs(),
            "server_cpu_us_per_value": per(self.server_secs()),
            "client_cpu_seconds": self.client_secs(),
            "client_cpu_us_per_value": per(self.client_secs()),
            "by_role_seconds": self.by_role,
            "machine_seconds": {
                "busy": self.machine.busy,
                "idle": self.machine.idle,
                "steal": self.machine.steal,
                "busy_share": self.machine.busy_share(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_names() {
        let line = "42 (tokio-rt-worker) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0";
        assert_eq!(parse_stat(line), Some(("tokio-rt-worker".to_string(), 300)));
        let odd = "7 (a) b (c) R 1 2 3 4 5 6 7 8 9 10 11 12 0 0 20 0";
        assert_eq!(parse_stat(odd), Some(("a) b (c".to_string(), 23)));
        assert_eq!(parse_stat("7 (x) R 1 2"), None);
    }

    #[test]
    fn machine_line_by_state() {
        let line = "cpu  1528 0 252 112 23 0 29 33 0 0";
        let m = Machine::parse(line, 100.0).expect("the aggregate line");
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(
            close(m.busy, 18.09) && close(m.idle, 1.35) && close(m.steal, 0.33),
            "{m:?}"
        );
        assert!((m.busy_share() - 1809.0 / 1977.0).abs() < 1e-12);
        assert_eq!(Machine::parse("cpu0 1 2 3 4", 100.0), None);
        assert_eq!(Machine::default().busy_share(), 0.0);
    }

    #[test]
    fn roles_split_server_from_clients() {
        let before = Snapshot {
            threads: BTreeMap::from([(1, ("profiledb-write".into(), 1.0))]),
            process: 1.0,
            machine: Machine {
                busy: 10.0,
                idle: 5.0,
                steal: 0.0,
            },
        };
        let after = Snapshot {
            threads: BTreeMap::from([
                (1, ("profiledb-write".into(), 4.0)),
                (2, ("tokio-rt-worker".into(), 2.0)),
                (3, ("bench".into(), 5.0)),
            ]),
            // Thread 3 plus 2 s of threads that have ended.
            process: 14.0,
            machine: Machine {
                busy: 25.0,
                idle: 9.0,
                steal: 1.0,
            },
        };
        let u = after.since(&before);
        assert_eq!(u.server_secs(), 5.0);
        assert_eq!(u.client_secs(), 8.0);
        let line = u.describe(1_000_000);
        assert!(
            line.starts_with("server CPU 5.0 s = 5.00 µs/value"),
            "{line}"
        );
        assert!(
            line.ends_with("machine: 75 % busy (busy 15.0 s, idle 4.0 s, steal 1.0 s)"),
            "{line}"
        );
    }

    #[test]
    fn own_threads_are_seen() {
        let s = Snapshot::now();
        if std::path::Path::new("/proc/self/task").exists() {
            assert!(!s.threads.is_empty());
            let t = std::time::Instant::now();
            while t.elapsed() < std::time::Duration::from_millis(200) {
                std::hint::black_box(0u64);
            }
            // The spin above is this (unnamed, so client) thread's time.
            assert!(Snapshot::now().since(&s).client_secs() > 0.0);
        }
    }
}
