//! Tenants that are separate, against the real `profiledb` binary started with an
//! auth file: every route is called with tenant alpha's credential and must never
//! return or change tenant beta's data; a missing or wrong credential gets 401
//! everywhere but `/ready`, `/healthy` and `/metrics`; an `X-Scope-OrgID` naming
//! another tenant gets 403; SIGHUP loads a new tenant without a restart and a broken
//! file on reload keeps the old one.
//!
//! The route list is checked against the router's source and the gate's table, so
//! a new endpoint fails here until it is classified and exercised.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::common::{build_pprof, encode, wait_for};
use base64::Engine;
use reqwest::blocking::Client;
use reqwest::Method;
use serde_json::{json, Value};

mod routes;
use routes::every_route;

const BIN: &str = env!("CARGO_BIN_EXE_profiledb");
const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
const ADMIN: &str = "admin-token-0123456789";
/// Strings only tenant beta's data contains.
const BETA_MARKERS: [&str; 2] = ["svc_beta", "beta_secret"];

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// `profiledb auth add-tenant`, returning the printed token.
fn add_tenant(file: &Path, tenant: &str) -> String {
    let out = Command::new(BIN)
        .args(["auth", "add-tenant", "--auth-file"])
        .arg(file)
        .args(["--tenant", tenant])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(token.starts_with("pdb_"), "{token}");
    token
}

struct Proc {
    child: Child,
    url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    fn start(auth_file: &Path) -> Proc {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("server.log");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(BIN)
            .args([
                "serve",
                "--fsync",
                "never",
                "--compaction-interval-minutes",
                "0",
            ])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--admin-token", ADMIN])
            .arg("--auth-file")
            .arg(auth_file)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let client = Client::new();
        wait_for(30, "the server to be ready", || {
            client
                .get(format!("{url}/ready"))
                .send()
                .ok()
                .filter(|r| r.status() == 200)
        });
        Proc {
            child,
            url,
            log,
            _dir: dir,
        }
    }

    fn hup(&self) {
        let ok = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }
}

/// How a request presents itself.
#[derive(Clone, Copy)]
enum Who<'a> {
    Nobody,
    Basic(&'a str, &'a str),
    Bearer(&'a str),
    Admin,
}

/// One request of the route table.
struct Call {
    /// The route pattern as registered with the router.
    route: &'static str,
    method: Method,
    path: String,
    body: Option<(&'static str, Vec<u8>)>,
}

fn call(route: &'static str, method: Method, path: String) -> Call {
    Call {
        route,
        method,
        path,
        body: None,
    }
}

fn with_json(mut c: Call, v: Value) -> Call {
    c.body = Some(("application/json", v.to_string().into_bytes()));
    c
}

fn with_bytes(mut c: Call, content_type: &'static str, body: Vec<u8>) -> Call {
    c.body = Some((content_type, body));
    c
}

fn with_text(mut c: Call, text: &str) -> Call {
    c.body = Some(("text/plain", text.as_bytes().to_vec()));
    c
}

struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: String,
}

fn send(url: &str, c: &Call, who: Who, org: Option<&str>) -> Answer {
    let mut r = Client::new().request(c.method.clone(), format!("{url}{}", c.path));
    r = match who {
        Who::Nobody => r,
        Who::Basic(u, p) => r.basic_auth(u, Some(p)),
        Who::Bearer(t) => r.bearer_auth(t),
        Who::Admin => r.bearer_auth(ADMIN),
    };
    if let Some(o) = org {
        r = r.header("X-Scope-OrgID", o);
    }
    if let Some((ct, b)) = &c.body {
        r = r.header("content-type", *ct).body(b.clone());
    }
    let resp = r.send().unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = resp.bytes().unwrap().to_vec();
    // Protobuf and gzip'd pprof carry their strings inside: look at them too.
    let plain = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut out)
            .unwrap();
        out
    } else {
        bytes
    };
    Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&plain).into_owned(),
    }
}

fn percent(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

fn renamed(rule: &Value, name: &str) -> Value {
    let mut r = rule.clone();
    r["name"] = json!(name);
    r
}

/// Every `.route("...")` pattern in the server's HTTP and cluster source.
fn source_routes(dir: &Path, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            source_routes(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            for (i, _) in text.match_indices(".route(") {
                let rest = text[i + ".route(".len()..].trim_start();
                if let Some(lit) = rest.strip_prefix('"') {
                    out.insert(lit[..lit.find('"').unwrap()].to_string());
                }
            }
        }
    }
}

