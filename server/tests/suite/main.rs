//! The server's integration tests, in one binary: each module starts real servers
//! (in-process on a loopback port, or the built `profiledb` binary) and talks to them
//! over HTTP. One binary rather than one per file because every test binary links the
//! whole server statically; twenty of them cost CI gigabytes of disk and minutes of
//! linking for no isolation the tests need (none of them touches process-global state).

mod browser;
mod common;
#[path = "../../../storage/tests/support/external.rs"]
mod external;
mod jdk;
/// The S3-protocol server of the cluster, monitoring and doctor tests.
#[path = "../../../storage/tests/support/moto.rs"]
mod moto;
mod pprof_oracle;

mod access_log;
mod adhoc;
mod admin_api;
mod alerts;
mod bad_input;
mod clear_answers;
mod cluster;
mod cluster_faults;
mod cluster_procs;
mod cluster_split;
mod config_file;
mod control_api;
mod deploy;
mod docs_examples;
mod doctor;
mod fleet_api;
mod go_pgo;
mod grafana_api;
mod ingest_http;
mod ingest_jfr;
mod monitoring;
mod openapi;
mod otlp;
mod pipeline;
mod process;
mod query_answers;
mod query_api;
mod query_cache;
mod sdk_python;
mod symbolization;
mod tenancy_isolation;
mod tenancy_limits;
mod ui_adhoc;
mod ui_assets;
mod ui_browser;
mod ui_oracle;
mod upgrade;
