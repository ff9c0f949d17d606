//! A token bucket: `rate` tokens per second refill a bucket of `burst` tokens, and
//! a request takes as many tokens as it weighs, or is refused whole.

use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

/// Why a take failed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Refusal {
    /// Enough tokens will be there after this long.
    Wait(Duration),
    /// The request weighs more than the bucket holds: it can never pass.
    TooLarge,
}

impl TokenBucket {
    /// A full bucket. `burst` 0 means one second of `rate`.
    pub fn new(rate: u64, burst: u64, now: Instant) -> Self {
        let burst = if burst == 0 { rate } else { burst };
        TokenBucket {
            rate: rate as f64,
            burst: burst as f64,
            tokens: burst as f64,
            last: now,
        }
    }

    /// Whether this bucket was built for `rate` and `burst` (limits may change on
    /// reload; an unchanged bucket keeps its level).
    pub fn configured_as(&self, rate: u64, burst: u64) -> bool {
        let burst = if burst == 0 { rate } else { burst };
        self.rate == rate as f64 && self.burst == burst as f64
    }

    /// Takes `n` tokens, or takes none and says why.
    pub fn take(&mut self, n: u64, now: Instant) -> Result<(), Refusal> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.last = now.max(self.last);
        let n = n as f64;
        if n > self.burst {
            return Err(Refusal::TooLarge);
        }
        if n <= self.tokens {
            self.tokens -= n;
            return Ok(());
        }
        Err(Refusal::Wait(Duration::from_secs_f64(
            (n - self.tokens) / self.rate,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_then_refills_at_the_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(10, 30, t0);
        assert_eq!(b.take(30, t0), Ok(()));
        assert_eq!(
            b.take(5, t0),
            Err(Refusal::Wait(Duration::from_millis(500)))
        );
        // Half a second later 5 tokens are back.
        let t1 = t0 + Duration::from_millis(500);
        assert_eq!(b.take(5, t1), Ok(()));
        assert_eq!(
            b.take(1, t1),
            Err(Refusal::Wait(Duration::from_millis(100)))
        );
        // An idle bucket fills up to the burst, never beyond.
        let t2 = t1 + Duration::from_secs(60);
        assert_eq!(b.take(30, t2), Ok(()));
        assert!(b.take(1, t2).is_err());
    }

    #[test]
    fn a_request_over_the_burst_never_passes() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(10, 0, t0);
        assert!(b.configured_as(10, 10));
        assert_eq!(b.take(11, t0), Err(Refusal::TooLarge));
        // The refused take took nothing.
        assert_eq!(b.take(10, t0), Ok(()));
    }
}
