//! Idempotent asks (SPEC §16): the ids an owner remembers, so that an ask
//! retried after its answer was lost counts once.
//!
//! A caller names an ask with an `id`; the owner of the key remembers the
//! id of every ask it **admitted** (an allowed `allow`, any `hit`), with
//! what the ask was (verb, policy, cost) and the decision it got, until the
//! ask stops counting ([`Policy::remembered_until`]; at most
//! [`MAX_REMEMBERED`]). An ask that repeats a remembered id counts nothing
//! and gets the first decision again ([`Seen::Repeat`]); the same id with
//! another verb, policy or cost is refused ([`Seen::Reused`]), since the
//! caller means a different ask. A denial is not remembered: it consumed
//! nothing, so its repeat is decided afresh.
//!
//! Memory is bounded per partition ([`RememberedIds::new`]'s `most`): past
//! it, the id whose remembering ends soonest is forgotten first, and
//! counted ([`RememberedIds::forgotten_early`]); its repeat would count
//! again, which errs the way an id-less retry always did.
//!
//! Ids are per key token, not per counter: the policy is part of what the
//! id names, so one id under two policies is a reuse, not two asks.
//!
//! Cheap where every named ask pays: the lookup allocates nothing (ids are
//! found by a keyed 64-bit hash of token and id, computed once per ask
//! ([`IdName`]) and then checked against the stored name), an admitted ask
//! allocates its name once, and policy names are shared between entries. A
//! snapshot's copy shares the names too ([`CarriedId`]): the answering
//! task copies no string for it, and the encoding is an array per id. The order of forgetting is a min-heap of
//! (end, hash) beside the map: an id remembered after the others of its
//! window ends no sooner than they do, so most pushes are O(1); an entry
//! replaced or forgotten by a reset leaves its heap item behind, skipped
//! when it comes up (its sequence number no longer matches).
//!
//! Pure data and no clock: every call takes `now`. The worker keeps one per
//! partition beside its counters, carries it through handovers (its
//! `kept/` kind) and rebuilds the rest from the journal.

use crate::holds::HoldId;
use crate::limit::{Algorithm, Decision};
use crate::policy::Policy;
use crate::subject::Verb;
use crate::time::Nanos;
use crate::wire::{ErrorCode, ErrorReply};
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::hash_map::{Entry as Slot, RandomState};
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::Arc;

/// The longest an id is remembered, whatever the policy's windows.
pub const MAX_REMEMBERED: Nanos = Nanos::from_secs(24 * 3600);

/// The default bound of ids remembered per partition (`max_ids`).
pub const DEFAULT_MAX_IDS: usize = 8_192;

impl Policy {
    /// Until when an ask counted under this policy at `now` still counts
    /// (SPEC §16): the end of the window it was counted in (a sliding
    /// window's: the window after, which still weighs it), or for a token
    /// bucket and GCRA the time an empty bucket takes to fill; the latest
    /// over the policy's limits, at most [`MAX_REMEMBERED`] ahead.
    pub fn remembered_until(&self, now: Nanos) -> Nanos {
        let most = now.saturating_add(MAX_REMEMBERED);
        self.limits()
            .iter()
            .map(|limit| match self.algorithm() {
                Algorithm::FixedWindow => limit.window_end(limit.window_start(now)),
                Algorithm::SlidingLog => now.saturating_add(limit.per()),
                Algorithm::SlidingWindow => limit
                    .window_end(limit.window_start(now))
                    .saturating_add(limit.per()),
                Algorithm::TokenBucket | Algorithm::Gcra => {
                    let fill = u128::from(limit.per().0) * u128::from(limit.burst())
                        / u128::from(limit.max());
                    now.saturating_add(Nanos(u64::try_from(fill).unwrap_or(u64::MAX)))
                }
            })
            .max()
            .unwrap_or(now)
            .min(most)
    }
}

/// What an ask with an id was: a repeat must be the same ask. `P` is how
/// the policy's name is held: borrowed to look up, owned to carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Asked<P = String> {
    #[serde(rename = "v", with = "verb_name")]
    pub verb: Verb,
    #[serde(rename = "p")]
    pub policy: P,
    #[serde(rename = "c")]
    pub cost: u64,
}

impl<P: AsRef<str>> Asked<P> {
    /// The same ask, its policy borrowed.
    pub fn borrowed(&self) -> Asked<&str> {
        Asked {
            verb: self.verb,
            policy: self.policy.as_ref(),
            cost: self.cost,
        }
    }
}

