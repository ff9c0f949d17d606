//! The platform-assignment linear program of GWP ("Optimizing for application
//! affinities"): place each application's load (instructions) on platforms so
//! that the cycles spent, Σ CPI_ij × Load_ij, are minimal, subject to every
//! application's total load and every platform's capacity (cycles).
//!
//! Solved with `microlp`, a maintained pure-Rust simplex (no system solver to
//! install, builds from crates.io alone). An application may only be placed where
//! its CPI was measured: an unmeasured platform has no cost to plan with.

use std::collections::BTreeSet;

use microlp::{ComparisonOp, OptimizationDirection, Problem};

use super::cpi::CpiCell;

/// Why an assignment could not be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum AssignError {
    /// The platforms' capacity cannot hold every application's load at the
    /// measured CPIs.
    #[error("the platforms' capacity cannot hold every application's load at the measured CPIs")]
    Infeasible,
    /// An input is not a finite non-negative number (or a CPI is not positive).
    #[error("invalid assignment input: {0}")]
    InvalidInput(String),
    /// The solver failed for another reason.
    #[error("the LP solver failed: {0}")]
    Solver(String),
}

/// The inputs: applications with their load, platforms with their capacity, and
/// the measured CPI of application `i` on platform `j` (`None`: never measured).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AssignProblem {
    /// Instructions per application over the window.
    pub loads: Vec<f64>,
    /// Cycles per platform over the window.
    pub capacities: Vec<f64>,
    /// `cpi[i][j]`.
    pub cpi: Vec<Vec<Option<f64>>>,
}

/// The optimal placement.
#[derive(Clone, Debug, PartialEq)]
pub struct Assignment {
    /// `load[i][j]`: instructions of application `i` on platform `j`.
    pub load: Vec<Vec<f64>>,
    /// Σ CPI_ij × load_ij: the cycles the placement spends.
    pub cycles: f64,
}

/// An assignment problem read off measured (service, platform) CPI cells, with
/// the names of its rows and columns and today's placement.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Placement {
    /// Application (service) names, the rows.
    pub apps: Vec<String>,
    /// Platform names, the columns.
    pub platforms: Vec<String>,
    /// Loads (instructions per application), capacities (cycles per platform
    /// today) and the CPIs measured.
    pub problem: AssignProblem,
    /// Today's instructions of application `i` on platform `j`.
    pub today: Vec<Vec<f64>>,
}

impl Placement {
    /// From cells keyed `[service, platform]`. A cell without a positive CPI (no
    /// instructions, or no cycles) gives that application no cost on that
    /// platform, so it is not placed there.
    pub fn from_cells(cells: &[CpiCell]) -> Placement {
        let names = |at: usize| -> Vec<String> {
            let set: BTreeSet<&str> = cells
                .iter()
                .filter_map(|c| c.key.get(at).map(String::as_str))
                .collect();
            set.into_iter().map(String::from).collect()
        };
        let (apps, platforms) = (names(0), names(1));
        let index = |list: &[String], name: &str| list.binary_search_by(|n| n.as_str().cmp(name));
        let (n, m) = (apps.len(), platforms.len());
        let mut p = Placement {
            problem: AssignProblem {
                loads: vec![0.0; n],
                capacities: vec![0.0; m],
                cpi: vec![vec![None; m]; n],
            },
            today: vec![vec![0.0; m]; n],
            apps: Vec::new(),
            platforms: Vec::new(),
        };
        for c in cells {
            let [app, platform] = c.key.as_slice() else {
                continue;
            };
            let (Ok(i), Ok(j)) = (index(&apps, app), index(&platforms, platform)) else {
                continue;
            };
            p.problem.capacities[j] += c.cycles as f64;
            if let Some(cpi) = c.cpi.filter(|&x| x > 0.0) {
                p.problem.cpi[i][j] = Some(cpi);
                p.problem.loads[i] += c.instructions as f64;
                p.today[i][j] = c.instructions as f64;
            }
        }
        p.apps = apps;
        p.platforms = platforms;
        p
    }
}

