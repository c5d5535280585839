//! A hold as its owner keeps it, and its parts: the id and what its end
//! does; what a policy says of holds ([`Holding`]). Apart from [`super`] so
//! that the owner's table ([`crate::outstanding`]) and the policy can name
//! them without reaching the decisions.

use crate::limit::PolicyError;
use crate::time::Nanos;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Names a hold: 128 random bits drawn by the owner, written as 32 hex
/// digits. Unguessable, so a client cannot end another's hold; a hold is
/// found only under the key and policy it was taken for, so an id used
/// with another key names nothing there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HoldId(u128);

impl HoldId {
    /// The id made of `random` (the owner draws it).
    pub fn new(random: u128) -> HoldId {
        HoldId(random)
    }

    /// The id `text` writes (32 hex digits), or `None`.
    pub fn parse(text: &str) -> Option<HoldId> {
        if text.len() != 32 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u128::from_str_radix(text, 16).ok().map(HoldId)
    }
}

impl fmt::Display for HoldId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl Serialize for HoldId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HoldId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<HoldId, D::Error> {
        let text = String::deserialize(d)?;
        HoldId::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("not a hold id: {text:?}")))
    }
}

/// What happens to a hold that reaches its end unsettled (a policy's
/// `on_expiry`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum End {
    /// It stays counted: what was held is charged.
    #[default]
    Charge,
    /// What was held goes back, as a settle of 0 would.
    Release,
}

impl End {
    pub fn as_str(self) -> &'static str {
        match self {
            End::Charge => "charge",
            End::Release => "release",
        }
    }
}

/// A live hold as its owner keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hold {
    pub id: HoldId,
    /// When it was reserved (the owner's clock): where its cost was counted.
    pub taken_at: Nanos,
    /// The cost held.
    pub units: u64,
    /// When it ends by itself.
    pub ends_at: Nanos,
    /// What its end does.
    pub end: End,
    /// It takes one of its policy's concurrency slots.
    pub slot: bool,
}

/// The longest a hold lives without an extend.
pub const MAX_TTL: Nanos = Nanos(3_600_000_000_000);

/// A hold's ttl when neither the reserve nor the policy names one.
pub const DEFAULT_TTL: Nanos = Nanos(60_000_000_000);

/// The most slots a policy's `concurrency` may give one key.
pub const MAX_CONCURRENCY: u32 = 1_000_000;

/// What a policy says of holds (SPEC §13).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holding {
    /// At most this many holds of a key live at once (`concurrency`).
    pub concurrency: Option<u32>,
    /// A hold's ttl when its reserve names none (`hold_ttl`).
    pub ttl: Nanos,
    /// What an unsettled hold's end does (`on_expiry`).
    pub on_expiry: End,
}

impl Default for Holding {
    fn default() -> Holding {
        Holding {
            concurrency: None,
            ttl: DEFAULT_TTL,
            on_expiry: End::Charge,
        }
    }
}

impl Holding {
    /// Itself if every value is in range.
    pub fn checked(self) -> Result<Holding, PolicyError> {
        if self
            .concurrency
            .is_some_and(|n| !(1..=MAX_CONCURRENCY).contains(&n))
        {
            return Err(PolicyError::Concurrency {
                max: MAX_CONCURRENCY,
            });
        }
        if self.ttl == Nanos::ZERO || self.ttl > MAX_TTL {
            return Err(PolicyError::HoldTtl);
        }
        Ok(self)
    }
}
