//! The configuration file against real files: precedence (flags > file >
//! defaults), the printed defaults read back, and every kind of mistake refused
//! with the key's path.

use std::path::Path;

use clap::{Arg, ArgAction, CommandFactory};

use super::{keys, ConfigError, ConfigFile, Problem};
use crate::cli::serve::ServeArgs;
use crate::cli::{config, Cli, Command, LogFormat, ParseError};

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn parse(argv: &[&str]) -> Result<Cli, ParseError> {
    Cli::try_parse_args(argv.iter().copied())
}

fn serve(cli: &Cli) -> &ServeArgs {
    match &cli.command {
        Command::Serve(s) => s,
        other => panic!("not serve: {other:?}"),
    }
}

fn problems(text: &str) -> Vec<Problem> {
    match ConfigFile::parse(Path::new("f.yaml"), text, &Cli::command()) {
        Err(ConfigError::Invalid { problems, .. }) => problems,
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn every_visible_serve_flag_is_a_key_of_a_section() {
    let cli = Cli::command();
    let keys = keys(&cli);
    let serve = cli.find_subcommand("serve").unwrap();
    for a in serve.get_arguments() {
        let name = a.get_id().as_str();
        if a.is_hide_set() || ["config", "help"].contains(&name) {
            continue;
        }
        assert!(
            keys.iter().any(|k| k.name() == name),
            "--{name} has no help heading, so no key in the configuration file"
        );
    }
    let log = keys.iter().find(|k| k.name() == "log_format").unwrap();
    assert_eq!(log.path(), "logging.log_format");
    let sections = super::sections(&keys);
    assert_eq!(
        sections,
        [
            "server",
            "memory",
            "storage",
            "ingest",
            "query",
            "cluster",
            "tenancy",
            "limits",
            "alerts",
            "control",
            "symbolization",
            "logging"
        ]
    );
}

#[test]
fn flags_win_over_the_file_and_the_file_over_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "profiledb.yaml",
        "# a comment\n\
         server:\n  listen: 127.0.0.1:5000\n  max_body_mb: 8\n\
         memory:\n  memory_mb: 1000\n\
         storage:\n  fsync: interval\n\
         cluster:\n  storage: file:///tmp/bucket\n  role: writer\n\
         limits:\n  max_query_range: 7d\n  ingestion_rate_mb: 1.5\n\
         logging:\n  log_format: json\n",
    );
    let f = f.to_str().unwrap();
    let cli = parse(&[
        "profiledb",
        "serve",
        "--config",
        f,
        "--max-body-mb",
        "16",
        "--fsync-interval-ms",
        "20",
    ])
    .unwrap();
    assert_eq!(cli.log_format, LogFormat::Json, "from the file");
    let o = serve(&cli).options().unwrap();
    assert_eq!(o.listen.to_string(), "127.0.0.1:5000", "from the file");
    assert_eq!(o.max_body_bytes, 16 << 20, "the flag wins over the file");
    assert_eq!(
        o.store.fsync,
        profiledb_storage::FsyncPolicy::Interval { ms: 20 },
        "the mode from the file, the period from the flag"
    );
    assert_eq!(
        o.store.head_max_bytes,
        250 << 20,
        "a quarter of the file's 1000 MiB"
    );
    let c = o.cluster.unwrap();
    assert_eq!(c.bucket.url, "file:///tmp/bucket");
    assert!(c.roles.writer && !c.roles.querier);
    assert_eq!(o.tenancy.limits.max_query_range_secs, 7 * 86_400);
    assert_eq!(o.tenancy.limits.ingestion_rate_bytes, 3 << 19);
    // Neither flag nor file: the default.
    assert_eq!(o.store.partition_ms, 3_600_000);
    assert_eq!(o.data_dir, std::path::PathBuf::from("./data"));
    // A global flag before the command wins over the file too.
    let cli = parse(&["profiledb", "--log-format", "text", "serve", "--config", f]).unwrap();
    assert_eq!(cli.log_format, LogFormat::Text);
    assert_eq!(serve(&cli).server.max_body_mb, 8, "from the file");
}

#[test]
fn the_printed_defaults_read_back_as_no_file_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let text = config::print_defaults(&Cli::command());
    let f = write(dir.path(), "defaults.yaml", &text);
    let lines = config::check(&f).unwrap();
    assert!(lines[0].contains(": ok, "), "{lines:?}");
    let with = parse(&["profiledb", "serve", "--config", f.to_str().unwrap()]).unwrap();
    let without = parse(&["profiledb", "serve"]).unwrap();
    assert_eq!(with.log_format, without.log_format);
    assert_eq!(
        format!("{:?}", serve(&with).options().unwrap()),
        format!("{:?}", serve(&without).options().unwrap())
    );
    // Every key is in it, each once.
    for k in keys(&Cli::command()) {
        let line = format!("\n  {}: ", k.name());
        assert_eq!(text.matches(&line).count(), 1, "{line:?}");
    }
}

