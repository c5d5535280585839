//! The `local` fallback: an in-process limiter on the same algorithms as the
//! workers ([`Policy::decide`] / [`Policy::record`]), with the client's own
//! copy of the policies.
//!
//! It only sees this process's traffic, so with K API servers falling back
//! at once a key may get up to K times its limit: the price of staying up
//! while no worker answers. Its counters start empty on every fallback
//! episode's first ask of a key and are never sent to the workers.
//!
//! Keys are kept in one `Mutex<HashMap>` keyed by `"<policy>/<token>"`; each
//! entry is dropped once its state is as good as fresh
//! ([`Policy::idle_expiry`]), checked whenever the map has doubled in size.

use crate::answer::{Answer, Source};
use crate::error::Error;
use sluice_core::ask::{self, Op};
use sluice_core::config::Fallback;
use sluice_core::policies::Policies;
use sluice_core::policy::{KeyState, Policy};
use sluice_core::time::{Clock, Nanos};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

pub(crate) struct LocalLimiter {
    /// Replaced whole when the policy bucket changes (with
    /// [`ClientOptions::follow_policies`](crate::ClientOptions::follow_policies)).
    policies: RwLock<Arc<Policies>>,
    clock: Arc<dyn Clock>,
    keys: Mutex<Keys>,
}

struct Keys {
    map: HashMap<String, Entry>,
    prune_at: usize,
}

struct Entry {
    state: KeyState,
    /// When the state is as good as fresh and can be forgotten.
    idle_at: Nanos,
}

const MIN_PRUNE_AT: usize = 1024;

impl LocalLimiter {
    pub(crate) fn new(policies: BTreeMap<String, Policy>, clock: Arc<dyn Clock>) -> LocalLimiter {
        LocalLimiter {
            policies: RwLock::new(Arc::new(Policies::new(policies))),
            clock,
            keys: Mutex::new(Keys {
                map: HashMap::new(),
                prune_at: MIN_PRUNE_AT,
            }),
        }
    }

    /// The policies in force.
    pub(crate) fn policies(&self) -> Arc<Policies> {
        self.policies
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Puts `policies` in force (kept counters fit the new limits).
    pub(crate) fn set_policies(&self, policies: Policies) {
        *self.policies.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policies);
    }

    /// Applies `op` to `token` under `policy`, with the same refusals a
    /// worker would give ([`ask::admit`]).
    pub(crate) fn decide(&self, token: &str, policy_name: &str, op: Op) -> Result<Answer, Error> {
        let policies = self.policies();
        let policy = ask::admit(|name| policies.get(name), policy_name, op)?;
        let now = self.clock.now();
        let mut key = String::new();
        ask::counter_key(&mut key, policy_name, token);

        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if keys.map.len() >= keys.prune_at {
            keys.map.retain(|_, e| e.idle_at > now);
            keys.prune_at = (keys.map.len() * 2).max(MIN_PRUNE_AT);
        }
        let entry = keys.map.entry(key).or_insert_with(|| Entry {
            state: policy.new_state(),
            idle_at: Nanos::ZERO,
        });
        let decision = op.apply(policy, &mut entry.state, now);
        entry.idle_at = now.saturating_add(policy.idle_expiry(&mut entry.state, now));
        Ok(Answer::from_decision(
            &decision,
            policy_name,
            Source::Fallback(Fallback::Local),
        ))
    }

    /// The `open` fallback's answer: allowed, with the numbers a fresh key
    /// would get (or zeros when the policy is not known locally).
    pub(crate) fn open(&self, policy_name: &str, cost: u64) -> Answer {
        let source = Source::Fallback(Fallback::Open);
        match self.policies().get(policy_name) {
            Some(policy) => {
                let mut fresh = policy.new_state();
                let mut d = policy.decide(&mut fresh, self.clock.now(), cost);
                d.allowed = true;
                d.retry_after = Nanos::ZERO;
                Answer::from_decision(&d, policy_name, source)
            }
            None => Answer {
                allowed: true,
                shadow_denied: false,
                limit: 0,
                remaining: 0,
                reset: Default::default(),
                retry_after: Default::default(),
                policy: policy_name.to_string(),
                repeat: false,
                wait: Default::default(),
                levels: Vec::new(),
                denied_by: None,
                blocked: false,
                source,
            },
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.keys.lock().unwrap().map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::config::Config;
    use sluice_core::time::ManualClock;
    use std::time::Duration;

    fn limiter(clock: &ManualClock) -> LocalLimiter {
        let config = Config::from_toml(
            r#"
            [policies.default]
            algorithm = "sliding_log"
            limits = [ { max = 3, per = "10s" } ]
            "#,
            "test.toml",
        )
        .unwrap();
        LocalLimiter::new(config.policies, Arc::new(clock.clone()))
    }

    #[test]
    fn it_limits_like_a_worker_would() {
        let clock = ManualClock::new(Nanos::from_secs(1_000));
        let l = limiter(&clock);
        let allowed: Vec<bool> = (0..5)
            .map(|_| l.decide("alice", "default", Op::Allow(1)).unwrap().allowed)
            .collect();
        assert_eq!(allowed, [true, true, true, false, false]);
        let denied = l.decide("alice", "default", Op::Allow(1)).unwrap();
        assert_eq!(denied.retry_after, Duration::from_secs(10));
        assert_eq!(denied.source, Source::Fallback(Fallback::Local));
        assert!(l.decide("bob", "default", Op::Allow(1)).unwrap().allowed);
        clock.advance(Duration::from_secs(10));
        assert!(l.decide("alice", "default", Op::Allow(1)).unwrap().allowed);
    }

    #[test]
    fn it_refuses_what_a_worker_refuses() {
        let clock = ManualClock::new(Nanos::from_secs(1_000));
        let l = limiter(&clock);
        assert!(matches!(
            l.decide("alice", "nope", Op::Allow(1)),
            Err(Error::UnknownPolicy(_))
        ));
        assert!(matches!(
            l.decide("alice", "default", Op::Allow(4)),
            Err(Error::BadRequest(_))
        ));
    }

    #[test]
    fn idle_keys_are_forgotten() {
        let clock = ManualClock::new(Nanos::from_secs(1_000));
        let l = limiter(&clock);
        for i in 0..MIN_PRUNE_AT {
            l.decide(&format!("k{i}"), "default", Op::Allow(1)).unwrap();
        }
        clock.advance(Duration::from_secs(11));
        l.decide("late", "default", Op::Allow(1)).unwrap();
        assert_eq!(l.len(), 1);
    }

    #[test]
    fn open_answers_allowed_with_fresh_numbers() {
        let clock = ManualClock::new(Nanos::from_secs(1_000));
        let l = limiter(&clock);
        let a = l.open("default", 1);
        assert!(a.allowed);
        assert_eq!((a.limit, a.remaining), (3, 2));
        assert!(l.open("unknown", 1).allowed);
    }
}
