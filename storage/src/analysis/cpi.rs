//! Cycles per instruction per (service, platform), from the `cycles` and
//! `instructions` hardware-event profiles (GWP, "Optimizing for application
//! affinities").
//!
//! Both profiles hold event counts (or sample counts at a common period: the ratio
//! is the same), summed per service and platform over one window, so CPI is
//! Σ cycles / Σ instructions. The totals are reported beside each figure: a CPI
//! from a handful of samples is a guess, one from thousands is a measurement.

use std::collections::BTreeMap;

use crate::exec::grouping::GroupAcc;

/// The profile type of sampled CPU cycles by default: what a pprof upload whose
/// sample type is `cycles`/`count` is stored as.
pub const CYCLES_TYPE: &str = "cycles:cycles:count:cycles:count";
/// The profile type of sampled retired instructions (hardware event) by default.
pub const INSTRUCTIONS_TYPE: &str = "instructions:instructions:count:instructions:count";

/// The CPI of one (service, platform) cell, or of one function in it.
#[derive(Clone, Debug, PartialEq)]
pub struct CpiCell {
    /// The group's key values: service, platform, then the clock label's value
    /// (and the function when grouped by function).
    pub key: Vec<String>,
    /// Σ cycles in the window.
    pub cycles: i64,
    /// Σ instructions in the window.
    pub instructions: i64,
    /// cycles / instructions; `None` without instructions.
    pub cpi: Option<f64>,
    /// CPI / clock rate in GHz: nanoseconds per instruction, comparable across
    /// platforms of different clocks; `None` when the clock value is absent or not
    /// a positive number.
    pub ns_per_instruction: Option<f64>,
}

/// Joins group-by rows of the two profiles (same keys, in the same order) into CPI
/// cells sorted by key. `clock_at` is the index of the key holding the clock rate
/// in GHz, if any.
pub fn cpi_cells(
    cycles: &GroupAcc,
    instructions: &GroupAcc,
    clock_at: Option<usize>,
) -> Vec<CpiCell> {
    let mut both: BTreeMap<&[String], (i64, i64)> = BTreeMap::new();
    for (k, &v) in &cycles.rows {
        both.entry(k.as_slice()).or_default().0 += v;
    }
    for (k, &v) in &instructions.rows {
        both.entry(k.as_slice()).or_default().1 += v;
    }
    both.into_iter()
        .map(|(key, (c, i))| {
            let cpi = (i > 0).then(|| c as f64 / i as f64);
            let ghz = clock_at
                .and_then(|at| key.get(at))
                .and_then(|g| g.parse::<f64>().ok())
                .filter(|g| g.is_finite() && *g > 0.0);
            CpiCell {
                key: key.to_vec(),
                cycles: c,
                instructions: i,
                cpi,
                ns_per_instruction: cpi.zip(ghz).map(|(cpi, g)| cpi / g),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::test_rows as acc;

    #[test]
    fn cpi_with_clock_normalisation() {
        let cycles = acc(&[(&["db", "p1", "2"], 300), (&["db", "p2", "x"], 50)]);
        let instr = acc(&[(&["db", "p1", "2"], 100), (&["web", "p1", "2"], 10)]);
        let cells = cpi_cells(&cycles, &instr, Some(2));
        let cell = |key: [&str; 3], cycles, instructions, cpi, ns_per_instruction| CpiCell {
            key: key.iter().map(|s| s.to_string()).collect(),
            cycles,
            instructions,
            cpi,
            ns_per_instruction,
        };
        assert_eq!(
            cells,
            vec![
                cell(["db", "p1", "2"], 300, 100, Some(3.0), Some(1.5)),
                cell(["db", "p2", "x"], 50, 0, None, None),
                cell(["web", "p1", "2"], 0, 10, Some(0.0), Some(0.0)),
            ]
        );
    }
}