/// The method names of the querier's method table (`"Name" => ...` arms of its
/// `match method.as_str()`).
fn querier_methods() -> BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/http/query/querier.rs");
    let text = std::fs::read_to_string(path).unwrap();
    let table = &text[text
        .find("match method.as_str() {")
        .expect("the method table")..];
    let table = &table[..table
        .find("\n    }\n")
        .expect("the end of the method table")];
    table
        .lines()
        .filter_map(|l| l.trim().strip_prefix('"'))
        .filter_map(|l| l.split_once("\" =>").map(|(name, _)| name.to_string()))
        .collect()
}

#[test]
fn every_route_is_classified_by_the_gate_and_exercised_here() {
    let mut in_source = BTreeSet::new();
    let src = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in ["src/http", "src/cluster"] {
        source_routes(&src.join(dir), &mut in_source);
    }
    let table: BTreeSet<String> = profiledb::tenancy::routes::ROUTES
        .iter()
        .map(|(p, _)| p.to_string())
        .collect();
    assert_eq!(
        in_source, table,
        "routes in server/src/http and in tenancy::routes::ROUTES differ"
    );
    let calls = every_route("svc", 0, 1);
    let exercised: BTreeSet<String> = calls.iter().map(|c| c.route.to_string()).collect();
    assert_eq!(exercised, table, "every_route() must call every route");
    let methods = querier_methods();
    assert!(methods.contains("SelectMergeStacktraces"), "{methods:?}");
    let called: BTreeSet<String> = calls
        .iter()
        .filter_map(|c| c.path.strip_prefix("/querier.v1.QuerierService/"))
        .map(str::to_string)
        .collect();
    assert_eq!(
        called, methods,
        "every_route() must call every querier method"
    );
}

fn is_public(c: &Call) -> bool {
    matches!(c.route, "/ready" | "/healthy" | "/metrics")
}

fn is_admin(c: &Call) -> bool {
    c.route.starts_with("/api/v1/admin/") || c.route.starts_with("/internal/")
}

/// The CPU total of the caller's tenant over `[start, end)` for `selector`.
fn total(url: &str, who: Who, selector: &str, start: i64, end: i64) -> i64 {
    let c = call(
        "/api/v1/flamegraph",
        Method::GET,
        format!(
            "/api/v1/flamegraph?query={}&from={start}&until={end}",
            percent(&format!("{CPU}{selector}"))
        ),
    );
    let a = send(url, &c, who, None);
    assert_eq!(a.status, 200, "{}", a.body);
    let v: Value = serde_json::from_str(&a.body).unwrap();
    v["total"].as_i64().unwrap()
}

fn writes(calls: Vec<Call>) -> Vec<Call> {
    calls
        .into_iter()
        .filter(|c| c.method == Method::POST && !c.route.starts_with("/querier") && !is_admin(c))
        .filter(|c| c.route != "/api/v1/alerts/rules")
        .collect()
}

