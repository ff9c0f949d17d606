//! The conversion of `serve`'s flags into options: each flag lands in its field
//! with its unit converted, the defaults are the documented ones, and invalid
//! combinations are refused before anything opens.

use std::path::PathBuf;
use std::time::Duration;

use profiledb_storage::{BlockPolicy, FsyncPolicy};

use crate::cli::{Cli, Command};
use crate::cluster::Ack;
use crate::ServeOptions;

const MIB: u64 = 1 << 20;

pub(crate) fn serve_args(flags: &[&str]) -> super::ServeArgs {
    let argv = ["profiledb", "serve"].iter().chain(flags);
    match Cli::try_parse_args(argv.copied()) {
        Ok(Cli {
            command: Command::Serve(s),
            ..
        }) => s,
        Ok(other) => panic!("not serve: {other:?}"),
        Err(e) => panic!("{flags:?}: {e}"),
    }
}

fn options(flags: &[&str]) -> anyhow::Result<ServeOptions> {
    serve_args(flags).options()
}

#[test]
fn without_flags_the_options_are_the_documented_defaults() {
    let o = options(&["--memory-mb", "1000"]).unwrap();
    assert_eq!(o.listen.to_string(), "127.0.0.1:4040");
    assert_eq!(o.data_dir, PathBuf::from("./data"));
    assert_eq!(o.max_body_bytes, 64 << 20);
    assert_eq!(o.ready_warm_up, Duration::from_secs(30));
    assert_eq!(o.admin_token, None);
    assert_eq!(o.store.fsync, FsyncPolicy::Always);
    assert_eq!(o.store.partition_ms, 3_600_000);
    assert!(o.store.background_compaction);
    assert_eq!(o.store.compaction_interval, Duration::from_secs(600));
    assert_eq!(o.store.open_merge_segments, 4);
    assert_eq!(o.store.open_merge_max_bytes, 64 * MIB);
    assert_eq!(
        o.store.blocks,
        BlockPolicy {
            width_ms: 86_400_000,
            delay_ms: 7_200_000,
            part_width_ms: 6 * 3_600_000,
            wide_width_ms: 7 * 86_400_000,
            wider_width_ms: 28 * 86_400_000,
        }
    );
    assert_eq!(o.ingest.queue, 64);
    assert_eq!(o.ingest.max_future_skew_ms, 600_000);
    assert_eq!(o.ingest.max_age_ms, None);
    assert_eq!(o.query_limits.timeout, Duration::from_secs(60));
    assert!(o.cluster.is_none());
    assert_eq!(o.tenancy.auth_file, None);
    let l = &o.tenancy.limits;
    assert_eq!(l.ingestion_rate_bytes, 64 * MIB);
    assert_eq!(l.ingestion_burst_bytes, 256 * MIB);
    assert_eq!(l.ingestion_rate_profiles, 1000);
    assert_eq!(l.ingestion_burst_profiles, 5000);
    assert_eq!(l.max_active_series, 100_000);
    assert_eq!(l.max_labels_per_series, 30);
    assert_eq!(l.max_query_range_secs, 0);
    assert_eq!(l.max_nodes, 0);
    assert_eq!(l.max_concurrent_queries, 32);
    assert_eq!(o.tenancy.active_series_window_ms, 3_600_000);
    assert!(o.alerts.rules.is_empty());
    assert_eq!(o.alerts.alertmanager_url, None);
    assert_eq!(o.control.seed, 0);
    assert_eq!(o.control.max_agents, 100_000);
    // The memory rule of docs/operations.md on a 1000 MiB budget.
    assert_eq!(o.store.head_max_bytes as u64, 250 * MIB);
    assert_eq!(o.store.segment_cache_bytes, 250 * MIB);
    assert_eq!(o.query_cache_bytes, 100 * MIB);
    assert_eq!(o.query_memory_bytes, 200 * MIB);
    assert_eq!(o.store.compaction_max_bytes, 100 * MIB);
    assert_eq!(o.ingest.memory_bytes, 60 * MIB);
}

