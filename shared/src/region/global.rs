//! A global fixed window (SPEC §12) as the regions keep it: the home's
//! owner of a key keeps the one count, every other region's owner of the
//! key is a *delegate* that decides from units the home counted for it
//! ahead of time. No ask waits on the link between regions; the window
//! holds at most `max` summed over all regions, linked, cut or healing
//! (docs/REGIONS-DESIGN.md, "How a global window is decided").
//!
//! What a delegate may spend comes in two kinds, both counted at the home
//! before the delegate spends them:
//!
//! - **Its reserved share** of each window (its weight's fraction of `max`,
//!   [`crate::region::Global::reserved`]). The home counts every remote
//!   region's share as used when a key's window opens there
//!   ([`crate::policy::Policy::open_at_home`]), as a slice taken at the window's start; a delegate
//!   knows its share without asking, so it spends it from the window's
//!   first ask on, and while it cannot reach the home.
//! - **Slices** the home grants it on request ([`crate::policy::Policy::grant_to_region`]):
//!   the local-budget protocol of [`crate::budget`] one level up, at most
//!   half of what the window has left, with a lease of [`REGION_LEASE`] (cut
//!   at the window's end) counted from when the request left. A delegate
//!   asks ahead of need ([`DelegateKey::want`]), so while it holds budget
//!   its asks never wait; what a slice has left when its lease ends goes
//!   back to the home, as a client's does.
//!
//! A share nobody spends would be lost to the other regions every window
//! (half of `max` with two equal regions). So the home, when its own room
//! runs short, asks the delegates for their shares back (a *reclaim*, again
//! every eighth of a window while it is short): a delegate keeps what its
//! demand says it needs until the window ends ([`Demand::need_until`]) and
//! gives back the rest ([`DelegateKey::reclaim`]); the home's refund check
//! ([`crate::outstanding::Outstanding`]) takes back at most what is out.
//! The home keeps for itself the same way: a grant to another region
//! leaves it what its own demand needs, up to its own share
//! ([`home_keeps`]), so a quiet region is not starved by a busy one.
//!
//! What a delegate spent of its share, or gave back, it records in its own
//! counter of the key, so that an owner that takes the partition over
//! starts from it ([`Delegates`]). The rest of its books (its demand, and
//! its slices when a handover hands them on) a snapshot carries
//! ([`carry::CarriedBooks`]); after a crash the slices are not carried (a new
//! owner asks anew, and the old slices' units stay counted at the home
//! until their window ends). A lost request, answer, refund or reclaim
//! only leaves units counted at the home: under-admission, never more
//! than `max`.

use crate::budget::{Grant, Refund, Slice};
use crate::limit::{Decision, Limit};
use crate::time::Nanos;
use std::collections::HashMap;

pub use crate::budget::REGION_LEASE;

/// How long a delegate waits for the home's answer before it may ask
/// again (the request or its answer is taken as lost).
pub const ASK_TIMEOUT: Nanos = Nanos(1_000_000_000);

/// How far ahead a delegate looks when it judges what it holds: a slice
/// whose lease ends sooner than this counts for nothing, so the next one
/// is asked for while the link's round trip (up to ~300 ms) still leaves
/// time for it to arrive.
pub const ASK_AHEAD: Nanos = Nanos(300_000_000);

/// What one region asked of one key in one window: when its first unit
/// was taken and how many were. How a region tells what it will still
/// need, so that it keeps that much and no more when another region is
/// short ([`DelegateKey::reclaim`], the home's grants).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Demand {
    #[serde(rename = "f", default, skip_serializing_if = "Option::is_none")]
    first_at: Option<Nanos>,
    #[serde(rename = "n")]
    taken: u64,
}

/// How many units a region must have taken in a window before its rate is
/// trusted to tell what it will need.
const RATE_SAMPLE: u64 = 4;

impl Demand {
    /// `cost` units were taken at `now`.
    pub fn took(&mut self, now: Nanos, cost: u64) {
        if cost > 0 {
            self.first_at.get_or_insert(now);
            self.taken = self.taken.saturating_add(cost);
        }
    }

    pub fn taken(&self) -> u64 {
        self.taken
    }

