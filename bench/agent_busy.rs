//! The CPU load of the `agent` bench suite, compiled by the suite with `rustc` (with
//! and without `-C force-frame-pointers=yes`). Not part of the bench crate's build.
//! Same program as `collector/examples/busy.rs`.
//!
//! `busy [SECONDS]` spins for SECONDS (default 10): about two thirds of the time in
//! `busy_alpha`, one third in `busy_beta`, both called through a few named levels so
//! that stack depth can be measured.

use std::hint::black_box;
use std::time::{Duration, Instant};

#[inline(never)]
fn busy_alpha(n: u64) -> u64 {
    let mut x = black_box(n);
    for i in 0..n {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(i) ^ (x >> 29);
    }
    black_box(x)
}

#[inline(never)]
fn busy_beta(n: u64) -> u64 {
    let mut x = black_box(n) | 1;
    for i in 0..n {
        x = x
            .rotate_left(7)
            .wrapping_add(i.wrapping_mul(0x9e3779b97f4a7c15))
            ^ (x >> 11);
    }
    black_box(x)
}

#[inline(never)]
fn level3(n: u64) -> u64 {
    busy_alpha(2 * n) ^ busy_beta(n)
}

#[inline(never)]
fn level2(n: u64) -> u64 {
    black_box(level3(n)).wrapping_add(1)
}

#[inline(never)]
fn level1(n: u64) -> u64 {
    black_box(level2(n)).wrapping_add(1)
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10.0);
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut acc = 0u64;
    while Instant::now() < end {
        acc ^= level1(200_000);
    }
    println!("{acc}");
}
