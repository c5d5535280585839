//! What one kind of kept state implements ([`Kept`]): how a snapshot reads
//! it and how a new owner takes it over. Registered in [`super`].

use crate::counters::Counters;
use serde::de::DeserializeOwned;
use serde::Serialize;
use sluice_core::time::Nanos;
use std::fmt::Debug;

/// One kind of state a partition's owner keeps beside its counters.
pub trait Kept {
    /// What a snapshot's manifest carries of it (left out when empty).
    type Carried: Clone + Debug + Default + PartialEq + Serialize + DeserializeOwned;

    /// What a snapshot carries: read in its copy, between the same two
    /// turns as the counters it copies. `handover`: the copy is a
    /// handover's final one, after which its owner changes nothing.
    fn read(counters: &Counters, now: Nanos, handover: bool) -> Self::Carried;

    /// At takeover, once the snapshot's counters are restored: the new
    /// owner takes over what the manifest carried. `handover`: the
    /// snapshot is a handover's final one and this is the first owner
    /// after it (no owner since may have changed what it carries).
    fn take_over(carried: &Self::Carried, counters: &Counters, now: Nanos, handover: bool);

    /// Whether it holds state that a handover must carry even when no
    /// count changed since the last snapshot (which then has no final
    /// one): state changed without a count, or carried only at handovers.
    fn unsaved(_counters: &Counters) -> bool {
        false
    }
}