/// The first answer to an ask, as a repeat gets it again.
///
/// An ask admitted for a later start (SPEC §18, a decision's `wait`) is
/// remembered with that start as a moment, not as the wait: its repeat is
/// answered the wait left until the same start ([`FirstAnswer::again`]),
/// zero once it has come, so a caller that retries sleeps no longer than
/// the first answer told it to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FirstAnswer {
    /// The decision, its `wait` zero (see `start`).
    pub decision: Decision,
    /// A reserve's hold and when it ends (ns since the epoch), so that
    /// the repeat names the same hold.
    pub held: Option<(HoldId, Nanos)>,
    /// When the first ask's caller starts (ns since the epoch), if later
    /// than it was decided; zero when it started at once.
    pub start: Nanos,
}

impl FirstAnswer {
    /// The first answer of an ask decided at `now` as `decision` (whose
    /// `wait` becomes its start), with no hold.
    pub fn new(decision: Decision, now: Nanos) -> FirstAnswer {
        let start = match decision.wait {
            Nanos::ZERO => Nanos::ZERO,
            wait => now.saturating_add(wait),
        };
        FirstAnswer {
            decision: Decision {
                wait: Nanos::ZERO,
                ..decision
            },
            held: None,
            start,
        }
    }

    /// The first answer as a repeat at `now` gets it: the decision, its
    /// `wait` what is left until the first answer's start.
    pub fn again(&self, now: Nanos) -> Decision {
        Decision {
            wait: Nanos(self.start.0.saturating_sub(now.0)),
            ..self.decision
        }
    }

    /// Its start as stored ([`CarriedId`], a journal record's id): ns
    /// since the epoch when still to come at `now`, else 0, the form of
    /// an answer without a wait, which every release reads.
    pub fn stored_start(&self, now: Nanos) -> u64 {
        if self.start > now {
            self.start.0
        } else {
            0
        }
    }

    /// A first answer as a snapshot or a journal record stores it: the
    /// admitted decision's `remaining`, `limit`, `reset` (ns) and shadow
    /// flag, a reserve's hold with its end, and its start (0: none; ns
    /// since the epoch).
    pub fn stored(
        (remaining, limit, reset, shadow_denied): (u64, u64, u64, bool),
        held: Option<(HoldId, u64)>,
        start: u64,
    ) -> FirstAnswer {
        FirstAnswer {
            decision: Decision {
                allowed: true,
                limit,
                remaining,
                reset: Nanos(reset),
                retry_after: Nanos::ZERO,
                shadow_denied,
                wait: Nanos::ZERO,
                blocked: false,
            },
            held: held.map(|(id, end)| (id, Nanos(end))),
            start: Nanos(start),
        }
    }
}

/// What an ask's id turned out to be.
#[derive(Clone, Debug, PartialEq)]
pub enum Seen {
    /// Not remembered: decide it (and [`RememberedIds::remember`] it if
    /// it is admitted).
    First,
    /// A repeat of an admitted ask: count nothing, answer as the first.
    Repeat(FirstAnswer),
    /// The id was first used for another ask: refuse it (409), count nothing.
    Reused(ErrorReply),
}

/// One remembered id.
#[derive(Clone, Debug)]
struct Entry {
    /// The key token and the id, joined ([`joined`]); shared with the
    /// snapshots that carry it.
    name: Arc<str>,
    asked: Asked<Arc<str>>,
    first: FirstAnswer,
    until: Nanos,
    /// Its item in [`RememberedIds::by_end`] (an item of another
    /// sequence number is stale).
    seq: u64,
}

impl Entry {
    /// Whether this is the entry of `id` under `token` (and not of another
    /// pair whose hash is the same).
    fn is(&self, token: &str, id: &str) -> bool {
        let name = self.name.as_bytes();
        name.len() == token.len() + 1 + id.len()
            && name.starts_with(token.as_bytes())
            && name[token.len()] == b'\n'
            && name.ends_with(id.as_bytes())
    }
}

/// The ids one partition's owner remembers (see the module doc).
#[derive(Debug)]
pub struct RememberedIds {
    /// By the hash of key token and id ([`RememberedIds::hash`]).
    entries: HashMap<u64, Entry, BuildHasherDefault<Prehashed>>,
    /// The same hashes, by when each stops being remembered: the first to
    /// forget on top; with stale items (see the module doc).
    by_end: BinaryHeap<Reverse<(Nanos, u64, u64)>>,
    /// Keyed per partition, so that no caller can choose ids that collide.
    hasher: RandomState,
    /// The policy names entries share.
    policies: Vec<Arc<str>>,
    next_seq: u64,
    most: usize,
    forgotten_early: u64,
    /// Where a name is joined before it is shared ([`joined`]).
    scratch: String,
}

/// The most policy names shared; past it each entry holds its own.
const MOST_SHARED_POLICIES: usize = 256;

