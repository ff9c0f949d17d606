//! The Fleet view's tables (and its boost) against the fleet API.

use super::*;

/// The cells of each body row of the table `css`.
fn table_rows(b: &Browser, css: &str) -> Vec<Vec<String>> {
    let n = b.find_all(&format!("{css} tbody tr")).len();
    (1..=n)
        .map(|i| {
            b.find_all(&format!("{css} tbody tr:nth-child({i}) td"))
                .iter()
                .map(|c| b.text(c))
                .collect()
        })
        .collect()
}

#[test]
fn fleet_view_tables_match_the_api() {
    let Some(Setup { s, b, from, until }) = setup() else {
        return;
    };
    // Four hosts of `pay`: zone b's cost twice zone a's, all of it in a lock.
    let at = until / 1000 - 1800;
    for (h, zone, lock) in [
        ("h1", "a", 0),
        ("h2", "a", 0),
        ("h3", "b", 100),
        ("h4", "b", 100),
    ] {
        ingest(
            &s,
            None,
            &format!("pay.cpu{{host={h},zone={zone}}}"),
            at,
            format!("main;pay::serve 100\nmain;pay::lock {lock}\n").into_bytes(),
            "folded",
        );
    }
    // CPI 1 on p1, 3 on p2.
    for (platform, cycles) in [("p1", 100), ("p2", 300)] {
        crate::common::ingest_hw_event(&s, "cycles", "pay", platform, &[("pay::run", cycles)], at);
        crate::common::ingest_hw_event(
            &s,
            "instructions",
            "pay",
            platform,
            &[("pay::run", 100)],
            at,
        );
    }
    b.goto(&format!(
        "{}/ui/fleet?type={CPU}&from={from}&until={until}",
        s.url
    ));
    b.wait_idle(60);
    assert_eq!(b.error_text(), "");
    let current = b.find("header nav a[aria-current=page]");
    assert_eq!(b.text(&current), "Fleet");
    let q = format!("{CPU}{{}}");
    let (from_s, until_s) = (from.to_string(), until.to_string());
    let with = |extra: &[(&'static str, &'static str)]| -> Vec<(String, String)> {
        [("from", from_s.as_str()), ("until", until_s.as_str())]
            .iter()
            .chain(extra)
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let json = |path: &str, params: Vec<(String, String)>| {
        let p: Vec<(&str, &str)> = params
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        s.json(path, &p)
    };

    // Hottest shared code: the API's ranking, row for row.
    let mut hot_params = with(&[("limit", "20")]);
    hot_params.push(("query".into(), q.clone()));
    let hot = json("/api/v1/fleet/hottest", hot_params);
    let rows = table_rows(&b, "section[aria-label='Hottest shared code'] table");
    let entries = hot["entries"].as_array().unwrap();
    assert_eq!(rows.len(), entries.len());
    for (row, e) in rows.iter().zip(entries) {
        assert_eq!(row[0], e["name"].as_str().unwrap(), "{rows:?}");
        assert_eq!(row[1], e["services"].to_string(), "{rows:?}");
    }
    assert_eq!(rows[0][0], "json::encode");
    assert_eq!(hot["services"], json!(3), "checkout, search, pay");

    // CPI per (service, platform), highest first.
    let cpi = json("/api/v1/fleet/cpi", with(&[]));
    let api_rows: Vec<(String, String, f64)> = cpi["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["key"][0].as_str().unwrap().to_string(),
                r["key"][1].as_str().unwrap().to_string(),
                num(&r["cpi"]),
            )
        })
        .collect();
    assert_eq!(
        api_rows,
        [
            ("pay".into(), "p1".into(), 1.0),
            ("pay".into(), "p2".into(), 3.0)
        ]
    );
    let rows = table_rows(
        &b,
        "section[aria-label='CPI per service and platform'] table",
    );
    let shown: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| (r[0].clone(), r[1].clone(), r[4].clone()))
        .collect();
    assert_eq!(
        shown,
        [
            ("pay".into(), "p2".into(), "3.000".into()),
            ("pay".into(), "p1".into(), "1.000".into())
        ]
    );

    // Variance: only pay has hosts; its explainers and correlated labels.
    let mut var_params = with(&[]);
    var_params.push(("query".into(), q.clone()));
    let v = json("/api/v1/fleet/variance", var_params);
    assert_eq!(v["groups"].as_array().map(Vec::len), Some(1), "{v}");
    let g = &v["groups"][0];
    let rows = table_rows(
        &b,
        "section[aria-label='Variance groups'] table[aria-label=variance]",
    );
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0][0], "service_name=pay");
    assert_eq!(rows[0][1], "4");
    assert_eq!(rows[0][6], format!("{:.3}", num(&g["cov"])));
    assert_eq!(rows[0][6], "0.333", "σ 50 over a mean of 150");
    assert!(rows[0][4].starts_with("h3 "), "{rows:?}");
    let why = "section[aria-label='Why service_name=pay varies']";
    let functions = table_rows(&b, &format!("{why} table[aria-label^=Functions]"));
    assert_eq!(g["explainers"][0]["function"], "pay::lock");
    assert_eq!(functions[0], ["pay::lock", "50.0%", "0.000%"]);
    let labels = table_rows(&b, &format!("{why} table[aria-label^=Labels]"));
    let c = &g["correlated_labels"][0];
    assert_eq!(
        (c["label"].clone(), c["value"].clone()),
        (json!("zone"), json!("b"))
    );
    assert_eq!((num(&c["effect"]), num(&c["ratio"])), (2.0, 2.0));
    assert_eq!(
        labels,
        [["zone=b", "2", "2.00 s", "1.00 s", "2.00×", "+2.00"]],
        "{labels:?}"
    );
    b.window_size(1400, 1700);
    b.screenshot(&screenshots(), "fleet");

    // The boost button raises the group's hosts for an hour.
    b.click(&b.find("div[aria-label='Boost sampling'] button"));
    let out = b.find("div[aria-label='Boost sampling'] output");
    let text = wait_for(10, "the boost's answer", || {
        let t = b.text(&out);
        (!t.is_empty()).then_some(t)
    });
    assert!(text.starts_with("4 hosts at 99 Hz until "), "{text}");
    assert!(text.ends_with(": h1, h2, h3, h4"), "{text}");
    b.screenshot(&screenshots(), "fleet-boost");
    let listed = s.json("/api/v1/admin/agents/overrides", &[]);
    let hosts: Vec<&str> = listed["overrides"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, ["h1", "h2", "h3", "h4"]);
}