    /// Units taken per `span` at the rate since the first one.
    fn per(&self, span: Nanos, now: Nanos) -> u64 {
        let Some(first) = self.first_at else { return 0 };
        let elapsed = now.saturating_sub(first).0.max(1_000_000);
        (u128::from(self.taken) * u128::from(span.0) / u128::from(elapsed)) as u64
    }

    /// What it will still need from `now` to `end` (the window began at
    /// `start`): its rate so far, with a quarter more for safety; nothing
    /// if it asked nothing in the first quarter of the window; `None`
    /// (keep everything) while too little was asked to tell a rate.
    pub fn need_until(&self, start: Nanos, now: Nanos, end: Nanos) -> Option<u64> {
        let quarter = end.saturating_sub(start).0 / 4;
        if self.taken == 0 && now.saturating_sub(start).0 >= quarter {
            return Some(0);
        }
        if self.taken < RATE_SAMPLE {
            return None;
        }
        let rate = self.per(end.saturating_sub(now), now);
        Some(rate.saturating_add(rate.div_ceil(4)))
    }
}

/// One key's window as a delegate keeps it.
#[derive(Clone, Debug)]
pub struct DelegateKey {
    window_start: Nanos,
    window_end: Nanos,
    max: u64,
    /// What is left of this region's reserved share (0 when unknown).
    share_left: u64,
    slices: Vec<Slice>,
    /// A request for a slice left at this time and is not answered.
    asking: Option<Nanos>,
    /// What this delegate admitted in this window.
    demand: Demand,
    /// A global bucket's books: its slices outlast the window, which only
    /// paces the books ([`Delegates::from_slices`]).
    bucket: bool,
    /// Whether `share_left` was read from the key's counter: not yet for
    /// books a new owner took over ([`Delegates::take_over`]), whose
    /// counter may hold more since (the journal's records replayed).
    share_read: bool,
}

impl DelegateKey {
    /// Books for the window at `now`, their share not read yet.
    fn new(limit: &Limit, now: Nanos) -> DelegateKey {
        let window_start = limit.window_start(now);
        DelegateKey {
            window_start,
            window_end: limit.window_end(window_start),
            max: limit.max(),
            share_left: 0,
            slices: Vec::new(),
            asking: None,
            demand: Demand::default(),
            bucket: false,
            share_read: false,
        }
    }

    /// Units it may spend at `now` without asking.
    fn room(&self, now: Nanos) -> u64 {
        let sliced: u64 = self
            .slices
            .iter()
            .filter(|s| !s.expired(now))
            .map(Slice::left)
            .sum();
        self.share_left.saturating_add(sliced)
    }

    /// Spends `cost` from the share, else from one slice that holds it;
    /// the decision, and how many units came from the share.
    fn decide(&mut self, now: Nanos, cost: u64) -> (Decision, u64) {
        let reset = self.window_end.saturating_sub(now);
        let mut from_share = 0;
        let allowed = if cost == 0 {
            true
        } else if cost <= self.share_left {
            self.share_left -= cost;
            from_share = cost;
            true
        } else {
            self.slices
                .iter_mut()
                .any(|slice| slice.take(cost, now).is_some())
        };
        if allowed {
            self.demand.took(now, cost);
        }
        let remaining = self.room(now);
        let decision = Decision {
            allowed,
            limit: self.max,
            remaining,
            reset,
            // Denied while a slice is on its way: worth asking again soon.
            retry_after: match (allowed, self.asking) {
                (true, _) => Nanos::ZERO,
                (false, Some(_)) => reset.min(Nanos(100_000_000)),
                (false, None) => reset,
            },
            shadow_denied: false,
            wait: Nanos::ZERO,
            blocked: false,
        };
        (decision, from_share)
    }

