//! What an owner granted from its keys' state and has not had back: the
//! slices of local budgets ([`crate::budget`]) and holds
//! ([`crate::holds`]), in one table per partition.
//!
//! Both are the same idea: units taken from a key's state now, handed to
//! someone outside the owner, and coming back later (a slice's refund, a
//! hold's settle) or never (the holder died). The owner keeps what it
//! granted so that what comes back is checked against it (at most what was
//! granted, once) and so that the next owner, after a handover or a crash,
//! still knows it: the table goes through snapshots and the journal with the
//! counters. A slice that never comes back is forgotten after a while and
//! its units stay counted; a hold that reaches its end is charged or
//! released as its policy says, by the owner ([`Outstanding::ended`]).
//!
//! They differ in what may be dropped. Slices are a cache of good faith: past
//! [`MOST_OUTSTANDING`] the oldest is forgotten (its refund then gives
//! nothing back, which only leaves units counted). Holds are promises: none
//! is dropped; past [`MOST_HOLDS`] a reserve is refused instead.

use crate::budget::Refund;
use crate::holds::hold::{End, Hold, HoldId};
use crate::time::Nanos;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

/// How long an owner remembers a slice it granted, waiting for it to come
/// back: a minute. A client gives a slice back within about two leases (at
/// its end, or at the sweep after it), or at once when the partition moved
/// and its first try met the old owner; one that stalls longer gets nothing
/// back for it, which only leaves its units counted. Memory is bounded by
/// [`MOST_OUTSTANDING`] whatever this is.
pub const GRANT_KEPT: Nanos = Nanos(60_000_000_000);

/// The most slices an owner remembers for one partition (given back ones
/// included, until [`GRANT_KEPT`] after their grant); past it the oldest is
/// forgotten (its refund then gives nothing back). A slice lives about two
/// leases, so this is room for ~10,000 grants a second per partition; it
/// bounds what a flood of slice requests can make a worker hold (with the
/// longest keys, ~1.5 MiB a partition).
pub const MOST_OUTSTANDING: usize = 4_096;

/// The most grants an owner remembers for one partition past
/// [`GRANT_KEPT`] (the shares of a global window, kept until the window
/// ends: [`crate::policy::Policy::grant_kept_until`]); past it the one that
/// would be forgotten first is forgotten now (a region's refund of it then
/// gives nothing back, which only leaves its units counted).
pub const MOST_KEPT_LONG: usize = 4_096;

/// The most live holds an owner keeps for one partition: a reserve past it
/// is refused (503, "too many holds"), none is ever dropped. Bounds what a
/// flood of reserves can make a worker hold, and what a snapshot's manifest
/// carries (~130 bytes each: ~0.5 MiB).
pub const MOST_HOLDS: usize = 4_096;

/// What an owner granted and has not had back, per counter key: the slices
/// (a refund gives back at most what its own slice held, once) and the
/// holds (each ends once: settled, or at its end).
///
/// Without it a refund was taken at its word, and any client could hand
/// back units it never held: a key's budget freed at will, an admin's
/// reset (SPEC §10) by another name. A slice is known by its key and
/// [`crate::budget::Grant::taken_at`] (grants to several clients in one batch share it
/// and add up); it is forgotten when it is all back, after [`GRANT_KEPT`],
/// and when its key is reset. Snapshots carry the slices not back yet to
/// the partition's next owner ([`Outstanding::carried`],
/// [`Outstanding::take_over`]), and in journal mode the replayed journal
/// brings those granted since ([`Outstanding::replayed_grant`]). In
/// snapshot mode one granted after the last snapshot before a crash is
/// unknown there, and its refund gives nothing back (its units stay
/// counted until the window ends or the bucket refills them, as if the
/// client had died holding it).
#[derive(Debug, Default)]
pub struct Outstanding {
    by_key: HashMap<Arc<str>, Vec<Held>>,
    /// Every slice granted in the last [`GRANT_KEPT`], oldest first:
    /// `(taken_at, key)`.
    order: VecDeque<(Nanos, Arc<str>)>,
    /// The grants kept longer ([`Outstanding::granted_until`]), by when
    /// they are forgotten: `(until, taken_at, key)`.
    kept_long: BTreeSet<(Nanos, Nanos, Arc<str>)>,
    /// The live holds, per counter key.
    holds: HashMap<Arc<str>, Vec<Hold>>,
    /// Every live hold by its end: `(ends_at, key, id)`.
    hold_ends: BTreeSet<(Nanos, Arc<str>, HoldId)>,
}