#[test]
fn every_flag_reaches_its_option() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.yaml");
    std::fs::write(
        &rules,
        "- name: hot\n  profile_type: process_cpu:cpu:nanoseconds:cpu:nanoseconds\n  watch: {function: 'main'}\n  window: 1h\n  baseline: {offset: 1d}\n  condition: {share_delta_pp: 5}\n",
    )
    .unwrap();
    let rules = rules.to_str().unwrap();
    #[rustfmt::skip]
    let o = options(&[
        "--data-dir", "/srv/p", "--listen", "0.0.0.0:9", "--max-body-mb", "3",
        "--ready-warm-up-secs", "0", "--admin-token", "sesame",
        "--fsync", "interval", "--fsync-interval-ms", "250", "--partition-minutes", "30",
        "--compaction-interval-minutes", "0", "--open-merge-segments", "6",
        "--open-merge-max-mb", "8", "--block-hours", "12", "--block-delay-minutes", "30",
        "--part-block-hours", "3", "--wide-block-days", "2", "--wider-block-days", "8",
        "--ingest-queue", "5", "--max-future-skew-secs", "7", "--ingestion-window-secs", "9",
        "--query-timeout-secs", "11",
        "--auth-file", "/etc/auth.yaml",
        "--ingestion-rate-mb", "0.5", "--ingestion-burst-mb", "2", "--ingestion-rate-profiles", "3",
        "--ingestion-burst-profiles", "4", "--max-active-series", "5",
        "--active-series-window-minutes", "6", "--max-labels-per-series", "7",
        "--max-query-range", "2h", "--max-nodes", "8", "--max-concurrent-queries", "9",
        "--rules", rules, "--alertmanager-url", "http://am:9093", "--alert-webhook-url", "http://hook",
        "--external-url", "http://me", "--control-seed", "42", "--control-max-agents", "0",
        "--memory-mb", "2000", "--head-max-mb", "1", "--query-cache-mb", "2",
        "--segment-cache-mb", "3", "--query-memory-mb", "4", "--ingest-memory-mb", "5",
        "--compaction-memory-mb", "6",
    ])
    .unwrap();
    assert_eq!(o.data_dir, PathBuf::from("/srv/p"));
    assert_eq!(o.listen.to_string(), "0.0.0.0:9");
    assert_eq!(o.max_body_bytes, 3 << 20);
    assert_eq!(o.ready_warm_up, Duration::ZERO);
    assert_eq!(o.admin_token.as_deref(), Some("sesame"));
    assert_eq!(o.store.fsync, FsyncPolicy::Interval { ms: 250 });
    assert_eq!(o.store.partition_ms, 1_800_000);
    assert!(!o.store.background_compaction);
    assert_eq!(o.store.open_merge_segments, 6);
    assert_eq!(o.store.open_merge_max_bytes, 8 * MIB);
    assert_eq!(
        o.store.blocks,
        BlockPolicy {
            width_ms: 12 * 3_600_000,
            delay_ms: 30 * 60_000,
            part_width_ms: 3 * 3_600_000,
            wide_width_ms: 2 * 86_400_000,
            wider_width_ms: 8 * 86_400_000,
        }
    );
    assert_eq!(o.ingest.queue, 5);
    assert_eq!(o.ingest.max_future_skew_ms, 7000);
    assert_eq!(o.ingest.max_age_ms, Some(9000));
    assert_eq!(o.query_limits.timeout, Duration::from_secs(11));
    assert_eq!(o.tenancy.auth_file, Some(PathBuf::from("/etc/auth.yaml")));
    let l = &o.tenancy.limits;
    assert_eq!(l.ingestion_rate_bytes, MIB / 2);
    assert_eq!(l.ingestion_burst_bytes, 2 * MIB);
    assert_eq!(
        (l.ingestion_rate_profiles, l.ingestion_burst_profiles),
        (3, 4)
    );
    assert_eq!((l.max_active_series, l.max_labels_per_series), (5, 7));
    assert_eq!(o.tenancy.active_series_window_ms, 6 * 60_000);
    assert_eq!(l.max_query_range_secs, 7200);
    assert_eq!((l.max_nodes, l.max_concurrent_queries), (8, 9));
    assert_eq!(o.alerts.rules.len(), 1);
    assert_eq!(o.alerts.rules[0].name, "hot");
    assert_eq!(o.alerts.alertmanager_url.as_deref(), Some("http://am:9093"));
    assert_eq!(o.alerts.webhook_url.as_deref(), Some("http://hook"));
    assert_eq!(o.alerts.external_url.as_deref(), Some("http://me"));
    assert_eq!(o.control.seed, 42);
    assert_eq!(o.control.max_agents, 1, "at least one agent");
    // Each part's own flag wins over its share of --memory-mb.
    assert_eq!(o.store.head_max_bytes as u64, MIB);
    assert_eq!(o.query_cache_bytes, 2 * MIB);
    assert_eq!(o.store.segment_cache_bytes, 3 * MIB);
    assert_eq!(o.query_memory_bytes, 4 * MIB);
    assert_eq!(o.ingest.memory_bytes, 5 * MIB);
    assert_eq!(o.store.compaction_max_bytes, 6 * MIB);
    // The parts without a flag keep their share of the 2000 MiB.
    assert_eq!(o.store.stack_interner_bytes as u64, 40 * MIB);
}