    /// Units to ask the home for at `now`, after an ask of `cost`: none
    /// while a request is out (or until [`ASK_TIMEOUT`]), none while what it
    /// holds covers half a lease of its asks at their rate so far.
    /// `part` is what the region's own part of a global bucket still
    /// holds ([`crate::region::parts`]; 0 for a window).
    fn want(&self, now: Nanos, cost: u64, part: u64) -> Option<u64> {
        if self
            .asking
            .is_some_and(|sent| now < sent.saturating_add(ASK_TIMEOUT))
        {
            return None;
        }
        let want = self
            .demand
            .per(REGION_LEASE, now)
            .max(cost)
            .max(1)
            .min(self.max);
        let room = self
            .room(now.saturating_add(ASK_AHEAD))
            .saturating_add(part);
        (room < want.div_ceil(2).max(cost)).then_some(want)
    }

    /// Gives back the share when the home asks (`reclaim`): keeps what its
    /// demand so far says it will need until the window ends
    /// ([`Demand::need_until`]), returns the rest. The refund is taken at
    /// the window's start, as the home took the share. The home may ask
    /// again; each time gives back only what is over the need by then.
    fn reclaim(&mut self, now: Nanos) -> Option<Refund> {
        let need = self
            .demand
            .need_until(self.window_start, now, self.window_end)?;
        let back = self.share_left.saturating_sub(need);
        self.share_left -= back;
        (back > 0).then_some(Refund {
            units: back,
            spent: 0,
            taken_at: self.window_start,
        })
    }
}

pub mod carry;

/// The most keys a partition's delegate books hold (~200 bytes each, more
/// with slices: a few MiB a partition); past it some are forgotten
/// ([`Delegates::make_room`]).
pub const MOST_DELEGATE_KEYS: usize = 16_384;

/// One partition's delegate books: a [`DelegateKey`] per counter key of a
/// global policy whose home is another region. What must outlive the
/// owner, the units it spent of its shares or gave back, it records in
/// its own counter of the key ([`Decided::from_share`]), which goes
/// through snapshots, the journal and handovers like any count; a new
/// owner's books start from it (`recorded`). Their demand, and their
/// slices at a handover, a snapshot carries ([`carry::CarriedBooks`]).
#[derive(Debug, Default)]
pub struct Delegates {
    keys: HashMap<String, DelegateKey>,
}

/// A delegate's decision and what to ask the home for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decided {
    pub decision: Decision,
    /// Units to ask the home for now (send the request, then
    /// [`Delegates::asked`]).
    pub want: Option<u64>,
    /// Units that came from the share: to record in the key's own counter.
    pub from_share: u64,
}

impl Delegates {
    /// The key's books for the window at `now`; a new window's share is
    /// `share` less what the key's own counter says was spent of it or
    /// given back already (`recorded`, asked only then). `bucket`: the key
    /// is a global bucket's, whose "window" only paces the books (a
    /// stretch of `per` to measure its demand in), whose share is 0 (its
    /// part is in its counter) and whose slices last across it.
    fn key(
        &mut self,
        key: &str,
        limit: &Limit,
        share: u64,
        now: Nanos,
        recorded: impl FnOnce() -> u64,
        bucket: bool,
    ) -> &mut DelegateKey {
        let window_start = limit.window_start(now);
        let fresh = match self.keys.get(key) {
            Some(entry) => entry.window_start != window_start,
            None => true,
        };
        if fresh {
            // A bucket's slices go on; a window's that the home took in
            // this window (asked for before it began, granted after) are
            // this window's units: dropped, they would stay counted at
            // the home unspent.
            let slices = match self.keys.get_mut(key) {
                Some(old) if bucket => std::mem::take(&mut old.slices),
                Some(old) => {
                    let slices = std::mem::take(&mut old.slices);
                    (slices.into_iter())
                        .filter(|s| s.taken_at() >= window_start)
                        .collect()
                }
                None => Vec::new(),
            };
            if self.keys.len() >= MOST_DELEGATE_KEYS && !self.keys.contains_key(key) {
                self.make_room(now);
            }
            // A new window: the old one's slices ended with it (their
            // units cannot go back into a window that is over); a bucket's
            // go on until their lease ends.
            let mut entry = DelegateKey::new(limit, now);
            entry.slices = slices;
            entry.bucket = bucket;
            self.keys.insert(key.to_string(), entry);
        }
        let entry = self.keys.get_mut(key).expect("just inserted");
        if !entry.share_read {
            entry.share_left = share.saturating_sub(recorded());
            entry.share_read = true;
        }
        entry
    }