/// A hold as a snapshot carries it to the partition's next owner.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HeldHold {
    /// The counter key (`policy/token`).
    #[serde(rename = "k")]
    pub key: String,
    #[serde(rename = "i")]
    pub id: HoldId,
    /// When it was reserved, ns since the epoch.
    #[serde(rename = "t")]
    pub taken_at: u64,
    /// The cost held.
    #[serde(rename = "u")]
    pub units: u64,
    /// When it ends by itself, ns since the epoch.
    #[serde(rename = "e")]
    pub ends_at: u64,
    #[serde(rename = "x", default, skip_serializing_if = "is_charge")]
    pub end: End,
    #[serde(rename = "s", default, skip_serializing_if = "std::ops::Not::not")]
    pub slot: bool,
}

fn is_charge(end: &End) -> bool {
    *end == End::Charge
}

impl HeldHold {
    fn of(key: &str, h: &Hold) -> HeldHold {
        HeldHold {
            key: key.to_string(),
            id: h.id,
            taken_at: h.taken_at.as_u64(),
            units: h.units,
            ends_at: h.ends_at.as_u64(),
            end: h.end,
            slot: h.slot,
        }
    }

    fn hold(&self) -> Hold {
        Hold {
            id: self.id,
            taken_at: Nanos(self.taken_at),
            units: self.units,
            ends_at: Nanos(self.ends_at),
            end: self.end,
            slot: self.slot,
        }
    }
}

/// A reserve refused because the partition holds [`MOST_HOLDS`] already.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "this partition holds {MOST_HOLDS} live holds, the most it keeps: settle or let some end \
     before reserving more (or spread the keys over more partitions)"
)]
pub struct TooManyHolds;

/// What the holds of one key come to at an instant (`rl.inspect`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HoldsOf {
    /// Live holds.
    pub live: u32,
    /// Of them, those that take a concurrency slot.
    pub slots: u32,
    /// The cost they hold together.
    pub held: u64,
}

#[derive(Clone, Copy, Debug)]
struct Held {
    taken_at: Nanos,
    units: u64,
    /// Until when it is remembered: [`GRANT_KEPT`] after `taken_at`, or
    /// later for a grant kept longer.
    until: Nanos,
}

impl Held {
    fn kept_long(&self) -> bool {
        self.until > self.taken_at.saturating_add(GRANT_KEPT)
    }
}

/// A slice not back yet, as a snapshot carries it to the partition's next
/// owner (so a handover does not turn its refund away).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HeldSlice {
    /// The counter key (`policy/token`).
    #[serde(rename = "k")]
    pub key: String,
    /// [`crate::budget::Grant::taken_at`], ns since the epoch.
    #[serde(rename = "t")]
    pub taken_at: u64,
    /// Units not back yet.
    #[serde(rename = "u")]
    pub units: u64,
    /// Until when it is remembered, ns since the epoch, when that is
    /// later than [`GRANT_KEPT`] after `taken_at` (0: not).
    #[serde(rename = "e", default, skip_serializing_if = "is_zero")]
    pub until: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl HeldSlice {
    /// Until when it is remembered: `until`, or [`GRANT_KEPT`] after it
    /// was taken when that is later.
    fn remembered_until(&self) -> Nanos {
        Nanos(self.until).max(Nanos(self.taken_at).saturating_add(GRANT_KEPT))
    }
}

