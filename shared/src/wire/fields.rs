//! The fields of a request map, `policy`, `cost`, `id` and `wait_ms`, whichever encoding
//! they came in: shared by single requests ([`super::request`]) and batch
//! items ([`super::batch`]), so both refuse the same mistakes with the same
//! sentences.
//!
//! Each encoding's reader turns a value into a [`Scalar`] and hands it to
//! [`Fields::set`]; [`Fields::finish`] applies the defaults and the checks
//! that need the whole map. Values are judged here, not by serde, because
//! each wrong type or number gets its own sentence naming what was sent.
//! The bounds of both fields live here too ([`MAX_COST`],
//! [`is_valid_policy_name`]), with the rules that apply them.

use super::error::quoted;
use super::msgpack;
use crate::policy::DEFAULT_POLICY;
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::borrow::Cow;
use std::fmt;

/// The largest cost one request may carry (a sanity bound; the worker also
/// refuses costs above the policy's capacity).
pub const MAX_COST: u64 = 1_000_000_000;
/// The cost of a request that gives none.
pub const DEFAULT_COST: u64 = 1;
/// The longest policy name, in bytes.
pub const MAX_POLICY_NAME: usize = 64;

/// The longest ask id (SPEC §16), in bytes.
pub const MAX_ID_LEN: usize = 128;

/// Checks an ask's id as a caller sent it: 1 to [`MAX_ID_LEN`] bytes of
/// printable ASCII (space to `~`). The error is a sentence for a 400.
///
/// ```
/// use sluice_core::wire::check_id;
/// assert!(check_id("req-7 b~").is_ok());
/// assert!(check_id("").unwrap_err().contains("1 to 128 bytes"));
/// assert!(check_id("a\nb").unwrap_err().contains("0x0a"));
/// ```
pub fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(format!(
            "\"id\" must be 1 to {MAX_ID_LEN} bytes, not {}; send a request id or a UUID",
            id.len()
        ));
    }
    if let Some(bad) = id.bytes().find(|b| !(b' '..=b'~').contains(b)) {
        return Err(format!(
            "\"id\" must be printable ASCII (space to '~'); it holds the byte 0x{bad:02x}"
        ));
    }
    Ok(())
}

/// 1 to [`MAX_POLICY_NAME`] characters of `[A-Za-z0-9_-]`. Policies whose
/// names fail this cannot be asked for.
pub fn is_valid_policy_name(name: &str) -> bool {
    (1..=MAX_POLICY_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A field value, whichever encoding it came in.
pub(crate) enum Scalar<'a> {
    Nil,
    Uint(u64),
    NegInt(i64),
    Float(f64),
    Str(Cow<'a, str>),
    /// Anything else, by type name ("a boolean", "an array", ...).
    Other(&'static str),
}

impl<'a> From<msgpack::Value<'a>> for Scalar<'a> {
    fn from(v: msgpack::Value<'a>) -> Scalar<'a> {
        match v {
            msgpack::Value::Nil => Scalar::Nil,
            msgpack::Value::Uint(u) => Scalar::Uint(u),
            msgpack::Value::Int(i) => Scalar::NegInt(i),
            msgpack::Value::Float(f) => Scalar::Float(f),
            msgpack::Value::Str(s) => Scalar::Str(Cow::Borrowed(s)),
            other => Scalar::Other(other.type_name()),
        }
    }
}

/// `policy`, `cost` and `id` as read, before the checks that need both or none.
#[derive(Default)]
pub(crate) struct Fields<'a> {
    policy: Option<Cow<'a, str>>,
    cost: Option<u64>,
    id: Option<Cow<'a, str>>,
    wait_ms: Option<u64>,
    seen_policy: bool,
    seen_cost: bool,
    seen_id: bool,
    seen_wait_ms: bool,
}

/// An ask's fields once checked, defaults applied.
pub(crate) struct Finished<'a> {
    pub(crate) policy: Cow<'a, str>,
    pub(crate) cost: u64,
    /// SPEC §16: the caller's name for the ask, checked ([`check_id`]).
    pub(crate) id: Option<Cow<'a, str>>,
    /// SPEC §18: how long the ask may wait for its start (0: not at all).
    pub(crate) wait_ms: u64,
}

impl<'a> Fields<'a> {
    /// Takes one field; `known` describes the allowed fields for the
    /// "unknown field" message.
    pub(crate) fn set(&mut self, name: &str, value: Scalar<'a>, known: &str) -> Result<(), String> {
        match name {
            "policy" => {
                if std::mem::replace(&mut self.seen_policy, true) {
                    return Err(duplicate("policy"));
                }
                match value {
                    Scalar::Str(s) => self.policy = Some(s),
                    Scalar::Nil => {}
                    other => {
                        return Err(format!(
                            "\"policy\" must be a string naming a configured policy, not {}",
                            other.type_name()
                        ))
                    }
                }
            }
            "cost" => {
                if std::mem::replace(&mut self.seen_cost, true) {
                    return Err(duplicate("cost"));
                }
                match value {
                    Scalar::Uint(c) => self.cost = Some(c),
                    Scalar::Nil => {}
                    Scalar::NegInt(c) => {
                        return Err(format!(
                            "\"cost\" must not be negative (got {c}); send 0 to look without consuming"
                        ))
                    }
                    Scalar::Float(c) => {
                        return Err(format!(
                            "\"cost\" must be an unsigned integer, not the floating-point number {c:?}"
                        ))
                    }
                    other => {
                        return Err(format!(
                            "\"cost\" must be an unsigned integer (0 to look without consuming), not {}",
                            other.type_name()
                        ))
                    }
                }
            }
            "id" => {
                if std::mem::replace(&mut self.seen_id, true) {
                    return Err(duplicate("id"));
                }
                match value {
                    Scalar::Str(s) => {
                        check_id(&s)?;
                        self.id = Some(s);
                    }
                    Scalar::Nil => {}
                    other => {
                        return Err(format!(
                            "\"id\" must be a string naming the ask (a request id, a UUID), not {}",
                            other.type_name()
                        ))
                    }
                }
            }
            "wait_ms" => {
                if std::mem::replace(&mut self.seen_wait_ms, true) {
                    return Err(duplicate("wait_ms"));
                }
                self.wait_ms = wait_ms(value)?;
            }
            _ => return Err(format!("unknown field {}; {known}", quoted(name))),
        }
        Ok(())
    }

    /// Whether it carries a wait (SPEC §18), which a batch item cannot.
    pub(crate) fn waits(&self) -> bool {
        self.wait_ms.is_some_and(|ms| ms > 0)
    }

    /// The fields as sent, before defaults and checks (for a batch item
    /// that is a hold's verb, whose rules are [`super::hold`]'s).
    pub(crate) fn into_sent(self) -> (Option<Cow<'a, str>>, Option<u64>, Option<Cow<'a, str>>) {
        (self.policy, self.cost, self.id)
    }

    /// Defaults, a valid policy name, a sane cost.
    pub(crate) fn finish(self) -> Result<Finished<'a>, String> {
        let policy = self.policy.unwrap_or(Cow::Borrowed(DEFAULT_POLICY));
        if !is_valid_policy_name(&policy) {
            return Err(format!(
                "the policy name {} is not valid; policy names are 1 to {MAX_POLICY_NAME} characters of A-Z, a-z, 0-9, '_' and '-'",
                quoted(&policy)
            ));
        }
        let cost = self.cost.unwrap_or(DEFAULT_COST);
        if cost > MAX_COST {
            return Err(format!(
                "cost {cost} is absurd; no request may cost more than {MAX_COST}"
            ));
        }
        Ok(Finished {
            policy,
            cost,
            id: self.id,
            wait_ms: self.wait_ms.unwrap_or(0),
        })
    }
}

