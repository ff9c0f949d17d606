//! The cluster's gauges and counters in `/metrics`: the bucket client's on every
//! role, each role's standing with the store, and each role's own counters.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use profiledb_storage::{Health, Unreachable};

use super::Running;
use crate::metrics::{family, labelled};

/// (name, kind, help, value) of one metric family.
type Family<'a> = (&'a str, &'a str, &'a str, u64);

fn families(out: &mut String, list: &[Family<'_>]) {
    for (name, kind, help, v) in list {
        family(out, name, kind, help, *v);
    }
}

fn get(a: &AtomicU64) -> u64 {
    a.load(Relaxed)
}

impl Running {
    /// Cluster gauges and counters for `/metrics`.
    pub fn render_metrics(&self, out: &mut String) {
        let b = self.bucket.stats();
        families(
            out,
            &[
                (
                    "profiledb_bucket_get_requests_total",
                    "counter",
                    "GET requests to the object store (whole and ranged).",
                    b.gets + b.range_gets,
                ),
                (
                    "profiledb_bucket_put_requests_total",
                    "counter",
                    "PUT requests to the object store.",
                    b.puts,
                ),
                (
                    "profiledb_bucket_list_requests_total",
                    "counter",
                    "LIST requests to the object store.",
                    b.lists,
                ),
                (
                    "profiledb_bucket_delete_requests_total",
                    "counter",
                    "DELETE requests to the object store.",
                    b.deletes,
                ),
                (
                    "profiledb_bucket_read_bytes_total",
                    "counter",
                    "Bytes read from the object store.",
                    b.bytes_read,
                ),
                (
                    "profiledb_bucket_written_bytes_total",
                    "counter",
                    "Bytes written to the object store.",
                    b.bytes_written,
                ),
                (
                    "profiledb_bucket_index_written_bytes_total",
                    "counter",
                    "Of the bytes written, the index's: log entries and checkpoints.",
                    b.index_bytes_written,
                ),
                (
                    "profiledb_bucket_index_read_bytes_total",
                    "counter",
                    "Of the bytes read, the index's: log entries and checkpoints.",
                    b.index_bytes_read,
                ),
                (
                    "profiledb_bucket_cas_conflicts_total",
                    "counter",
                    "Conditional writes that lost a race and were retried.",
                    b.cas_conflicts,
                ),
                (
                    "profiledb_bucket_errors_total",
                    "counter",
                    "Object store requests that failed.",
                    b.errors,
                ),
            ],
        );
        labelled(
            out,
            (
                "profiledb_bucket_unreachable_total",
                "counter",
                "Object store requests that found the store unreachable after the retries, by how: connect (refused, no route), timed_out (no answer within --s3-timeout-ms), broken (reset or closed mid-request), error_status (5xx).",
            ),
            "kind",
            Unreachable::ALL.map(|k| (k.label(), b.unreachable[k.index()])),
        );
        self.render_health(out);
        if let Some(u) = &self.uploader {
            let s = u.stats();
            families(
                out,
                &[
                    (
                        "profiledb_upload_segments_total",
                        "counter",
                        "Segments a writer uploaded.",
                        get(&s.segments),
                    ),
                    (
                        "profiledb_upload_bytes_total",
                        "counter",
                        "Bytes a writer uploaded.",
                        get(&s.bytes),
                    ),
                    (
                        "profiledb_upload_passes_total",
                        "counter",
                        "Upload passes the writer's loop ran, failed or not.",
                        get(&s.passes),
                    ),
                    (
                        "profiledb_upload_errors_total",
                        "counter",
                        "Upload passes that failed (retried).",
                        get(&s.errors),
                    ),
                    (
                        "profiledb_upload_pending_segments",
                        "gauge",
                        "Local segments waiting for upload.",
                        get(&s.pending),
                    ),
                    (
                        "profiledb_upload_watermark_lsn",
                        "gauge",
                        "Highest WAL record durable in the bucket.",
                        get(&s.watermark),
                    ),
                ],
            );
        }
        if let Some(m) = &self.mirror {
            let s = m.stats();
            families(
                out,
                &[
                    (
                        "profiledb_mirror_syncs_total",
                        "counter",
                        "Index sync passes of a querier.",
                        get(&s.syncs),
                    ),
                    (
                        "profiledb_mirror_errors_total",
                        "counter",
                        "Index sync passes that failed.",
                        get(&s.errors),
                    ),
                    (
                        "profiledb_mirror_downloads_total",
                        "counter",
                        "Segment objects a querier downloaded.",
                        get(&s.downloads),
                    ),
                    (
                        "profiledb_mirror_download_bytes_total",
                        "counter",
                        "Bytes of segment objects downloaded.",
                        get(&s.download_bytes),
                    ),
                    (
                        "profiledb_mirror_summaries_total",
                        "counter",
                        "Segment summaries (labels and totals) a querier read with ranged GETs instead of downloading the object.",
                        get(&s.summaries),
                    ),
                    (
                        "profiledb_mirror_section_reads_total",
                        "counter",
                        "Ranged GETs of segment summary sections.",
                        get(&s.section_reads),
                    ),
                    (
                        "profiledb_mirror_section_bytes_total",
                        "counter",
                        "Bytes of segment summary sections read.",
                        get(&s.section_bytes),
                    ),
                    (
                        "profiledb_mirror_live_segments",
                        "gauge",
                        "Bucket segments a querier serves.",
                        get(&s.live),
                    ),
                    (
                        "profiledb_mirror_max_sync_age_seconds",
                        "gauge",
                        "--max-sync-age-secs: past this age of its last good sync a querier answers 503.",
                        self.max_sync_age.as_secs(),
                    ),
                ],
            );
        }
        if let Some(c) = &self.compactor {
            let s = c.stats();
            families(
                out,
                &[
                    (
                        "profiledb_bucket_merge_uploads_total",
                        "counter",
                        "Merged segments uploaded (swapped in or not).",
                        get(&s.uploads),
                    ),
                    (
                        "profiledb_bucket_merges_total",
                        "counter",
                        "Merges swapped into the bucket index.",
                        get(&s.merges),
                    ),
                    (
                        "profiledb_bucket_merged_sources_total",
                        "counter",
                        "Segments replaced by merges.",
                        get(&s.merged_sources),
                    ),
                    (
                        "profiledb_bucket_lease_busy_total",
                        "counter",
                        "Partitions skipped: another compactor held the lease.",
                        get(&s.lease_busy),
                    ),
                    (
                        "profiledb_bucket_merge_races_total",
                        "counter",
                        "Merges abandoned: a source left the index meanwhile.",
                        get(&s.lost_races),
                    ),
                    (
                        "profiledb_bucket_expired_segments_total",
                        "counter",
                        "Segments expired by retention.",
                        get(&s.expired),
                    ),
                    (
                        "profiledb_bucket_deleted_objects_total",
                        "counter",
                        "Objects deleted past the grace period.",
                        get(&s.deleted),
                    ),
                    (
                        "profiledb_bucket_checkpoints_total",
                        "counter",
                        "Index checkpoints written.",
                        get(&s.checkpoints),
                    ),
                    (
                        "profiledb_bucket_checkpoint_bytes_total",
                        "counter",
                        "Bytes of index checkpoints written.",
                        get(&s.checkpoint_bytes),
                    ),
                    (
                        "profiledb_bucket_log_pruned_total",
                        "counter",
                        "Index log entries and old checkpoints deleted under a newer checkpoint.",
                        get(&s.pruned),
                    ),
                    (
                        "profiledb_bucket_compaction_errors_total",
                        "counter",
                        "Compaction passes that failed.",
                        get(&s.errors),
                    ),
                ],
            );
        }
        if let Some(s) = &self.split {
            s.render_metrics(out);
        }
    }

    /// Per role: whether the store answered its last pass, how long ago a pass
    /// last succeeded, and the damaged objects it took out of service (the
    /// store answered, the object was bad).
    fn render_health(&self, out: &mut String) {
        let roles: Vec<(&str, &Health)> = [
            ("writer", self.uploader.as_ref().map(|u| u.health())),
            ("querier", self.mirror.as_ref().map(|m| m.health())),
            ("compactor", self.compactor.as_ref().map(|c| c.health())),
        ]
        .into_iter()
        .filter_map(|(r, h)| Some((r, h?)))
        .collect();
        labelled(
            out,
            (
                "profiledb_bucket_reachable",
                "gauge",
                "1 while the object store answers this role's passes, 0 while it is unreachable (refused, reset, timed out).",
            ),
            "role",
            roles.iter().map(|(r, h)| (*r, u8::from(h.reachable()))),
        );
        labelled(
            out,
            (
                "profiledb_bucket_quarantined_total",
                "counter",
                "Objects this role found damaged (missing, truncated, failing checks) and took out of service: a querier's reads, a compactor's merge sources.",
            ),
            "role",
            [
                ("querier", self.mirror.as_ref().map(|m| get(&m.stats().quarantined))),
                ("compactor", self.compactor.as_ref().map(|c| get(&c.stats().quarantined))),
            ]
            .into_iter()
            .filter_map(|(r, n)| Some((r, n?))),
        );
        labelled(
            out,
            (
                "profiledb_bucket_last_success_age_seconds",
                "gauge",
                "Seconds since this role's last successful pass over the bucket (absent before the first).",
            ),
            "role",
            roles
                .iter()
                .filter_map(|(r, h)| Some((*r, format!("{:.3}", h.since_success()?.as_secs_f64())))),
        );
    }
}
