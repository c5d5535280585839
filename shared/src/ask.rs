//! The rules every ask passes before it may touch a counter, and what it
//! then does to the counter: the same at a worker and in a client's local
//! limiter (the `local` fallback), so the two refuse the same asks with the
//! same sentences.
//!
//! - [`admit`]: the policy must be configured (404), and an `allow` may not
//!   cost more than the policy can ever hold (400: "can never pass" is an
//!   error; "not now" is a denial, see STYLE.md).
//!   An ask that may wait must wait no longer than its policy lets it
//!   (400, [`admit_wait`]).
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
    /// `rl.allow` with `wait_ms` (SPEC §18): take `cost` for the earliest
    /// moment within `wait_ms` at which every limit has room
    /// ([`crate::wait`]; 0 = peek).
    Wait { cost: u64, wait_ms: u64 },
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

    /// The op of a request to `verb` carrying `cost` and `wait_ms`, or the
    /// 400 of a verb that counts nothing, or of a wait on a verb that
    /// cannot wait (only `rl.allow` can).
    pub fn asked(verb: Verb, cost: u64, wait_ms: u64) -> Result<Op, ErrorReply> {
        let op = Op::of(verb, cost)
            .ok_or_else(|| ErrorReply::bad_request(format!("{} does not count", verb.as_str())))?;
        if wait_ms > 0 && verb != Verb::Allow {
            return Err(ErrorReply::bad_request(format!(
                "\"wait_ms\" is for {}: {} counts at once and waits for nothing; send no wait_ms",
                Verb::Allow.client_prefix(),
                verb.client_prefix()
            )));
        }
        Ok(op.waiting(wait_ms))
    }

    /// The same op waiting up to `wait_ms` for its start: an `allow`
    /// that may wait, if `wait_ms` is not 0; anything else as it is.
    pub const fn waiting(self, wait_ms: u64) -> Op {
        match self {
            Op::Allow(cost) if wait_ms > 0 => Op::Wait { cost, wait_ms },
            other => other,
        }
    }

    /// How much it counts.
    pub const fn cost(self) -> u64 {
        match self {
            Op::Allow(cost) | Op::Record(cost) | Op::Wait { cost, .. } => cost,
        }
    }

    /// How long after now it may start: an ask's `wait_ms`, never longer
    /// than any policy lets an ask wait ([`admit`] refused what is over
    /// its own); zero for anything else.
    pub fn within(self) -> Nanos {
        match self {
            Op::Wait { wait_ms, .. } => {
                let most = Nanos::from(crate::wait::MAX_WAIT).as_millis_ceil();
                Nanos::from_millis(wait_ms.min(most))
            }
            Op::Allow(_) | Op::Record(_) => Nanos::ZERO,
        }
    }

    /// Applies it to `state` under `policy` at `now`.
    pub fn apply(self, policy: &Policy, state: &mut KeyState, now: Nanos) -> Decision {
        match self {
            Op::Allow(cost) => policy.decide(state, now, cost),
            Op::Wait { cost, .. } => policy.decide_within(state, now, cost, self.within()),
            Op::Record(cost) => policy.record(state, now, cost),
        }
    }

    /// Whether applying it with this outcome changed the counter (what a
    /// journal must store and a snapshot must see): an allowed take of at
    /// least 1 (a shadow denial takes nothing), or any record of at least 1.
    pub const fn consumed(self, decision: &Decision) -> bool {
        match self {
            Op::Allow(cost) | Op::Wait { cost, .. } => decision.within_limits() && cost > 0,
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
    if let Op::Allow(cost) | Op::Wait { cost, .. } = op {
        if cost > policy.capacity() {
            return Err(ErrorReply::cost_above_capacity(
                cost,
                policy.name(),
                policy.capacity(),
            ));
        }
    }
    if let Op::Wait { wait_ms, .. } = op {
        admit_wait(policy, wait_ms)?;
    }
    Ok(policy)
}

/// How long an ask of `policy` carrying `wait_ms` may wait, or the 400
/// that refuses it (a wait on a policy that cannot wait, or over its
/// `max_wait`) before it touches a counter.
pub fn admit_wait(policy: &Policy, wait_ms: u64) -> Result<Nanos, ErrorReply> {
    if wait_ms == 0 {
        return Ok(Nanos::ZERO);
    }
    let name = policy.name();
    if !policy.algorithm().has_burst() {
        return Err(ErrorReply::bad_request(format!(
            "policy {name:?} uses {}, which cannot admit an ask for a later moment; send no wait_ms, or ask a token_bucket or gcra policy that has a max_wait",
            policy.algorithm()
        )));
    }
    let max_ms = policy.max_wait().as_millis_ceil();
    if wait_ms > max_ms {
        return Err(ErrorReply::bad_request(format!(
            "wait_ms {wait_ms} is over policy {name:?}'s max_wait of {max_ms} ms; send a wait_ms of at most {max_ms}, or raise the policy's max_wait (at most {})",
            crate::duration::format_duration(crate::wait::MAX_WAIT)
        )));
    }
    Ok(Nanos::from_millis(wait_ms))
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
    fn a_wait_is_admitted_up_to_max_wait_and_refused_past_it() {
        let paced = Policy::new(
            "paced",
            crate::policy::Algorithm::Gcra,
            vec![
                crate::policy::Limit::new(10, std::time::Duration::from_secs(1), Some(1)).unwrap(),
            ],
        )
        .unwrap()
        .with_max_wait(std::time::Duration::from_millis(500))
        .unwrap();
        let mut policies = policies();
        policies.insert("paced".to_string(), paced);
        let wait = |name: &str, wait_ms| {
            admit(|n| policies.get(n), name, Op::Allow(1).waiting(wait_ms)).map(|p| p.name())
        };
        assert_eq!(wait("paced", 500), Ok("paced"));
        let e = wait("paced", 501).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest);
        assert!(e.message.contains("max_wait of 500 ms"), "{e}");
        let e = wait("default", 1).unwrap_err();
        assert!(e.message.contains("uses sliding_window"), "{e}");
        // No wait is an allow like any.
        assert_eq!(Op::Allow(1).waiting(0), Op::Allow(1));
        assert_eq!(Op::Record(1).waiting(5), Op::Record(1));
        assert_eq!(wait("default", 0), Ok("default"));
        // Applied, it waits its turn: 100 ms after the first.
        let paced = &policies["paced"];
        let mut state = paced.new_state();
        let now = Nanos::from_secs(1_000);
        let op = Op::Allow(1).waiting(500);
        assert_eq!(op.apply(paced, &mut state, now).wait, Nanos::ZERO);
        let second = op.apply(paced, &mut state, now);
        assert!(op.consumed(&second));
        assert_eq!(second.wait, Nanos::from_millis(100));
    }

    #[test]
    fn only_counting_verbs_have_an_op() {
        assert_eq!(Op::of(Verb::Allow, 2), Some(Op::Allow(2)));
        assert_eq!(Op::of(Verb::Hit, 2), Some(Op::Record(2)));
        assert_eq!(Op::of(Verb::Inspect, 0), None);
        let waits = Op::asked(Verb::Allow, 2, 10);
        assert_eq!(
            waits,
            Ok(Op::Wait {
                cost: 2,
                wait_ms: 10
            })
        );
        assert_eq!(Op::asked(Verb::Hit, 2, 0), Ok(Op::Record(2)));
        let e = Op::asked(Verb::Hit, 2, 10).unwrap_err();
        assert!(e.message.contains("\"wait_ms\" is for rl.allow"), "{e}");
        let e = Op::asked(Verb::Inspect, 0, 0).unwrap_err();
        assert!(e.message.contains("does not count"), "{e}");
    }

    #[test]
    fn counter_key_joins_with_a_slash() {
        let mut buf = String::from("stale");
        counter_key(&mut buf, "login", "bob%40x");
        assert_eq!(buf, "login/bob%40x");
    }
}