/// A map's hasher for keys that are hashes already.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

impl Default for RememberedIds {
    fn default() -> RememberedIds {
        RememberedIds::new(DEFAULT_MAX_IDS)
    }
}

/// A remembered id as a snapshot carries it to the next owner: its
/// strings shared with the entry it copies (a snapshot is read on the
/// answering task), encoded as one array per id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CarriedId(
    /// The key token and the id, joined by a newline ([`CarriedId::name`]).
    Arc<str>,
    #[serde(with = "verb_name")] Verb,
    /// The policy.
    Arc<str>,
    /// The cost.
    u64,
    /// The first answer's `remaining`, `limit`, `reset` (ns) and whether
    /// a shadow policy let it through.
    (u64, u64, u64, bool),
    /// A reserve's hold and its end (ns since the epoch).
    Option<(HoldId, u64)>,
    /// When it is forgotten (ns since the epoch).
    u64,
    /// The first answer's start when still to come (ns since the epoch,
    /// SPEC §18; [`FirstAnswer::stored_start`]). Left out when 0, so that
    /// a snapshot without one reads as before waiting (snapshot format
    /// 5 only with one, [`CarriedId::waits`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    u64,
);

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl CarriedId {
    /// The key token and the id.
    pub fn name(&self) -> (&str, &str) {
        split(&self.0)
    }

    /// What the ask was.
    pub fn asked(&self) -> Asked<&str> {
        Asked {
            verb: self.1,
            policy: &self.2,
            cost: self.3,
        }
    }

    /// When it is forgotten.
    pub fn until(&self) -> Nanos {
        Nanos(self.6)
    }

    /// Whether its first answer's start was still to come when it was
    /// carried: a snapshot carrying one is in a format releases before
    /// waiting refuse (`sluice_core::format::SNAPSHOT`).
    pub fn waits(&self) -> bool {
        self.7 != 0
    }
}

/// An id under a key token, hashed once for the look-up of an ask and the
/// remembering after it ([`RememberedIds::name`]; valid for the table
/// that made it, whose hash is keyed).
#[derive(Clone, Copy, Debug)]
pub struct IdName<'a> {
    token: &'a str,
    id: &'a str,
    hash: u64,
}

impl RememberedIds {
    /// Remembers at most `most` ids (at least 1).
    pub fn new(most: usize) -> RememberedIds {
        RememberedIds {
            entries: HashMap::default(),
            by_end: BinaryHeap::new(),
            hasher: RandomState::new(),
            policies: Vec::new(),
            next_seq: 0,
            most: most.max(1),
            forgotten_early: 0,
            scratch: String::new(),
        }
    }

    /// `id` under `token`, as this table finds it.
    pub fn name<'a>(&self, token: &'a str, id: &'a str) -> IdName<'a> {
        IdName {
            token,
            id,
            hash: self.hasher.hash_one((token, id)),
        }
    }

    /// Whether the id `name` was seen for `asked` (see [`Seen`]).
    pub fn seen(&self, name: IdName<'_>, asked: &Asked<&str>, now: Nanos) -> Seen {
        let IdName { token, id, hash } = name;
        let Some(entry) = self.entries.get(&hash) else {
            return Seen::First;
        };
        if entry.until <= now || !entry.is(token, id) {
            return Seen::First;
        }
        if entry.asked.borrowed() != *asked {
            let first = &entry.asked;
            return Seen::Reused(ErrorReply::new(
                ErrorCode::IdReused,
                format!(
                    "the id {id:?} of key {token} was first used by {} with policy {:?} and cost {}, not {} with policy {:?} and cost {}; an id names one ask: send a new id for a new ask",
                    first.verb.client_prefix(),
                    first.policy,
                    first.cost,
                    asked.verb.client_prefix(),
                    asked.policy,
                    asked.cost
                ),
            ));
        }
        Seen::Repeat(entry.first)
    }

