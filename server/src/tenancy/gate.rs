//! The one place a request's tenant is decided, as a middleware around every route:
//! public routes pass; admin routes need the admin token once authentication is on;
//! every other route gets its tenant from the credential (or, with authentication
//! off, from `X-Scope-OrgID`), and that tenant is what `http::tenant_of` returns to
//! the handler. Query routes also take one of the tenant's query slots here.

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use profiledb_storage::TenantId;

use super::auth::AuthError;
use super::routes::{class_of, RouteClass};
use super::scope::{within, RequestScope};
use crate::error::ApiError;
use crate::http::{tenant_of, AppRef, TENANT_HEADER};

/// What clients are told to send, once per scheme we take.
const CHALLENGES: [&str; 2] = [
    "Basic realm=\"profiledb\", charset=\"UTF-8\"",
    "Bearer realm=\"profiledb\"",
];

fn unauthenticated(e: &AuthError) -> Response {
    let mut resp =
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthenticated", e.to_string()).into_response();
    for c in CHALLENGES {
        resp.headers_mut()
            .append(header::WWW_AUTHENTICATE, HeaderValue::from_static(c));
    }
    resp
}

fn forbidden(message: String) -> Response {
    ApiError::new(StatusCode::FORBIDDEN, "permission_denied", message).into_response()
}

/// Whether the request carries the admin token (`--admin-token`) as a bearer token.
pub fn has_admin_token(state: &AppRef, headers: &HeaderMap) -> bool {
    let Some(want) = state.options.admin_token.as_deref() else {
        return false;
    };
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|got| constant_time_eq(got.trim().as_bytes(), want.as_bytes()))
}

/// Equality that does not stop at the first differing byte.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What the gate decided.
enum Decision {
    /// Go on as this tenant.
    Tenant(TenantId),
    /// Go on without a tenant (admin routes check their own token).
    Admin,
    Refuse(Response),
}

fn decide(state: &AppRef, class: RouteClass, headers: &HeaderMap) -> Decision {
    let Some(creds) = state.tenancy.credentials() else {
        // Authentication off: the header names the tenant, as before.
        return match class {
            RouteClass::Admin => Decision::Admin,
            _ => match tenant_of(headers) {
                Ok(t) => Decision::Tenant(t),
                Err(e) => Decision::Refuse(e.into_response()),
            },
        };
    };
    if class == RouteClass::Admin && has_admin_token(state, headers) {
        return Decision::Admin;
    }
    let tenant = match creds.authenticate(headers) {
        Ok(t) => t,
        Err(e) => return Decision::Refuse(unauthenticated(&e)),
    };
    if class == RouteClass::Admin {
        return Decision::Refuse(forbidden(format!(
            "tenant {tenant} may not use admin endpoints: they act on every tenant and need \
             `Authorization: Bearer <admin token>` (--admin-token)"
        )));
    }
    if let Some(v) = headers.get(TENANT_HEADER) {
        let named = v.to_str().map(str::trim).unwrap_or("");
        if named != tenant.as_str() {
            return Decision::Refuse(forbidden(format!(
                "{TENANT_HEADER} {named:?} does not match the credential's tenant {tenant:?}",
                tenant = tenant.as_str()
            )));
        }
    }
    Decision::Tenant(tenant)
}

/// The middleware.
pub async fn gate(State(state): State<AppRef>, mut req: Request, next: Next) -> Response {
    let class = class_of(req.uri().path());
    if class == RouteClass::Public {
        return next.run(req).await;
    }
    let tenant = match decide(&state, class, req.headers()) {
        Decision::Tenant(t) => t,
        Decision::Admin => return next.run(req).await,
        Decision::Refuse(resp) => return resp,
    };
    // Handlers read the tenant through `tenant_of`: with authentication on, this is
    // where the credential's tenant replaces whatever the client sent.
    if state.tenancy.credentials().is_some() {
        match HeaderValue::from_str(tenant.as_str()) {
            Ok(v) => {
                req.headers_mut().insert(TENANT_HEADER, v);
            }
            Err(_) => return ApiError::internal("tenant id is not a header value").into_response(),
        }
    }
    let admission = state.tenancy.admission().clone();
    let _slot = if class == RouteClass::Query {
        match admission.begin_query(&tenant) {
            Ok(p) => Some(p),
            Err(e) => return ApiError::from(e).into_response(),
        }
    } else {
        None
    };
    let served = crate::http::access::ServedTenant(tenant.clone());
    let mut resp = within(RequestScope { tenant, admission }, next.run(req)).await;
    resp.extensions_mut().insert(served);
    resp
}
