//! What several pages' forms and links share: addresses with a query,
//! a key's fields, the policy, range and step choosers, the clock.
//!
//! A key is named in an address by `key` and, for a grouped key (SPEC
//! §17), the tokens before it: `org`, then `team` (`org=acme&team=eng&key=alice`
//! for `acme/eng/alice`), each as it was asked. Fields rather than a path
//! split at `/`, so that a plain key with a `/` in it is still one key.

use super::range::{Range, PRESETS};
use crate::App;
use maud::{html, Markup};
use sluice_client::KeyPath;
use sluice_core::key::{key_as_asked, TOKEN_SEPARATOR};
use sluice_core::usage::By;

/// How many keys a ranking shows without `n`.
const DEFAULT_N: u64 = 20;
use std::time::{SystemTime, UNIX_EPOCH};

/// The wall clock, in ms since the epoch (the workers' clocks decide what
/// "the last hour" holds; this one only says where a page's range ends).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `path?name=value&...`, each value encoded; empty values left out.
pub(crate) fn href(path: &str, pairs: &[(&str, &str)]) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (name, value) in pairs.iter().filter(|(_, v)| !v.is_empty()) {
        query.append_pair(name, value);
    }
    let query = query.finish();
    if query.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{query}")
    }
}

/// The key a page's `org`, `team` and `key` fields name (empty fields
/// left out), or why none.
pub(crate) fn key_path(
    org: Option<&str>,
    team: Option<&str>,
    key: &str,
) -> Result<KeyPath, String> {
    let (org, team) = (
        org.filter(|o| !o.is_empty()),
        team.filter(|t| !t.is_empty()),
    );
    if team.is_some() && org.is_none() {
        return Err("a team is named with its org".into());
    }
    KeyPath::new(org.into_iter().chain(team).chain([key])).map_err(|e| e.message().to_string())
}

/// The fields naming the key whose token is `key_token`: `key`, and
/// `org` and `team` before a grouped key's own token, each as asked.
pub(crate) fn key_fields(key_token: &str) -> Vec<(&'static str, String)> {
    let tokens: Vec<String> = key_token.split(TOKEN_SEPARATOR).map(key_as_asked).collect();
    let names: &[&'static str] = match tokens.len() {
        1 => &["key"],
        2 => &["org", "key"],
        _ => &["org", "team", "key"],
    };
    names.iter().copied().zip(tokens).collect()
}

/// `path?...` naming the key whose token is `key_token` by its fields
/// ([`key_fields`]), then `more`.
pub(crate) fn key_href(path: &str, key_token: &str, more: &[(&str, &str)]) -> String {
    let fields = key_fields(key_token);
    let mut pairs: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (*n, v.as_str())).collect();
    pairs.extend_from_slice(more);
    href(path, &pairs)
}

/// The `org` and `team` inputs of a form that names a key, for a grouped
/// key's tokens before its own.
pub(crate) fn group_inputs(org: Option<&str>, team: Option<&str>) -> Markup {
    html! {
        label { "org " input.token type="text" name="org" value=(org.unwrap_or("")) placeholder="none"; }
        label { "team " input.token type="text" name="team" value=(team.unwrap_or("")) placeholder="none"; }
    }
}

/// What a ranking's `by` asks for (`used` unless `denied`).
pub(crate) fn by_of(by: Option<&str>) -> By {
    match by {
        Some("denied") => By::Denied,
        _ => By::Used,
    }
}

/// The word for `by`, as addresses and pages say it.
pub(crate) fn by_name(by: By) -> &'static str {
    match by {
        By::Used => "used",
        By::Denied => "denied",
    }
}

/// A ranking's `n` (default 20), or why it is not a number.
pub(crate) fn top_n(n: Option<&str>) -> Result<u64, String> {
    match n.map(str::trim).filter(|n| !n.is_empty()) {
        None => Ok(DEFAULT_N),
        Some(n) => n
            .parse()
            .map_err(|_| format!("top is a number of keys (1 to 1000), not {n:?}")),
    }
}

/// A ranking's `by` and `n` inputs.
pub(crate) fn ranking_inputs(by: By, n: Option<&str>) -> Markup {
    let n = n.filter(|n| !n.is_empty()).unwrap_or("20");
    html! {
        label {
            "by "
            select name="by" {
                option value="used" selected[by == By::Used] { "used" }
                option value="denied" selected[by == By::Denied] { "denied" }
            }
        }
        label { "top " input type="number" name="n" min="1" max="1000" value=(n); }
    }
}

/// A fixed range's query pairs.
pub(crate) fn range_pairs(range: Range) -> [(&'static str, String); 2] {
    [
        ("from", range.from_ms.to_string()),
        ("to", range.to_ms.to_string()),
    ]
}

/// A `<select name="policy">` of the policies in force; with `any`, a
/// first choice "every policy" (empty).
pub(crate) fn policy_select(app: &App, selected: Option<&str>, any: Option<&str>) -> Markup {
    let policies = app.client.policies();
    html! {
        label {
            "policy "
            select name="policy" {
                @if let Some(any) = any {
                    option value="" selected[selected.is_none_or(str::is_empty)] { (any) }
                }
                @for p in policies.iter() {
                    option value=(p.name()) selected[selected == Some(p.name())] { (p.name()) }
                }
            }
        }
    }
}

/// A `<select name="last">` of the preset ranges.
pub(crate) fn last_select(selected: Option<&str>) -> Markup {
    let selected = selected
        .filter(|s| !s.is_empty())
        .unwrap_or(super::range::DEFAULT_LAST);
    html! {
        label {
            "last "
            select name="last" {
                @for p in PRESETS {
                    option value=(p) selected[*p == selected] { (p) }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_named_by_its_fields_and_read_back_from_them() {
        for token in ["alice", "a%2Fb", "acme.alice", "acme.eng.bob%40x%2Eio"] {
            let fields = key_fields(token);
            let get = |name| {
                fields
                    .iter()
                    .find(|(field, _)| *field == name)
                    .map(|(_, v)| v.as_str())
            };
            let path = key_path(get("org"), get("team"), get("key").unwrap()).unwrap();
            assert_eq!(path.token(), token, "{fields:?}");
        }
        assert_eq!(
            key_href("/ui/usage", "acme.eng.alice", &[("policy", "user")]),
            "/ui/usage?org=acme&team=eng&key=alice&policy=user"
        );
        assert!(key_path(None, Some("eng"), "alice").is_err());
        let plain = key_path(Some(""), Some(""), "a/b").unwrap();
        assert_eq!(plain.token(), "a%2Fb", "a '/' inside a plain key");
    }
}