#[test]
fn mistakes_are_refused_with_the_key_s_path() {
    let got = problems(
        "server:\n  listen: nowhere\n  memory_mb: 12\n  max_body_mb: -3\n\
         storage:\n  fsync: sometimes\n  partiton_minutes: 30\n\
         cluster:\n  bucket_retention_dayz: 3\n  ack: [bucket]\n\
         servre:\n  x: 1\n\
         limits:\n  max_nodes: {a: 1}\n\
         query: 5\n",
    );
    let want = [
        ("server.listen", "invalid value 'nowhere' for '--listen"),
        (
            "server.memory_mb",
            "unknown field in server; it is memory.memory_mb",
        ),
        (
            "server.max_body_mb",
            "invalid value '-3' for '--max-body-mb",
        ),
        ("storage.fsync", "one of: always, interval, never"),
        (
            "storage.partiton_minutes",
            "unknown field; did you mean storage.partition_minutes?",
        ),
        (
            "cluster.bucket_retention_dayz",
            "unknown field; did you mean cluster.bucket_retention_days?",
        ),
        ("cluster.ack", "takes one value, not a list"),
        ("servre", "unknown section; did you mean server?"),
        (
            "limits.max_nodes",
            "takes one value, not a nested list or map",
        ),
        ("query", "must be a map of settings"),
    ];
    assert_eq!(got.len(), want.len(), "{got:#?}");
    for (p, (key, message)) in got.iter().zip(want) {
        assert_eq!(p.key, key, "{got:#?}");
        assert!(p.message.contains(message), "{p}");
    }
    let far = problems("storage:\n  zzz: 1\n");
    assert!(far[0]
        .message
        .starts_with("unknown field; storage takes fsync, fsync_interval_ms"));
    let e = parse(&[
        "profiledb",
        "serve",
        "--config",
        "/nonexistent/profiledb.yaml",
    ]);
    assert!(matches!(
        e,
        Err(ParseError::Config(ConfigError::Read { .. }))
    ));
}

#[test]
fn yaml_that_does_not_parse_is_refused_with_its_line() {
    let cli = Cli::command();
    let dup = ConfigFile::parse(Path::new("f"), "server:\n  listen: a\n  listen: b\n", &cli);
    let e = dup.unwrap_err();
    assert!(matches!(e, ConfigError::Yaml { .. }));
    assert!(
        e.to_string()
            .contains("duplicate entry with key \"listen\""),
        "{e}"
    );
    let e = ConfigFile::parse(Path::new("f"), "server: {listen: 1\n", &cli).unwrap_err();
    assert!(e.to_string().contains("line 2"), "{e}");
    assert_eq!(problems("- server\n")[0].key, "(file)");
}

#[test]
fn empty_files_sections_and_nulls_keep_the_defaults() {
    let cli = Cli::command();
    for text in [
        "",
        "server:\n",
        "server:\n  listen: null\n  admin_token: ~\n",
    ] {
        let f = ConfigFile::parse(Path::new("f"), text, &cli).unwrap();
        assert!(f.settings.is_empty(), "{text:?}");
    }
}

/// Switches and repeated flags (none in `serve` today) map to booleans and lists.
#[test]
fn switches_take_booleans_and_repeated_flags_take_lists() {
    let cli = clap::Command::new("profiledb").subcommand(
        clap::Command::new("serve")
            .next_help_heading("Extra")
            .arg(Arg::new("quiet").long("quiet").action(ArgAction::SetTrue))
            .arg(Arg::new("url").long("url").action(ArgAction::Append)),
    );
    let f = ConfigFile::parse(
        Path::new("f"),
        "extra:\n  quiet: true\n  url: [http://a, http://b]\n",
        &cli,
    )
    .unwrap();
    let m = f
        .apply(cli.clone())
        .try_get_matches_from(["profiledb", "serve"])
        .unwrap();
    let (_, m) = m.subcommand().unwrap();
    assert!(m.get_flag("quiet"));
    let urls: Vec<&String> = m.get_many("url").unwrap().collect();
    assert_eq!(urls, ["http://a", "http://b"]);
    // The command line replaces the file's list and still cannot unset a switch.
    let m = f
        .apply(cli.clone())
        .try_get_matches_from(["profiledb", "serve", "--url", "http://c"])
        .unwrap();
    let (_, m) = m.subcommand().unwrap();
    let urls: Vec<&String> = m.get_many("url").unwrap().collect();
    assert_eq!(urls, ["http://c"]);
    let bad = ConfigFile::parse(Path::new("f"), "extra:\n  quiet: yes please\n", &cli);
    match bad {
        Err(ConfigError::Invalid { problems, .. }) => {
            assert_eq!(
                problems[0].to_string(),
                "extra.quiet: must be true or false"
            )
        }
        other => panic!("{other:?}"),
    }
}

/// docs/operations.md shows the whole default file; it must be what
/// `print-defaults` prints today.
#[test]
fn the_default_file_in_operations_md_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let marker = "<!-- generated by `profiledb config print-defaults`";
    let after = &doc[doc.find(marker).expect("the marker in docs/operations.md")..];
    let start = after
        .find("```yaml\n")
        .expect("a yaml block after the marker")
        + 8;
    let len = after[start..].find("\n```").expect("the block's end") + 1;
    let shown = &after[start..start + len];
    let printed = config::print_defaults(&Cli::command());
    assert!(
        shown == printed,
        "docs/operations.md shows an old default file: replace the block after the marker \
         with the output of `cargo run -p profiledb -- config print-defaults`"
    );
}