#[test]
fn cluster_flags_reach_the_cluster_options() {
    #[rustfmt::skip]
    let o = options(&[
        "--storage", "s3://b/p", "--role", "writer,querier", "--s3-endpoint", "http://minio:9000",
        "--s3-region", "eu", "--ack", "local", "--upload-interval-ms", "5", "--sync-interval-ms", "6",
        "--querier-disk-cache-mb", "7", "--bucket-compaction-interval-secs", "8",
        "--merge-min-segments", "1", "--merge-settle-secs", "9", "--gc-grace-secs", "10",
        "--lease-ttl-secs", "11", "--bucket-retention-days", "2", "--block-hours", "48",
        "--part-block-hours", "12", "--wide-block-days", "4", "--wider-block-days", "8",
        "--fault-compactor-pause-ms", "3",
    ])
    .unwrap();
    let c = o.cluster.unwrap();
    assert_eq!(c.bucket.url, "s3://b/p");
    assert_eq!(c.bucket.endpoint.as_deref(), Some("http://minio:9000"));
    assert!(c.bucket.allow_http, "an http:// endpoint allows plain HTTP");
    assert_eq!(c.bucket.region.as_deref(), Some("eu"));
    assert!(c.roles.writer && c.roles.querier && !c.roles.compactor);
    assert_eq!(c.ack, Ack::Local);
    assert_eq!(c.upload_interval, Duration::from_millis(5));
    assert_eq!(c.sync_interval, Duration::from_millis(6));
    assert_eq!(c.querier_disk_bytes, 7 * MIB);
    assert_eq!(c.compaction_interval, Duration::from_secs(8));
    assert_eq!(c.merge.min_segments, 2, "at least two segments to merge");
    assert_eq!(c.merge.settle_ms, 9000);
    assert_eq!(c.merge.blocks, o.store.blocks, "the store's blocks");
    assert_eq!(c.merge.blocks.width_ms, 48 * 3_600_000);
    assert_eq!(c.gc_grace, Duration::from_secs(10));
    assert_eq!(c.lease_ttl, Duration::from_secs(11));
    assert_eq!(c.retention, Some(Duration::from_secs(2 * 86_400)));
    assert_eq!(c.compactor_pause, Some(Duration::from_millis(3)));
}

#[test]
fn fsync_policies_are_storage_s_own() {
    let fsync = |flags: &[&str]| options(flags).unwrap().store.fsync;
    assert_eq!(fsync(&["--fsync", "never"]), FsyncPolicy::Never);
    assert_eq!(fsync(&["--fsync", "always"]), FsyncPolicy::Always);
    assert_eq!(
        fsync(&["--fsync", "interval"]),
        FsyncPolicy::Interval { ms: 100 }
    );
    // The period matters only to `interval`.
    assert_eq!(fsync(&["--fsync-interval-ms", "5"]), FsyncPolicy::Always);
    let e = Cli::try_parse_args(["profiledb", "serve", "--fsync", "sometimes"]).unwrap_err();
    assert!(e.to_string().contains("always, interval, never"), "{e}");
}

#[test]
fn blank_texts_are_unset() {
    let o = options(&[
        "--admin-token",
        "",
        "--alertmanager-url",
        " ",
        "--external-url",
        "",
    ])
    .unwrap();
    assert_eq!(o.admin_token, None);
    assert_eq!(o.alerts.alertmanager_url, None);
    assert_eq!(o.alerts.external_url, None);
}

#[test]
fn invalid_combinations_are_refused_with_the_flag() {
    let refused = |flags: &[&str], flag: &str| {
        let e = format!("{:#}", options(flags).unwrap_err());
        assert!(e.contains(flag), "{flags:?}: {e}");
    };
    refused(&["--role", "writer"], "needs --storage");
    refused(
        &["--storage", "file:///b", "--role", "reader"],
        "unknown role",
    );
    refused(
        &["--storage", "file:///b", "--upload-interval-ms", "0"],
        "--upload-interval-ms must be positive",
    );
    refused(&["--part-block-hours", "5"], "part");
    refused(&["--max-query-range", "soon"], "--max-query-range");
    refused(&["--ingestion-rate-mb=-1"], "--ingestion-rate-mb");
    refused(&["--partition-minutes", "0"], "partition");
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.yaml");
    refused(
        &["--rules", missing.to_str().unwrap()],
        "cannot read rules file",
    );
}