/// The most slices a snapshot carries (the newest): a manifest stays well
/// under nats-server's default 1 MiB max payload with the longest keys.
pub const MOST_CARRIED: usize = 1_024;

/// What of a refund an owner takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Returned {
    /// A slice this owner granted: all its unspent units go back.
    Known,
    /// No slice of this owner's explains it (granted by an earlier owner
    /// and not carried to this one, longer ago than [`GRANT_KEPT`], or
    /// never): nothing goes back. What
    /// was spent of it is still usage, as a hit's would be.
    Unknown,
}

/// A refund that claims more than its slice holds: refused whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "a refund of {claimed} units (spent and unspent) for the slice taken at {taken_at} ns, \
     which holds {held}: nothing was given back; a client gives back what its own slice held, once"
)]
pub struct Overclaim {
    pub claimed: u64,
    pub held: u64,
    pub taken_at: u64,
}

impl Outstanding {
    /// Remembers `units` granted for `key` at `taken_at` (the owner's now).
    pub fn granted(&mut self, key: &str, taken_at: Nanos, units: u64) {
        self.granted_until(key, taken_at, units, Nanos::ZERO);
    }

    /// Remembers `units` granted for `key` at `taken_at` until `until`, if
    /// that is later than [`GRANT_KEPT`] after `taken_at` (a global
    /// window's shares, given back by a region up to the window's end).
    pub fn granted_until(&mut self, key: &str, taken_at: Nanos, units: u64, until: Nanos) {
        self.expire(taken_at);
        if units == 0 {
            return;
        }
        let until = until.max(taken_at.saturating_add(GRANT_KEPT));
        let key = self.shared_key(key);
        let held = self.by_key.entry(key.clone()).or_default();
        let h = match held.iter_mut().find(|h| h.taken_at == taken_at) {
            Some(h) => {
                h.units = h.units.saturating_add(units);
                if until <= h.until {
                    return;
                }
                if h.kept_long() {
                    self.kept_long.remove(&(h.until, taken_at, key.clone()));
                }
                h.until = until;
                *h
            }
            None => {
                let h = Held {
                    taken_at,
                    units,
                    until,
                };
                held.push(h);
                if !h.kept_long() {
                    self.order.push_back((taken_at, key.clone()));
                    while self.order.len() > MOST_OUTSTANDING {
                        self.forget_oldest();
                    }
                }
                h
            }
        };
        if h.kept_long() {
            self.kept_long.insert((until, taken_at, key));
            while self.kept_long.len() > MOST_KEPT_LONG {
                self.forget_first_kept_long();
            }
        }
    }

    /// Units of `key` granted at `taken_at` and not back yet.
    pub fn units(&self, key: &str, taken_at: Nanos) -> u64 {
        self.by_key
            .get(key)
            .and_then(|held| held.iter().find(|h| h.taken_at == taken_at))
            .map_or(0, |h| h.units)
    }

    /// Takes `refund` of `key` back at `now`: whether its unspent units go
    /// back, or why it is refused (then nothing changes).
    pub fn refund(
        &mut self,
        key: &str,
        refund: &Refund,
        now: Nanos,
    ) -> Result<Returned, Overclaim> {
        self.expire(now);
        let Some(units) = self.held_mut(key, refund.taken_at) else {
            return Ok(Returned::Unknown);
        };
        let claimed = refund.units.saturating_add(refund.spent);
        if claimed > *units {
            return Err(Overclaim {
                claimed,
                held: *units,
                taken_at: refund.taken_at.as_u64(),
            });
        }
        *units -= claimed;
        self.drop_empty(key);
        Ok(Returned::Known)
    }

    /// A grant that a journal replays after a takeover (journal mode):
    /// remembered, unless the restored snapshot carried that slice already
    /// (its count then stands: it may have been partly given back since).
    /// `until` as for [`Outstanding::granted_until`].
    pub fn replayed_grant(&mut self, key: &str, taken_at: Nanos, units: u64, until: Nanos) {
        if self.held_mut(key, taken_at).is_none() {
            self.granted_until(key, taken_at, units, until);
        }
    }

