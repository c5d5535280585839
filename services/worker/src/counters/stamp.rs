//! A slot's stamp: when its key may be forgotten, and whether it was asked
//! for again, in one word that ranks keys in the order the key bound
//! forgets them.

use sluice_core::time::Nanos;

/// When a slot may be forgotten, and whether its key was asked for again
/// after it was stored, in one word (a flag of its own would cost 8 bytes of
/// padding per key): the top bit is the flag, free because times stay below
/// 2^63 ns since the epoch until the year 2262. Ordered as words, stamps
/// rank slots in the order the key bound forgets them: asked once before
/// asked again, each the earliest forgettable first. A bucket's table keeps
/// it in 4 bytes, to the second (rounded up), with the flag beside it
/// ([`super::table`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stamp(u64);

impl Stamp {
    pub const ASKED_AGAIN: u64 = 1 << 63;
    /// Ranks below every other stamp.
    pub const ZERO: Stamp = Stamp(0);
    /// Ranks above every other stamp.
    pub const MAX: Stamp = Stamp(u64::MAX);

    pub fn new(forgettable_at: Nanos, asked_again: bool) -> Stamp {
        let at = forgettable_at.as_u64().min(Stamp::ASKED_AGAIN - 1);
        Stamp(if asked_again {
            at | Stamp::ASKED_AGAIN
        } else {
            at
        })
    }

    pub fn forgettable_at(self) -> Nanos {
        Nanos(self.0 & !Stamp::ASKED_AGAIN)
    }

    pub fn asked_again(self) -> bool {
        self.0 & Stamp::ASKED_AGAIN != 0
    }
}
