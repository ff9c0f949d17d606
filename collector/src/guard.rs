//! The CPU overhead guard: the agent's own CPU use from `/proc/self/stat`.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use thiserror::Error;

#[derive(Debug, Error)]
pub enum GuardError {
    #[error("cannot read /proc/self/stat: {0}")]
    Read(#[from] std::io::Error),
    #[error("unexpected /proc/self/stat format")]
    Format,
}

/// Clock ticks per second for `utime`/`stime`.
fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// Parses utime + stime (in ticks) from a `/proc/PID/stat` line.
pub fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    // The comm field may contain spaces and parentheses: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); utime is field 14, stime field 15.
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// CPU seconds this process has used so far.
pub fn self_cpu_seconds() -> Result<f64, GuardError> {
    let s = std::fs::read_to_string("/proc/self/stat")?;
    let t = parse_cpu_ticks(&s).ok_or(GuardError::Format)?;
    Ok(t as f64 / ticks_per_sec())
}

/// Sliding-window CPU meter and budget check.
pub struct CpuGuard {
    max_percent: f64,
    window: Duration,
    samples: VecDeque<(Instant, f64)>,
    start: (Instant, f64),
}

impl CpuGuard {
    /// `max_percent` of one CPU, averaged over `window`.
    pub fn new(max_percent: f64, window: Duration) -> Result<Self, GuardError> {
        let now = (Instant::now(), self_cpu_seconds()?);
        Ok(Self {
            max_percent,
            window,
            samples: VecDeque::from([now]),
            start: now,
        })
    }

    /// Records a reading; returns `Some(percent)` if the budget is exceeded over a
    /// full window.
    pub fn check(&mut self) -> Result<Option<f64>, GuardError> {
        let now = (Instant::now(), self_cpu_seconds()?);
        self.samples.push_back(now);
        while self.samples.len() > 2
            && self
                .samples
                .get(1)
                .is_some_and(|s| now.0.duration_since(s.0) >= self.window)
        {
            self.samples.pop_front();
        }
        let Some(&first) = self.samples.front() else {
            return Ok(None);
        };
        let dt = now.0.duration_since(first.0);
        if dt < self.window {
            return Ok(None);
        }
        let pct = 100.0 * (now.1 - first.1) / dt.as_secs_f64();
        Ok((pct > self.max_percent).then_some(pct))
    }

    /// Average CPU % since the guard was created.
    pub fn average_percent(&self) -> f64 {
        let Ok(cpu) = self_cpu_seconds() else {
            return 0.0;
        };
        let dt = self.start.0.elapsed().as_secs_f64();
        if dt <= 0.0 {
            0.0
        } else {
            100.0 * (cpu - self.start.1) / dt
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_comm() {
        let line = "1234 (a b) c)) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0 100 1000 10";
        assert_eq!(parse_cpu_ticks(line), Some(300));
        assert!(self_cpu_seconds().is_ok());
    }

    #[test]
    fn guard_trips_on_busy_loop() {
        let mut g = CpuGuard::new(1.0, Duration::from_millis(200)).expect("guard");
        let t = Instant::now();
        let mut x = 0u64;
        let mut tripped = None;
        while t.elapsed() < Duration::from_secs(3) && tripped.is_none() {
            for i in 0..1_000_000u64 {
                x = std::hint::black_box(x.wrapping_add(i));
            }
            tripped = g.check().expect("reads");
        }
        assert!(tripped.is_some_and(|p| p > 1.0), "{tripped:?}");
    }
}