    /// A refund that a journal replays: what it claimed is not held any
    /// more. Both replays err low (a record may also be in the restored
    /// snapshot): what is remembered never exceeds what a slice holds, so
    /// a later refund is refused rather than given back twice.
    pub fn replayed_refund(&mut self, key: &str, taken_at: Nanos, claimed: u64) {
        if let Some(units) = self.held_mut(key, taken_at) {
            *units = units.saturating_sub(claimed);
            self.drop_empty(key);
        }
    }

    /// The units still held of the slice of `key` taken at `taken_at`.
    fn held_mut(&mut self, key: &str, taken_at: Nanos) -> Option<&mut u64> {
        let held = self.by_key.get_mut(key)?;
        let h = held.iter_mut().find(|h| h.taken_at == taken_at)?;
        Some(&mut h.units)
    }

    /// Forgets the slices of `key` that are all back.
    fn drop_empty(&mut self, key: &str) {
        self.retain(key, |h| h.units > 0);
    }

    /// Keeps the slices of `key` that `keep` says to (and the key only
    /// while it holds one).
    fn retain(&mut self, key: &str, mut keep: impl FnMut(&Held) -> bool) {
        let Some(held) = self.by_key.get_mut(key) else {
            return;
        };
        // Allocates only when a grant kept longer goes (rare).
        let mut gone_long = Vec::new();
        held.retain(|h| {
            let kept = keep(h);
            if !kept && h.kept_long() {
                gone_long.push(*h);
            }
            kept
        });
        let empty = held.is_empty();
        if !gone_long.is_empty() {
            if let Some((shared, _)) = self.by_key.get_key_value(key) {
                let shared = shared.clone();
                self.forget_kept_long(&shared, &gone_long);
            }
        }
        if empty {
            self.by_key.remove(key);
        }
    }

    /// Drops `gone`'s grants kept longer from `kept_long`.
    fn forget_kept_long(&mut self, key: &Arc<str>, gone: &[Held]) {
        for h in gone.iter().filter(|h| h.kept_long()) {
            self.kept_long.remove(&(h.until, h.taken_at, key.clone()));
        }
    }

    /// Forgets every slice and hold of `key` (it was reset: what they held
    /// was counted in a state that is gone, and a reset frees its slots).
    pub fn forget(&mut self, key: &str) {
        if let Some((shared, held)) = self.by_key.remove_entry(key) {
            self.forget_kept_long(&shared, &held);
        }
        if let Some((shared, holds)) = self.holds.remove_entry(key) {
            for h in holds {
                self.hold_ends.remove(&(h.ends_at, shared.clone(), h.id));
            }
        }
    }

    /// The slices granted less than [`GRANT_KEPT`] before `now` and not all
    /// back, the newest [`MOST_CARRIED`], for the next owner.
    pub fn carried(&mut self, now: Nanos) -> Vec<HeldSlice> {
        self.expire(now);
        let mut held: Vec<HeldSlice> = self
            .by_key
            .iter()
            .flat_map(|(key, held)| {
                held.iter().map(|h| HeldSlice {
                    key: key.to_string(),
                    taken_at: h.taken_at.as_u64(),
                    units: h.units,
                    until: if h.kept_long() { h.until.as_u64() } else { 0 },
                })
            })
            .collect();
        if held.len() > MOST_CARRIED {
            // Those remembered longest.
            held.sort_unstable_by_key(|h| std::cmp::Reverse(h.remembered_until()));
            held.truncate(MOST_CARRIED);
        }
        held
    }

