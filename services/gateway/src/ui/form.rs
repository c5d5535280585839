//! What several pages' forms and links share: addresses with a query,
//! the policy, range and step choosers, the clock.

use super::range::{Range, PRESETS};
use crate::App;
use maud::{html, Markup};
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
