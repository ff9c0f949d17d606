//! Fleet analyses fed from the store: the group-by rows each needs, handed to the
//! algorithms in `crate::analysis`.

use super::Querier;
use crate::analysis::correlated::{correlated_labels, LabelEffect, MAX_LABELS};
use crate::analysis::cpi::{cpi_cells, CpiCell};
use crate::analysis::hottest::{rank_shared, HotDimension, Hottest};
use crate::analysis::noise::{fit, per_host, NoiseModel};
use crate::analysis::variance::{explain, group_variance, Explainer, GroupVariance};
use crate::error::{QueryError, Result};
use crate::exec::grouping::{GroupByQuery, GroupKey};
use crate::exec::TimeRange;
use crate::model::TenantId;
use crate::selector::Selector;

/// Seed of the host splits of a noise fit: fixed, so the same data always fits the
/// same C (and cached answers agree with fresh ones).
const NOISE_SEED: u64 = 0x6777_7000_2010;

impl Querier {
    /// Functions or binaries ranked by their share of every selected sample, with
    /// the number of values of `service_label` each appears under; `limit` 0 keeps
    /// all. Runs through the group-by, so it shares its cache and group limit.
    pub fn fleet_hottest(
        &self,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
        dimension: HotDimension,
        service_label: &str,
        limit: usize,
    ) -> Result<Hottest, QueryError> {
        let q = GroupByQuery {
            keys: vec![
                GroupKey::Label(service_label.to_string()),
                dimension.group_key(),
            ],
            ..GroupByQuery::default()
        };
        let rows = self.group_by(tenant, sel, range, &q)?;
        Ok(rank_shared(&rows, limit))
    }

    /// Fits the sampling-noise constant C of the selection by splitting the values
    /// of `host_label` into random halves `splits` times, measuring the top-`k`
    /// Manhattan distance. `None` when fewer than two hosts have data.
    pub fn noise_model(
        &self,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
        host_label: &str,
        k: usize,
        splits: usize,
    ) -> Result<Option<NoiseModel>, QueryError> {
        let q = GroupByQuery {
            keys: vec![GroupKey::Label(host_label.to_string()), GroupKey::Function],
            ..GroupByQuery::default()
        };
        let rows = self.group_by(tenant, sel, range, &q)?;
        Ok(fit(&per_host(&rows), k, splits, NOISE_SEED))
    }
}

impl Querier {
    /// Cycles per instruction per group of `keys`, joining the `cycles` and
    /// `instructions` selections over `range`; `clock_at` is the key holding the
    /// clock rate in GHz, if one does.
    pub fn fleet_cpi(
        &self,
        tenant: &TenantId,
        (cycles, instructions): (&Selector, &Selector),
        range: TimeRange,
        keys: &[GroupKey],
        clock_at: Option<usize>,
    ) -> Result<Vec<CpiCell>, QueryError> {
        let q = GroupByQuery {
            keys: keys.to_vec(),
            ..GroupByQuery::default()
        };
        let c = self.group_by(tenant, cycles, range, &q)?;
        let i = self.group_by(tenant, instructions, range, &q)?;
        Ok(cpi_cells(&c, &i, clock_at))
    }
}

impl Querier {
    /// Pythia: per group of `group_labels` values, the CoV of the cost of each
    /// `unit_label` value over `range`, highest first.
    pub fn fleet_variance(
        &self,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
        group_labels: &[String],
        unit_label: &str,
    ) -> Result<Vec<GroupVariance>, QueryError> {
        let mut keys: Vec<GroupKey> = group_labels.iter().cloned().map(GroupKey::Label).collect();
        keys.push(GroupKey::Label(unit_label.to_string()));
        let q = GroupByQuery {
            keys,
            ..GroupByQuery::default()
        };
        Ok(group_variance(&self.group_by(tenant, sel, range, &q)?))
    }

    /// The `k` functions explaining the spread of one group (its `group_labels`
    /// values in `group`): the selection is narrowed to the group, so only its
    /// units' functions are grouped.
    #[allow(clippy::too_many_arguments)]
    pub fn fleet_variance_explain(
        &self,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
        group_labels: &[String],
        group: &[String],
        unit_label: &str,
        k: usize,
    ) -> Result<Vec<Explainer>, QueryError> {
        let narrowed = sel.narrowed_to(group_labels, group);
        let q = GroupByQuery {
            keys: vec![GroupKey::Label(unit_label.to_string()), GroupKey::Function],
            ..GroupByQuery::default()
        };
        Ok(explain(
            &self.group_by(tenant, &narrowed, range, &q)?,
            &[],
            k,
        ))
    }

    /// The `k` labels whose values go most with the cost of one group's units (its
    /// `group_labels` values in `group`): every label of the group's series but the
    /// grouping labels, the unit label and reserved `__…__` labels, at most
    /// `MAX_LABELS` of them.
    #[allow(clippy::too_many_arguments)]
    pub fn fleet_variance_labels(
        &self,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
        group_labels: &[String],
        group: &[String],
        unit_label: &str,
        k: usize,
    ) -> Result<Vec<LabelEffect>, QueryError> {
        let narrowed = sel.narrowed_to(group_labels, group);
        let labels: Vec<String> = self
            .label_names(tenant, &narrowed, range)?
            .into_iter()
            .filter(|l| !l.starts_with("__") && l != unit_label && !group_labels.contains(l))
            .take(MAX_LABELS)
            .collect();
        if labels.is_empty() || k == 0 {
            return Ok(Vec::new());
        }
        let mut keys = vec![GroupKey::Label(unit_label.to_string())];
        keys.extend(labels.iter().cloned().map(GroupKey::Label));
        let q = GroupByQuery {
            keys,
            ..GroupByQuery::default()
        };
        let rows = self.group_by(tenant, &narrowed, range, &q)?;
        Ok(correlated_labels(&rows, &labels, k))
    }
}