    /// Takes over the slices the previous owner `carried` (those it would
    /// still remember at `now`).
    pub fn take_over(&mut self, carried: &[HeldSlice], now: Nanos) {
        let mut carried: Vec<&HeldSlice> = carried.iter().collect();
        carried.sort_unstable_by_key(|h| h.taken_at);
        for h in carried {
            let until = h.remembered_until();
            if until > now {
                self.granted_until(&h.key, Nanos(h.taken_at), h.units, until);
            }
        }
    }

    /// The live holds of `key` at `now` (those whose end has come are not
    /// live, even before [`Outstanding::ended`] ends them).
    pub fn holds_of(&self, key: &str, now: Nanos) -> HoldsOf {
        let mut of = HoldsOf::default();
        for h in self.holds.get(key).into_iter().flatten() {
            if h.ends_at > now {
                of.live += 1;
                of.slots += u32::from(h.slot);
                of.held = of.held.saturating_add(h.units);
            }
        }
        of
    }

    /// The end of the first live slot of `key` to end after `now`.
    pub fn first_slot_end(&self, key: &str, now: Nanos) -> Option<Nanos> {
        self.holds
            .get(key)?
            .iter()
            .filter(|h| h.slot && h.ends_at > now)
            .map(|h| h.ends_at)
            .min()
    }

    /// Whether another hold can be kept ([`MOST_HOLDS`]).
    pub fn hold_room(&self) -> Result<(), TooManyHolds> {
        if self.hold_ends.len() >= MOST_HOLDS {
            return Err(TooManyHolds);
        }
        Ok(())
    }

    /// Keeps `hold` of `key` (the reserve was allowed and counted).
    pub fn hold(&mut self, key: &str, hold: Hold) -> Result<(), TooManyHolds> {
        self.hold_room()?;
        self.keep_hold(key, hold);
        Ok(())
    }

    /// Ends the live hold `id` of `key` (settled): `None` if `key` has no
    /// such hold, or its end has come.
    pub fn settle(&mut self, key: &str, id: HoldId, now: Nanos) -> Option<Hold> {
        let hold = *self.live_hold(key, id, now)?;
        self.remove_hold(key, id);
        Some(hold)
    }

    /// Moves the end of the live hold `id` of `key` to `ends_at`: the hold
    /// as it is now, or `None` as for [`Outstanding::settle`].
    pub fn extend(&mut self, key: &str, id: HoldId, ends_at: Nanos, now: Nanos) -> Option<Hold> {
        let old = self.live_hold(key, id, now)?.ends_at;
        let key = self.shared_key(key);
        self.hold_ends.remove(&(old, key.clone(), id));
        self.hold_ends.insert((ends_at, key.clone(), id));
        let hold = self.holds.get_mut(&key)?.iter_mut().find(|h| h.id == id)?;
        hold.ends_at = ends_at;
        Some(*hold)
    }

    /// Ends every hold whose end has come by `now`, the earliest first: for
    /// the owner to charge or release each.
    pub fn ended(&mut self, now: Nanos) -> Vec<(Arc<str>, Hold)> {
        let mut ended = Vec::new();
        while let Some((ends_at, key, id)) = self.hold_ends.first().cloned() {
            if ends_at > now {
                break;
            }
            if let Some(hold) = self.remove_hold(&key, id) {
                ended.push((key, hold));
            }
        }
        ended
    }

    /// Ends the holds of `key` whose end has come by `now` (before a
    /// decision on the key, so that what they release is back first).
    pub fn ended_of(&mut self, key: &str, now: Nanos) -> Vec<Hold> {
        let due: Vec<HoldId> = self
            .holds
            .get(key)
            .into_iter()
            .flatten()
            .filter(|h| h.ends_at <= now)
            .map(|h| h.id)
            .collect();
        due.into_iter()
            .filter_map(|id| self.remove_hold(key, id))
            .collect()
    }

    /// Every live hold, for the next owner (none is left out: their number
    /// is bounded by [`MOST_HOLDS`]).
    pub fn carried_holds(&self) -> Vec<HeldHold> {
        self.holds
            .iter()
            .flat_map(|(key, holds)| holds.iter().map(|h| HeldHold::of(key, h)))
            .collect()
    }

