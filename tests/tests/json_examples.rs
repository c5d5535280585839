//! Every JSON body a page shows is one the wire really carries: each
//! ```` ```json ```` block of README.md, CONTRIBUTING.md,
//! clients/python/README.md and docs/*.md is read by the same code that
//! reads that body in sluice, so a sample with a misspelt field, a number
//! where a string goes or a field left out fails here, not in a reader's
//! program.
//!
//! The line right before each `json` fence says what the block is:
//!
//! - `<!-- json: DecisionReply -->`: a body of that wire type, one of
//!   [`TYPES`] (the name of the Rust type that carries it). The block is
//!   decoded by the type's own reader (the one clients or workers use) and
//!   must be accepted; then it is written back by the type's own writer,
//!   and the two must have the same fields at every level. That second
//!   step makes the check strict where the wire is lenient on purpose
//!   (replies only gain fields, so readers ignore fields they do not know):
//!   a field the type does not have is dropped on the way back and caught,
//!   and so is a field the type always writes that the sample left out.
//!   Values are compared by kind only (a number stays a number), since a
//!   writer may spell a value its own way (`"1m"` as `"60s"`).
//! - `<!-- json not wire: why -->`: JSON that is not a body of the wire
//!   (a file of another program, say), with the reason.
//!
//! A `json` block without either mark fails, and so does one whose type
//! is not in [`TYPES`]. Blocks of other kinds are checked elsewhere
//! (tests/docs/test_examples.py: `sh`, `python`, `toml` and `text`).

use serde_json::Value;
use sluice_core::alerts::Alert;
use sluice_core::config::PolicyTable;
use sluice_core::policies::parse_override;
use sluice_core::wire::inspect::{decode_admin_reply, InspectReply, ResetReply};
use sluice_core::wire::usage::{TopReply, UsageReply};
use sluice_core::wire::{decode_reply, decode_request, Reply};
use std::path::{Path, PathBuf};

/// Reads a body as sluice reads it and gives back what the type writes
/// for it, or why the body was refused.
type Reader = fn(&[u8]) -> Result<Value, String>;

/// The wire types a `json` block may name, each with its reader.
const TYPES: &[(&str, Reader)] = &[
    ("Request", request),
    ("DecisionReply", decision_reply),
    ("ErrorReply", error_reply),
    ("InspectReply", admin_reply::<InspectReply>),
    ("ResetReply", admin_reply::<ResetReply>),
    ("UsageReply", admin_reply::<UsageReply>),
    ("TopReply", admin_reply::<TopReply>),
    ("Alert", alert),
    ("PolicyTable", policy_table),
    ("OverrideTable", override_table),
];

/// The body of `rl.allow` (SPEC §1): its reader refuses unknown fields
/// itself and has no writer to compare with, so the sample is its own
/// round trip.
fn request(body: &[u8]) -> Result<Value, String> {
    decode_request(body).map_err(|e| e.reply.message)?;
    serde_json::from_slice(body).map_err(|e| e.to_string())
}

/// A decision reply, read as clients read it ([`decode_reply`]).
fn decision_reply(body: &[u8]) -> Result<Value, String> {
    match decode_reply(body).map_err(|e| e.to_string())? {
        reply @ Reply::Decision(_) => to_value(&reply),
        Reply::Error(_) => Err("an error reply, not a decision".into()),
    }
}

/// An error reply, read as clients read it ([`decode_reply`]).
fn error_reply(body: &[u8]) -> Result<Value, String> {
    match decode_reply(body).map_err(|e| e.to_string())? {
        reply @ Reply::Error(_) => to_value(&reply),
        Reply::Decision(_) => Err("a decision, not an error reply".into()),
    }
}

/// The replies of `rl.inspect`, `rl.reset`, `rl.usage` and `rl.top`, read
/// as the client and the CLI read them.
fn admin_reply<T>(body: &[u8]) -> Result<Value, String>
where
    T: serde::Serialize + for<'de> serde::Deserialize<'de>,
{
    to_value(&decode_admin_reply::<T>(body)?)
}

