//! Line-resolution queries: a profile's stacks of `(function, file, line)` frames
//! (for pprof exports with lines) and one function's source lines.

use crate::error::{QueryError, Result};
use crate::exec::lines::{lines_into, FunctionLines, LineProfile};
use crate::exec::scratch::Scratch;
use crate::exec::TimeRange;
use crate::model::TenantId;
use crate::selector::Selector;
use crate::store::Scope;

use super::Querier;

impl Querier {
    /// The selected samples as stacks of source frames, frames kept as addresses
    /// symbolized with the store's symbolizer. At most `max_tree_nodes` distinct
    /// stacks (the merge's memory budget).
    pub fn line_profile(
        &self,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
    ) -> Result<LineProfile, QueryError> {
        let deadline = self.deadline();
        let max = self.limits.max_tree_nodes;
        let symbols = self.store.frames().symbolizer();
        let parts = self.store.scan_scoped(
            tenant,
            range,
            Scope::All,
            || (LineProfile::default(), Scratch::take()),
            |(acc, s), src| {
                deadline.check()?;
                lines_into(src, sel, range, symbols.as_deref(), max, acc, s)
            },
        )?;
        let mut out = LineProfile::default();
        for (p, s) in parts {
            s.give_back();
            out.merge(p, max)?;
        }
        Ok(out)
    }

    /// `function`'s source lines with their self and total values.
    pub fn function_lines(
        &self,
        tenant: &TenantId,
        sel: &Selector,
        range: TimeRange,
        function: &str,
    ) -> Result<FunctionLines, QueryError> {
        Ok(self
            .line_profile(tenant, sel, range)?
            .function_lines(function))
    }
}
