//! The description cannot drift: it is the committed file, and every `/v1`
//! route is added with its description.

use super::openapi_json;
use std::path::{Path, PathBuf};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn the_committed_description_is_the_generated_one() {
    let file = repository().join("docs/openapi.json");
    let generated = openapi_json();
    if std::env::var_os("SLUICE_WRITE_OPENAPI").is_some() {
        std::fs::write(&file, &generated).expect("docs/openapi.json is writable");
    }
    let committed = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/openapi.json is not the description the gateway serves; \
         run `SLUICE_WRITE_OPENAPI=1 cargo test -p sluice-gateway --lib api::tests` and commit it"
    );
}

/// A `/v1` route added with `.route(...)` has no `#[utoipa::path]`, so
/// the description would not list it: every one must go through
/// `routes!` in `api::routes` (paths that name no key, ending in `/`,
/// are the 400s of `lib.rs`'s `no_key_routes`, as are the paths of four
/// key segments or more, `grouped::too_deep_routes`).
#[test]
fn every_v1_route_is_added_with_its_description() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut undescribed = Vec::new();
    let mut files = vec![src];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") || path.ends_with("api/tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (at, _) in text.match_indices(".route(\"/v1") {
            let literal: String = text[at + 8..].chars().take_while(|c| *c != '"').collect();
            if !literal.ends_with('/') {
                undescribed.push(format!("{}: {literal}", path.display()));
            }
        }
    }
    assert!(
        undescribed.is_empty(),
        "add these routes with routes!(handler) in api::routes, the handler carrying #[utoipa::path]: {undescribed:?}"
    );
    let api = super::openapi();
    for path in [
        "/v1/allow/{key}",
        "/v1/batch",
        "/v1/status",
        "/v1/openapi.json",
    ] {
        assert!(api.paths.paths.contains_key(path), "{path} is described");
    }
    for (path, item) in &api.paths.paths {
        let ops = [&item.get, &item.put, &item.post, &item.delete];
        for op in ops.into_iter().flatten() {
            assert!(
                op.description.is_some() || op.summary.is_some(),
                "{path}: every operation says what it does"
            );
            assert!(
                path == "/v1/openapi.json" || op.responses.responses.contains_key("401"),
                "{path}: 401 is described"
            );
        }
    }
}

/// Every decision's reply carries the RateLimit headers and who decided
/// (`respond::put_decision_headers`); a denial also `Retry-After`.
#[test]
fn decisions_are_described_with_their_headers() {
    let api = super::openapi();
    let response = |path: &str, status: &str| {
        let item = &api.paths.paths[path];
        let op = item.get.as_ref().or(item.post.as_ref()).unwrap();
        match &op.responses.responses[status] {
            utoipa::openapi::RefOr::T(r) => r.headers.keys().cloned().collect::<Vec<_>>(),
            utoipa::openapi::RefOr::Ref(_) => panic!("{path} {status}: a reference"),
        }
    };
    for (path, status) in [
        ("/v1/allow/{key}", "200"),
        ("/v1/allow/{key}", "429"),
        ("/v1/hit/{key}", "200"),
        ("/v1/reserve/{key}", "200"),
        ("/v1/settle/{key}", "200"),
    ] {
        let headers = response(path, status);
        for name in [
            "RateLimit-Limit",
            "RateLimit-Remaining",
            "RateLimit-Reset",
            "Sluice-Source",
        ] {
            assert!(
                headers.iter().any(|h| h == name),
                "{path} {status}: {headers:?}"
            );
        }
    }
    assert!(response("/v1/allow/{key}", "429")
        .iter()
        .any(|h| h == "Retry-After"));
    assert!(!response("/v1/batch", "200")
        .iter()
        .any(|h| h.starts_with("RateLimit")));
}
