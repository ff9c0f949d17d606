//! docs/openapi.yaml against the server: every `$ref` resolves, and every path and
//! method it documents is routed (answered by an endpoint, not by the router's
//! 404 or 405).

use crate::common::*;

fn refs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x.as_str()) {
                    ("$ref", Some(r)) => out.push(r.to_string()),
                    _ => refs(x, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
        _ => {}
    }
}

#[test]
fn every_documented_path_is_served_and_every_ref_resolves() {
    let path = repo_root().join("docs/openapi.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let doc: serde_json::Value = serde_norway::from_str(&text).unwrap();
    let mut found = Vec::new();
    refs(&doc, &mut found);
    assert!(!found.is_empty());
    for r in found {
        let pointer = r
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("{r}: not local"));
        assert!(doc.pointer(pointer).is_some(), "{r} does not resolve");
    }

    let s = TestServer::start();
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.contains_key("/api/v1/adhoc/diff") && paths.contains_key("/api/v1/debuginfo"));
    for (p, item) in paths {
        let url = format!("{}{}", s.url, p.replace("{id}", "0").replace("{name}", "x"));
        for method in ["get", "post", "put", "delete"] {
            if item.get(method).is_none() {
                continue;
            }
            let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let r = s.client.request(m, &url).send().unwrap();
            let status = r.status().as_u16();
            let body: serde_json::Value = r.json().unwrap_or_default();
            let message = body["message"].as_str().unwrap_or("");
            assert!(
                status != 405 && !(status == 404 && message.starts_with("no endpoint")),
                "{method} {p}: {status} {message}"
            );
        }
    }
}
