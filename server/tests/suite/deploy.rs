//! The files in deploy/ checked by the tools that read them, and against what they
//! claim: systemd's own `systemd-analyze verify` and `security` on the units (with
//! ExecStart pointed at the built binaries), the agent sampling the machine as an
//! unprivileged user holding only the unit's capabilities (and failing without
//! CAP_PERFMON), the Dockerfile linted by dockerfile-utils and its COPY paths and
//! binary names matched to the repository and Cargo, the Kubernetes manifests
//! validated against the API schemas by kubernetes-validate, their configuration
//! file read by `profiledb config check`, and their probes, ports, memory and
//! capabilities matched to the configuration and the memory budget rule.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde::Deserialize;
use serde_norway::Value;

use crate::common::{on_path, repo_root, skip_or_fail, tool, TestServer};

const BIN: &str = env!("CARGO_BIN_EXE_profiledb");
const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";

fn deploy(path: &str) -> PathBuf {
    repo_root().join("deploy").join(path)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The agent binary, built beside the server's by `cargo test --workspace`.
fn agent_bin() -> Option<PathBuf> {
    let p = Path::new(BIN).with_file_name("profiledb-agent");
    p.exists().then_some(p)
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

/// Runs a checker `.ci/run` installs under `target/` (path, and its name for the
/// message) and asserts that it passes.
fn check_with(
    (in_target, name): (&str, &str),
    check: impl FnOnce(&Path) -> std::io::Result<Output>,
) {
    let bin_name = Path::new(in_target).file_name().unwrap().to_str().unwrap();
    let Some(bin) = tool(in_target, bin_name) else {
        return skip_or_fail(&format!("{name} is not installed in target/"));
    };
    let out = check(&bin).unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The values of `key=` lines in a unit file, split on whitespace.
fn unit_values(unit: &str, key: &str) -> Vec<String> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .flat_map(|v| v.split_whitespace().map(str::to_string))
        .collect()
}

/// The agent's capabilities, as its systemd unit grants them (`CAP_PERFMON`, …).
fn agent_capabilities() -> Vec<String> {
    let unit = read(&deploy("systemd/profiledb-agent.service"));
    let ambient = unit_values(&unit, "AmbientCapabilities");
    assert_eq!(
        ambient,
        unit_values(&unit, "CapabilityBoundingSet"),
        "the bounding set is exactly the granted set"
    );
    assert!(!ambient.is_empty());
    ambient
}

#[test]
fn systemd_units_pass_systemd_analyze_and_name_a_valid_config() {
    let Some(analyze) = on_path("systemd-analyze") else {
        return skip_or_fail("systemd-analyze is not installed (Debian systemd)");
    };
    let dir = tempfile::tempdir().unwrap();
    // The check must be able to fail: a misspelt key is only a warning for
    // systemd, so any output counts as a failure below.
    let bad = dir.path().join("bad.service");
    std::fs::write(
        &bad,
        "[Service]\nExecStart=/bin/true\nProtectSystm=strict\n",
    )
    .unwrap();
    let out = run(Command::new(&analyze)
        .args(["verify", "--man=no"])
        .arg(&bad));
    assert!(text(&out.stderr).contains("ProtectSystm"), "{out:?}");

    let agent = agent_bin();
    for (unit, installed, built, threshold) in [
        (
            "profiledb.service",
            "/usr/bin/profiledb",
            Some(PathBuf::from(BIN)),
            "20",
        ),
        (
            "profiledb-agent.service",
            "/usr/bin/profiledb-agent",
            agent.clone(),
            "30",
        ),
    ] {
        let Some(built) = built else {
            return skip_or_fail(
                "target/*/profiledb-agent is not built (cargo test --workspace builds it)",
            );
        };
        let original = read(&deploy(&format!("systemd/{unit}")));
        let exec = format!("ExecStart={installed} ");
        assert!(original.contains(&exec), "{unit} runs {installed}");
        let copy = dir.path().join(unit);
        let built_exec = format!("ExecStart={} ", built.display());
        std::fs::write(&copy, original.replace(&exec, &built_exec)).unwrap();
        let out = run(Command::new(&analyze)
            .args(["verify", "--man=no"])
            .arg(&copy));
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "{unit}: {}",
            text(&out.stderr)
        );
        // systemd's own exposure score (0 best, 10 worst; the threshold is in
        // tenths) stays at its level.
        let out = run(Command::new(&analyze)
            .args(["security", "--offline=yes", "--no-pager"])
            .arg(format!("--threshold={threshold}"))
            .arg(&copy));
        assert!(
            out.status.success(),
            "{unit} exposure: {}",
            text(&out.stdout)
        );
        for key in [
            "NoNewPrivileges=yes",
            "ProtectSystem=strict",
            "DynamicUser=yes",
        ] {
            assert!(original.contains(key), "{unit} has {key}");
        }
        assert!(!unit_values(&original, "LimitNOFILE").is_empty());
    }

    // The server's configuration file is one `profiledb` takes, and its data
    // directory is the unit's StateDirectory, the only place it may write.
    let unit = read(&deploy("systemd/profiledb.service"));
    assert!(unit.contains("--config /etc/profiledb/profiledb.yaml"));
    let config = deploy("systemd/profiledb.yaml");
    let out = run(Command::new(BIN).args(["config", "check"]).arg(&config));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let state = unit_values(&unit, "StateDirectory");
    let data_dir = format!("server.data_dir = /var/lib/{}", state[0]);
    assert!(
        text(&out.stdout).contains(&data_dir),
        "{}",
        text(&out.stdout)
    );
}

/// Runs the agent as `nobody` with only `caps` for 3 s against `url`.
fn agent_as_nobody(agent: &Path, caps: &[String], url: &str) -> Output {
    let list = caps
        .iter()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect::<Vec<_>>()
        .join(",");
    run(Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .args(["--inh-caps", &list, "--ambient-caps", &list])
        .args(["--bounding-set", &format!("-all,{list}")])
        .arg(agent)
        .args(["--server", url, "--duration", "3s", "--push-interval", "1s"])
        .args(["--frequency", "99", "--service", "capcheck"]))
}

#[test]
fn the_agent_samples_the_machine_with_only_its_documented_capabilities() {
    let caps = agent_capabilities();
    // The DaemonSet and the Dockerfile's `docker run` line grant the same set.
    let daemonset = documents(&deploy("kubernetes/agent.yaml"))
        .into_iter()
        .find(|d| d["kind"] == "DaemonSet")
        .unwrap();
    let container = &daemonset["spec"]["template"]["spec"]["containers"][0];
    let granted: Vec<String> = strings(&container["securityContext"]["capabilities"]["add"]);
    let bare: Vec<String> = caps.iter().map(|c| c.replace("CAP_", "")).collect();
    assert_eq!(granted, bare, "the DaemonSet's capabilities");
    assert_eq!(container["securityContext"]["privileged"], false);
    assert_eq!(daemonset["spec"]["template"]["spec"]["hostPID"], true);
    let dockerfile = read(&deploy("docker/Dockerfile"));
    for c in &bare {
        assert!(
            dockerfile.contains(&format!("--cap-add={c}")),
            "docker run adds {c}"
        );
    }

    let Some(agent) = agent_bin() else {
        return skip_or_fail(
            "target/*/profiledb-agent is not built (cargo test --workspace builds it)",
        );
    };
    let uid = run(Command::new("id").arg("-u"));
    if text(&uid.stdout).trim() != "0" {
        return crate::external::refused(
            "switching to an unprivileged user with capabilities",
            "it needs root",
        );
    }
    // A copy nobody can execute (the target directory may not be reachable).
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("profiledb-agent");
    std::fs::copy(&agent, &copy).unwrap();
    let open = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    open(dir.path());
    open(&copy);

    let s = TestServer::start();
    // A busy process of another user (root), so reading its maps and binary
    // needs the capabilities.
    let mut busy = Command::new("yes").stdout(Stdio::null()).spawn().unwrap();
    let out = agent_as_nobody(&copy, &caps, &s.url);
    let without: Vec<String> = caps
        .iter()
        .filter(|c| *c != "CAP_PERFMON")
        .cloned()
        .collect();
    let refused = agent_as_nobody(&copy, &without, &s.url);
    let _ = busy.kill();
    let _ = busy.wait();
    let stderr = text(&out.stderr);
    if !out.status.success() && stderr.contains("perf_event_paranoid") && !caps.is_empty() {
        // perf_event_open refused even with CAP_PERFMON: a kernel or a container
        // without perf events, not the capability set.
        let root = run(Command::new(&copy).args(["--server", &s.url, "--duration", "1s"]));
        if !root.status.success() {
            return crate::external::refused(
                "perf_event_open",
                "perf events are not available here, even to root",
            );
        }
    }
    assert!(out.status.success(), "agent with {caps:?}: {stderr}");
    assert!(
        !refused.status.success(),
        "without CAP_PERFMON the agent cannot sample: {}",
        text(&refused.stderr)
    );

    let stacks = s.merged(
        None,
        &format!("{CPU}{{service_name=\"capcheck\",comm=\"yes\"}}"),
    );
    let total: i64 = stacks.values().sum();
    assert!(total > 0, "samples of root's `yes` process: {stacks:?}");
    // Its frames are named, which needs its maps (CAP_SYS_PTRACE) and files.
    assert!(
        stacks.keys().any(|k| k.to_lowercase().contains("write")),
        "a named write frame in {stacks:?}"
    );
}

/// The instructions of a Dockerfile, continuation lines joined.
fn instructions(dockerfile: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in dockerfile.lines() {
        let t = line.trim();
        if cur.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(part) => cur.push_str(part),
            None => {
                cur.push_str(t);
                let (op, rest) = cur.split_once(' ').unwrap_or((&cur, ""));
                out.push((op.to_uppercase(), rest.trim().to_string()));
                cur.clear();
            }
        }
    }
    out
}