    /// Room for one more key: the books of windows that are over go,
    /// then, if that is not enough, an eighth of the rest, whichever keys
    /// the map yields first. Forgetting a key is safe: its share's books
    /// start again from its counter (`recorded`), and its slices' units
    /// stay counted at the home until their window ends (under-admission).
    fn make_room(&mut self, now: Nanos) {
        self.keys.retain(|_, entry| now < entry.window_end);
        if self.keys.len() >= MOST_DELEGATE_KEYS {
            let gone: Vec<String> = self
                .keys
                .keys()
                .take(MOST_DELEGATE_KEYS / 8)
                .cloned()
                .collect();
            for key in gone {
                self.keys.remove(&key);
            }
        }
    }

    /// Forgets `key`'s books (`rl.reset`): its slices' units were
    /// forgotten at the home too.
    pub fn forget(&mut self, key: &str) {
        self.keys.remove(key);
    }

    /// Keys with books.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether `key` has books for the window at `now` whose share is
    /// known (else the next decision needs what its counter recorded).
    pub fn knows(&self, key: &str, limit: &Limit, now: Nanos) -> bool {
        self.keys
            .get(key)
            .is_some_and(|entry| entry.share_read && entry.window_start == limit.window_start(now))
    }

    /// Decides an ask of `cost` for the counter `key` under `limit`, this
    /// region's reserved share of each window being `share`; `recorded`
    /// is what the key's own counter holds in the window at `now`.
    pub fn decide(
        &mut self,
        key: &str,
        limit: &Limit,
        share: u64,
        now: Nanos,
        cost: u64,
        recorded: impl FnOnce() -> u64,
    ) -> Decided {
        let entry = self.key(key, limit, share, now, recorded, false);
        let (decision, from_share) = entry.decide(now, cost);
        let want = entry.want(now, if decision.allowed { 0 } else { cost }, 0);
        Decided {
            decision,
            want,
            from_share,
        }
    }

    /// A global bucket's ask of `cost` that the region's own part
    /// ([`crate::region::parts`]) could not pay, `part` units being left
    /// in it: decided from the slices the home granted. `limit` is the
    /// policy's whole limit.
    pub fn from_slices(
        &mut self,
        key: &str,
        limit: &Limit,
        now: Nanos,
        cost: u64,
        part: u64,
    ) -> Decided {
        let entry = self.key(key, limit, 0, now, || 0, true);
        let (decision, _) = entry.decide(now, cost);
        let want = entry.want(now, if decision.allowed { 0 } else { cost }, part);
        Decided {
            decision,
            want,
            from_share: 0,
        }
    }

    /// A global bucket's region's own part paid an ask of `cost`, `part`
    /// units being left in it: its demand counts it; what to ask the home
    /// for ahead, if anything.
    pub fn paid_by_part(
        &mut self,
        key: &str,
        limit: &Limit,
        now: Nanos,
        cost: u64,
        part: u64,
    ) -> Option<u64> {
        let entry = self.key(key, limit, 0, now, || 0, true);
        entry.demand.took(now, cost);
        entry.want(now, 0, part)
    }

    /// The home of a global bucket asks for units back: how many of the
    /// `part` units its own part holds this region will not need before
    /// the stretch of `limit`'s `per` it is in ends, and at least
    /// [`ASK_AHEAD`] from now (a gift just before a stretch ends must not
    /// leave its next asks nothing), by its demand so far
    /// ([`Demand::need_until`]; none while too little was asked to tell).
    pub fn spare(&mut self, key: &str, limit: &Limit, now: Nanos, part: u64) -> u64 {
        let entry = self.key(key, limit, 0, now, || 0, true);
        let until = entry.window_end.max(now.saturating_add(ASK_AHEAD));
        entry
            .demand
            .need_until(entry.window_start, now, until)
            .map_or(0, |need| part.saturating_sub(need))
    }

    /// A request for a slice of `key` left at `sent`.
    pub fn asked(&mut self, key: &str, sent: Nanos) {
        if let Some(entry) = self.keys.get_mut(key) {
            entry.asking = Some(sent);
        }
    }

