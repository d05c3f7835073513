//! `GET /openapi.json` against the code it documents: every route the router
//! serves (read from `src/api/mod.rs`), every problem slug the code can
//! answer with ([`ProblemType::ALL`], each used under `src/`), the headers,
//! and the bearer scheme (tried against the running gateway).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::{TestGateway, TestStore};
use intentgate::api::{PROBLEM_TYPE_BASE, ProblemType};
use reqwest::Method;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_covers_every_route_header_and_problem() {
    let store = TestStore::new(common::Backend::Sqlite).await.unwrap();
    let gw = TestGateway::start(&store).await;

    let response = common::client().get(gw.url("/openapi.json")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200, "served without an API key");
    let content_type = response.headers().get("content-type").unwrap().to_str().unwrap().to_owned();
    assert!(content_type.starts_with("application/json"), "content type {content_type}");
    let doc: Value = serde_json::from_str(&response.text().await.unwrap()).expect("the document is JSON");

    assert!(doc["openapi"].as_str().unwrap().starts_with("3."), "an OpenAPI 3 document: {}", doc["openapi"]);
    assert_refs_resolve(&doc, &doc);

    let served = served_routes();
    every_served_route_is_documented(&doc, &served);
    security_matches_the_gateway(&gw, &doc, &served).await;
    headers_are_documented(&doc);
    problems_are_documented(&doc);
    for name in ["Problem", "JobView", "AttemptView", "JobRequest", "JobStatus", "AttemptState", "Resolve"] {
        assert!(doc["components"]["schemas"][name].is_object(), "schema {name}");
    }
}

/// Every Rust file under `src/api`: the router and each door declare
/// routes (a door in its own module), so all of them are read.
fn api_sources() -> Vec<(std::path::PathBuf, String)> {
    let mut files = Vec::new();
    let mut folders = vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/api")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).expect("src/api is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let source = std::fs::read_to_string(&path).expect("a source file");
                files.push((path, source));
            }
        }
    }
    files
}

/// `(path, method)` for every `.route("PATH", get(..).post(..))` in
/// `src/api`, methods lower-case.
fn served_routes() -> BTreeSet<(String, String)> {
    let mut routes = BTreeSet::new();
    for (file, source) in api_sources() {
        for unscanned in [".nest(", ".nest_service(", ".route_service("] {
            assert!(
                !source.contains(unscanned),
                "{} uses `{unscanned}`: teach served_routes() to read it",
                file.display()
            );
        }
        routes_in(&source, &mut routes);
    }
    assert!(routes.len() >= 14, "the scan found too few routes: {routes:?}");
    routes
}

fn routes_in(source: &str, routes: &mut BTreeSet<(String, String)>) {
    let mut rest = source;
    while let Some(at) = rest.find(".route(\"") {
        let args = call_arguments(&rest[at + ".route".len()..]);
        rest = &rest[at + ".route(".len()..];
        let path = first_string_literal(args).expect("a route path literal");
        let handlers = &args[args.find(',').expect("a method router") + 1..];
        let methods = top_level_calls(handlers);
        assert!(!methods.is_empty(), "no methods found for route {path}: {handlers}");
        for method in methods {
            assert!(
                ["get", "post", "put", "delete", "patch", "head", "options", "trace"]
                    .contains(&method.as_str()),
                "route {path}: `{method}` is not a method router"
            );
            routes.insert((path.clone(), method));
        }
    }
}

fn every_served_route_is_documented(doc: &Value, served: &BTreeSet<(String, String)>) {
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().unwrap().keys() {
            if ["get", "post", "put", "delete", "patch", "head", "options", "trace"]
                .contains(&method.as_str())
            {
                documented.insert((path.clone(), method.clone()));
            }
        }
    }
    let missing: Vec<_> = served.difference(&documented).collect();
    assert!(missing.is_empty(), "served but not in /openapi.json: {missing:?}");
    let extra: Vec<_> = documented.difference(served).collect();
    assert!(extra.is_empty(), "in /openapi.json but not served: {extra:?}");
}

