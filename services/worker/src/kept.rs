//! The kinds of state an owner keeps beside its counters' values, and how
//! each is carried from one owner to the next.
//!
//! A counter's value travels in the snapshot's chunks and the journal's
//! records. Some state belongs to the partition without being a counter
//! value: the budget slices granted and not back yet, the live holds, the
//! alerts fired, the ids of admitted asks, the global keys' state. Each such kind implements [`Kept`] in a file of its own
//! and is registered once, in the [`kept!`] list at the bottom of this file:
//! that list makes the manifest's field for it ([`Carried`]), takes it at
//! every snapshot, and hands it to the next owner at takeover.
//!
//! A snapshot copies the counters between two turns
//! ([`crate::counters::Turns`]), and each kind is read in the same copy
//! ([`Kept::read`]): what the manifest carries is exactly what the copied
//! counters hold, so a record replayed after the copy (a settle, a slice
//! given back) finds its hold or slice, and one before it is not replayed.

mod alerts;
mod global;
mod holds;
mod ids;
mod kind;
mod slices;

pub use kind::Kept;

use crate::counters::Counters;
use serde::{Deserialize, Serialize};
use sluice_core::time::Nanos;

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// Registers the kinds of kept state: one line each, `field: Kind`, where
/// `field` is its name in the manifest.
macro_rules! kept {
    ($($(#[$doc:meta])* $field:ident: $kind:ty),* $(,)?) => {
        /// What a snapshot's manifest carries beside the chunks: one field
        /// per kind of kept state, each left out while empty (so earlier
        /// releases read the manifest as before and ignore what they do not
        /// know).
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
        pub struct Carried {
            $(
                $(#[$doc])*
                #[serde(default, skip_serializing_if = "is_default")]
                pub $field: <$kind as Kept>::Carried,
            )*
        }

        impl Carried {
            /// Every kind, read in a snapshot's copy between turns
            /// (`handover`: a handover's final copy, [`Kept::read`]).
            pub fn read(counters: &Counters, now: Nanos, handover: bool) -> Carried {
                Carried { $($field: <$kind>::read(counters, now, handover),)* }
            }

            /// Every kind, taken over by a new owner (`handover`: the
            /// first after a handover's final snapshot, [`Kept::take_over`]).
            pub fn take_over(&self, counters: &Counters, now: Nanos, handover: bool) {
                $(<$kind>::take_over(&self.$field, counters, now, handover);)*
            }

            /// Whether any kind holds state a handover must carry though
            /// no count changed ([`Kept::unsaved`]).
            pub fn unsaved(counters: &Counters) -> bool {
                false $(|| <$kind>::unsaved(counters))*
            }
        }
    };
}

kept! {
    /// Slices of local budgets granted and not back yet, so that the next
    /// owner still takes their refunds ([`sluice_core::outstanding::Outstanding`]).
    slices: slices::Slices,
    /// Live holds, so that the next owner settles, extends and ends them
    /// ([`sluice_core::holds`]).
    holds: holds::Holds,
    /// Threshold alerts fired in windows not over yet, so that the next
    /// owner fires none of them again and publishes those the stream may
    /// not hold (SPEC §14, `crate::alerting`).
    alerts: alerts::Alerts,
    /// The ids of admitted asks that still count, so that the next owner
    /// answers their repeats instead of counting them again (SPEC §16).
    ids: ids::Ids,
    /// The partition's global state (SPEC §12) beside its keys' counters:
    /// each global key's demand, the home's reclaims, and at a handover a
    /// delegate's slices, so that the next owner keeps, asks for and
    /// gives back what the last one would have
    /// ([`sluice_core::region::state::CarriedGlobal`]).
    global: global::Global,
}

#[cfg(test)]
mod tests {
    use super::Carried;
    use crate::counters::Counters;
    use crate::snapshot::Manifest;
    use sluice_core::alerts::Thresholds;
    use sluice_core::ask::Op;
    use sluice_core::policy::{Algorithm, Limit, Policy};
    use sluice_core::time::Nanos;
    use std::time::Duration;

    /// A threshold fires once per window: not again when units given back
    /// let the count reach it a second time, and not again at a new owner
    /// that took the snapshot's alerts over (which still lists the one the
    /// stream had not acknowledged, to publish it again).
    #[test]
    fn fired_alerts_fire_once_and_travel_to_the_next_owner() {
        let policy = Policy::new(
            "quota",
            Algorithm::FixedWindow,
            vec![Limit::new(10, Duration::from_secs(3600), None).unwrap()],
        )
        .unwrap()
        .with_alerts(Thresholds::new(&[50]).unwrap())
        .unwrap();
        let key = "quota/alice";
        let now = Nanos::from_secs(7_200);
        let counters = Counters::new();
        counters.apply(&policy, key, now, Op::Allow(6));
        counters.update(&policy, key, now, |s| policy.refund(s, now, 3, now));
        counters.apply(&policy, key, now, Op::Allow(3));
        let carried = Carried::read(&counters, now, false);
        assert_eq!(carried.alerts.len(), 1, "{:?}", carried.alerts);
        assert_eq!(
            (carried.alerts[0].alert.used, carried.alerts[0].stored),
            (6, false)
        );

        let next = Counters::new();
        carried.take_over(&next, now, false);
        next.apply(&policy, key, now, Op::Record(6));
        assert_eq!(next.alerts().fired().len(), 1, "nothing fired again");
        // The next hour is a new window: it fires again there.
        let later = Nanos::from_secs(10_800);
        next.apply(&policy, key, later, Op::Allow(5));
        assert_eq!(next.alerts().fired().len(), 2);
    }

    /// A manifest written before kept state had a place of its own
    /// (`kept/`) names its slices `slices` at the top level; it must read the same, and a manifest
    /// with nothing kept must not name the field (earlier releases ignore
    /// what they do not know, but read less).
    #[test]
    fn a_manifest_carries_each_kind_under_its_own_field_and_leaves_empty_ones_out() {
        let empty = serde_json::to_value(Manifest::default()).unwrap();
        for field in ["slices", "global", "handover"] {
            assert!(empty.get(field).is_none(), "{empty}");
        }

        let written = r#"{"gen":"3x9","chunks":1,"bytes":10,"entries":1,"lease_rev":3,
            "journal_seq":0,"taken_at_ms":1,"worker":"w0",
            "slices":[{"k":"default/hot","t":5000000000,"u":12}]}"#;
        let m: Manifest = serde_json::from_str(written).unwrap();
        assert_eq!(m.carried.slices.len(), 1);
        // Written before the global state was kept: none, and not a
        // handover's (its slices, had it any, are not taken).
        assert_eq!(m.carried.global, Default::default());
        assert!(!m.handover);
        assert_eq!(
            (m.carried.slices[0].key.as_str(), m.carried.slices[0].units),
            ("default/hot", 12)
        );
        let again = serde_json::to_value(&m).unwrap();
        assert_eq!(again["slices"][0]["u"], 12);
    }
}