/// A threshold alert (SPEC §14), as the stream's readers read it.
fn alert(body: &[u8]) -> Result<Value, String> {
    to_value(&Alert::from_json(body)?)
}

/// A policy as the `sluice-policies` bucket holds it (SPEC §7): read and
/// checked as every reader of the bucket does.
fn policy_table(body: &[u8]) -> Result<Value, String> {
    let table = PolicyTable::from_json(body).map_err(|e| format!("{}: {}", e.field, e.reason))?;
    table
        .to_policy("example")
        .map_err(|e| format!("{}: {}", e.field, e.reason))?;
    to_value(&table)
}

/// A per-key override as the bucket holds it (SPEC §7).
fn override_table(body: &[u8]) -> Result<Value, String> {
    to_value(&parse_override("example", body)?)
}

fn to_value<T: serde::Serialize>(value: &T) -> Result<Value, String> {
    serde_json::to_value(value).map_err(|e| format!("cannot be written back: {e}"))
}

/// Where `shown` and `written` differ in shape: a field in one and not in
/// the other, arrays of other lengths, values of other kinds. `at` is the
/// path so far (`.policies[0].limits`).
fn differences(at: &str, shown: &Value, written: &Value, out: &mut Vec<String>) {
    match (shown, written) {
        (Value::Object(s), Value::Object(w)) => {
            for (k, v) in s {
                match w.get(k) {
                    Some(wv) => differences(&format!("{at}.{k}"), v, wv, out),
                    None => out.push(format!("{at}.{k}: not a field of the type")),
                }
            }
            for k in w.keys().filter(|k| !s.contains_key(*k)) {
                out.push(format!("{at}.{k}: missing; the type always writes it"));
            }
        }
        (Value::Array(s), Value::Array(w)) if s.len() == w.len() => {
            for (i, (sv, wv)) in s.iter().zip(w).enumerate() {
                differences(&format!("{at}[{i}]"), sv, wv, out);
            }
        }
        (Value::Array(s), Value::Array(w)) => out.push(format!(
            "{at}: {} items shown, {} written back",
            s.len(),
            w.len()
        )),
        _ if kind(shown) == kind(written) => {}
        _ => out.push(format!(
            "{at}: {} shown, the type writes {}",
            kind(shown),
            kind(written)
        )),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// What is wrong with `text` as a body of the type `name`, if anything.
fn check(name: &str, text: &str) -> Result<(), String> {
    let Some((_, reader)) = TYPES.iter().find(|(n, _)| *n == name) else {
        let known: Vec<&str> = TYPES.iter().map(|(n, _)| *n).collect();
        return Err(format!(
            "no wire type {name:?}; name one of {}",
            known.join(", ")
        ));
    };
    let body = text.trim();
    let shown: Value = serde_json::from_str(body).map_err(|e| format!("not JSON: {e}"))?;
    let written = reader(body.as_bytes()).map_err(|e| format!("{name} refuses it: {e}"))?;
    let mut found = Vec::new();
    differences("", &shown, &written, &mut found);
    if found.is_empty() {
        Ok(())
    } else {
        Err(format!("not the shape of {name}: {}", found.join("; ")))
    }
}

/// What the line before a `json` fence says.
#[derive(Debug, PartialEq)]
enum Mark<'a> {
    Wire(&'a str),
    NotWire,
    None,
}

fn mark(line: &str) -> Mark<'_> {
    let Some(inner) = line
        .trim()
        .strip_prefix("<!--")
        .and_then(|l| l.strip_suffix("-->"))
        .map(str::trim)
    else {
        return Mark::None;
    };
    if let Some(why) = inner.strip_prefix("json not wire:") {
        if !why.trim().is_empty() {
            return Mark::NotWire;
        }
    } else if let Some(name) = inner.strip_prefix("json:") {
        return Mark::Wire(name.trim());
    }
    Mark::None
}

/// The `json` blocks of a page: the line of each fence (from 1), the line
/// before it and the block's text.
fn json_blocks(page: &str) -> Vec<(usize, &str, String)> {
    let lines: Vec<&str> = page.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(info) = lines[i].trim().strip_prefix("```") else {
            i += 1;
            continue;
        };
        let end = (i + 1..lines.len())
            .find(|&j| lines[j].trim() == "```")
            .unwrap_or(lines.len());
        if info.trim() == "json" {
            let before = if i > 0 { lines[i - 1] } else { "" };
            found.push((i + 1, before, lines[i + 1..end].join("\n")));
        }
        i = end + 1;
    }
    found
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The pages whose examples are checked, as paths from the workspace root.
fn pages() -> Vec<String> {
    let mut pages: Vec<String> = ["README.md", "CONTRIBUTING.md", "clients/python/README.md"]
        .map(String::from)
        .to_vec();
    let mut docs: Vec<String> = std::fs::read_dir(workspace_root().join("docs"))
        .expect("docs/ is readable")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

#[test]
fn every_json_block_is_a_body_its_wire_type_accepts() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(workspace_root().join(&page))
            .unwrap_or_else(|e| panic!("{page}: {e}"));
        for (line, before, block) in json_blocks(&text) {
            match mark(before) {
                Mark::Wire(name) => {
                    checked += 1;
                    if let Err(e) = check(name, &block) {
                        failures.push(format!("{page}:{line}: {e}"));
                    }
                }
                Mark::NotWire => {}
                Mark::None => failures.push(format!(
                    "{page}:{line}: unmarked; put <!-- json: TYPE --> (the wire type it is a \
                     body of) or <!-- json not wire: why --> on the line before the fence"
                )),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "json blocks that are not what the wire carries:\n  {}",
        failures.join("\n  ")
    );
    assert!(
        checked > 0,
        "no json block names a wire type: is the page list right?"
    );
}

#[test]
fn a_sample_is_refused_for_an_unknown_field_a_wrong_type_or_a_missing_field() {
    let good = r#"{"allowed":true,"limit":15,"remaining":14,"reset_ms":67,"retry_after_ms":0,"policy":"default"}"#;
    assert_eq!(check("DecisionReply", good), Ok(()));
    let unknown = good.replace(r#""policy""#, r#""polcy":"x","policy""#);
    let e = check("DecisionReply", &unknown).unwrap_err();
    assert!(e.contains(".polcy: not a field of the type"), "{e}");
    let wrong = good.replace(r#""limit":15"#, r#""limit":"15""#);
    let e = check("DecisionReply", &wrong).unwrap_err();
    assert!(e.contains("DecisionReply refuses it"), "{e}");
    let missing = good.replace(r#","policy":"default""#, "");
    let e = check("DecisionReply", &missing).unwrap_err();
    assert!(e.contains("\"policy\""), "{e}");

    // A nested field of a lenient reader is caught on the way back.
    let inspect = r#"{"key":"k","policies":[{"policy":"p","algorithm":"gcra","limits":[
        {"max":1,"per_ms":1000,"used":0,"remaining":1,"reset_ms":0,"burst":2}]}]}"#;
    let e = check("InspectReply", inspect).unwrap_err();
    assert!(
        e.contains(".policies[0].limits[0].burst: not a field"),
        "{e}"
    );
    // A policy the bucket's readers would refuse.
    let e = check("PolicyTable", r#"{"algorithm":"fixed_window","limits":[]}"#).unwrap_err();
    assert!(e.contains("limits"), "{e}");
    assert!(check("NoSuchType", "{}")
        .unwrap_err()
        .contains("name one of"));
}

#[test]
fn marks_are_read_from_the_line_before_the_fence() {
    let page = "<!-- json: Alert -->\n```json\n{}\n```\ntext\n```json\n[]\n```\n\
                <!-- json not wire: a file of Envoy's -->\n```json\n{\"a\":1}\n```\n";
    let blocks = json_blocks(page);
    let marks: Vec<Mark> = blocks.iter().map(|(_, before, _)| mark(before)).collect();
    assert_eq!(marks, [Mark::Wire("Alert"), Mark::None, Mark::NotWire]);
    assert_eq!(
        blocks.iter().map(|(line, _, _)| *line).collect::<Vec<_>>(),
        [2, 6, 10]
    );
    assert_eq!(mark("<!-- json not wire: -->"), Mark::None);
}
