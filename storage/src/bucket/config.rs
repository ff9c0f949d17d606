//! Where the bucket is: parsed once from flags and the standard `AWS_*`
//! environment variables, then resolved into a client by [`Bucket::open`].
//!
//! [`Bucket::open`]: super::Bucket::open

/// A bucket and prefix, with how to reach it.
#[derive(Clone, PartialEq, Eq)]
pub struct BucketConfig {
    /// `s3://bucket/prefix` or `memory://` (tests).
    pub url: String,
    /// S3 endpoint for non-AWS stores (MinIO, Ceph RGW, moto).
    pub endpoint: Option<String>,
    /// S3 region.
    pub region: Option<String>,
    /// Access key id.
    pub access_key_id: Option<String>,
    /// Secret access key.
    pub secret_access_key: Option<String>,
    /// Plain HTTP to the endpoint (a local store).
    pub allow_http: bool,
    /// How long one request may wait for the store's answer (and for each
    /// further read of a body) before it counts as failed.
    pub request_timeout: std::time::Duration,
    /// How often a failed or timed-out request is tried again before the
    /// store counts as unreachable.
    pub retries: usize,
}

/// The default request timeout: a hung store is noticed within about
/// `(retries + 1) ×` this, a few seconds.
pub const DEFAULT_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

impl std::fmt::Debug for BucketConfig {
    // Credentials stay out of logs and panics.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BucketConfig")
            .field("url", &self.url)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("allow_http", &self.allow_http)
            .field("request_timeout", &self.request_timeout)
            .field("retries", &self.retries)
            .finish_non_exhaustive()
    }
}

impl BucketConfig {
    /// `url` with endpoint, region and keys from `AWS_ENDPOINT_URL`, `AWS_REGION`
    /// (or `AWS_DEFAULT_REGION`), `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`;
    /// plain HTTP is allowed when the endpoint is `http://`.
    pub fn new(url: &str) -> BucketConfig {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let endpoint = env("AWS_ENDPOINT_URL");
        BucketConfig {
            url: url.to_string(),
            allow_http: endpoint
                .as_deref()
                .is_some_and(|e| e.starts_with("http://")),
            endpoint,
            region: env("AWS_REGION").or_else(|| env("AWS_DEFAULT_REGION")),
            access_key_id: env("AWS_ACCESS_KEY_ID"),
            secret_access_key: env("AWS_SECRET_ACCESS_KEY"),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            retries: 1,
        }
    }

    /// The bucket and prefix of an `s3://bucket/prefix` URL.
    pub(super) fn s3_parts(&self) -> Option<(&str, &str)> {
        let rest = self.url.strip_prefix("s3://")?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        (!bucket.is_empty()).then_some((bucket, prefix.trim_matches('/')))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_urls_split_into_bucket_and_prefix() {
        let c = |u: &str| BucketConfig {
            url: u.into(),
            ..BucketConfig::new("memory://")
        };
        assert_eq!(c("s3://b/p/q/").s3_parts(), Some(("b", "p/q")));
        assert_eq!(c("s3://b").s3_parts(), Some(("b", "")));
        assert_eq!(c("s3:///p").s3_parts(), None);
        assert_eq!(c("gs://b").s3_parts(), None);
    }

    #[test]
    fn debug_output_has_no_secrets() {
        let mut c = BucketConfig::new("s3://b/p");
        c.secret_access_key = Some("hunter2".into());
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
