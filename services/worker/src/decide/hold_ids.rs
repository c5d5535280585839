//! Hold ids as this worker draws them (SPEC §13: a client cannot
//! forge or guess one).

use sluice_core::holds::HoldId;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

/// Draws hold ids: 128 bits of a keyed hash (SipHash, a PRF under its
/// random key) of a counter, so no client can guess one from others.
pub struct HoldIds {
    key: std::collections::hash_map::RandomState,
    next: AtomicU64,
}

impl Default for HoldIds {
    fn default() -> HoldIds {
        HoldIds {
            key: std::collections::hash_map::RandomState::new(),
            next: AtomicU64::new(0),
        }
    }
}

impl HoldIds {
    pub fn draw(&self) -> HoldId {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let half = |side: u8| {
            let mut h = self.key.build_hasher();
            h.write_u64(n);
            h.write_u8(side);
            u128::from(h.finish())
        };
        HoldId::new(half(0) << 64 | half(1))
    }
}
