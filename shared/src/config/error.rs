//! What a config's errors say: a [`ConfigError`] names the file, the field
//! path and the reason, a [`FieldError`] the same within one table; field
//! paths are written as TOML spells them ([`key_path`]) and a near miss of a
//! known name gets a suggestion ([`suggest`]). Below the checks of the file
//! ([`crate::config`]) and of each table, which all report through these.

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
/// (the JSON policies of CONTRACT §7).
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
pub(super) fn key_path(key: &str) -> String {
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
