//! The levels of a grouped decision (SPEC §17), as a reply lists them:
//! `levels`, outermost first, each `{policy, remaining, reset_ms}`, and
//! `denied_by`, the policy of the level that denied.
//!
//! Apart from [`super::reply`] because a grouped reply is the one reply
//! with a list in it: its MessagePack is written here, by the same writer
//! and in the same order as rmp-serde's `to_vec_named` would.

use super::msgpack;
use crate::policy::Decision;
use serde::{Deserialize, Serialize};

/// One level of a grouped decision.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LevelReply {
    /// The level's policy.
    pub policy: String,
    /// What is left at this level (of its most restrictive limit).
    pub remaining: u64,
    /// Milliseconds (rounded up) until this level is fully available again.
    pub reset_ms: u64,
}

impl LevelReply {
    /// The level of `policy` that decided `decision`.
    pub fn new(policy: impl Into<String>, decision: &Decision) -> LevelReply {
        LevelReply {
            policy: policy.into(),
            remaining: decision.remaining,
            reset_ms: decision.reset.as_millis_ceil(),
        }
    }
}

/// At least the MessagePack length of `levels` and `denied_by` with their
/// names.
pub(super) fn msgpack_len(levels: &[LevelReply], denied_by: Option<&str>) -> usize {
    const HEADER: usize = 5;
    const LEVEL: usize = 1
        + (1 + "policy".len())
        + HEADER
        + (1 + "remaining".len())
        + 9
        + (1 + "reset_ms".len())
        + 9;
    let levels_len = if levels.is_empty() {
        0
    } else {
        (1 + "levels".len()) + HEADER + levels.iter().map(|l| LEVEL + l.policy.len()).sum::<usize>()
    };
    levels_len + denied_by.map_or(0, |d| 1 + "denied_by".len() + HEADER + d.len())
}

/// Writes `levels` (when there are any) and `denied_by` (when set), names
/// and values.
pub(super) fn write_msgpack(
    w: &mut msgpack::Writer,
    levels: &[LevelReply],
    denied_by: Option<&str>,
) {
    if !levels.is_empty() {
        w.str("levels");
        w.array(levels.len() as u32);
        for level in levels {
            w.map(3);
            w.str("policy");
            w.str(&level.policy);
            w.str("remaining");
            w.uint(level.remaining);
            w.str("reset_ms");
            w.uint(level.reset_ms);
        }
    }
    if let Some(denied_by) = denied_by {
        w.str("denied_by");
        w.str(denied_by);
    }
}

/// How many fields [`write_msgpack`] writes.
pub(super) fn fields(levels: &[LevelReply], denied_by: Option<&str>) -> usize {
    usize::from(!levels.is_empty()) + usize::from(denied_by.is_some())
}
