//! Every route the server serves and what the gate does for it. A route missing
//! here is still authenticated (the fallback class), but `tests/tenancy_routes.rs`
//! fails until it is listed, and the isolation tests fail until they call it.

/// What the gate does for a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteClass {
    /// Open to everyone, even with authentication on: probes and metrics.
    Public,
    /// Cluster-wide administration: the admin token, never a tenant's credential.
    Admin,
    /// Writes of the request's tenant (rate, series and label limits apply in the
    /// ingest pipeline).
    Ingest,
    /// Reads of the request's tenant: concurrency, range and node limits apply.
    Query,
    /// Anything else of the request's tenant (alerts, the UI).
    Tenant,
}

/// Route patterns as registered with axum (`{name}` one segment, `{*rest}` the rest).
pub const ROUTES: &[(&str, RouteClass)] = &[
    ("/ready", RouteClass::Public),
    ("/healthy", RouteClass::Public),
    ("/metrics", RouteClass::Public),
    ("/ingest", RouteClass::Ingest),
    ("/pyroscope/ingest", RouteClass::Ingest),
    ("/push.v1.PusherService/Push", RouteClass::Ingest),
    ("/v1development/profiles", RouteClass::Ingest),
    (
        "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export",
        RouteClass::Ingest,
    ),
    ("/querier.v1.QuerierService/{method}", RouteClass::Query),
    ("/pyroscope/render", RouteClass::Query),
    ("/pyroscope/render-diff", RouteClass::Query),
    ("/pyroscope/label-values", RouteClass::Query),
    ("/pyroscope/labels", RouteClass::Query),
    ("/version.v1.Version/{method}", RouteClass::Tenant),
    (
        "/capabilities.v1.FeatureFlagsService/{method}",
        RouteClass::Tenant,
    ),
    ("/settings.v1.SettingsService/{method}", RouteClass::Tenant),
    ("/api/v1/profile_types", RouteClass::Query),
    ("/api/v1/labels", RouteClass::Query),
    ("/api/v1/label_values", RouteClass::Query),
    ("/api/v1/series", RouteClass::Query),
    ("/api/v1/merge", RouteClass::Query),
    ("/api/v1/query", RouteClass::Query),
    ("/api/v1/timeseries", RouteClass::Query),
    ("/api/v1/diff", RouteClass::Query),
    ("/api/v1/flamegraph", RouteClass::Query),
    ("/api/v1/functions", RouteClass::Query),
    ("/api/v1/sandwich", RouteClass::Query),
    ("/api/v1/pprof", RouteClass::Query),
    ("/api/v1/render.svg", RouteClass::Query),
    ("/api/v1/diff.svg", RouteClass::Query),
    ("/api/v1/fleet/hottest", RouteClass::Query),
    ("/api/v1/fleet/cpi", RouteClass::Query),
    ("/api/v1/fleet/assignment", RouteClass::Query),
    ("/api/v1/fleet/variance", RouteClass::Query),
    ("/api/v1/admin/segments", RouteClass::Admin),
    ("/internal/v1/partial", RouteClass::Admin),
    ("/api/v1/admin/compact", RouteClass::Admin),
    ("/api/v1/admin/retention", RouteClass::Admin),
    ("/control.v1.ControlService/GetPlan", RouteClass::Ingest),
    ("/api/v1/agents", RouteClass::Tenant),
    ("/api/v1/admin/agents/policy", RouteClass::Admin),
    ("/api/v1/admin/agents/overrides", RouteClass::Admin),
    ("/api/v1/admin/agents/overrides/{id}", RouteClass::Admin),
    ("/api/v1/admin/fleet/variance/boost", RouteClass::Admin),
    ("/api/v1/alerts", RouteClass::Tenant),
    ("/api/v1/alerts/rules", RouteClass::Tenant),
    ("/api/v1/alerts/rules/{name}", RouteClass::Tenant),
    ("/", RouteClass::Tenant),
    ("/ui", RouteClass::Tenant),
    ("/ui/", RouteClass::Tenant),
    ("/ui/assets/{*path}", RouteClass::Tenant),
    ("/ui/{*view}", RouteClass::Tenant),
];

fn matches(pattern: &str, path: &str) -> bool {
    let mut want = pattern.split('/');
    let mut got = path.split('/');
    loop {
        match (want.next(), got.next()) {
            (None, None) => return true,
            (Some(w), Some(g)) if w.starts_with("{*") => return !g.is_empty(),
            (Some(w), Some(g)) if w.starts_with('{') => {
                if g.is_empty() {
                    return false;
                }
            }
            (Some(w), Some(g)) if w == g => {}
            _ => return false,
        }
    }
}

/// The class of a request path; an unknown path is a tenant's (authenticated).
pub fn class_of(path: &str) -> RouteClass {
    ROUTES
        .iter()
        .find(|(p, _)| matches(p, path))
        .map_or(RouteClass::Tenant, |(_, c)| *c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_match_their_patterns() {
        assert_eq!(class_of("/ready"), RouteClass::Public);
        assert_eq!(class_of("/ready/x"), RouteClass::Tenant);
        assert_eq!(
            class_of("/querier.v1.QuerierService/SelectMergeStacktraces"),
            RouteClass::Query
        );
        assert_eq!(class_of("/querier.v1.QuerierService/"), RouteClass::Tenant);
        assert_eq!(class_of("/api/v1/admin/retention"), RouteClass::Admin);
        assert_eq!(class_of("/api/v1/admin/other"), RouteClass::Tenant);
        assert_eq!(class_of("/ui/assets/app.js"), RouteClass::Tenant);
        assert_eq!(class_of("/metrics"), RouteClass::Public);
        assert_eq!(class_of("/nowhere"), RouteClass::Tenant);
        assert!(matches("/ui/{*view}", "/ui/explore/x"));
        assert!(!matches("/ui/{*view}", "/ui"));
    }
}
