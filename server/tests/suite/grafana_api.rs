//! The methods a current Grafana (Pyroscope datasource and Profiles Drilldown app)
//! calls beyond the querier basics, over real HTTP in both Connect encodings:
//! exemplars in SelectSeries and the profile ids they name, SelectHeatmap,
//! AnalyzeQuery, version, feature flags, per-tenant settings, `/pyroscope/labels`,
//! and Connect's `unimplemented` for procedures we lack. Request bodies are shaped
//! as the datasource and the app send them (their request code, read for facts).

use crate::common::TestServer;
use prost::Message;
use serde_json::{json, Value};

use profiledb_proto::querier::v1 as q;
use profiledb_proto::version::v1 as ver;

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
/// `.cpu` folded counts are scaled by 1e9 / sampleRate(100).
const SCALE: i64 = 10_000_000;
/// 2023-01-01T00:00:00Z in seconds: a whole multiple of every step used here.
const T0: i64 = 1_672_531_200;

/// `tenant` "" is the default tenant (no header).
fn as_tenant(
    req: reqwest::blocking::RequestBuilder,
    tenant: &str,
) -> reqwest::blocking::RequestBuilder {
    if tenant.is_empty() {
        req
    } else {
        req.header("X-Scope-OrgID", tenant)
    }
}

