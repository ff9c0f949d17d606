//! Who a request is: HTTP basic auth (tenant id as user, token as password, as the
//! Grafana datasource and the Pyroscope SDKs send it) or `Authorization: Bearer
//! <token>` (the token names its tenant).

use axum::http::{header, HeaderMap};
use base64::Engine;
use profiledb_storage::TenantId;

use super::authfile::{digest, Credentials};

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error(
        "authentication required: send HTTP basic auth (tenant id and token) \
         or `Authorization: Bearer <token>`"
    )]
    Missing,
    #[error("malformed Authorization header: {0}")]
    Malformed(&'static str),
    #[error("unknown tenant or wrong token")]
    Rejected,
}

/// The `Authorization` header's credential.
enum Presented {
    Basic { user: String, password: String },
    Bearer(String),
}

fn presented(headers: &HeaderMap) -> Result<Presented, AuthError> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or(AuthError::Missing)?
        .to_str()
        .map_err(|_| AuthError::Malformed("not text"))?
        .trim();
    let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        if rest.is_empty() {
            return Err(AuthError::Malformed("empty bearer token"));
        }
        return Ok(Presented::Bearer(rest.to_string()));
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .map_err(|_| AuthError::Malformed("basic credentials are not base64"))?;
        let text = String::from_utf8(raw)
            .map_err(|_| AuthError::Malformed("basic credentials are not UTF-8"))?;
        let (user, password) = text
            .split_once(':')
            .ok_or(AuthError::Malformed("basic credentials have no ':'"))?;
        return Ok(Presented::Basic {
            user: user.to_string(),
            password: password.to_string(),
        });
    }
    Err(AuthError::Malformed("the scheme must be Basic or Bearer"))
}

impl Credentials {
    /// The tenant the request's credential belongs to.
    ///
    /// Tokens are compared by their SHA-256 digest through a hash lookup: timing can
    /// tell an attacker about digests of tokens they chose, not about a stored one.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<TenantId, AuthError> {
        match presented(headers)? {
            Presented::Bearer(token) => self
                .owner
                .get(&digest(&token))
                .cloned()
                .ok_or(AuthError::Rejected),
            Presented::Basic { user, password } => {
                let tenant = TenantId::new(user.trim()).map_err(|_| AuthError::Rejected)?;
                let known = self
                    .tenants
                    .get(&tenant)
                    .is_some_and(|d| d.contains(&digest(&password)));
                if known {
                    Ok(tenant)
                } else {
                    Err(AuthError::Rejected)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::super::authfile::{hash_token, AuthFile};
    use super::super::limits::Limits;
    use super::*;

    fn creds() -> Credentials {
        let mut f = AuthFile::default();
        f.add_token("a", hash_token("token-a-0123456789").unwrap())
            .unwrap();
        f.add_token("b", hash_token("token-b-0123456789").unwrap())
            .unwrap();
        f.compile(&Limits::default()).unwrap()
    }

    fn with(auth: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(auth).unwrap());
        h
    }

    fn basic(user: &str, password: &str) -> HeaderMap {
        let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        with(&format!("Basic {b64}"))
    }

    #[test]
    fn basic_and_bearer_name_the_tenant() {
        let c = creds();
        let a = TenantId::new("a").unwrap();
        assert_eq!(
            c.authenticate(&basic("a", "token-a-0123456789")),
            Ok(a.clone())
        );
        assert_eq!(c.authenticate(&with("Bearer token-a-0123456789")), Ok(a));
        assert_eq!(
            c.authenticate(&with("bearer token-b-0123456789")),
            Ok(TenantId::new("b").unwrap())
        );
    }

    #[test]
    fn wrong_or_missing_credentials_are_refused() {
        let c = creds();
        // b's token does not open a.
        assert_eq!(
            c.authenticate(&basic("a", "token-b-0123456789")),
            Err(AuthError::Rejected)
        );
        assert_eq!(
            c.authenticate(&basic("nobody", "x")),
            Err(AuthError::Rejected)
        );
        assert_eq!(
            c.authenticate(&with("Bearer nope")),
            Err(AuthError::Rejected)
        );
        assert_eq!(c.authenticate(&HeaderMap::new()), Err(AuthError::Missing));
        assert!(matches!(
            c.authenticate(&with("Basic !!!")),
            Err(AuthError::Malformed(_))
        ));
        assert!(matches!(
            c.authenticate(&with("Digest x")),
            Err(AuthError::Malformed(_))
        ));
    }
}
