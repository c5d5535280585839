//! The reserved shares of a global fixed window (docs/REGIONS.md, "Global
//! limits: the design"): the bookkeeping that keeps a window at most `max`
//! summed over every region, whether the regions are linked, cut apart or
//! healing. Not wired into the worker yet: this is the rule both sides
//! will follow, checked on its own by `shared/tests/region_shares.rs`.
//!
//! - The home counts every remote region's share as used when it opens a
//!   window ([`HomeShares::open`]). A grant to a region comes out of what
//!   is left of that region's share first, then out of the window.
//! - A delegate (a remote region's owner of the key) spends on its own,
//!   while it cannot reach the home, only what is left of its share after
//!   everything the home may have granted it, an unanswered request counted
//!   as granted in full ([`DelegateShare::alone_room`]).
//! - Every message of the delegate carries what it spent alone so far
//!   (cumulative, so a repeated message books nothing twice); the home
//!   books it against the share before anything else ([`HomeShares::report`]).
//! - A delegate may release its share of a window once it has committed
//!   not to spend it alone ([`DelegateShare::release`]); the home then
//!   gives what is left of it back to the window ([`HomeShares::release`]).
//!
//! Units are whole units of the limit; windows are named by their start.

/// The home's record of one key's window: what is left of each remote
/// region's share, and whether the region released it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HomeShares {
    pub window_start: u64,
    /// Per remote region, in the policy's order of `regions` without the home.
    left: Vec<u64>,
    released: Vec<bool>,
    /// Per remote region, what it has reported spending alone (cumulative,
    /// so a repeated report books nothing twice).
    reported: Vec<u64>,
}

/// Where a grant's units came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Taken {
    /// Out of the region's reserved share (already counted in the window).
    pub from_share: u64,
    /// Out of the window's count (to be counted now).
    pub from_window: u64,
}

impl Taken {
    pub fn total(self) -> u64 {
        self.from_share + self.from_window
    }
}

impl HomeShares {
    /// Opens `window_start` with `shares` (each remote region's reserved
    /// share of `max`, [`crate::region::Global::reserved`]); returns the
    /// bookkeeping and how many units the window counts as used from the
    /// start (their sum).
    pub fn open(window_start: u64, shares: &[u64]) -> (HomeShares, u64) {
        let pre_counted = shares.iter().sum();
        (
            HomeShares {
                window_start,
                left: shares.to_vec(),
                released: vec![false; shares.len()],
                reported: vec![0; shares.len()],
            },
            pre_counted,
        )
    }

    /// What is left of `region`'s share.
    pub fn left(&self, region: usize) -> u64 {
        self.left.get(region).copied().unwrap_or(0)
    }

    /// A grant of up to `want` units to `region`, when the window has
    /// `window_room` units left (`max` minus its count): from the share
    /// first, then from the window. `spent_alone` is what the region says
    /// it spent alone so far (every request carries it): booked first.
    pub fn grant(&mut self, region: usize, want: u64, window_room: u64, spent_alone: u64) -> Taken {
        self.report(region, spent_alone);
        let Some(left) = self.left.get_mut(region) else {
            return Taken::default();
        };
        let from_share = want.min(*left);
        *left -= from_share;
        let from_window = (want - from_share).min(window_room);
        Taken {
            from_share,
            from_window,
        }
    }

    /// `region` says it has spent `spent_alone` units alone in this window
    /// so far: the part not booked yet comes out of its share, never past
    /// what is left of it (a delegate never spends more).
    pub fn report(&mut self, region: usize, spent_alone: u64) {
        let (Some(left), Some(reported)) =
            (self.left.get_mut(region), self.reported.get_mut(region))
        else {
            return;
        };
        let new = spent_alone.saturating_sub(*reported);
        *reported = (*reported).max(spent_alone);
        *left -= new.min(*left);
    }

    /// `region` released its share of this window, having spent
    /// `spent_alone` alone: that is booked, and what is left of the share
    /// goes back to the window (returned: the units the window's count
    /// drops by). Once only.
    pub fn release(&mut self, region: usize, spent_alone: u64) -> u64 {
        self.report(region, spent_alone);
        match (self.left.get_mut(region), self.released.get_mut(region)) {
            (Some(left), Some(released)) if !*released => {
                *released = true;
                std::mem::take(left)
            }
            _ => 0,
        }
    }
}

/// A delegate's record of one key's window: its share, what the home has
/// or may have granted it, what it spent alone, whether it released.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DelegateShare {
    pub window_start: u64,
    share: u64,
    /// Granted out of the share, as answers said.
    granted_from_share: u64,
    /// Asked for and not answered: counted as granted in full.
    unanswered: u64,
    spent_alone: u64,
    released: bool,
}

impl DelegateShare {
    pub fn new(window_start: u64, share: u64) -> DelegateShare {
        DelegateShare {
            window_start,
            share,
            granted_from_share: 0,
            unanswered: 0,
            spent_alone: 0,
            released: false,
        }
    }

    /// A request for `want` units is sent.
    pub fn asked(&mut self, want: u64) {
        self.unanswered += want;
    }

    /// The answer to a request for `want` came: `taken` was granted.
    pub fn answered(&mut self, want: u64, taken: Taken) {
        self.unanswered = self.unanswered.saturating_sub(want);
        self.granted_from_share += taken.from_share;
    }

    /// What it may still spend alone: what is left of its share after
    /// everything the home may have taken from it.
    pub fn alone_room(&self) -> u64 {
        if self.released {
            return 0;
        }
        self.share
            .saturating_sub(self.granted_from_share)
            .saturating_sub(self.unanswered)
            .saturating_sub(self.spent_alone)
    }

    /// Spends `cost` alone, if it fits.
    pub fn spend_alone(&mut self, cost: u64) -> bool {
        if cost > self.alone_room() {
            return false;
        }
        self.spent_alone += cost;
        true
    }

    /// What it spent alone so far (every message to the home carries it).
    pub fn spent(&self) -> u64 {
        self.spent_alone
    }

    /// Commits not to spend alone in this window any more; the release
    /// can then be sent.
    pub fn release(&mut self) {
        self.released = true;
    }
}
