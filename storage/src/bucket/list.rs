//! Listing the bucket: every object under a prefix, the ones after a key (a
//! log's new entries), and the "directories" right under a prefix (tenants).

use futures_util::TryStreamExt;

use super::client::{Bucket, ObjectInfo};
use super::error::BucketError;

impl Bucket {
    /// Every object whose key starts with `prefix` (a directory-like prefix
    /// ending in `/`), recursively.
    pub fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>, BucketError> {
        self.list_after(prefix, None)
    }

    /// The objects under `prefix` whose keys sort after `after` (all of them
    /// for `None`), in key order.
    pub fn list_after(
        &self,
        prefix: &str,
        after: Option<&str>,
    ) -> Result<Vec<ObjectInfo>, BucketError> {
        self.count_list();
        let (store, path) = (self.store(), self.path(prefix.trim_end_matches('/')));
        let offset = after.map(|a| self.path(a));
        let metas = self
            .run(async move {
                match offset {
                    Some(o) => store.list_with_offset(Some(&path), &o).try_collect().await,
                    None => store.list(Some(&path)).try_collect::<Vec<_>>().await,
                }
            })
            .map_err(|e| self.failed("LIST", prefix, e))?;
        let mut out: Vec<ObjectInfo> = metas
            .into_iter()
            .map(|m| ObjectInfo {
                key: self.key_of(m.location.as_ref()),
                size: m.size,
                etag: m.e_tag,
                last_modified_ms: m.last_modified.timestamp_millis(),
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    /// The names of the "directories" right under `prefix` (one LIST with a
    /// delimiter, not every object below).
    pub fn list_dirs(&self, prefix: &str) -> Result<Vec<String>, BucketError> {
        self.count_list();
        let (store, path) = (self.store(), self.path(prefix.trim_end_matches('/')));
        let listed = self
            .run(async move { store.list_with_delimiter(Some(&path)).await })
            .map_err(|e| self.failed("LIST", prefix, e))?;
        let mut out: Vec<String> = listed
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .collect();
        out.sort();
        Ok(out)
    }
}