/// `[[bin]]` names of a Cargo.toml.
fn bin_names(manifest: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_bin = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if let Some(v) = line.strip_prefix("name = ").filter(|_| in_bin) {
            names.push(v.trim_matches('"').to_string());
        }
    }
    names
}

#[test]
fn the_dockerfile_lints_and_builds_what_cargo_builds() {
    let root = repo_root();
    let path = deploy("docker/Dockerfile");
    let dockerfile = read(&path);
    let mut stages: Vec<String> = Vec::new();
    let mut copied: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut entrypoints: BTreeMap<String, String> = BTreeMap::new();
    let mut run_lines = String::new();
    for (op, rest) in instructions(&dockerfile) {
        let words: Vec<&str> = rest.split_whitespace().collect();
        match op.as_str() {
            "FROM" => {
                assert_eq!(words.get(1), Some(&"AS"), "every stage is named: {rest}");
                stages.push(words[2].to_string());
            }
            "COPY" => {
                let stage = stages.last().unwrap().clone();
                let (from, args): (Option<&str>, Vec<&str>) = match words[0].strip_prefix("--from=")
                {
                    Some(f) => (Some(f), words[1..].to_vec()),
                    None => (None, words.clone()),
                };
                let (dest, sources) = args.split_last().unwrap();
                match from {
                    Some(f) => assert!(stages[..stages.len() - 1].iter().any(|s| s == f), "{rest}"),
                    None => {
                        for s in sources {
                            assert!(
                                root.join(s).exists(),
                                "COPY source {s} is in the repository"
                            );
                        }
                    }
                }
                copied.entry(stage).or_default().push(dest.to_string());
            }
            "RUN" => run_lines.push_str(&rest),
            "ENTRYPOINT" => {
                let argv: Vec<String> = serde_json::from_str(&rest).unwrap();
                entrypoints.insert(stages.last().unwrap().clone(), argv[0].clone());
            }
            _ => {}
        }
    }
    assert_eq!(stages, ["build", "server", "agent"]);
    // Cargo resolves the workspace only with every member present.
    let workspace = read(&root.join("Cargo.toml"));
    let members = workspace
        .lines()
        .find_map(|l| l.strip_prefix("members = "))
        .unwrap();
    let members: Vec<String> = serde_json::from_str(members).unwrap();
    for m in &members {
        assert!(copied["build"].contains(m), "the build stage copies {m}");
    }
    for (stage, package) in [("server", "server"), ("agent", "collector")] {
        let bins = bin_names(&read(&root.join(package).join("Cargo.toml")));
        let bin = &bins[0];
        assert!(
            run_lines.contains(&format!("target/release/{bin} /out/{bin}")),
            "{bin}"
        );
        let installed = format!("/usr/bin/{bin}");
        assert_eq!(entrypoints[stage], installed);
        assert!(
            copied[stage].contains(&installed),
            "{stage} copies {installed}"
        );
    }
    let ignore = read(&deploy("docker/Dockerfile.dockerignore"));
    assert!(
        ignore.lines().any(|l| l == "target"),
        "the context leaves target/ out"
    );

    check_with(
        (
            "deploy-tools/node_modules/.bin/dockerfile-utils",
            "dockerfile-utils (npm)",
        ),
        |lint| Command::new(lint).arg("lint").arg(&path).output(),
    );
}