impl Scalar<'_> {
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Scalar::Nil => "nil",
            Scalar::Uint(_) => "an unsigned integer",
            Scalar::NegInt(_) => "a negative integer",
            Scalar::Float(_) => "a floating-point number",
            Scalar::Str(_) => "a string",
            Scalar::Other(t) => t,
        }
    }
}

/// A `wait_ms` value: milliseconds, or nil for none.
fn wait_ms(value: Scalar<'_>) -> Result<Option<u64>, String> {
    if let Scalar::Uint(ms) = value {
        return Ok(Some(ms));
    }
    if let Scalar::Nil = value {
        return Ok(None);
    }
    Err(format!(
        "\"wait_ms\" must be an unsigned integer of milliseconds the ask may wait for its start (0: not at all), not {}",
        value.type_name()
    ))
}

pub(crate) fn duplicate(name: &str) -> String {
    format!("the field {name:?} appears twice; send it once")
}

/// Reads one `name: value` entry of a map into `fields`.
pub(crate) fn read_msgpack_field<'a>(
    r: &mut msgpack::Reader<'a>,
    fields: &mut Fields<'a>,
    known: &str,
) -> Result<(), String> {
    let name = read_msgpack_name(r, known)?;
    let value = r.next().map_err(|e| e.sentence().to_string())?;
    fields.set(name, Scalar::from(value), known)
}

/// Reads a map key, which must be a string.
pub(crate) fn read_msgpack_name<'a>(
    r: &mut msgpack::Reader<'a>,
    known: &str,
) -> Result<&'a str, String> {
    match r.next() {
        Ok(msgpack::Value::Str(s)) => Ok(s),
        Ok(other) => Err(format!(
            "map keys must be strings naming fields, not {}; {known}",
            other.type_name()
        )),
        Err(e) => Err(e.sentence().to_string()),
    }
}

/// A JSON string, borrowed when it has no escapes.
pub(crate) struct JsonStr<'a>(pub(crate) Cow<'a, str>);

impl<'de> Deserialize<'de> for JsonStr<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<JsonStr<'de>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = JsonStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<JsonStr<'de>, E> {
                Ok(JsonStr(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<JsonStr<'de>, E> {
                Ok(JsonStr(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<JsonStr<'de>, E> {
                Ok(JsonStr(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

/// Any JSON value, as a [`Scalar`]; arrays and objects are skipped over.
pub(crate) struct JsonScalar<'a>(pub(crate) Scalar<'a>);

impl<'de> Deserialize<'de> for JsonScalar<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<JsonScalar<'de>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Nil)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Other("a boolean"))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Uint(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Scalar<'de>, E> {
                Ok(match u64::try_from(v) {
                    Ok(u) => Scalar::Uint(u),
                    Err(_) => Scalar::NegInt(v),
                })
            }
            fn visit_f64<E>(self, v: f64) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Float(v))
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Str(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Str(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Str(Cow::Owned(s)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar<'de>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other("an array"))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar<'de>, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other("an object"))
            }
        }
        d.deserialize_any(V).map(JsonScalar)
    }
}