fn post(s: &TestServer, tenant: &str, path: &str, body: Value) -> (u16, Value) {
    let req = s
        .client
        .post(format!("{}{path}", s.url))
        .header("content-type", "application/json");
    let r = as_tenant(req, tenant)
        .body(body.to_string())
        .send()
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn post_proto<Req: Message, Resp: Message + Default>(
    s: &TestServer,
    path: &str,
    req: &Req,
) -> Resp {
    let r = s
        .client
        .post(format!("{}{path}", s.url))
        .header("content-type", "application/proto")
        .body(req.encode_to_vec())
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    Resp::decode(r.bytes().unwrap()).unwrap()
}

/// Three individual profiles of `shop`: host a at T0 (3) and T0+60 s (1), host b at
/// T0 (5); and one of another tenant, which no answer here may show.
fn fleet() -> TestServer {
    let s = TestServer::start();
    s.ingest("", "shop.cpu{host=a}", T0, "main;work 3\n");
    s.ingest("", "shop.cpu{host=a}", T0 + 60, "main;work 1\n");
    s.ingest("", "shop.cpu{host=b}", T0, "main;idle 5\n");
    s.ingest("other", "shop.cpu{host=z}", T0, "main;secret 100\n");
    s
}

fn ms(s: i64) -> i64 {
    s * 1000
}

#[test]
fn series_exemplars_name_profiles_a_merge_can_select() {
    let s = fleet();
    // As the datasource sends it: step in seconds, exemplars of individual profiles.
    let body = json!({
        "profileTypeID": CPU, "labelSelector": "{service_name=\"shop\"}",
        "start": ms(T0), "end": ms(T0 + 120), "step": 60.0,
        "exemplarType": "EXEMPLAR_TYPE_INDIVIDUAL"
    });
    let (st, v) = post(&s, "", "/querier.v1.QuerierService/SelectSeries", body);
    assert_eq!(st, 200, "{v}");
    let points = v["series"][0]["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    assert_eq!(points[0]["value"], (8 * SCALE) as f64);
    // The largest profile of the first minute is host b's; of the second, host a's.
    let e0 = &points[0]["exemplars"][0];
    assert_eq!(e0["value"], (5 * SCALE).to_string());
    assert_eq!(e0["timestamp"], ms(T0).to_string());
    assert_eq!(
        e0["labels"],
        json!([{"name": "host", "value": "b"}, {"name": "service_name", "value": "shop"}])
    );
    let e1 = &points[1]["exemplars"][0];
    assert_eq!(e1["value"], SCALE.to_string());
    assert_eq!(e1["labels"][0]["value"], "a");
    // Without an exemplar type there are none.
    let body = json!({
        "profileTypeID": CPU, "labelSelector": "{}", "start": ms(T0), "end": ms(T0 + 120), "step": 60.0
    });
    let (_, v) = post(&s, "", "/querier.v1.QuerierService/SelectSeries", body);
    assert!(
        v["series"][0]["points"][0].get("exemplars").is_none(),
        "{v}"
    );

    // The exemplar's profile id selects exactly that profile: host b's 5, not host
    // a's 3 at the same step.
    let id = e0["profileId"].as_str().unwrap().to_string();
    let body = json!({
        "profileTypeID": CPU, "labelSelector": "{service_name=\"shop\"}",
        "start": ms(T0), "end": ms(T0 + 120), "profileIdSelector": [id]
    });
    let (st, v) = post(
        &s,
        "",
        "/querier.v1.QuerierService/SelectMergeStacktraces",
        body,
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["flamegraph"]["total"], (5 * SCALE).to_string());
    let names: Vec<&str> = v["flamegraph"]["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"idle") && !names.contains(&"work"),
        "{names:?}"
    );

    // The same in binary protobuf, through SelectMergeProfile (pprof), two ids.
    let id1 = e1["profileId"].as_str().unwrap().to_string();
    let req = q::SelectMergeProfileRequest {
        profile_type_id: CPU.into(),
        label_selector: "{}".into(),
        start: ms(T0),
        end: ms(T0 + 120),
        profile_id_selector: vec![id.clone(), id1],
        ..Default::default()
    };
    let p: profiledb_proto::pprof::Profile =
        post_proto(&s, "/querier.v1.QuerierService/SelectMergeProfile", &req);
    let total: i64 = p.sample.iter().map(|x| x.value[0]).sum();
    assert_eq!(total, 6 * SCALE);

    // Another tenant cannot reach the profile by its id.
    let body = json!({
        "profileTypeID": CPU, "labelSelector": "{}", "start": ms(T0), "end": ms(T0 + 120),
        "profileIdSelector": [id]
    });
    let (st, v) = post(
        &s,
        "other",
        "/querier.v1.QuerierService/SelectMergeStacktraces",
        body,
    );
    assert_eq!((st, v["code"].as_str()), (404, Some("not_found")), "{v}");
    // An id that is not ours says what one looks like.
    let body = json!({
        "profileTypeID": CPU, "labelSelector": "{}", "start": ms(T0), "end": ms(T0 + 120),
        "profileIdSelector": ["7c9e6679-7425-40de-944b-e07fc1f90ae7"]
    });
    let (st, v) = post(
        &s,
        "",
        "/querier.v1.QuerierService/SelectMergeStacktraces",
        body,
    );
    assert_eq!(st, 400, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("<16 hex digits>-<ms>"),
        "{v}"
    );
}

#[test]
fn heatmap_counts_profiles_per_step_and_value() {
    let s = fleet();
    let body = json!({
        "profileTypeID": CPU, "labelSelector": "{service_name=\"shop\"}",
        "start": ms(T0), "end": ms(T0 + 120), "step": 60.0,
        "queryType": "HEATMAP_QUERY_TYPE_INDIVIDUAL", "exemplarType": "EXEMPLAR_TYPE_INDIVIDUAL"
    });
    let (st, v) = post(&s, "", "/querier.v1.QuerierService/SelectHeatmap", body);
    assert_eq!(st, 200, "{v}");
    let series = v["series"].as_array().unwrap();
    assert_eq!(series.len(), 1);
    let slots = series[0]["slots"].as_array().unwrap();
    // Values 1, 3, 5 (× SCALE): 20 buckets of 0.2 from 1. Slot timestamps are step ends.
    assert_eq!(slots.len(), 2);
    assert_eq!(slots[0]["timestamp"], ms(T0 + 60).to_string());
    let counts = |slot: &Value| -> Vec<i64> {
        slot["counts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_i64().unwrap())
            .collect()
    };
    let mut want = vec![0; 20];
    want[10] = 1; // 3: (3 - 1) / 0.2
    want[19] = 1; // 5: the maximum, in the last bucket
    assert_eq!(counts(&slots[0]), want);
    let mut want = vec![0; 20];
    want[0] = 1;
    assert_eq!(counts(&slots[1]), want);
    assert_eq!(slots[0]["yMin"][10], (3 * SCALE) as f64);
    assert_eq!(slots[0]["exemplars"].as_array().unwrap().len(), 2);

    // Binary protobuf, grouped by host: one series per host, counts adding up.
    let req = q::SelectHeatmapRequest {
        profile_type_id: CPU.into(),
        label_selector: "{}".into(),
        start: ms(T0),
        end: ms(T0 + 120),
        step: 60.0,
        group_by: vec!["host".into()],
        ..Default::default()
    };
    let r: q::SelectHeatmapResponse =
        post_proto(&s, "/querier.v1.QuerierService/SelectHeatmap", &req);
    let hosts: Vec<&str> = r
        .series
        .iter()
        .map(|s| s.labels[0].value.as_str())
        .collect();
    assert_eq!(hosts, vec!["b", "a"], "largest total first");
    let profiles: i32 = r
        .series
        .iter()
        .flat_map(|s| &s.slots)
        .flat_map(|x| &x.counts)
        .sum();
    assert_eq!(profiles, 3);
    assert!(r
        .series
        .iter()
        .flat_map(|s| &s.slots)
        .all(|x| x.exemplars.is_empty()));

    // Span heatmaps count only span profiles: there are none here.
    let body = json!({
        "profileTypeID": CPU, "labelSelector": "{}", "start": ms(T0), "end": ms(T0 + 120),
        "step": 60.0, "queryType": "HEATMAP_QUERY_TYPE_SPAN"
    });
    let (st, v) = post(&s, "", "/querier.v1.QuerierService/SelectHeatmap", body);
    assert_eq!(st, 200);
    assert!(v.get("series").is_none(), "{v}");
    // A type that does not parse is a 400 saying what a type looks like.
    let body =
        json!({"profileTypeID": "cpu", "labelSelector": "{}", "start": ms(T0), "end": ms(T0 + 60)});
    let (st, v) = post(&s, "", "/querier.v1.QuerierService/SelectHeatmap", body);
    assert_eq!(st, 400, "{v}");
}

#[test]
fn analyze_query_reports_what_a_query_reads() {
    let s = fleet();
    // As the Drilldown app sends it.
    let body = json!({
        "start": ms(T0), "end": ms(T0 + 3600),
        "query": format!("{CPU}{{service_name=\"shop\"}}")
    });
    let (st, v) = post(&s, "", "/querier.v1.QuerierService/AnalyzeQuery", body);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["queryImpact"]["totalQueriedSeries"], "2");
    let scopes = v["queryScopes"].as_array().unwrap();
    assert_eq!(scopes[0]["componentType"], "Head");
    assert_eq!(scopes[0]["seriesCount"], "2");
    assert_eq!(scopes[0]["profileCount"], "3");
    assert_eq!(scopes[1]["componentType"], "Segments");
    // A selector matching nothing reads nothing.
    let body = json!({"start": ms(T0), "end": ms(T0 + 3600), "query": "{service_name=\"nope\"}"});
    let (_, v) = post(&s, "", "/querier.v1.QuerierService/AnalyzeQuery", body);
    assert!(v["queryImpact"].get("totalQueriedSeries").is_none(), "{v}");
    let body = json!({"start": ms(T0), "end": ms(T0 + 3600), "query": "{service_name="});
    let (st, _) = post(&s, "", "/querier.v1.QuerierService/AnalyzeQuery", body);
    assert_eq!(st, 400);
}

#[test]
fn version_feature_flags_and_unimplemented_procedures() {
    let s = TestServer::start();
    let (st, v) = post(&s, "", "/version.v1.Version/Version", json!({}));
    assert_eq!((st, &v), (200, &json!({"QuerierAPI": "1"})));
    let r: ver::VersionResponse =
        post_proto(&s, "/version.v1.Version/Version", &ver::VersionRequest {});
    assert_eq!(r.querier_api, 1);

    let (st, v) = post(
        &s,
        "",
        "/capabilities.v1.FeatureFlagsService/GetFeatureFlags",
        json!({}),
    );
    assert_eq!(st, 200);
    let names: Vec<&str> = v["featureFlags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        vec![
            "v2StorageLayer",
            "pyroscopeRuler",
            "pyroscopeRulerFunctions",
            "utf8LabelNames"
        ]
    );
    // We claim none of them (false is protojson's default, so it is left out).
    assert!(v["featureFlags"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f.get("enabled").is_none()));

    // Procedures the Drilldown app may call that we do not serve.
    for path in [
        "/vcs.v1.VCSService/GetFile",
        "/adhocprofiles.v1.AdHocProfileService/Upload",
        "/settings.v1.RecordingRulesService/ListRecordingRules",
        "/querier.v1.QuerierService/SelectMergeSomethingNew",
        "/settings.v1.SettingsService/Frobnicate",
    ] {
        let (st, v) = post(&s, "", path, json!({}));
        assert_eq!(
            (st, v["code"].as_str()),
            (404, Some("unimplemented")),
            "{path}: {v}"
        );
        assert!(
            v["message"].as_str().unwrap().contains("not implemented"),
            "{v}"
        );
    }
    // An unknown plain route is still a plain 404.
    let (st, v) = post(&s, "", "/no/such/endpoint", json!({}));
    assert_eq!((st, v["code"].as_str()), (404, Some("not_found")));
}

#[test]
fn settings_are_stored_per_tenant_and_survive_a_restart() {
    let s = TestServer::start();
    let get = |s: &TestServer, tenant: &str| {
        post(s, tenant, "/settings.v1.SettingsService/Get", json!({})).1
    };
    assert_eq!(get(&s, ""), json!({}));
    // As the Drilldown app stores its preferences.
    let value = json!({"maxNodes": 16384, "enableFlameGraphDotComExport": true}).to_string();
    let (st, v) = post(
        &s,
        "",
        "/settings.v1.SettingsService/Set",
        json!({"setting": {"name": "pluginSettings", "value": value}}),
    );
    assert_eq!(st, 200, "{v}");
    let stamped: i64 = v["setting"]["modifiedAt"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(stamped > 0);
    let got = get(&s, "");
    assert_eq!(got["settings"][0]["name"], "pluginSettings");
    assert_eq!(got["settings"][0]["value"], value.as_str());
    // Other tenants do not see it.
    assert_eq!(get(&s, "other"), json!({}));
    // A write older than the stored value is refused, and changes nothing.
    let (st, v) = post(
        &s,
        "",
        "/settings.v1.SettingsService/Set",
        json!({"setting": {"name": "pluginSettings", "value": "{}", "modifiedAt": stamped - 1}}),
    );
    assert_eq!(
        (st, v["code"].as_str()),
        (409, Some("already_exists")),
        "{v}"
    );
    assert_eq!(get(&s, "")["settings"][0]["value"], value.as_str());
    // Bad input says what is wrong.
    let (st, _) = post(&s, "", "/settings.v1.SettingsService/Set", json!({}));
    assert_eq!(st, 400);
    let (st, _) = post(
        &s,
        "",
        "/settings.v1.SettingsService/Set",
        json!({"setting": {"name": "big", "value": "x".repeat(70_000)}}),
    );
    assert_eq!(st, 400);
    post(
        &s,
        "",
        "/settings.v1.SettingsService/Set",
        json!({"setting": {"name": "gone", "value": "1"}}),
    );

    let dir = s.stop();
    let s = TestServer::start_in(dir, |_| {});
    let got = get(&s, "");
    let names: Vec<&str> = got["settings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["gone", "pluginSettings"]);
    let (st, _) = post(
        &s,
        "",
        "/settings.v1.SettingsService/Delete",
        json!({"name": "gone"}),
    );
    assert_eq!(st, 200);
    assert_eq!(get(&s, "")["settings"].as_array().unwrap().len(), 1);
}

#[test]
fn pyroscope_labels_lists_label_names() {
    let s = fleet();
    let from = T0.to_string();
    let until = (T0 + 3600).to_string();
    let v = s.json(
        "/pyroscope/labels",
        &[
            ("query", "{service_name=\"shop\"}"),
            ("from", &from),
            ("until", &until),
        ],
    );
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"host") && names.contains(&"service_name"),
        "{names:?}"
    );
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    // A selector matching nothing: no names, not an error.
    let v = s.json(
        "/pyroscope/labels",
        &[
            ("query", "{service_name=\"nope\"}"),
            ("from", &from),
            ("until", &until),
        ],
    );
    assert_eq!(v, json!([]));
    let r = s.get("/pyroscope/labels?query=%7Bservice_name%3D");
    assert_eq!(r.status(), 400);
}

#[test]
fn render_as_dot_draws_the_call_graph() {
    let s = fleet();
    let (from, until) = (T0.to_string(), (T0 + 3600).to_string());
    // As the Drilldown app asks for it.
    let r = s
        .client
        .get(format!("{}/pyroscope/render", s.url))
        .query(&[
            ("query", &format!("{CPU}{{service_name=\"shop\"}}")),
            ("from", &from),
            ("until", &until),
            ("format", &"dot".to_string()),
            ("max-nodes", &"2".to_string()),
        ])
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/vnd.graphviz"));
    let d = r.text().unwrap();
    assert!(d.starts_with(&format!("digraph \"{CPU}\" {{")), "{d}");
    // main holds all 9 (× SCALE), idle 5 of them; work (4) is past the node limit.
    let main = format!(
        "N1 [label=\"main\\n0 (0.00%)\\nof {} (100.00%)\"",
        9 * SCALE
    );
    let idle = format!(
        "N2 [label=\"idle\\n{0} (55.56%)\\nof {0} (55.56%)\"",
        5 * SCALE
    );
    assert!(d.contains(&main) && d.contains(&idle), "{d}");
    assert!(d.contains("Showing 2 of 3 functions (1 dropped)"), "{d}");
    assert!(
        d.contains(&format!("N1 -> N2 [label=\" {}\"", 5 * SCALE)),
        "{d}"
    );
    // Nothing selected: an empty graph text, not an error.
    let r = s
        .client
        .get(format!("{}/pyroscope/render", s.url))
        .query(&[
            ("query", &format!("{CPU}{{service_name=\"nope\"}}")),
            ("from", &from),
            ("format", &"dot".to_string()),
        ])
        .send()
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), r.text().unwrap()),
        (200, String::new())
    );
    let r = s.get(&format!("/pyroscope/render?format=xml&query={CPU}%7B%7D"));
    assert_eq!(r.status(), 400);
}

