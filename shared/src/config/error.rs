//! What a config's errors say: a [`ConfigError`] names the file, the field
//! path and the reason, a [`FieldError`] the same within one table; field
//! paths are written as TOML spells them ([`key_path`]) and a near miss of a
//! known name gets a suggestion ([`suggest`]). Below the checks of the file
//! ([`crate::config`]) and of each table, which all report through these;
//! serde's own sentences (unknown and missing fields) are turned into these
//! here too ([`field_error`]).

use serde_path_to_error::{Path, Segment};

/// Why a config cannot be used: the file, the field path and the reason.
///
/// `field` is empty when the problem is not one field's (a TOML syntax error,
/// which gives its line and column in `reason`, or an unreadable file).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.display())]
pub struct ConfigError {
    pub file: String,
    pub field: String,
    pub reason: String,
}

impl ConfigError {
    pub(super) fn new(
        file: &str,
        field: impl Into<String>,
        reason: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            file: file.to_string(),
            field: field.into(),
            reason: reason.into(),
        }
    }

    fn display(&self) -> String {
        if self.field.is_empty() {
            format!("{}: {}", self.file, self.reason)
        } else {
            format!("{}: {}: {}", self.file, self.field, self.reason)
        }
    }
}

/// Why a value in a table cannot be used: the field path within the table
/// (empty when the problem is the whole table) and the reason. A
/// [`ConfigError`] without the file, for tables that come from elsewhere
/// (the JSON policies of SPEC §7).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.display())]
pub struct FieldError {
    pub field: String,
    pub reason: String,
}

impl FieldError {
    pub(super) fn new(field: impl Into<String>, reason: impl Into<String>) -> FieldError {
        FieldError {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// The same error in the file `file`.
    pub fn in_file(self, file: &str) -> ConfigError {
        ConfigError {
            file: file.to_string(),
            field: self.field,
            reason: self.reason,
        }
    }

    /// The field path below `prefix` (`policies.login` + `limits[1].per`).
    pub(super) fn below(self, prefix: &str) -> FieldError {
        let field = if self.field.is_empty() {
            prefix.to_string()
        } else if self.field.starts_with('[') {
            format!("{prefix}{}", self.field)
        } else {
            format!("{prefix}.{}", self.field)
        };
        FieldError { field, ..self }
    }

    fn display(&self) -> String {
        if self.field.is_empty() {
            self.reason.clone()
        } else {
            format!("{}: {}", self.field, self.reason)
        }
    }
}

/// A key as it would be written in a TOML dotted path: bare when it can be.
pub(crate) fn key_path(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare {
        key.to_string()
    } else {
        format!("{key:?}")
    }
}

/// The known name closest to `key`, if it is close enough to be a typo.
pub(super) fn suggest<'k>(key: &str, known: &[&'k str]) -> Option<&'k str> {
    known
        .iter()
        .map(|k| (edit_distance(key, k), *k))
        .filter(|(d, k)| *d <= 2.max(k.len().div_ceil(3)))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diag + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(above + 1);
            diag = above;
        }
    }
    row[b.len()]
}

// ---------------------------------------------------------------------------
// serde's errors, as ours.

/// A deserialization error at `path` as a [`FieldError`]. serde words
/// unknown and missing fields itself ("unknown field `partiton`, expected
/// one of `partitions`, ..."); those become our sentences. Every other
/// message is already ours, from a `deserialize_with` function of
/// `table.rs`.
pub(super) fn field_error(path: &Path, message: &str) -> FieldError {
    let field = path_text(path);
    if let Some(rest) = message.strip_prefix("unknown field `") {
        if let Some((key, expected)) = rest.rsplit_once("`, expected ") {
            // The struct's fields, each in backticks: "one of `a`, `b`".
            let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
            let expected = known.join(", ");
            let reason = match suggest(key, &known) {
                Some(s) => {
                    format!("unknown field; did you mean {s:?}? (expected one of {expected})")
                }
                None => format!("unknown field; expected one of {expected}"),
            };
            return FieldError::new(field, reason);
        }
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        if let Some(name) = rest.strip_suffix('`') {
            let field = if field.is_empty() {
                name.to_string()
            } else {
                format!("{field}.{name}")
            };
            return FieldError::new(field, missing(name));
        }
    }
    FieldError::new(field, message)
}

/// Why a required field is needed, with an example. (A policy's
/// `algorithm` and `limits` are not required by the table's shape: a
/// policy of only `concurrency` has neither; `PolicyTable::to_policy` says
/// what is missing.)
fn missing(name: &str) -> String {
    match name {
        "max" => "missing; e.g. max = 10".to_string(),
        "per" => "missing; give the window or period, e.g. per = \"1m\"".to_string(),
        _ => "missing".to_string(),
    }
}

/// `policies.login.limits[1].per`; keys that are not bare TOML keys quoted.
fn path_text(path: &Path) -> String {
    let mut text = String::new();
    for segment in path.iter() {
        let key = match segment {
            Segment::Seq { index } => {
                text.push_str(&format!("[{index}]"));
                continue;
            }
            Segment::Map { key } | Segment::Enum { variant: key } => key_path(key),
            Segment::Unknown => "?".to_string(),
        };
        if !text.is_empty() {
            text.push('.');
        }
        text.push_str(&key);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("partitions", "partitions"), 0);
        assert_eq!(edit_distance("partiton", "partitions"), 2);
        assert_eq!(edit_distance("algoritm", "algorithm"), 1);
        assert_eq!(edit_distance("", "max"), 3);
    }

    #[test]
    fn suggestions_only_for_near_misses() {
        let top_level = [
            "partitions",
            "durability",
            "snapshot_interval",
            "fallback",
            "lease_ttl",
            "journal_failure",
            "max_keys",
            "policies",
            "envoy",
            "usage",
        ];
        assert_eq!(suggest("partiton", &top_level), Some("partitions"));
        assert_eq!(suggest("colour", &top_level), None);
    }
}
