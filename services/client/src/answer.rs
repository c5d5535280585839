//! [`Answer`]: a decision and where it came from.

use sluice_core::config::Fallback;
use sluice_core::policy::Decision;
use sluice_core::time::Nanos;
use sluice_core::wire::{self, DecisionReply, LevelReply};
use std::fmt;
use std::time::Duration;

/// Who decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// The key's owning worker (one NATS round trip, alone or in a batch).
    Worker,
    /// The client's deny cache: the key and policy were denied earlier and
    /// the retry time has not passed yet; no network was used.
    DenyCache,
    /// A slice of the key's budget that its owner granted this client
    /// (local budgets, docs/CLIENT.md); no network was used.
    Budget,
    /// No worker answered; the configured fallback decided: `Open` (allowed)
    /// or `Local` (the in-process limiter). `Closed` gives an
    /// [`Error::Unavailable`](crate::Error::Unavailable) instead of an answer.
    Fallback(Fallback),
}

impl Source {
    /// `worker`, `deny_cache`, `budget`, `fallback_open`, `fallback_local`
    /// (metrics labels, the gateway's `Sluice-Source` header).
    pub const fn as_str(self) -> &'static str {
        match self {
            Source::Worker => "worker",
            Source::DenyCache => "deny_cache",
            Source::Budget => "budget",
            Source::Fallback(Fallback::Open) => "fallback_open",
            Source::Fallback(Fallback::Local) => "fallback_local",
            Source::Fallback(Fallback::Closed) => "fallback_closed",
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A decision (SPEC §1 reply fields) and its [`Source`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The request may proceed; when true, its cost was consumed.
    pub allowed: bool,
    /// The limit that decided (the most restrictive one).
    pub limit: u64,
    /// What is left of that limit after this request.
    pub remaining: u64,
    /// Until that limit is fully available again.
    pub reset: Duration,
    /// Zero when allowed; otherwise the earliest time after which the same
    /// request can be allowed.
    pub retry_after: Duration,
    /// The policy applied.
    pub policy: String,
    /// A shadow policy (SPEC §14) would have denied this ask: it is
    /// allowed, and nothing was consumed.
    pub shadow_denied: bool,
    /// The answer to an ask that repeated the id of one already admitted
    /// (SPEC §16): the first answer's decision, nothing counted again.
    pub repeat: bool,
    /// How long from now the caller starts (SPEC §18): zero unless an ask
    /// that may wait ([`Client::ask_waiting`](crate::Client::ask_waiting))
    /// was allowed for a later moment, its units taken at once.
    /// [`Client::acquire`](crate::Client::acquire) has slept it already.
    pub wait: Duration,
    /// A grouped ask's levels (SPEC §17), outermost first, each with its
    /// policy, what is left there and when it resets; empty for a plain
    /// key, and for an answer the fallback made (it decides the ask's own
    /// policy alone).
    pub levels: Vec<LevelReply>,
    /// The policy of the level that denied a grouped ask (SPEC §17): the
    /// organisation's, say, while the user still had room.
    pub denied_by: Option<String>,
    /// A denial because the key is blocked under a policy's `block_for`
    /// (SPEC §18): every ask of it is denied, a peek and an ask that may
    /// wait too, until `retry_after` (the block's rest).
    pub blocked: bool,
    pub source: Source,
}

impl Answer {
    pub(crate) fn from_reply(r: DecisionReply, source: Source) -> Answer {
        Answer {
            allowed: r.allowed,
            limit: r.limit,
            remaining: r.remaining,
            reset: Duration::from_millis(r.reset_ms),
            retry_after: Duration::from_millis(r.retry_after_ms),
            policy: r.policy,
            shadow_denied: r.shadow_denied,
            repeat: r.repeat,
            wait: Duration::from_millis(r.wait_ms),
            levels: r.levels,
            denied_by: r.denied_by,
            blocked: r.blocked,
            source,
        }
    }

    pub(crate) fn from_decision(d: &Decision, policy: &str, source: Source) -> Answer {
        Answer {
            allowed: d.allowed,
            limit: d.limit,
            remaining: d.remaining,
            reset: d.reset.into(),
            retry_after: d.retry_after.into(),
            policy: policy.to_string(),
            shadow_denied: d.shadow_denied,
            repeat: false,
            wait: d.wait.into(),
            levels: Vec::new(),
            denied_by: None,
            blocked: d.blocked,
            source,
        }
    }

    /// The core [`Decision`] this answer carries.
    pub fn decision(&self) -> Decision {
        Decision {
            allowed: self.allowed,
            limit: self.limit,
            remaining: self.remaining,
            reset: Nanos::from(self.reset),
            retry_after: Nanos::from(self.retry_after),
            shadow_denied: self.shadow_denied,
            wait: Nanos::from(self.wait),
            blocked: self.blocked,
        }
    }

    /// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`, when
    /// denied `Retry-After` (whole seconds, rounded up), and on a shadow
    /// denial `Sluice-Shadow: denied`, exactly as a worker
    /// sets them on its NATS reply ([`wire::decision_headers`]).
    pub fn headers(&self) -> impl Iterator<Item = (&'static str, String)> {
        wire::decision_headers(&self.decision())
    }

    /// The SPEC §1 reply body (durations in ms, rounded up; `wait_ms` when
    /// [`Answer::wait`] is not zero; `levels` and `denied_by` of a grouped
    /// ask).
    pub fn to_reply(&self) -> DecisionReply {
        DecisionReply {
            repeat: self.repeat,
            levels: self.levels.clone(),
            denied_by: self.denied_by.clone(),
            ..DecisionReply::new(&self.decision(), self.policy.clone())
        }
    }
}
