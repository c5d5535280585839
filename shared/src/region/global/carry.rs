//! A delegate's books as a snapshot carries them to the partition's next
//! owner ([`CarriedBooks`]).
//!
//! What it spent of its share is not among them: that is in the key's own
//! counter, which the journal's records after the snapshot add to, so a
//! new owner reads the share from the counter again
//! ([`DelegateKey::share_read`]). What travels here is what no counter
//! holds: the key's demand in its window (what it keeps when the home
//! reclaims, what it asks for ahead) and, only from a handover's final
//! snapshot (`with_slices`), the slices the home granted it. A handover's
//! owner spends nothing after that copy, so its slices are exactly what is
//! left of them; a periodic snapshot's would be spent again by an owner
//! taking over after a crash (the journal does not say which slice an ask
//! spent), so they are left out, and their units stay counted at the home
//! until their window ends (under-admission, as before they were carried).

use super::{DelegateKey, Delegates, Demand};
use crate::budget::Slice;
use crate::time::Nanos;
use serde::{Deserialize, Serialize};

fn is_false(b: &bool) -> bool {
    !*b
}

/// One key's books as a snapshot carries them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CarriedBooks {
    /// The counter key (`policy/token`).
    #[serde(rename = "k")]
    pub key: String,
    #[serde(rename = "s")]
    window_start: Nanos,
    #[serde(rename = "e")]
    window_end: Nanos,
    #[serde(rename = "m")]
    max: u64,
    #[serde(rename = "d")]
    demand: Demand,
    /// The slices with units left (a handover's only).
    #[serde(rename = "l", default, skip_serializing_if = "Vec::is_empty")]
    slices: Vec<Slice>,
    #[serde(rename = "b", default, skip_serializing_if = "is_false")]
    bucket: bool,
}

impl CarriedBooks {
    /// The slices carried.
    pub fn slices(&self) -> &[Slice] {
        &self.slices
    }
}

impl Delegates {
    /// Whether any key's books hold a slice with units left.
    pub fn holds_slices(&self) -> bool {
        self.keys
            .values()
            .any(|entry| entry.slices.iter().any(|s| s.left() > 0))
    }

    /// What a snapshot copied at `now` carries: the books of every key
    /// with a demand in a window not over, or (`with_slices`, a
    /// handover's) slices with units left, in key order.
    pub fn carried(&self, now: Nanos, with_slices: bool) -> Vec<CarriedBooks> {
        let with_slices = with_slices && self.holds_slices();
        let mut carried: Vec<CarriedBooks> = self
            .keys
            .iter()
            .filter_map(|(key, entry)| {
                let slices: Vec<Slice> = match with_slices {
                    true => entry
                        .slices
                        .iter()
                        .filter(|s| s.left() > 0)
                        .cloned()
                        .collect(),
                    false => Vec::new(),
                };
                let demand = now < entry.window_end && entry.demand.taken() > 0;
                (demand || !slices.is_empty()).then(|| CarriedBooks {
                    key: key.clone(),
                    window_start: entry.window_start,
                    window_end: entry.window_end,
                    max: entry.max,
                    demand: entry.demand,
                    slices,
                    bucket: entry.bucket,
                })
            })
            .collect();
        carried.sort_by(|a, b| a.key.cmp(&b.key));
        carried
    }

    /// A new owner takes over the books a snapshot carried: their share
    /// is read from the key's counter at its next decision (which holds
    /// what the journal replayed since); their slices are spent and given
    /// back as the last owner's would have been (the sweep gives back
    /// those whose lease ended meanwhile), when `with_slices` (this owner
    /// is the first after the handover that carried them). Books the owner
    /// has already are kept.
    pub fn take_over(&mut self, carried: &[CarriedBooks], with_slices: bool) {
        for books in carried {
            if self.keys.len() >= super::MOST_DELEGATE_KEYS {
                return;
            }
            self.keys
                .entry(books.key.clone())
                .or_insert_with(|| DelegateKey {
                    window_start: books.window_start,
                    window_end: books.window_end,
                    max: books.max,
                    share_left: 0,
                    slices: match with_slices {
                        true => books.slices.clone(),
                        false => Vec::new(),
                    },
                    asking: None,
                    demand: books.demand,
                    bucket: books.bucket,
                    share_read: false,
                });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::slice_granted;
    use super::super::{Delegates, REGION_LEASE};
    use crate::limit::Limit;
    use crate::time::Nanos;
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    /// A delegate's books through a snapshot: the share is read again
    /// from the key's counter (which the journal may have added to), the
    /// demand goes on, and the slices only from a handover's copy.
    #[test]
    fn books_travel_without_their_share_and_with_slices_only_at_a_handover() {
        let limit = Limit::new(100, Duration::from_secs(10), None).unwrap();
        let t = Nanos(10_000 * MS);
        let mut d = Delegates::default();
        for i in 0..5 {
            assert!(
                d.decide("k", &limit, 5, Nanos(t.0 + i * MS), 1, || 0)
                    .decision
                    .allowed
            );
        }
        d.asked("k", Nanos(t.0 + 5 * MS));
        let grant = slice_granted(&mut d, t);
        let at = Nanos(t.0 + 200 * MS);
        assert!(d.carried(at, false)[0].slices().is_empty());
        let carried = d.carried(at, true);
        assert_eq!(carried.len(), 1);
        assert_eq!(carried[0].slices().len(), 1);

        let mut next = Delegates::default();
        next.take_over(&carried, true);
        assert!(!next.knows("k", &limit, at), "its share is read again");
        // The counter says the share (5) is spent: the slice pays.
        let spent = next.decide("k", &limit, 5, at, 3, || 5);
        assert!(spent.decision.allowed);
        assert_eq!(spent.from_share, 0);
        assert_eq!(spent.decision.remaining, 7);
        // What is left of it goes back when its lease ends.
        let refunds = next.sweep(Nanos(t.0 + 5 * MS + REGION_LEASE.0));
        assert_eq!(refunds.len(), 1);
        assert_eq!(
            (refunds[0].1.units, refunds[0].1.taken_at),
            (7, grant.taken_at)
        );

        // A periodic snapshot's books carry no slice: a new owner after a
        // crash asks anew.
        let mut crashed = Delegates::default();
        crashed.take_over(&d.carried(at, false), false);
        assert!(!crashed.decide("k", &limit, 5, at, 3, || 5).decision.allowed);
    }
}
