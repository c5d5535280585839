//! Local budgets: a client decides most asks of a key it asks often from a
//! slice of the key's budget that the key's owner granted it
//! ([`sluice_core::budget`] has the design and what stays exact).
//!
//! Per key (a policy and a key token) this keeps, in sharded mutexes (one
//! lock per ask, like the deny cache):
//!
//! - **heat**: how often the key was asked in the current and the previous
//!   tick of [`budget::LEASE`], in a fixed table of slots indexed by the
//!   key's hash, so uniform traffic over millions of keys costs no memory
//!   per key. A key asked [`HOT_ASKS`] times within a tick is hot.
//! - **a slice** while one is held: asks are taken from it
//!   ([`budget::Slice::take`]) with no network.
//! - **one request for a slice at a time**: while it is in flight, other
//!   asks of the key go to the owner as usual (in the same batches).
//!
//! A slice that ends (spent, too small for an ask, or its lease over) is
//! taken out under the lock, so nothing more is spent from it, and its
//! unspent units go back to the owner as a batch item
//! ([`sluice_core::wire::batch::Budget::Refund`]); a sweep every lease gives
//! back the slices of keys no longer asked. A policy whose owner answers
//! a slice request with no grant has no local budgets: its keys are not
//! sliced for [`NO_BUDGET_FOR`], then asked again (a live policy change may
//! turn budgets on).

use crate::answer::{Answer, Source};
use foldhash::fast::RandomState;
use sluice_core::budget::{self, Refund, Slice};
use sluice_core::time::{Clock, Nanos};
use sluice_core::wire::DecisionReply;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

const SHARDS: usize = 16;
/// Heat slots per shard.
const SLOTS: usize = 512;
/// Asks of one key within one tick that make it hot.
pub(crate) const HOT_ASKS: u32 = 8;
/// How long a policy that offered no slice is not asked for one again.
const NO_BUDGET_FOR: Nanos = Nanos(10_000_000_000);

/// One heat slot: the key (by hash) it counts, and its asks in the tick
/// `tick` and in the tick before.
#[derive(Clone, Copy, Default)]
struct Heat {
    hash: u64,
    tick: u64,
    asks: u32,
    before: u32,
}

/// What a key holds.
enum Held {
    /// A slice request is in flight.
    Pending,
    Slice(Slice),
}

struct Shard {
    heat: Box<[Heat]>,
    held: HashMap<String, Held, RandomState>,
}

pub(crate) struct Budgets {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    clock: Arc<dyn Clock>,
    /// Policies whose owners granted no slice, until when.
    no_budget: Mutex<HashMap<String, Nanos>>,
    /// Set by [`Budgets::close`]: no more slices are asked for.
    closed: AtomicBool,
}

/// What to do with an ask.
pub(crate) enum Plan {
    /// Answered from a slice.
    Local(Answer),
    /// Ask the owner; with `Some(want)`, ask for a slice of that many units
    /// too, sent at `sent` (the lease is counted from then).
    Ask { want: Option<u64>, sent: Nanos },
}

