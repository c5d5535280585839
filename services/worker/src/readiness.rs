//! What `/readyz` reads of a worker ([`sluice_core::readiness`] judges
//! it): the controller marks here when its heartbeat was stored, when its
//! view of the lease bucket became current and when it began to stop; the
//! NATS connection's state is read live at each probe.

use sluice_core::readiness::WorkerState;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The controller's marks, read by `/readyz`.
#[derive(Debug, Default)]
pub struct Readiness {
    /// When the worker first stored its heartbeat, and its lease ttl.
    joined: OnceLock<(Instant, Duration)>,
    /// The last heartbeat stored, in ms after `joined`.
    heartbeat_ms: AtomicU64,
    view_current: AtomicBool,
    stopping: AtomicBool,
}

impl Readiness {
    /// Its first heartbeat is stored; leases expire after `lease_ttl`.
    pub fn joined(&self, lease_ttl: Duration) {
        let _ = self.joined.set((Instant::now(), lease_ttl));
    }

    /// A heartbeat was stored just now.
    pub fn heartbeat_stored(&self) {
        if let Some((at, _)) = self.joined.get() {
            let ms = at.elapsed().as_millis() as u64;
            self.heartbeat_ms.store(ms, Ordering::Relaxed);
        }
    }

    /// Its view of the lease bucket is current (it may claim partitions).
    pub fn view_current(&self) {
        self.view_current.store(true, Ordering::Relaxed);
    }

    /// It has begun to stop.
    pub fn stopping(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    /// The state to judge, with the NATS connection's state
    /// `nats_connected`.
    pub fn state(&self, nats_connected: bool) -> WorkerState {
        let (since_heartbeat, lease_ttl) = match self.joined.get() {
            Some((at, ttl)) => {
                let stored = Duration::from_millis(self.heartbeat_ms.load(Ordering::Relaxed));
                (Some(at.elapsed().saturating_sub(stored)), *ttl)
            }
            None => (None, Duration::ZERO),
        };
        WorkerState {
            nats_connected,
            lease_view_current: self.view_current.load(Ordering::Relaxed),
            since_heartbeat,
            lease_ttl,
            stopping: self.stopping.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::readiness::worker;

    #[test]
    fn a_worker_is_ready_from_its_first_heartbeat_and_view_until_it_stops() {
        let r = Readiness::default();
        assert!(!worker(&r.state(true)).is_ready(), "not joined yet");
        r.joined(Duration::from_secs(3));
        r.heartbeat_stored();
        assert!(!worker(&r.state(true)).is_ready(), "no view yet");
        r.view_current();
        assert!(worker(&r.state(true)).is_ready());
        assert!(!worker(&r.state(false)).is_ready(), "disconnected");
        r.stopping();
        assert!(!worker(&r.state(true)).is_ready(), "stopping");
    }
}
