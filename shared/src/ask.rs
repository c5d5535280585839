//! The rules every ask passes before it may touch a counter, and what it
//! then does to the counter: the same at a worker and in a client's local
//! limiter (the `local` fallback), so the two refuse the same asks with the
//! same sentences.
//!
//! - [`admit`]: the policy must be configured (404), and an `allow` may not
//!   cost more than the policy can ever hold (400: "can never pass" is an
//!   error; "not now" is a denial, see STYLE.md).
//! - [`Op`]: what the verb does to the key's state.
//! - [`counter_key`]: the one spelling of a counter's key.

use crate::policy::{Decision, KeyState, Policy};
use crate::subject::Verb;
use crate::time::Nanos;
use crate::wire::ErrorReply;

/// What an ask does to a key's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `rl.allow`: take `cost` if every limit has room (0 = peek).
    Allow(u64),
    /// `rl.hit`: record `cost` whether or not it fits.
    Record(u64),
}

impl Op {
    /// The op of a counting verb; `None` for verbs that change no counter
    /// this way (inspect, reset, usage, and the holds' own verbs).
    pub const fn of(verb: Verb, cost: u64) -> Option<Op> {
        match verb {
            Verb::Allow => Some(Op::Allow(cost)),
            Verb::Hit => Some(Op::Record(cost)),
            Verb::Inspect
            | Verb::Reset
            | Verb::Usage
            | Verb::Reserve
            | Verb::Settle
            | Verb::Extend => None,
        }
    }

    /// How much it counts.
    pub const fn cost(self) -> u64 {
        match self {
            Op::Allow(cost) | Op::Record(cost) => cost,
        }
    }

    /// Applies it to `state` under `policy` at `now`.
    pub fn apply(self, policy: &Policy, state: &mut KeyState, now: Nanos) -> Decision {
        match self {
            Op::Allow(cost) => policy.decide(state, now, cost),
            Op::Record(cost) => policy.record(state, now, cost),
        }
    }

    /// Whether applying it with this outcome changed the counter (what a
    /// journal must store and a snapshot must see): an allowed take of at
    /// least 1 (a shadow denial takes nothing), or any record of at least 1.
    pub const fn consumed(self, decision: &Decision) -> bool {
        match self {
            Op::Allow(cost) => decision.within_limits() && cost > 0,
            Op::Record(cost) => cost > 0,
        }
    }
}

/// The policy an ask runs under, or the error reply that refuses it.
/// `policy_of` looks a name up in the policies in force.
pub fn admit<'p>(
    policy_of: impl FnOnce(&str) -> Option<&'p Policy>,
    policy_name: &str,
    op: Op,
) -> Result<&'p Policy, ErrorReply> {
    let Some(policy) = policy_of(policy_name) else {
        return Err(ErrorReply::unknown_policy(policy_name));
    };
    if let Op::Allow(cost) = op {
        if cost > policy.capacity() {
            return Err(ErrorReply::cost_above_capacity(
                cost,
                policy.name(),
                policy.capacity(),
            ));
        }
    }
    Ok(policy)
}

/// A counter's key: the policy and the key token joined with `/`, which
/// neither may contain, so the pair is unambiguous. Written into `buf`
/// (cleared first), so the hot path reuses one buffer.
pub fn counter_key(buf: &mut String, policy: &str, token: &str) {
    buf.clear();
    buf.reserve(policy.len() + 1 + token.len());
    buf.push_str(policy);
    buf.push('/');
    buf.push_str(token);
}

thread_local! {
    /// The buffer [`with_counter_key`] builds keys in: one per thread, not
    /// one `String` per ask (the worker builds one per decision, the client
    /// one per ask it looks up in its deny cache and budgets).
    static COUNTER_KEY: std::cell::RefCell<String> =
        std::cell::RefCell::new(String::with_capacity(128));
}

/// Runs `f` on the counter key of `policy` and `token` ([`counter_key`]),
/// built in this thread's buffer. `f` must not call it again (the buffer is
/// borrowed while `f` runs).
pub fn with_counter_key<R>(policy: &str, token: &str, f: impl FnOnce(&str) -> R) -> R {
    COUNTER_KEY.with_borrow_mut(|key| {
        counter_key(key, policy, token);
        f(key)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ErrorCode;
    use std::collections::BTreeMap;

    fn policies() -> BTreeMap<String, Policy> {
        let p = Policy::builtin_default();
        BTreeMap::from([(p.name().to_string(), p)])
    }

    #[test]
    fn unknown_policy_is_404_and_cost_above_capacity_is_400() {
        let policies = policies();
        let e = admit(|n| policies.get(n), "nope", Op::Allow(1)).unwrap_err();
        assert_eq!(e.code, ErrorCode::UnknownPolicy);
        let e = admit(|n| policies.get(n), "default", Op::Allow(16)).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest);
        assert!(e.message.contains("cost 16 can never be allowed"), "{e}");
        // A hit records what was served, whatever its size.
        assert!(admit(|n| policies.get(n), "default", Op::Record(16)).is_ok());
        assert!(admit(|n| policies.get(n), "default", Op::Allow(15)).is_ok());
    }

    #[test]
    fn only_counting_verbs_have_an_op() {
        assert_eq!(Op::of(Verb::Allow, 2), Some(Op::Allow(2)));
        assert_eq!(Op::of(Verb::Hit, 2), Some(Op::Record(2)));
        assert_eq!(Op::of(Verb::Inspect, 0), None);
    }

    #[test]
    fn counter_key_joins_with_a_slash() {
        let mut buf = String::from("stale");
        counter_key(&mut buf, "login", "bob%40x");
        assert_eq!(buf, "login/bob%40x");
    }
}