/// Solves the assignment LP.
pub fn assign(p: &AssignProblem) -> Result<Assignment, AssignError> {
    let bad = |what: &str, v: f64| AssignError::InvalidInput(format!("{what} {v}"));
    if let Some(&v) = p.loads.iter().find(|v| !(v.is_finite() && **v >= 0.0)) {
        return Err(bad("load", v));
    }
    if let Some(&v) = p.capacities.iter().find(|v| !(v.is_finite() && **v >= 0.0)) {
        return Err(bad("capacity", v));
    }
    if p.cpi.len() != p.loads.len() || p.cpi.iter().any(|r| r.len() != p.capacities.len()) {
        return Err(AssignError::InvalidInput(
            "the CPI matrix must have one row per application and one column per platform".into(),
        ));
    }
    if p.loads.is_empty() {
        // Nothing measured: nothing to place (the solver wants variables).
        return Ok(Assignment {
            load: Vec::new(),
            cycles: 0.0,
        });
    }
    let mut lp = Problem::new(OptimizationDirection::Minimize);
    // vars[i][j]: the load of i on j, where CPI_ij was measured.
    let mut vars = Vec::with_capacity(p.loads.len());
    for row in &p.cpi {
        let mut r = Vec::with_capacity(row.len());
        for &c in row {
            match c {
                Some(c) if c.is_finite() && c > 0.0 => {
                    r.push(Some((lp.add_var(c, (0.0, f64::INFINITY)), c)))
                }
                Some(c) => return Err(bad("CPI", c)),
                None => r.push(None),
            }
        }
        vars.push(r);
    }
    for (i, &load) in p.loads.iter().enumerate() {
        let terms: Vec<_> = vars[i].iter().flatten().map(|&(v, _)| (v, 1.0)).collect();
        if terms.is_empty() {
            if load > 0.0 {
                return Err(AssignError::Infeasible);
            }
            continue;
        }
        lp.add_constraint(terms, ComparisonOp::Eq, load);
    }
    for (j, &cap) in p.capacities.iter().enumerate() {
        let terms: Vec<_> = vars.iter().filter_map(|r| r[j]).collect();
        if !terms.is_empty() {
            lp.add_constraint(terms, ComparisonOp::Le, cap);
        }
    }
    let outcome = lp.solve().map_err(|e| match e {
        microlp::Error::Infeasible => AssignError::Infeasible,
        other => AssignError::Solver(other.to_string()),
    })?;
    let sol = outcome
        .solution()
        .ok_or_else(|| AssignError::Solver("interrupted before a solution".into()))?;
    let load = vars
        .iter()
        .map(|r| {
            r.iter()
                .map(|v| v.map_or(0.0, |(v, _)| sol.var_value(v)))
                .collect()
        })
        .collect();
    Ok(Assignment {
        load,
        cycles: sol.objective(),
    })
}

/// Σ CPI_ij × load_ij of a placement (today's, or one to compare).
pub fn cycles_of(cpi: &[Vec<Option<f64>>], load: &[Vec<f64>]) -> f64 {
    cpi.iter()
        .zip(load)
        .flat_map(|(c, l)| c.iter().zip(l))
        .map(|(c, l)| c.unwrap_or(0.0) * l)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    /// GWP's example: NumCrunch has CPI 1 on both platforms, MemBench 1 on
    /// platform 1 and 2 on platform 2, 200 instructions each. Spread evenly they
    /// cost 200 + 300 = 500 cycles, which is each platform's capacity today
    /// (200 and 300); MemBench all on platform 1 and NumCrunch all on platform 2
    /// cost 200 + 200 = 400.
    #[test]
    fn gwp_numcrunch_membench() {
        let cpi = vec![vec![Some(1.0), Some(1.0)], vec![Some(1.0), Some(2.0)]];
        let today = vec![vec![100.0, 100.0], vec![100.0, 100.0]];
        assert!(close(cycles_of(&cpi, &today), 500.0));
        let p = AssignProblem {
            loads: vec![200.0, 200.0],
            capacities: vec![200.0, 300.0],
            cpi,
        };
        let a = assign(&p).unwrap();
        assert!(close(a.cycles, 400.0), "{}", a.cycles);
        let want = [[0.0, 200.0], [200.0, 0.0]];
        for (row, want) in a.load.iter().zip(want) {
            for (&got, want) in row.iter().zip(want) {
                assert!(close(got, want), "{:?}", a.load);
            }
        }
        assert!(close(cycles_of(&p.cpi, &a.load), 400.0));
    }

    #[test]
    fn unmeasured_cells_and_too_little_capacity() {
        // MemBench was never seen on platform 1: it must stay on platform 2.
        let p = AssignProblem {
            loads: vec![200.0, 200.0],
            capacities: vec![200.0, 400.0],
            cpi: vec![vec![Some(1.0), Some(1.0)], vec![None, Some(2.0)]],
        };
        let a = assign(&p).unwrap();
        assert!(close(a.cycles, 600.0), "{}", a.cycles);
        assert!(close(a.load[1][1], 200.0) && close(a.load[0][0], 200.0));
        let tight = AssignProblem {
            capacities: vec![100.0, 100.0],
            ..p.clone()
        };
        assert_eq!(assign(&tight), Err(AssignError::Infeasible));
        let negative = AssignProblem {
            loads: vec![-1.0, 0.0],
            ..p
        };
        assert!(matches!(
            assign(&negative),
            Err(AssignError::InvalidInput(_))
        ));
    }
}
