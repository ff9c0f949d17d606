//! The request's tenant and its limits, carried with the request's task so the
//! shared query rules (`http::request::window_ms`, `max_nodes`) apply the tenant's
//! limits without each endpoint passing them along: an endpoint cannot forget them.
//!
//! The gate sets the scope around every request but the public ones;
//! `http::request::blocking` carries it onto the blocking pool. Outside a request
//! (alert evaluation, tests of the rules) there is no scope and no tenant limit.

use std::sync::Arc;

use profiledb_storage::TenantId;

use super::admission::Admission;
use crate::error::ApiResult;

pub struct RequestScope {
    pub tenant: TenantId,
    pub admission: Arc<Admission>,
}

tokio::task_local! {
    static SCOPE: Arc<RequestScope>;
}

/// Runs `f` with `scope` as the current request's.
pub async fn within<F: std::future::Future>(scope: RequestScope, f: F) -> F::Output {
    SCOPE.scope(Arc::new(scope), f).await
}

fn current() -> Option<Arc<RequestScope>> {
    SCOPE.try_with(Arc::clone).ok()
}

/// `f`, made to run with the current scope wherever it runs (a blocking thread).
pub fn carried<T>(f: impl FnOnce() -> T) -> impl FnOnce() -> T {
    let scope = current();
    move || match scope {
        Some(s) => SCOPE.sync_scope(s, f),
        None => f(),
    }
}

/// Refuses a query window longer than the tenant may ask for.
pub fn check_window(range_ms: i64) -> ApiResult<()> {
    match current() {
        Some(s) => Ok(s.admission.check_range(&s.tenant, range_ms)?),
        None => Ok(()),
    }
}

/// The node budget of a query that asked for `asked` (`None`: the default; 0: no
/// budget), within the tenant's limit.
pub fn max_nodes(asked: Option<usize>, default: usize) -> ApiResult<usize> {
    match current() {
        Some(s) => Ok(s.admission.max_nodes(&s.tenant, asked, default)?),
        None => Ok(asked.unwrap_or(default)),
    }
}