/// Every YAML document of a file.
fn documents(path: &Path) -> Vec<Value> {
    serde_norway::Deserializer::from_str(&read(path))
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_sequence()
        .map(|s| {
            s.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// `4096Mi`, `10Gi` in MiB.
fn mib(quantity: &Value) -> u64 {
    let q = quantity.as_str().unwrap();
    let (n, unit) = q.split_at(q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len()));
    let n: u64 = n.parse().unwrap();
    match unit {
        "Mi" => n,
        "Gi" => n << 10,
        _ => panic!("quantity {q}: use Mi or Gi"),
    }
}

/// The value of `--flag` in an argument list.
fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .map(|i| args[i + 1].clone())
}

#[test]
fn kubernetes_manifests_validate_and_follow_the_config_and_memory_rule() {
    let dir = deploy("kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    check_with(
        (
            "deploy-venv/bin/kubernetes-validate",
            "kubernetes-validate (PyPI)",
        ),
        |validate| Command::new(validate).arg("--strict").args(&files).output(),
    );
    let docs: Vec<Value> = files.iter().flat_map(|f| documents(f)).collect();
    let find = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name}"))
    };

    // The configuration every role reads is one `profiledb config check` takes.
    let config = find("ConfigMap", "profiledb-config")["data"]["profiledb.yaml"]
        .as_str()
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("profiledb.yaml");
    std::fs::write(&file, config).unwrap();
    let out = run(Command::new(BIN).args(["config", "check"]).arg(&file));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let settings: Value = serde_norway::from_str(config).unwrap();
    let listen = settings["server"]["listen"].as_str().unwrap();
    let port: u64 = listen.rsplit_once(':').unwrap().1.parse().unwrap();
    let data_dir = settings["server"]["data_dir"].as_str().unwrap();

    for (kind, name, role) in [
        ("StatefulSet", "profiledb-writer", "writer"),
        ("Deployment", "profiledb-querier", "querier"),
        ("Deployment", "profiledb-compactor", "compactor"),
    ] {
        let w = find(kind, name);
        let pod = &w["spec"]["template"]["spec"];
        let c = &pod["containers"][0];
        let args = strings(&c["args"]);
        assert_eq!(
            args[..3],
            ["serve", "--config", "/etc/profiledb/profiledb.yaml"]
        );
        assert_eq!(flag(&args, "--role").as_deref(), Some(role));
        assert_eq!(
            c["ports"][0]["containerPort"].as_u64(),
            Some(port),
            "{name}"
        );
        assert_eq!(c["ports"][0]["name"], "http");
        for (probe, path) in [("readinessProbe", "/ready"), ("livenessProbe", "/healthy")] {
            assert_eq!(c[probe]["httpGet"]["path"], path, "{name} {probe}");
            assert_eq!(c[probe]["httpGet"]["port"], "http", "{name} {probe}");
        }
        // Memory: the budget plus a quarter (fixed overhead and slack), as
        // both request and limit, so the pod is never the first to be evicted.
        let budget: u64 = flag(&args, "--memory-mb").unwrap().parse().unwrap();
        let limit = mib(&c["resources"]["limits"]["memory"]);
        assert_eq!(
            limit,
            budget + budget / 4,
            "{name}: limit = 1.25 x --memory-mb"
        );
        assert_eq!(mib(&c["resources"]["requests"]["memory"]), limit, "{name}");
        // S3 keys from the Secret, never inline.
        let env = c["env"].as_sequence().unwrap();
        for key in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] {
            let e = env.iter().find(|e| e["name"] == key).unwrap();
            assert_eq!(
                e["valueFrom"]["secretKeyRef"]["name"], "profiledb-s3",
                "{key}"
            );
        }
        let mounts = c["volumeMounts"].as_sequence().unwrap();
        let data = mounts.iter().find(|m| m["mountPath"] == data_dir).unwrap();
        let volume = data["name"].as_str().unwrap();
        if role == "writer" {
            // The WAL lives on a claim of its own that survives the pod.
            let claims = w["spec"]["volumeClaimTemplates"].as_sequence().unwrap();
            assert!(claims.iter().any(|t| t["metadata"]["name"] == volume));
        } else {
            let v = pod["volumes"].as_sequence().unwrap();
            let v = v.iter().find(|v| v["name"] == volume).unwrap();
            let size = mib(&v["emptyDir"]["sizeLimit"]);
            let cache = flag(&args, "--querier-disk-cache-mb").map_or(0, |m| m.parse().unwrap());
            assert!(size > cache, "{name}: the volume holds the disk cache");
        }
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    }
    assert_eq!(
        find("Deployment", "profiledb-compactor")["spec"]["strategy"]["type"],
        "Recreate"
    );
}
