//! Bodies of the messages the owners of a global policy's keys send each
//! other over the link between regions (SPEC §12), on the
//! `sluice-link.<region>.p.<n>.<kind>` subjects. Asks, batches, inspects
//! and resets use the client's bodies; these are the link's own.
//!
//! All are MessagePack maps with named fields, decoded by one function,
//! [`decode`], whose error names the fields the kind of message has. What
//! each one means to the state it changes is
//! `sluice_core::region::global`'s (slices, shares, reclaims) and
//! `sluice_core::region::tally`'s (tallies).

use super::ErrorReply;
use crate::region::tally::Reported;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A body the link carries: what [`decode`] says when it is malformed.
pub trait LinkBody: DeserializeOwned {
    /// "a reclaim", "a gift", ...
    const WHAT: &'static str;
    /// Its fields, as the error names them.
    const FIELDS: &'static str;
}

/// Decodes a link body of kind `T`; the error says what the kind holds.
pub fn decode<T: LinkBody>(body: &[u8]) -> Result<T, ErrorReply> {
    rmp_serde::from_slice(body).map_err(|e| {
        ErrorReply::bad_request(format!(
            "{} is a MessagePack map of {}: {e}",
            T::WHAT,
            T::FIELDS
        ))
    })
}

/// Encodes a link body (named fields).
pub fn encode<T: Serialize>(body: &T) -> Vec<u8> {
    // A map of strings and integers: encoding cannot fail.
    rmp_serde::to_vec_named(body).expect("a link body encodes")
}

/// The home asks a delegate for a key's share of a window back
/// (`….reclaim`): the policy, the key token and the window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reclaim {
    pub policy: String,
    pub key: String,
    pub window_start: u64,
}

impl LinkBody for Reclaim {
    const WHAT: &'static str = "a reclaim";
    const FIELDS: &'static str = "policy, key and window_start";
}

/// Units another region took out of its part of a global bucket at
/// `taken_at` (its clock) for the home's part (`….give`,
/// `sluice_core::region::parts`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gift {
    pub policy: String,
    pub key: String,
    pub units: u64,
    pub taken_at: u64,
    /// The region that gives (empty from releases before gifts had ids).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub from: String,
}

impl Gift {
    /// Its id at the home, which takes a gift the link carried twice once
    /// (SPEC §16): who gave, when and how much. A region gives a key's
    /// units once per reclaim, so no two of its gifts share one.
    pub fn id(&self) -> String {
        format!("gift-{}-{}-{}", self.from, self.taken_at, self.units)
    }

    /// The units and the time (`taken_at`) of the gift whose id is `id`
    /// ([`Gift::id`]); `None` for any other id.
    pub fn parse_id(id: &str) -> Option<(u64, u64)> {
        let (rest, units) = id.strip_prefix("gift-")?.rsplit_once('-')?;
        let (_from, taken_at) = rest.rsplit_once('-')?;
        Some((units.parse().ok()?, taken_at.parse().ok()?))
    }
}

impl LinkBody for Gift {
    const WHAT: &'static str = "a gift";
    const FIELDS: &'static str = "policy, key, units and taken_at";
}

/// What the home answered to an ask forwarded to it, as the link task
/// tells the asking region's owner (`….answered`), so that it records the
/// ask's usage where it was made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answered {
    pub policy: String,
    pub key: String,
    pub cost: u64,
    pub allowed: bool,
}

impl LinkBody for Answered {
    const WHAT: &'static str = "an answered note";
    const FIELDS: &'static str = "policy, key, cost and allowed";
}

/// What a region reports of its tallies to a home's owner (`….tally`):
/// who it is and what it spent of each key so far. Answered with an empty
/// batch of results once taken.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TallyBatch {
    pub from: String,
    pub reports: Vec<Reported>,
}

impl LinkBody for TallyBatch {
    const WHAT: &'static str = "a tally report";
    const FIELDS: &'static str = "from and reports";
}

/// A home's new owner asks for the tallies again (`….resend`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resend {
    pub home: String,
}

impl LinkBody for Resend {
    const WHAT: &'static str = "a resend request";
    const FIELDS: &'static str = "home";
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every body comes back as it went; a malformed one is refused with
    /// the fields its kind holds.
    #[test]
    fn bodies_round_trip_and_a_malformed_one_names_its_fields() {
        let reclaim = Reclaim {
            policy: "plan".into(),
            key: "alice".into(),
            window_start: 60,
        };
        assert_eq!(decode::<Reclaim>(&encode(&reclaim)).unwrap(), reclaim);
        let gift = Gift {
            policy: "plan".into(),
            key: "alice".into(),
            units: 3,
            taken_at: 7,
            from: "west".into(),
        };
        assert_eq!(decode::<Gift>(&encode(&gift)).unwrap(), gift);
        // A gift from a release before gifts had ids: no region in its id.
        let old = Gift {
            from: String::new(),
            ..gift.clone()
        };
        assert_eq!(decode::<Gift>(&encode(&old)).unwrap(), old);
        assert_eq!(gift.id(), "gift-west-7-3");
        assert_ne!(old.id(), gift.id());
        for g in [&gift, &old] {
            assert_eq!(Gift::parse_id(&g.id()), Some((3, 7)));
        }
        assert_eq!(Gift::parse_id("refund-7-3-0"), None);
        assert_eq!(Gift::parse_id("gift-west-x-3"), None);
        let resend = Resend {
            home: "east".into(),
        };
        assert_eq!(decode::<Resend>(&encode(&resend)).unwrap(), resend);
        let error = decode::<Gift>(&encode(&reclaim)).unwrap_err();
        assert!(
            error
                .message
                .starts_with("a gift is a MessagePack map of policy, key, units and taken_at"),
            "{}",
            error.message
        );
    }
}