impl Budgets {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Budgets {
        Budgets {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        heat: vec![Heat::default(); SLOTS].into_boxed_slice(),
                        held: HashMap::default(),
                    })
                })
                .collect(),
            hasher: RandomState::default(),
            clock,
            no_budget: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
        }
    }

    /// Decides `cost` units of `key` (`policy/token`) from its slice, or
    /// says how to ask the owner; a slice that ended on the way is put in
    /// `ended`, to be given back.
    pub(crate) fn plan(
        &self,
        key: &str,
        policy: &str,
        cost: u64,
        ended: &mut Option<Refund>,
    ) -> Plan {
        let now = self.clock.now();
        if cost == 0 {
            // A peek is the owner's to answer, and leaves a slice alone.
            return Plan::Ask {
                want: None,
                sent: now,
            };
        }
        let hash = self.hasher.hash_one(key);
        let mut shard = self.shard(hash);
        if let Some(held) = shard.held.get_mut(key) {
            match held {
                Held::Pending => {
                    return Plan::Ask {
                        want: None,
                        sent: now,
                    }
                }
                Held::Slice(slice) => {
                    if let Some(decision) = slice.take(cost, now) {
                        let answer = Answer::from_decision(&decision, policy, Source::Budget);
                        return Plan::Local(answer);
                    }
                    // Spent, too small for this ask, or its lease is over:
                    // nothing more is taken from it, what is left goes back.
                    let refund = slice.refund();
                    *ended = (refund.units > 0 || refund.spent > 0).then_some(refund);
                    shard.held.remove(key);
                }
            }
        }
        let asks = shard.warm(hash, now);
        if asks < HOT_ASKS || self.offers_none(policy, now) || self.closed.load(Ordering::Relaxed) {
            return Plan::Ask {
                want: None,
                sent: now,
            };
        }
        shard.held.insert(key.to_string(), Held::Pending);
        // A tick is one lease: the key's asks of the last tick are about
        // what the next lease will bring.
        let want = budget::want(u64::from(asks), cost, u64::MAX);
        Plan::Ask {
            want: Some(want),
            sent: now,
        }
    }

    /// Takes the owner's answer to an ask that asked for a slice: holds
    /// the slice it granted, or learns that the policy grants none.
    /// `reply` is `None` when no decision came back.
    pub(crate) fn settle(
        &self,
        key: &str,
        policy: &str,
        sent: Nanos,
        reply: Option<&DecisionReply>,
    ) {
        let hash = self.hasher.hash_one(key);
        let received = self.clock.now();
        let slice = match reply {
            Some(r) => match (r.grant, r.allowed) {
                (Some(grant), _) if grant.units > 0 => {
                    Some(Slice::new(&grant, sent, received, &r.decision()))
                }
                (None, true) => {
                    let until = received.saturating_add(NO_BUDGET_FOR);
                    lock(&self.no_budget).insert(policy.to_string(), until);
                    None
                }
                _ => None,
            },
            None => None,
        };
        let mut shard = self.shard(hash);
        match slice {
            Some(slice) => shard.held.insert(key.to_string(), Held::Slice(slice)),
            None => shard.held.remove(key),
        };
    }

    /// Takes out every slice whose lease is over and returns what to give
    /// back for each (`policy/token`, refund).
    pub(crate) fn sweep(&self) -> Vec<(String, Refund)> {
        let now = self.clock.now();
        self.take_out(|slice| slice.expired(now))
    }

    /// Takes out every slice, and asks for no more (the client is closing):
    /// what to give back for each.
    pub(crate) fn close(&self) -> Vec<(String, Refund)> {
        self.closed.store(true, Ordering::Relaxed);
        self.take_out(|_| true)
    }

    /// Takes out the slices `ending` picks and returns their refunds (those
    /// with something to give back or report).
    fn take_out(&self, ending: impl Fn(&Slice) -> bool) -> Vec<(String, Refund)> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            shard.held.retain(|key, held| match held {
                Held::Slice(slice) if ending(slice) => {
                    let refund = slice.refund();
                    if refund.units > 0 || refund.spent > 0 {
                        out.push((key.clone(), refund));
                    }
                    false
                }
                _ => true,
            });
        }
        out
    }

    fn offers_none(&self, policy: &str, now: Nanos) -> bool {
        let mut none = lock(&self.no_budget);
        match none.get(policy) {
            Some(until) if now < *until => true,
            Some(_) => {
                none.remove(policy);
                false
            }
            None => false,
        }
    }

    fn shard(&self, hash: u64) -> MutexGuard<'_, Shard> {
        lock(&self.shards[(hash as usize) % SHARDS])
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shard {
    /// Counts an ask of the key with `hash` at `now`; returns its asks in
    /// this tick or the one before, whichever is more.
    fn warm(&mut self, hash: u64, now: Nanos) -> u32 {
        let tick = now.as_u64() / budget::LEASE.as_u64();
        let slot = &mut self.heat[((hash >> 32) as usize) % SLOTS];
        if slot.hash != hash {
            // Another key had the slot: a hot key keeps it, since it
            // comes back within a tick.
            if slot.tick + 1 >= tick && slot.asks >= HOT_ASKS {
                return 1;
            }
            *slot = Heat {
                hash,
                tick,
                asks: 0,
                before: 0,
            };
        }
        if slot.tick != tick {
            slot.before = if slot.tick + 1 == tick { slot.asks } else { 0 };
            slot.asks = 0;
            slot.tick = tick;
        }
        slot.asks = slot.asks.saturating_add(1);
        slot.asks.max(slot.before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::budget::Grant;
    use sluice_core::time::ManualClock;

    fn budgets() -> (Budgets, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(Nanos::from_secs(1_000)));
        (Budgets::new(clock.clone()), clock)
    }

    fn reply(allowed: bool, grant: Option<Grant>) -> DecisionReply {
        DecisionReply {
            allowed,
            limit: 1000,
            remaining: 500,
            reset_ms: 900,
            retry_after_ms: 0,
            policy: "p".into(),
            shadow_denied: false,
            repeat: false,
            wait_ms: 0,
            blocked: false,
            levels: Vec::new(),
            denied_by: None,
            grant,
            hold: None,
        }
    }

    fn ask(b: &Budgets, key: &str) -> (Plan, Option<Refund>) {
        let mut ended = None;
        let plan = b.plan(key, "p", 1, &mut ended);
        (plan, ended)
    }

    #[test]
    fn a_key_asked_often_asks_for_one_slice_at_a_time_and_spends_it_locally() {
        let (b, clock) = budgets();
        for _ in 1..HOT_ASKS {
            assert!(matches!(ask(&b, "p/k").0, Plan::Ask { want: None, .. }));
        }
        let Plan::Ask {
            want: Some(want),
            sent,
        } = ask(&b, "p/k").0
        else {
            panic!("the eighth ask of a tick asks for a slice")
        };
        assert_eq!(want, u64::from(HOT_ASKS));
        // While that request is out, the others ask as usual.
        assert!(matches!(ask(&b, "p/k").0, Plan::Ask { want: None, .. }));
        let grant = Grant {
            units: 3,
            lease: budget::LEASE,
            taken_at: Nanos(5),
        };
        b.settle("p/k", "p", sent, Some(&reply(true, Some(grant))));
        for _ in 0..3 {
            let Plan::Local(a) = ask(&b, "p/k").0 else {
                panic!("decided from the slice")
            };
            assert!(a.allowed);
            assert_eq!(a.source, Source::Budget);
        }
        // Spent: the next ask goes to the owner and the slice is given back.
        let (plan, ended) = ask(&b, "p/k");
        assert!(matches!(plan, Plan::Ask { want: Some(_), .. }));
        assert_eq!(
            ended,
            Some(Refund {
                units: 0,
                spent: 3,
                taken_at: Nanos(5)
            })
        );
        // A peek goes to the owner and leaves the slice alone.
        b.settle("p/k", "p", clock.now(), Some(&reply(true, Some(grant))));
        let mut ended = None;
        assert!(matches!(
            b.plan("p/k", "p", 0, &mut ended),
            Plan::Ask { want: None, .. }
        ));
        assert_eq!(ended, None);
        assert!(matches!(ask(&b, "p/k").0, Plan::Local(_)));
    }

    /// Holds a slice of 10 units of `p/k` and spends one from it.
    fn one_spent_of_a_slice_of_ten(b: &Budgets, clock: &ManualClock) {
        let grant = Grant {
            units: 10,
            lease: budget::LEASE,
            taken_at: Nanos(5),
        };
        b.settle("p/k", "p", clock.now(), Some(&reply(true, Some(grant))));
        assert!(matches!(ask(b, "p/k").0, Plan::Local(_)));
    }

    #[test]
    fn a_slice_whose_lease_ended_is_swept_and_given_back() {
        let (b, clock) = budgets();
        one_spent_of_a_slice_of_ten(&b, &clock);
        assert!(b.sweep().is_empty(), "the lease lasts");
        clock.advance(budget::LEASE.into());
        let swept = b.sweep();
        assert_eq!(swept.len(), 1);
        assert_eq!((swept[0].1.units, swept[0].1.spent), (9, 1));
        assert!(matches!(ask(&b, "p/k").0, Plan::Ask { .. }));
    }

    #[test]
    fn closing_takes_out_every_slice_and_asks_for_no_more() {
        let (b, clock) = budgets();
        one_spent_of_a_slice_of_ten(&b, &clock);
        // The lease still runs: closing gives it back anyway.
        let closed = b.close();
        assert_eq!(closed.len(), 1);
        assert_eq!(closed[0].0, "p/k");
        assert_eq!((closed[0].1.units, closed[0].1.spent), (9, 1));
        assert!(b.sweep().is_empty(), "nothing is held any more");
        // However hot a key gets, no slice is asked for.
        for _ in 0..2 * HOT_ASKS {
            assert!(matches!(ask(&b, "p/k").0, Plan::Ask { want: None, .. }));
        }
    }

    #[test]
    fn a_policy_that_grants_nothing_is_not_asked_for_slices_for_a_while() {
        let (b, clock) = budgets();
        let heat = |b: &Budgets| {
            (0..HOT_ASKS)
                .map(|_| ask(b, "p/k").0)
                .filter(|p| matches!(p, Plan::Ask { want: Some(_), .. }))
                .count()
        };
        assert_eq!(heat(&b), 1);
        b.settle("p/k", "p", clock.now(), Some(&reply(true, None)));
        clock.advance(budget::LEASE.into());
        assert_eq!(heat(&b), 0);
        clock.advance(NO_BUDGET_FOR.into());
        assert_eq!(heat(&b), 1);
    }

    #[test]
    fn keys_asked_rarely_never_ask_for_slices() {
        let (b, clock) = budgets();
        for i in 0..10_000 {
            let key = format!("p/k{}", i % 2_000);
            let mut ended = None;
            let plan = b.plan(&key, "p", 1, &mut ended);
            assert!(matches!(plan, Plan::Ask { want: None, .. }), "{key}");
            clock.advance(std::time::Duration::from_micros(20)); // 2.5 asks of a key a tick
        }
    }
}