#[test]
fn merges_answer_dot_and_pprof_and_refuse_trace_ids() {
    let s = fleet();
    let base = json!({
        "profileTypeID": CPU, "labelSelector": "{service_name=\"shop\"}",
        "start": ms(T0), "end": ms(T0 + 3600)
    });
    let with = |extra: Value| {
        let mut b = base.clone();
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        b
    };
    let path = "/querier.v1.QuerierService/SelectMergeStacktraces";
    let (st, v) = post(&s, "", path, with(json!({"format": "PROFILE_FORMAT_DOT"})));
    assert_eq!(st, 200, "{v}");
    let d = v["dot"].as_str().unwrap();
    assert!(
        d.contains(&format!(
            "label=\"main\\n0 (0.00%)\\nof {} (100.00%)\"",
            9 * SCALE
        )),
        "{d}"
    );
    assert!(v.get("flamegraph").is_none());

    let req = q::SelectMergeStacktracesRequest {
        profile_type_id: CPU.into(),
        label_selector: "{}".into(),
        start: ms(T0),
        end: ms(T0 + 3600),
        format: q::ProfileFormat::Pprof as i32,
        ..Default::default()
    };
    let r: q::SelectMergeStacktracesResponse = post_proto(&s, path, &req);
    let p = r.pprof.and_then(|p| p.profile).expect("a pprof profile");
    assert_eq!(p.sample.iter().map(|x| x.value[0]).sum::<i64>(), 9 * SCALE);

    let (st, v) = post(
        &s,
        "",
        path,
        with(json!({"traceIdSelector": ["4bf92f3577b34da6a3ce929d0e0e4736"]})),
    );
    assert_eq!(
        (st, v["code"].as_str()),
        (404, Some("unimplemented")),
        "{v}"
    );
    let (st, _) = post(&s, "", path, with(json!({"format": 9})));
    assert_eq!(st, 400);
    let (st, v) = post(
        &s,
        "",
        "/querier.v1.QuerierService/SelectMergeSpanProfile",
        with(json!({"format": "PROFILE_FORMAT_DOT", "spanSelector": ["00f067aa0ba902b7"]})),
    );
    assert_eq!(st, 400, "{v}");
    // A span selector on SelectMergeStacktraces narrows to those spans: none here.
    let (st, v) = post(
        &s,
        "",
        path,
        with(json!({"spanSelector": ["00f067aa0ba902b7"]})),
    );
    assert_eq!(st, 200);
    assert_eq!(v["flamegraph"]["total"].as_str().unwrap_or("0"), "0", "{v}");
}
