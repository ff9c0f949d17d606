//! GWP group-by: pick k keys out of the label and stack dimensions, filter on the
//! others, sum, and return rows (see `crate::exec::grouping` for the per-source
//! algorithms).

use std::sync::Arc;

use regex::Regex;
use roaring::RoaringBitmap;

use super::cache::{CacheKey, Cached, GroupSpec, Selection};
use super::limits::Deadline;
use super::Querier;
use crate::error::{QueryError, Result};
use crate::exec::grouping::{
    frames_can_group, group_into, FrameGroups, GroupAcc, GroupByQuery, SourceGroups,
};
use crate::exec::{shares, steps, Scratch, Share, Source, TimeRange};
use crate::fnindex::scan_functions;
use crate::model::TenantId;
use crate::selector::Selector;
use crate::store::Scope;

impl Querier {
    /// GWP group-by: rows keyed by `q.keys`, through the result cache. A query
    /// without its own `max_groups` gets the querier's limit.
    pub fn group_by(
        &self,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
        q: &GroupByQuery,
    ) -> Result<GroupAcc, QueryError> {
        let deadline = self.deadline();
        let mut q = q.clone();
        if q.max_groups == 0 {
            q.max_groups = self.limits.max_groups;
        }
        let query = Selection::new(tenant, sel, range);
        let spec = GroupSpec::of(&q);
        self.cached_split(
            |version| CacheKey::GroupBy {
                query: query.clone(),
                spec: spec.clone(),
                version,
            },
            |scope| self.group_scope(deadline, &query, sel, &q, &spec, scope),
            |g| Cached::Groups(g.clone()),
            |c| match c {
                Cached::Groups(g) => Some(g.clone()),
                _ => None,
            },
            |a, b| a.merge(&b),
        )
        .map_err(QueryError::from)
    }

    fn group_scope(
        &self,
        deadline: Deadline,
        query: &Selection,
        sel: &Selector,
        q: &GroupByQuery,
        spec: &GroupSpec,
        scope: Scope,
    ) -> Result<GroupAcc> {
        let (tenant, range) = (&query.tenant, query.range);
        let resolve = |src: &dyn Source, re: &Regex| -> Result<RoaringBitmap> {
            Ok(match src.segment_id() {
                Some(id) => self.cache.fn_index(id, src.dict()?).matching(re),
                None => scan_functions(src.dict()?, re),
            })
        };
        if frames_can_group(q) {
            let frames = self.store.frames().for_query();
            let generation = frames.read().generation();
            let label_keys: Vec<String> = q.label_keys().into_iter().map(str::to_owned).collect();
            // A function filter's per-segment parts are kept from its second run on.
            let filtered = q.include.is_some() || q.exclude.is_some();
            let keep_parts = !filtered || self.cache.asked_before(&(tenant, &query.selector, spec));
            let accs = self.store.scan_scoped(
                tenant,
                range,
                scope,
                || (FrameGroups::default(), Scratch::take()),
                |(acc, s), src| {
                    deadline.check()?;
                    let shares = shares(src, range);
                    // Built on the first piece that has to be computed.
                    let mut plan: Option<Option<SourceGroups>> = None;
                    // `share`: the piece is a cached share, so a filtered query
                    // reads its unfiltered sums (cached too) instead of its rows.
                    let mut add = |sub: TimeRange,
                                   share: Option<Share>,
                                   acc: &mut FrameGroups,
                                   s: &mut Scratch| {
                        let (lo, hi) = steps(src, sub);
                        if lo >= hi {
                            return Ok(());
                        }
                        let plan = match &mut plan {
                            Some(p) => p,
                            None => plan.insert(SourceGroups::new(src, sel, q, &resolve)?),
                        };
                        let Some(p) = plan else {
                            return Ok(());
                        };
                        let Some(share) = share.filter(|_| p.filtered()) else {
                            return p.add(src, (lo, hi), &frames, acc, s);
                        };
                        let key = CacheKey::SegmentGroupNodes {
                            share,
                            tenant: tenant.clone(),
                            selector: query.selector.clone(),
                            label_keys: label_keys.clone(),
                        };
                        let c = self.cache.partial(key, || {
                            Ok(Cached::GroupNodes(Arc::new(p.nodes(src, (lo, hi), s)?)))
                        })?;
                        match &*c {
                            Cached::GroupNodes(nodes) => p.add_nodes(src, nodes, &frames, acc, s),
                            _ => p.add(src, (lo, hi), &frames, acc, s),
                        }
                    };
                    for &sub in &shares.fresh {
                        add(sub, None, acc, s)?;
                    }
                    for &(share, sub) in &shares.cached {
                        if !keep_parts {
                            add(sub, Some(share), acc, s)?;
                            continue;
                        }
                        let key = CacheKey::SegmentGroupBy {
                            share,
                            generation,
                            tenant: tenant.clone(),
                            selector: query.selector.clone(),
                            spec: spec.clone(),
                        };
                        let c = self.cache.partial(key, || {
                            let mut own = FrameGroups::default();
                            add(sub, Some(share), &mut own, s)?;
                            own.shrink_for_cache();
                            Ok(Cached::GroupPart(Arc::new(own)))
                        })?;
                        if let Cached::GroupPart(g) = &*c {
                            acc.add(g);
                        }
                    }
                    Ok(())
                },
            )?;
            let accs: Vec<FrameGroups> = accs
                .into_iter()
                .map(|(a, s)| {
                    s.give_back();
                    a
                })
                .collect();
            return FrameGroups::into_rows(accs, &frames.read(), q);
        }
        let symbols = self.store.frames().symbolizer();
        let accs = self.store.scan_scoped(
            tenant,
            range,
            scope,
            || (GroupAcc::default(), Scratch::take()),
            |(acc, s), src| {
                deadline.check()?;
                group_into(src, sel, range, q, &resolve, acc, s, symbols.as_deref())
            },
        )?;
        let mut out = GroupAcc::default();
        for (a, s) in accs {
            s.give_back();
            out.merge(&a);
            if q.max_groups > 0 && out.rows.len() > q.max_groups {
                return Err(QueryError::too_many_groups(q.max_groups).into());
            }
        }
        Ok(out)
    }
}
