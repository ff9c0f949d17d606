//! Fleet analyses (Google-Wide Profiling, Ren et al. 2010): questions answered over
//! the whole fleet's profiles rather than one service's flame graph.
//!
//! The algorithms here are pure functions over group-by rows, so each can be tested
//! on hand-built inputs and checked against a brute-force form; the querier
//! (`crate::querier::fleet`) feeds them from the store.
//!
//! - `hottest`: functions and binaries ranked by their share of every service's
//!   samples, with the number of services each appears in, and their cost.
//! - `noise`: GWP's sampling-noise model M(N) ≈ C/√N, fitted per profile type by
//!   splitting the hosts, and the verdict on a diff's distance.
//! - `cpi`: cycles per instruction per (service, platform), with the totals behind it.
//! - `assign`: the linear program placing applications on the platforms where they
//!   run best.
//! - `variance`: Pythia's variance hunting — the CoV of unit costs per group of
//!   units that should behave alike, and the functions that explain the spread.
//! - `correlated`: the labels (zone, kernel…) whose values go with a group's
//!   costlier or cheaper units.

pub mod assign;
pub mod correlated;
pub mod cpi;
pub mod hottest;
pub mod noise;
pub mod variance;

/// Mean and population standard deviation of unit costs (`(0, 0)` for none): the
/// spread both the CoV and the label effects are measured against.
pub(crate) fn mean_and_sigma<'a>(costs: impl Iterator<Item = &'a i64> + Clone) -> (f64, f64) {
    let n = costs.clone().count();
    if n == 0 {
        return (0.0, 0.0);
    }
    let mean = costs.clone().map(|&c| c as f64).sum::<f64>() / n as f64;
    let var = costs.map(|&c| (c as f64 - mean).powi(2)).sum::<f64>() / n as f64;
    (mean, var.sqrt())
}

/// Group-by rows from `(key, value)` pairs, for the analyses' unit tests.
#[cfg(test)]
pub(crate) fn test_rows(rows: &[(&[&str], i64)]) -> crate::exec::grouping::GroupAcc {
    crate::exec::grouping::GroupAcc {
        rows: rows
            .iter()
            .map(|(k, v)| (k.iter().map(|s| s.to_string()).collect(), *v))
            .collect(),
        total: rows.iter().map(|r| r.1).sum(),
    }
}
