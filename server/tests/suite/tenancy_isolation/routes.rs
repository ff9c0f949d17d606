//! Every route of the server, called as one tenant: the list the isolation test
//! checks against the router's source and the gate's table.

use super::*;

/// Every route, called as the tenant whose service is `svc`, over `[start, end)`.
pub(super) fn every_route(svc: &str, start: i64, end: i64) -> Vec<Call> {
    use Method as M;
    let from = start.to_string();
    let until = end.to_string();
    let q = |s: &str| percent(&format!("{CPU}{s}"));
    let all = q("{}");
    let win = format!("from={from}&until={until}");
    let secs = (now_ms() / 1000 - 60).to_string();
    let pprof = encode(&build_pprof(
        &[("cpu", "nanoseconds")],
        ("cpu", "nanoseconds", 10_000_000),
        &[(vec!["main".into(), format!("{svc}_push")], vec![70_000_000])],
        &[],
        (now_ms() - 60_000) * 1_000_000,
    ));
    let push = json!({"series": [{
        "labels": [{"name": "__name__", "value": "process_cpu"}, {"name": "service_name", "value": svc}],
        "samples": [{"rawProfile": base64::engine::general_purpose::STANDARD.encode(pprof)}],
    }]});
    let otlp = json!({
        "resourceProfiles": [{
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": svc}}]},
            "scopeProfiles": [{"profiles": [{
                "sampleType": {"typeStrindex": 1, "unitStrindex": 2},
                "samples": [{
                    "stackIndex": 1,
                    "values": ["7"],
                    "timestampsUnixNano": [((now_ms() - 60_000) * 1_000_000).to_string()]
                }]
            }]}]
        }],
        "dictionary": {
            "stringTable": ["", "events", "nanoseconds", format!("{svc}_otlp")],
            "functionTable": [{}, {"nameStrindex": 3}],
            "locationTable": [{}, {"lines": [{"functionIndex": 1}]}],
            "stackTable": [{}, {"locationIndices": [1]}]
        }
    });
    let merge_req =
        json!({"profile_typeID": CPU, "label_selector": "{}", "start": start, "end": end});
    let querier = |m: &str, body: Value| {
        with_json(
            call(
                "/querier.v1.QuerierService/{method}",
                M::POST,
                format!("/querier.v1.QuerierService/{m}"),
            ),
            body,
        )
    };
    let window = json!({"start": start, "end": end});
    let rule = json!({
        "name": format!("{svc}-rule"),
        "profile_type": CPU,
        "selector": "{}",
        "watch": {"function": "^main$"},
        "window": "1m",
        "baseline": {"fixed": {"start": start.to_string(), "end": end.to_string()}},
        "condition": {"share_delta_pp": 10},
        "for": "1m",
        "interval": "1m",
        "annotations": {"owner": svc},
    });
    vec![
        call("/ready", M::GET, "/ready".into()),
        call("/healthy", M::GET, "/healthy".into()),
        call("/metrics", M::GET, "/metrics".into()),
        with_text(
            call("/ingest", M::POST, format!("/ingest?name={svc}.cpu&from={secs}")),
            &format!("main;{svc}_ingest 2\n"),
        ),
        with_text(
            call(
                "/pyroscope/ingest",
                M::POST,
                format!("/pyroscope/ingest?name={svc}.cpu&from={secs}"),
            ),
            &format!("main;{svc}_pyroscope 4\n"),
        ),
        with_json(
            call("/push.v1.PusherService/Push", M::POST, "/push.v1.PusherService/Push".into()),
            push,
        ),
        // OTLP: off-CPU events (not the CPU type the totals below count), named after
        // the service so a leak would show its marker.
        with_json(
            call("/v1development/profiles", M::POST, "/v1development/profiles".into()),
            otlp,
        ),
        // An empty gRPC export (one frame of an empty message): the gate's checks on
        // the gRPC route; tests/otlp.rs stores data through it.
        with_bytes(
            call(
                "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export",
                M::POST,
                "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export".into(),
            ),
            "application/grpc",
            vec![0, 0, 0, 0, 0],
        ),
        querier("ProfileTypes", window.clone()),
        querier("LabelNames", window.clone()),
        querier("LabelValues", json!({"name": "service_name", "start": start, "end": end})),
        querier("Series", json!({"matchers": ["{}"], "start": start, "end": end})),
        querier("SelectMergeStacktraces", merge_req.clone()),
        querier("SelectMergeProfile", merge_req.clone()),
        querier(
            "SelectSeries",
            json!({"profile_typeID": CPU, "label_selector": "{}", "start": start, "end": end, "step": 60, "group_by": ["service_name"]}),
        ),
        querier("Diff", json!({"left": merge_req, "right": merge_req})),
        querier(
            "SelectMergeSpanProfile",
            json!({"profile_typeID": CPU, "label_selector": "{}", "span_selector": ["00000000000000aa"], "start": start, "end": end}),
        ),
        querier("GetProfileStats", json!({})),
        querier(
            "SelectHeatmap",
            json!({"profile_typeID": CPU, "label_selector": "{}", "start": start, "end": end, "step": 60, "exemplar_type": "EXEMPLAR_TYPE_INDIVIDUAL"}),
        ),
        querier("AnalyzeQuery", json!({"start": start, "end": end, "query": "{}"})),
        with_json(
            call("/version.v1.Version/{method}", M::POST, "/version.v1.Version/Version".into()),
            json!({}),
        ),
        with_json(
            call(
                "/capabilities.v1.FeatureFlagsService/{method}",
                M::POST,
                "/capabilities.v1.FeatureFlagsService/GetFeatureFlags".into(),
            ),
            json!({}),
        ),
        with_json(
            call("/settings.v1.SettingsService/{method}", M::POST, "/settings.v1.SettingsService/Set".into()),
            json!({"setting": {"name": "owner", "value": svc}}),
        ),
        with_json(
            call("/settings.v1.SettingsService/{method}", M::POST, "/settings.v1.SettingsService/Get".into()),
            json!({}),
        ),
        call("/pyroscope/render", M::GET, format!("/pyroscope/render?query={all}&{win}&format=json")),
        call(
            "/pyroscope/render-diff",
            M::GET,
            format!("/pyroscope/render-diff?leftQuery={all}&rightQuery={all}&leftFrom={from}&leftUntil={until}&rightFrom={from}&rightUntil={until}"),
        ),
        call("/pyroscope/label-values", M::GET, format!("/pyroscope/label-values?label=service_name&{win}")),
        call("/pyroscope/labels", M::GET, format!("/pyroscope/labels?{win}")),
        call("/api/v1/profile_types", M::GET, format!("/api/v1/profile_types?{win}")),
        call("/api/v1/labels", M::GET, format!("/api/v1/labels?{win}")),
        call("/api/v1/label_values", M::GET, format!("/api/v1/label_values?name=service_name&{win}")),
        call("/api/v1/series", M::GET, format!("/api/v1/series?{win}")),
        call("/api/v1/merge", M::GET, format!("/api/v1/merge?query={all}&{win}")),
        with_json(
            call("/api/v1/query", M::POST, "/api/v1/query".into()),
            json!({"profile_type": CPU, "selector": "{}", "start": start, "end": end, "group_by": ["service_name", "function"]}),
        ),
        call("/api/v1/timeseries", M::GET, format!("/api/v1/timeseries?query={all}&{win}&step=60")),
        with_json(
            call("/api/v1/diff", M::POST, "/api/v1/diff".into()),
            json!({"profile_type": CPU, "selector": "{}", "base": window, "compare": window}),
        ),
        call("/api/v1/flamegraph", M::GET, format!("/api/v1/flamegraph?query={all}&{win}")),
        call("/api/v1/functions", M::GET, format!("/api/v1/functions?query={all}&{win}")),
        call("/api/v1/sandwich", M::GET, format!("/api/v1/sandwich?query={all}&{win}&function=main")),
        call("/api/v1/pprof", M::GET, format!("/api/v1/pprof?query={all}&{win}")),
        call("/api/v1/render.svg", M::GET, format!("/api/v1/render.svg?query={all}&{win}")),
        call(
            "/api/v1/diff.svg",
            M::GET,
            format!("/api/v1/diff.svg?query={all}&base_from={from}&base_until={until}&compare_from={from}&compare_until={until}&tenant=beta"),
        ),
        call("/api/v1/fleet/hottest", M::GET, format!("/api/v1/fleet/hottest?query={all}&{win}")),
        call("/api/v1/fleet/cpi", M::GET, format!("/api/v1/fleet/cpi?{win}")),
        call("/api/v1/fleet/assignment", M::GET, format!("/api/v1/fleet/assignment?{win}")),
        call("/api/v1/fleet/variance", M::GET, format!("/api/v1/fleet/variance?query={all}&{win}")),
        call("/api/v1/admin/segments", M::GET, "/api/v1/admin/segments".into()),
        with_json(call("/internal/v1/partial", M::POST, "/internal/v1/partial".into()), json!({})),
        with_json(call("/api/v1/admin/compact", M::POST, "/api/v1/admin/compact".into()), json!({})),
        call("/api/v1/admin/retention", M::GET, "/api/v1/admin/retention?tenant=beta".into()),
        with_json(
            call("/api/v1/admin/retention", M::PUT, "/api/v1/admin/retention".into()),
            json!({"tenant": "beta", "max_age": "1h"}),
        ),
        // An agent checking in: its host is named after the service, so another
        // tenant's agent list would show the marker.
        with_json(
            call(
                "/control.v1.ControlService/GetPlan",
                M::POST,
                "/control.v1.ControlService/GetPlan".into(),
            ),
            json!({"agentId": format!("{svc}_agent"), "host": format!("{svc}_host")}),
        ),
        call("/api/v1/agents", M::GET, "/api/v1/agents".into()),
        call("/api/v1/admin/agents/policy", M::GET, "/api/v1/admin/agents/policy".into()),
        with_json(
            call("/api/v1/admin/agents/policy", M::PUT, "/api/v1/admin/agents/policy".into()),
            json!({"period_secs": 60}),
        ),
        call("/api/v1/admin/agents/overrides", M::GET, "/api/v1/admin/agents/overrides".into()),
        with_json(
            call("/api/v1/admin/agents/overrides", M::POST, "/api/v1/admin/agents/overrides".into()),
            json!({"host": format!("{svc}_host"), "until": "1h"}),
        ),
        call(
            "/api/v1/admin/agents/overrides/{id}",
            M::DELETE,
            "/api/v1/admin/agents/overrides/1".into(),
        ),
        call(
            "/api/v1/admin/fleet/variance/boost",
            M::POST,
            format!("/api/v1/admin/fleet/variance/boost?query={all}&{win}&duration=1m"),
        ),
        call("/api/v1/alerts", M::GET, "/api/v1/alerts".into()),
        call("/api/v1/alerts/rules", M::GET, "/api/v1/alerts/rules".into()),
        with_json(call("/api/v1/alerts/rules", M::POST, "/api/v1/alerts/rules".into()), rule.clone()),
        call("/api/v1/alerts/rules/{name}", M::GET, "/api/v1/alerts/rules/beta-rule".into()),
        with_json(
            call("/api/v1/alerts/rules/{name}", M::PUT, "/api/v1/alerts/rules/beta-rule".into()),
            renamed(&rule, "beta-rule"),
        ),
        call("/api/v1/alerts/rules/{name}", M::DELETE, "/api/v1/alerts/rules/beta-rule".into()),
        call("/", M::GET, "/".into()),
        call("/ui", M::GET, "/ui".into()),
        call("/ui/", M::GET, "/ui/".into()),
        call("/ui/assets/{*path}", M::GET, "/ui/assets/index.html".into()),
        call("/ui/{*view}", M::GET, "/ui/explore".into()),
    ]
}