    /// Takes over the holds the previous owner carried (those ended since
    /// end at the next [`Outstanding::ended`]).
    pub fn take_over_holds(&mut self, carried: &[HeldHold]) {
        for h in carried {
            self.replayed_hold(&h.key, h.hold());
        }
    }

    /// A reserve that a journal replays: kept, unless the restored
    /// snapshot carried it already.
    pub fn replayed_hold(&mut self, key: &str, hold: Hold) {
        if !self.has_hold(key, hold.id) {
            self.keep_hold(key, hold);
        }
    }

    /// A settle or end that a journal replays: the hold is gone. Whether
    /// it was here (then what it gave back was not in the counters yet).
    pub fn replayed_end(&mut self, key: &str, id: HoldId) -> bool {
        self.remove_hold(key, id).is_some()
    }

    /// Whether `key` keeps the hold `id`, live or not yet ended.
    pub fn has_hold(&self, key: &str, id: HoldId) -> bool {
        self.holds
            .get(key)
            .is_some_and(|hs| hs.iter().any(|h| h.id == id))
    }

    /// An extend that a journal replays.
    pub fn replayed_extend(&mut self, key: &str, id: HoldId, ends_at: Nanos) {
        self.extend(key, id, ends_at, Nanos::ZERO);
    }

    /// Live holds in the partition.
    pub fn holds_len(&self) -> usize {
        self.hold_ends.len()
    }

    fn live_hold(&self, key: &str, id: HoldId, now: Nanos) -> Option<&Hold> {
        self.holds
            .get(key)?
            .iter()
            .find(|h| h.id == id && h.ends_at > now)
    }

    fn remove_hold(&mut self, key: &str, id: HoldId) -> Option<Hold> {
        let shared = self.holds.get_key_value(key)?.0.clone();
        let holds = self.holds.get_mut(key)?;
        let at = holds.iter().position(|h| h.id == id)?;
        let hold = holds.swap_remove(at);
        if holds.is_empty() {
            self.holds.remove(key);
        }
        self.hold_ends.remove(&(hold.ends_at, shared, id));
        Some(hold)
    }

    fn keep_hold(&mut self, key: &str, hold: Hold) {
        let key = self.shared_key(key);
        self.hold_ends.insert((hold.ends_at, key.clone(), hold.id));
        self.holds.entry(key).or_default().push(hold);
    }

    /// One copy of `key`, shared by every map and order that names it.
    fn shared_key(&self, key: &str) -> Arc<str> {
        if let Some((k, _)) = self.holds.get_key_value(key) {
            return k.clone();
        }
        match self.by_key.get_key_value(key) {
            Some((k, _)) => k.clone(),
            None => key.into(),
        }
    }

    /// Slices held.
    pub fn len(&self) -> usize {
        self.by_key.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    fn expire(&mut self, now: Nanos) {
        while self
            .order
            .front()
            .is_some_and(|&(taken_at, _)| taken_at.saturating_add(GRANT_KEPT) <= now)
        {
            self.forget_oldest();
        }
        while self
            .kept_long
            .first()
            .is_some_and(|&(until, _, _)| until <= now)
        {
            self.forget_first_kept_long();
        }
    }

    /// Forgets the oldest slice in `order` (if its key still holds it: one
    /// given back, or reset, is gone already; one kept longer since is
    /// left to `kept_long`).
    fn forget_oldest(&mut self) {
        if let Some((taken_at, key)) = self.order.pop_front() {
            self.retain(&key, |h| h.taken_at != taken_at || h.kept_long());
        }
    }

    /// Forgets the grant kept longer that ends first.
    fn forget_first_kept_long(&mut self) {
        if let Some((_, taken_at, key)) = self.kept_long.pop_first() {
            self.retain(&key, |h| h.taken_at != taken_at);
        }
    }
}

#[cfg(test)]
mod tests;
