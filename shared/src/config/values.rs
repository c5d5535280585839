//! Values of the wrong kind in a config table, refused with what was
//! found: each field's `deserialize_with` function reads one value and
//! says what it expected and what it found, as the user wrote it
//! (`found a string ("64")`). Apart from `table.rs`, which holds the
//! tables' shapes.

use super::defaults::MAX_PARTITIONS;
use crate::policy::{Algorithm, Mode};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::fmt;

/// Any value, kept only to say what it was: "a string (\"64\")", "an
/// integer (5)", "a table", ...
pub(super) enum Found {
    Str(String),
    Int(i128),
    Float(f64),
    Bool(bool),
    Datetime(String),
    Null,
    Array,
    Table,
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Found::Str(s) => write!(f, "a string ({s:?})"),
            Found::Int(n) => write!(f, "an integer ({n})"),
            Found::Float(x) => write!(f, "a float ({x})"),
            Found::Bool(b) => write!(f, "a boolean ({b})"),
            Found::Datetime(d) => write!(f, "a datetime ({d})"),
            Found::Null => f.write_str("null"),
            Found::Array => f.write_str("an array"),
            Found::Table => f.write_str("a table"),
        }
    }
}

/// The toml crate hands a datetime to a visitor as a map with this one key
/// (`toml_datetime`'s private field name) and the datetime as a string.
pub(super) const TOML_DATETIME_KEY: &str = "$__toml_private_datetime";

/// Reads a map that is not wanted: a TOML datetime, or else "a table".
pub(super) fn found_in_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<Found, A::Error> {
    match map.next_key::<String>()? {
        Some(key) if key == TOML_DATETIME_KEY => Ok(Found::Datetime(map.next_value()?)),
        Some(_) => {
            map.next_value::<IgnoredAny>()?;
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(Found::Table)
        }
        None => Ok(Found::Table),
    }
}

/// The `visit_*` methods for every kind of value, each passing a [`Found`]
/// to `self.other(found)`; a visitor that wants maps or sequences defines
/// `visit_map` / `visit_seq` after these.
macro_rules! visit_scalars {
    () => {
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
            self.other(Found::Bool(v))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            self.other(Found::Int(v.into()))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            self.other(Found::Int(v.into()))
        }
        fn visit_i128<E: de::Error>(self, v: i128) -> Result<Self::Value, E> {
            self.other(Found::Int(v))
        }
        fn visit_u128<E: de::Error>(self, v: u128) -> Result<Self::Value, E> {
            self.other(Found::Int(i128::try_from(v).unwrap_or(i128::MAX)))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            self.other(Found::Float(v))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            self.other(Found::Str(v.to_string()))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            self.other(Found::Null)
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            self.other(Found::Null)
        }
    };
}
pub(super) use visit_scalars;

impl<'de> Deserialize<'de> for Found {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Found, D::Error> {
        struct V;
        impl V {
            fn other<E>(self, found: Found) -> Result<Found, E> {
                Ok(found)
            }
        }
        impl<'de> Visitor<'de> for V {
            type Value = Found;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            visit_scalars!();
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Found, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Found::Array)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Found, A::Error> {
                found_in_map(map)
            }
        }
        d.deserialize_any(V)
    }
}

/// "expected {what}, found {found}".
pub(super) fn expected<E: de::Error>(what: &str, found: &Found) -> E {
    E::custom(format!("expected {what}, found {found}"))
}

pub(super) fn partitions<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i128>, D::Error> {
    match Found::deserialize(d)? {
        Found::Int(n) => Ok(Some(n)),
        other => Err(expected(
            &format!("an integer from 1 to {}", MAX_PARTITIONS),
            &other,
        )),
    }
}

pub(super) fn max_keys<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i128>, D::Error> {
    bound(d, "an integer of at least 1, e.g. max_keys = 2_000_000")
}

pub(super) fn max_ids<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i128>, D::Error> {
    bound(d, "an integer of at least 1, e.g. max_ids = 8_192")
}

/// An integer bound; `wanted` is the error's "expected" with an example.
fn bound<'de, D: Deserializer<'de>>(d: D, wanted: &str) -> Result<Option<i128>, D::Error> {
    match Found::deserialize(d)? {
        Found::Int(n) => Ok(Some(n)),
        other => Err(expected(wanted, &other)),
    }
}

pub(super) fn some_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Found::deserialize(d)? {
        Found::Str(s) => Ok(Some(s)),
        other => Err(expected("a string", &other)),
    }
}

pub(super) fn some_algorithm<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Algorithm>, D::Error> {
    match Found::deserialize(d)? {
        Found::Str(s) => s.parse().map(Some).map_err(de::Error::custom),
        other => Err(expected(
            &format!("a string, one of {}", algorithm_names()),
            &other,
        )),
    }
}

pub(super) fn mode<'de, D: Deserializer<'de>>(d: D) -> Result<Mode, D::Error> {
    match Found::deserialize(d)? {
        Found::Str(s) => s.parse().map_err(de::Error::custom),
        other => Err(expected("a string, \"enforce\" or \"shadow\"", &other)),
    }
}

/// A duration is checked later ([`parse_duration`]); here only that it is
/// a string.
pub(super) fn duration_text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let shown = match Found::deserialize(d)? {
        Found::Str(s) => return Ok(s),
        // `per = 10`: show it the way the user wrote it.
        Found::Int(n) => n.to_string(),
        Found::Float(x) => toml::Value::Float(x).to_string(),
        other => other.to_string(),
    };
    Err(de::Error::custom(format!(
        "{shown} is not a duration; use a string with an integer and a unit (ms, s, m, h, d), e.g. \"10s\""
    )))
}

pub(super) fn some_duration_text<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<String>, D::Error> {
    duration_text(d).map(Some)
}

/// A non-negative integer; zero is left to `Limit::new` to refuse.
pub(super) fn count<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    match Found::deserialize(d)? {
        Found::Int(n) => u64::try_from(n)
            .map_err(|_| de::Error::custom(format!("must be a positive integer, found {n}"))),
        other => Err(expected("a positive integer", &other)),
    }
}

pub(super) fn some_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    count(d).map(Some)
}

/// The algorithms' names, for the reasons that list them.
pub(super) fn algorithm_names() -> String {
    Algorithm::ALL.map(Algorithm::as_str).join(", ")
}