/// An operation documented with the `bearer` scheme answers 401 without an
/// API key; one documented without it does not.
async fn security_matches_the_gateway(gw: &TestGateway, doc: &Value, served: &BTreeSet<(String, String)>) {
    let scheme = &doc["components"]["securitySchemes"]["bearer"];
    assert_eq!(scheme["type"], "http", "{scheme}");
    assert_eq!(scheme["scheme"].as_str().map(str::to_lowercase).as_deref(), Some("bearer"), "{scheme}");
    for (path, method) in served {
        let operation = &doc["paths"][path][method];
        let secured = operation["security"].as_array().is_some_and(|alternatives| {
            alternatives.iter().all(|alt| alt.get("bearer").is_some() || alt.get("x-api-key").is_some())
        });
        let concrete = path
            .replace("{id}", &uuid::Uuid::now_v7().to_string())
            .replace("{number}", "1")
            .replace("{name}", "sim-primary");
        assert!(!concrete.contains('{'), "give {path}'s parameters a value");
        let url = gw.url(&concrete);
        let response = common::client()
            .request(method.to_uppercase().parse::<Method>().unwrap(), url)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        if secured {
            assert_eq!(status, 401, "{method} {path} is documented as needing a key");
            assert!(operation["responses"]["401"].is_object(), "{method} {path} documents its 401");
        } else {
            assert_ne!(status, 401, "{method} {path} needs a key but documents no security");
        }
    }
}

fn headers_are_documented(doc: &Value) {
    let header_param = |path: &str, method: &str, name: &str| -> Value {
        doc["paths"][path][method]["parameters"]
            .as_array()
            .and_then(|params| {
                params.iter().find(|p| p["in"] == "header" && p["name"].as_str() == Some(name)).cloned()
            })
            .unwrap_or_else(|| panic!("{method} {path}: no `{name}` header parameter"))
    };
    for (path, method) in [("/v1/jobs", "post"), ("/v1/chat/completions", "post")] {
        let key = header_param(path, method, "Idempotency-Key");
        assert_eq!(key["required"], true, "{method} {path} Idempotency-Key");
        let text = key["description"].as_str().unwrap();
        assert!(text.contains("255") && text.contains("RFC 8941"), "{text}");
    }
    for (path, method) in [("/v1/jobs", "post"), ("/v1/jobs/{id}", "get")] {
        let prefer = header_param(path, method, "Prefer");
        assert!(prefer["description"].as_str().unwrap().contains("wait=N"), "{prefer}");
    }

    let mut response_headers = BTreeSet::new();
    for_each_response(doc, |_, _, _, response| {
        if let Some(headers) = resolve(doc, response)["headers"].as_object() {
            response_headers.extend(headers.keys().map(|name| name.to_lowercase()));
        }
    });
    for name in [
        "location",
        "idempotent-replayed",
        "preference-applied",
        "x-should-retry",
        "retry-after",
        "x-intentgate-job-id",
        "x-intentgate-attempt",
        "www-authenticate",
    ] {
        assert!(response_headers.contains(name), "response header `{name}` in {response_headers:?}");
    }
    let created = &doc["paths"]["/v1/jobs"]["post"]["responses"];
    assert!(created["201"]["headers"]["Location"].is_object(), "{created}");
    assert!(created["200"]["headers"]["Idempotent-Replayed"].is_object(), "{created}");
}

fn problems_are_documented(doc: &Value) {
    let problem = &doc["components"]["schemas"]["Problem"];
    for member in ["type", "title", "status", "detail", "job_id", "attempt_id", "attempt", "error"] {
        assert!(problem["properties"][member].is_object(), "Problem.{member}");
    }
    let documented: BTreeSet<String> = problem["properties"]["type"]["enum"]
        .as_array()
        .expect("Problem.type lists the problem types")
        .iter()
        .map(|uri| uri.as_str().unwrap().strip_prefix(PROBLEM_TYPE_BASE).unwrap().to_owned())
        .collect();
    let table = problem["description"].as_str().unwrap();
    let in_code = problems_in_code();
    for (slug, status) in &in_code {
        assert!(documented.contains(slug), "problem `{slug}` ({status}) is not in Problem.type");
        assert!(
            table.contains(&format!("| `{slug}` | {status} |")),
            "problem `{slug}` is not documented with status {status}:\n{table}"
        );
    }
    let stale: Vec<_> = documented.iter().filter(|slug| !in_code.contains_key(*slug)).collect();
    assert!(stale.is_empty(), "documented problems no code answers with: {stale:?}");

    // Every error response is problem+json, and names slugs of its status.
    for_each_response(doc, |path, method, status, response| {
        let Ok(code) = status.parse::<u16>() else { return };
        if code < 400 {
            return;
        }
        let response = resolve(doc, response);
        // A door whose errors are in its protocol's shape documents that shape.
        let door_shape = response["content"]["application/json"]["schema"]["$ref"]
            .as_str()
            .is_some_and(|schema| schema.ends_with("/MessagesError"));
        assert!(
            response["content"]["application/problem+json"].is_object() || door_shape,
            "{method} {path} {status} is not application/problem+json"
        );
        let description = response["description"].as_str().unwrap_or_default();
        let named: Vec<&str> = description.split('`').skip(1).step_by(2).collect();
        let slugs: Vec<_> = named.iter().filter(|slug| in_code.contains_key(**slug)).collect();
        assert!(!slugs.is_empty(), "{method} {path} {status} names no problem slug: {description}");
        for slug in slugs {
            assert_eq!(in_code[*slug], code, "{method} {path} {status} names `{slug}`");
        }
    });
}