    /// Remembers an admitted ask until `until` (forgetting those whose
    /// time is over, then, past the bound, those that end soonest).
    pub fn remember(
        &mut self,
        name: IdName<'_>,
        asked: Asked<&str>,
        first: FirstAnswer,
        until: Nanos,
        now: Nanos,
    ) {
        if until <= now {
            return;
        }
        self.forget_ended(now);
        let IdName { token, id, hash } = name;
        // The same id again, or (once in 2^64) another one of its hash,
        // which is then forgotten for this one.
        self.entries.remove(&hash);
        while self.entries.len() >= self.most {
            let Some(Reverse((_, seq, oldest))) = self.by_end.pop() else {
                break;
            };
            if self.forget_if_live(oldest, seq) {
                self.forgotten_early += 1;
            }
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.by_end.push(Reverse((until, seq, hash)));
        if self.by_end.len() > 2 * self.most + 1024 {
            self.drop_stale();
        }
        let asked = Asked {
            verb: asked.verb,
            policy: self.shared_policy(asked.policy),
            cost: asked.cost,
        };
        let entry = Entry {
            name: joined(&mut self.scratch, token, id),
            asked,
            first,
            until,
            seq,
        };
        self.entries.insert(hash, entry);
    }

    /// `name` as the entries share it.
    fn shared_policy(&mut self, name: &str) -> Arc<str> {
        if let Some(shared) = self.policies.iter().find(|p| ***p == *name) {
            return shared.clone();
        }
        let shared = Arc::<str>::from(name);
        if self.policies.len() < MOST_SHARED_POLICIES {
            self.policies.push(shared.clone());
        }
        shared
    }

    /// Forgets the ids whose time is over.
    pub fn forget_ended(&mut self, now: Nanos) {
        while let Some(&Reverse((until, seq, hash))) = self.by_end.peek() {
            if until > now {
                return;
            }
            self.by_end.pop();
            self.forget_if_live(hash, seq);
        }
    }

    /// Forgets the entry of a heap item if the item is its entry's (not
    /// left by one replaced or forgotten); whether it was.
    fn forget_if_live(&mut self, hash: u64, seq: u64) -> bool {
        match self.entries.entry(hash) {
            Slot::Occupied(found) if found.get().seq == seq => {
                found.remove();
                true
            }
            _ => false,
        }
    }

    /// Rebuilds the heap from the live entries: stale items left by
    /// replaced ids and resets no longer outnumber them.
    fn drop_stale(&mut self) {
        self.by_end = self
            .entries
            .iter()
            .map(|(hash, e)| Reverse((e.until, e.seq, *hash)))
            .collect();
    }

    /// Forgets the ids of `token`'s asks under `policy` (a reset of the
    /// key: its counts are gone, so a repeat must count again).
    pub fn forget_key(&mut self, token: &str, policy: &str) {
        if self.entries.is_empty() {
            return;
        }
        // Their heap items go stale.
        self.entries
            .retain(|_, e| !(split(&e.name).0 == token && *e.asked.policy == *policy));
    }

    /// How many ids are remembered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many ids were forgotten before their time, to keep the bound.
    pub fn forgotten_early(&self) -> u64 {
        self.forgotten_early
    }

    /// What a snapshot carries: every id still remembered at `now`, in
    /// no order ([`RememberedIds::take_over`] sorts them).
    pub fn carried(&self, now: Nanos) -> Vec<CarriedId> {
        self.entries
            .values()
            .filter(|e| e.until > now)
            .map(|e| {
                let decision = &e.first.decision;
                CarriedId(
                    e.name.clone(),
                    e.asked.verb,
                    e.asked.policy.clone(),
                    e.asked.cost,
                    (
                        decision.remaining,
                        decision.limit,
                        decision.reset.0,
                        decision.shadow_denied,
                    ),
                    e.first.held.map(|(id, end)| (id, end.0)),
                    e.until.0,
                    e.first.stored_start(now),
                )
            })
            .collect()
    }

    /// A new owner takes over what a snapshot carried: the first to forget
    /// first, so that past the bound the latest are kept.
    pub fn take_over(&mut self, carried: &[CarriedId], now: Nanos) {
        let mut carried: Vec<&CarriedId> = carried.iter().collect();
        carried.sort_unstable_by_key(|c| c.6);
        for c in carried {
            let (token, id) = c.name();
            let first = FirstAnswer::stored(c.4, c.5, c.7);
            let name = self.name(token, id);
            self.remember(name, c.asked(), first, c.until(), now);
        }
    }
}

/// A key token and an id as one map key: a newline is in neither (a
/// token is a NATS subject token, an id printable ASCII).
/// (Written in `scratch` first: one allocation, the name's own.)
fn joined(scratch: &mut String, token: &str, id: &str) -> Arc<str> {
    scratch.clear();
    scratch.push_str(token);
    scratch.push('\n');
    scratch.push_str(id);
    Arc::from(scratch.as_str())
}

/// A [`joined`] key's token and id.
fn split(key: &str) -> (&str, &str) {
    key.split_once('\n').unwrap_or((key, ""))
}

/// A verb by its name in carried ids.
mod verb_name {
    use crate::subject::Verb;
    use serde::{de, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(verb: &Verb, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(verb.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Verb, D::Error> {
        let name = String::deserialize(d)?;
        Verb::parse(&name).ok_or_else(|| de::Error::custom(format!("unknown verb {name:?}")))
    }
}

#[cfg(test)]
mod tests;