    /// The home answered the request that left at `sent`: `grant` (if any)
    /// with the home's `decision`. A grant for a window that is over here
    /// is not kept (its lease ended with it).
    pub fn answered(
        &mut self,
        key: &str,
        sent: Nanos,
        received: Nanos,
        grant: Option<&Grant>,
        decision: &Decision,
    ) {
        let Some(entry) = self.keys.get_mut(key) else {
            return;
        };
        if entry.asking == Some(sent) {
            entry.asking = None;
        }
        if let Some(grant) = grant.filter(|g| g.units > 0) {
            let slice = Slice::new(grant, sent, received, decision);
            if !slice.expired(received) {
                entry.slices.push(slice);
            }
        }
    }

    /// The home asks for `key`'s share of the window that started at
    /// `window_start` back: the refund to send, if any (record its units
    /// in the key's own counter, as spent share). A key not asked here in
    /// the window's first quarter gives back its whole share; nothing
    /// comes of a window that is not this one.
    pub fn reclaim(
        &mut self,
        key: &str,
        limit: &Limit,
        share: u64,
        window_start: Nanos,
        now: Nanos,
        recorded: impl FnOnce() -> u64,
    ) -> Option<Refund> {
        if limit.window_start(now) != window_start {
            return None;
        }
        self.key(key, limit, share, now, recorded, false)
            .reclaim(now)
    }

    /// The slices whose lease ended at `now` with units left: each key's
    /// refunds to send (into a window that still lasts), and the books of
    /// windows that are over dropped (a global bucket's once its slices
    /// have all ended).
    pub fn sweep(&mut self, now: Nanos) -> Vec<(String, Refund)> {
        let mut refunds = Vec::new();
        self.keys.retain(|key, entry| {
            // A bucket's books stay while any of their slices lasts; a
            // window's while a request may still be answered, whose slice
            // the home may take in the next window ([`Delegates::key`]).
            let slices_last = entry.bucket && !entry.slices.is_empty();
            let awaited = entry
                .asking
                .is_some_and(|sent| now < sent.saturating_add(ASK_TIMEOUT));
            if now >= entry.window_end && !slices_last && !awaited {
                return false;
            }
            entry.slices.retain(|slice| {
                if !slice.expired(now) {
                    return true;
                }
                if slice.left() > 0 {
                    let refund = Refund {
                        spent: 0,
                        ..slice.refund()
                    };
                    refunds.push((key.clone(), refund));
                }
                false
            });
            true
        });
        refunds
    }
}

/// What the home keeps out of a grant to another region, or out of an
/// ask another region sent on to it: what its own demand needs until the
/// window ends, and at least for [`ASK_AHEAD`] (a bucket's units carry
/// over a window's end, and so does the home's demand), up to what is
/// left of its own share (`home_share`, its weight's fraction of `max`);
/// all of that while its rate cannot be told yet.
pub fn home_keeps(demand: &Demand, home_share: u64, limit: &Limit, now: Nanos) -> u64 {
    let start = limit.window_start(now);
    let left = home_share.saturating_sub(demand.taken());
    let until = limit.window_end(start).max(now.saturating_add(ASK_AHEAD));
    match demand.need_until(start, now, until) {
        Some(need) => need.min(left),
        None => left,
    }
}

/// What the home counts when a key's window opens there: every other
/// region's reserved share of `max` (none when a cut-off region does not
/// decide from a share, `on_cut` other than `"reserved"`).
pub fn remote_shares(
    global: &crate::region::Global,
    here: &crate::region::RegionName,
    max: u64,
) -> u64 {
    global
        .others(here)
        .map(|region| cut_share(global, region, max))
        .sum()
}

/// What `region` may spend of `max` on its own while cut off from the
/// home: its reserved share under `on_cut = "reserved"`, else nothing.
pub fn cut_share(
    global: &crate::region::Global,
    region: &crate::region::RegionName,
    max: u64,
) -> u64 {
    if global.on_cut() == crate::region::OnCut::Reserved {
        global.reserved(region, max)
    } else {
        0
    }
}

#[cfg(test)]
mod tests;