/// `slug → status` of every problem type ([`ProblemType::ALL`]), each of
/// which some code under `src/` answers with (none is stale).
fn problems_in_code() -> BTreeMap<String, u16> {
    let mut files = Vec::new();
    rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    let table = Path::new("src/api/problem/kind.rs");
    let sources: String = files
        .iter()
        .filter(|file| !file.ends_with(table))
        .map(|file| std::fs::read_to_string(file).unwrap())
        .collect();
    let mut found = BTreeMap::new();
    for kind in ProblemType::ALL {
        let slug = kind.slug();
        assert!(
            sources.contains(&format!("ProblemType::{kind:?}")),
            "problem `{slug}` ({kind:?}): no code under src/ answers with it"
        );
        assert!(found.insert(slug.to_owned(), kind.status().as_u16()).is_none(), "`{slug}` twice");
    }
    assert!(found.len() >= 20, "too few problem types: {found:?}");
    found
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The text between the `(` that `text` starts with and its matching `)`,
/// skipping string literals.
fn call_arguments(text: &str) -> &str {
    assert!(text.starts_with('('), "not a call: {}", &text[..text.len().min(40)]);
    let bytes = text.as_bytes();
    let (mut depth, mut i) = (0usize, 0usize);
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return &text[1..i];
                }
            }
            _ => {}
        }
        i += 1;
    }
    panic!("unbalanced call: {}", &text[..text.len().min(80)]);
}

/// The first `"..."` literal in `text`, unescaped naively (slugs and paths
/// have no escapes).
fn first_string_literal(text: &str) -> Option<String> {
    let start = text.find('"')? + 1;
    let end = start + text[start..].find('"')?;
    Some(text[start..end].to_owned())
}

/// The names of calls at the top level of `text`: `get(a).post(b)` gives
/// `get` and `post`.
fn top_level_calls(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text.trim_start();
    loop {
        rest = rest.trim_start_matches(|c: char| c == '.' || c.is_whitespace());
        let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if name.is_empty() {
            break;
        }
        rest = &rest[name.len()..];
        if !rest.starts_with('(') {
            break;
        }
        let args = call_arguments(rest);
        rest = &rest[args.len() + 2..];
        names.push(name);
    }
    names
}

fn for_each_response(doc: &Value, mut visit: impl FnMut(&str, &str, &str, &Value)) {
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let Some(responses) = operation["responses"].as_object() else { continue };
            for (status, response) in responses {
                visit(path, method, status, response);
            }
        }
    }
}

/// A response, following its `$ref` into `components.responses`.
fn resolve<'a>(doc: &'a Value, response: &'a Value) -> &'a Value {
    match response["$ref"].as_str() {
        Some(reference) => {
            let name = reference.strip_prefix("#/components/responses/").expect("a response $ref");
            let target = &doc["components"]["responses"][name];
            assert!(target.is_object(), "dangling {reference}");
            target
        }
        None => response,
    }
}

/// Every local `$ref` points at something that exists.
fn assert_refs_resolve(doc: &Value, node: &Value) {
    match node {
        Value::Object(members) => {
            if let Some(reference) = members.get("$ref").and_then(Value::as_str) {
                let pointer = reference.strip_prefix('#').expect("a local $ref");
                assert!(doc.pointer(pointer).is_some(), "dangling $ref {reference}");
            }
            members.values().for_each(|value| assert_refs_resolve(doc, value));
        }
        Value::Array(items) => items.iter().for_each(|item| assert_refs_resolve(doc, item)),
        _ => {}
    }
}
