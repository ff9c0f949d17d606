//! Leases: a compactor's claim on a piece of work, held through conditional writes.
//!
//! A lease is an object holding its owner and expiry. It is taken by creating it
//! (create-if-absent), or, once expired, by replacing it on condition that it is
//! still the expired version; renewal and release are conditional on the ETag the
//! holder last wrote. A holder that paused past its expiry finds its renewal
//! refused and stops. Expiry compares wall clocks of different machines, so the
//! TTL must exceed the clock skew between compactors (NTP keeps it to
//! milliseconds; TTLs are minutes).

use std::time::Duration;

use bytes::Bytes;
use object_store::{PutMode, PutOptions, UpdateVersion};
use serde::{Deserialize, Serialize};

use super::client::Bucket;
use super::error::BucketError;
use super::layout::lease_key;

/// A lease held by this process.
#[derive(Debug)]
pub struct Lease {
    /// What it claims.
    pub name: String,
    /// Who holds it.
    pub owner: String,
    /// When it lapses unless renewed (ms).
    pub expires_ms: i64,
    etag: String,
}

#[derive(Serialize, Deserialize)]
struct LeaseDoc {
    owner: String,
    expires_ms: i64,
}

enum Put {
    Written(String),
    Lost,
}

impl Bucket {
    fn put_lease(&self, name: &str, doc: &LeaseDoc, mode: PutMode) -> Result<Put, BucketError> {
        let key = lease_key(name);
        let body = serde_json::to_vec(doc).map_err(|e| BucketError::Corrupt {
            key: key.clone(),
            reason: e.to_string(),
        })?;
        let opts = PutOptions {
            mode,
            ..PutOptions::default()
        };
        match self.put_opts(&key, Bytes::from(body), opts) {
            Ok(r) => Ok(Put::Written(r.e_tag.unwrap_or_default())),
            Err(object_store::Error::Precondition { .. })
            | Err(object_store::Error::AlreadyExists { .. }) => {
                self.conflict();
                Ok(Put::Lost)
            }
            Err(e) => Err(BucketError::from_store("PUT", &key, e)),
        }
    }

    /// Takes lease `name` for `owner` until `now_ms + ttl`: when nobody holds it,
    /// or its holder let it expire. `Ok(None)`: someone else holds it.
    pub fn try_lease(
        &self,
        name: &str,
        owner: &str,
        ttl: Duration,
        now_ms: i64,
    ) -> Result<Option<Lease>, BucketError> {
        let doc = LeaseDoc {
            owner: owner.to_string(),
            expires_ms: now_ms + ttl.as_millis() as i64,
        };
        let mode = match self.get_with_etag(&lease_key(name), None) {
            Err(BucketError::NotFound { .. }) => PutMode::Create,
            Err(e) => return Err(e),
            Ok(None) => return Ok(None),
            Ok(Some((bytes, etag))) => {
                let held: Option<LeaseDoc> = serde_json::from_slice(&bytes).ok();
                if held.is_some_and(|h| h.expires_ms > now_ms) {
                    return Ok(None);
                }
                // Expired (or unreadable): replace exactly the version read.
                PutMode::Update(UpdateVersion {
                    e_tag: etag,
                    version: None,
                })
            }
        };
        Ok(match self.put_lease(name, &doc, mode)? {
            Put::Written(etag) => Some(Lease {
                name: name.to_string(),
                owner: doc.owner,
                expires_ms: doc.expires_ms,
                etag,
            }),
            Put::Lost => None,
        })
    }

    /// Extends `lease` to `now_ms + ttl`. `Ok(false)`: it was lost (taken over
    /// after it expired) and the holder must stop.
    pub fn renew_lease(
        &self,
        lease: &mut Lease,
        ttl: Duration,
        now_ms: i64,
    ) -> Result<bool, BucketError> {
        let doc = LeaseDoc {
            owner: lease.owner.clone(),
            expires_ms: now_ms + ttl.as_millis() as i64,
        };
        let mode = PutMode::Update(UpdateVersion {
            e_tag: Some(lease.etag.clone()),
            version: None,
        });
        match self.put_lease(&lease.name, &doc, mode)? {
            Put::Written(etag) => {
                lease.etag = etag;
                lease.expires_ms = doc.expires_ms;
                Ok(true)
            }
            Put::Lost => Ok(false),
        }
    }

    /// Gives `lease` up at once (expired now), unless it was already lost.
    pub fn release_lease(&self, lease: Lease) -> Result<(), BucketError> {
        let doc = LeaseDoc {
            owner: lease.owner.clone(),
            expires_ms: 0,
        };
        let mode = PutMode::Update(UpdateVersion {
            e_tag: Some(lease.etag),
            version: None,
        });
        self.put_lease(&lease.name, &doc, mode).map(|_| ())
    }
}