#[test]
fn a_tenant_sees_and_changes_only_its_own_data() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("auth.yaml");
    let ta = add_tenant(&file, "alpha");
    let tb = add_tenant(&file, "beta");
    let p = Proc::start(&file);
    let url = p.url.as_str();
    let (start, end) = (now_ms() - 3_600_000, now_ms() + 600_000);
    let alpha = Who::Basic("alpha", &ta);
    let beta = Who::Basic("beta", &tb);

    // Beta writes its data (2 + 4 folded samples of 10 ms, and a 70 ms pprof) and
    // an alert rule.
    for c in writes(every_route("svc_beta", start, end)) {
        let a = send(url, &c, beta, None);
        assert_eq!(a.status, 200, "{} as beta: {}", c.path, a.body);
    }
    let beta_rule = renamed(
        &every_route("svc_beta", start, end)
            .into_iter()
            .find(|c| c.route == "/api/v1/alerts/rules" && c.method == Method::POST)
            .map(|c| serde_json::from_slice::<Value>(&c.body.unwrap().1).unwrap())
            .unwrap(),
        "beta-rule",
    );
    let created = send(
        url,
        &with_json(
            call(
                "/api/v1/alerts/rules",
                Method::POST,
                "/api/v1/alerts/rules".into(),
            ),
            beta_rule,
        ),
        beta,
        None,
    );
    assert!(created.status < 300, "{}", created.body);
    let beta_rule_url = call(
        "/api/v1/alerts/rules/{name}",
        Method::GET,
        "/api/v1/alerts/rules/beta-rule".into(),
    );
    let beta_rule_before = send(url, &beta_rule_url, beta, None).body;
    assert!(beta_rule_before.contains("svc_beta"), "{beta_rule_before}");
    assert_eq!(total(url, beta, "{}", start, end), 130_000_000);

    let calls = every_route("svc_alpha", start, end);
    for (i, c) in calls.iter().enumerate() {
        let what = format!("{} {}", c.method, c.path);
        if is_public(c) {
            let a = send(url, c, Who::Nobody, None);
            assert_eq!(a.status, 200, "{what} must stay open");
            continue;
        }
        // No, a malformed, or a wrong credential: 401 with the schemes to use.
        for who in [
            Who::Nobody,
            Who::Basic("alpha", &tb),
            Who::Basic("nobody", &ta),
            Who::Bearer("not-a-token-of-anyone"),
        ] {
            let a = send(url, c, who, None);
            assert_eq!(a.status, 401, "{what}: {}", a.body);
            let challenges: Vec<_> = a.headers.get_all("www-authenticate").iter().collect();
            assert!(
                challenges
                    .iter()
                    .any(|v| v.to_str().unwrap().starts_with("Basic realm=")),
                "{what}: {challenges:?}"
            );
            let v: Value = serde_json::from_str(&a.body).unwrap();
            assert_eq!(v["code"], "unauthenticated");
        }
        if is_admin(c) {
            // Admin endpoints act on every tenant: a tenant's credential is not enough.
            let a = send(url, c, alpha, None);
            assert_eq!(a.status, 403, "{what}: {}", a.body);
            continue;
        }
        // A tenant header that disagrees with the credential.
        let a = send(url, c, alpha, Some("beta"));
        assert_eq!(a.status, 403, "{what}: {}", a.body);
        // The real call, alternating basic and bearer, sometimes with the matching header.
        let who = if i % 2 == 0 { alpha } else { Who::Bearer(&ta) };
        let org = (i % 3 == 0).then_some("alpha");
        let a = send(url, c, who, org);
        let missing_rule = c.route == "/api/v1/alerts/rules/{name}" && a.status == 404;
        assert!(
            (200..300).contains(&a.status) || missing_rule,
            "{what} as alpha: {} {}",
            a.status,
            a.body
        );
        for marker in BETA_MARKERS {
            assert!(
                !a.body.contains(marker),
                "{what} as alpha shows beta's {marker:?}: {}",
                a.body
            );
        }
    }

    // Alpha's writes went to alpha: exactly its 2 + 4 samples and 70 ms.
    assert_eq!(total(url, alpha, "{}", start, end), 130_000_000);
    assert_eq!(
        total(url, alpha, "{service_name=\"svc_beta\"}", start, end),
        0
    );
    // Beta's data, rule and retention are as they were.
    assert_eq!(total(url, beta, "{}", start, end), 130_000_000);
    let rule_of = |body: &str| serde_json::from_str::<Value>(body).unwrap()["rule"].clone();
    assert_eq!(
        rule_of(&send(url, &beta_rule_url, beta, None).body),
        rule_of(&beta_rule_before)
    );
    let retention = call(
        "/api/v1/admin/retention",
        Method::GET,
        "/api/v1/admin/retention?tenant=beta".into(),
    );
    let r = send(url, &retention, Who::Admin, None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(!r.body.contains("3600000"), "{}", r.body);
}

#[test]
fn sighup_loads_new_tenants_and_a_broken_file_keeps_the_old_ones() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("auth.yaml");
    let ta = add_tenant(&file, "alpha");
    let p = Proc::start(&file);
    let labels = call("/api/v1/labels", Method::GET, "/api/v1/labels".into());
    let status = |who| send(&p.url, &labels, who, None).status;
    assert_eq!(status(Who::Basic("alpha", &ta)), 200);

    let tg = add_tenant(&file, "gamma");
    // Written but not loaded: the server still has the old file.
    assert_eq!(status(Who::Basic("gamma", &tg)), 401);
    p.hup();
    wait_for(20, "gamma to be loaded", || {
        (status(Who::Basic("gamma", &tg)) == 200).then_some(())
    });

    std::fs::write(&file, "tenants: [not, a, map\n").unwrap();
    p.hup();
    wait_for(20, "the refused reload to be logged", || {
        std::fs::read_to_string(&p.log)
            .unwrap()
            .contains("auth file not reloaded")
            .then_some(())
    });
    assert_eq!(status(Who::Basic("alpha", &ta)), 200);
    assert_eq!(status(Who::Bearer(&tg)), 200);
}
