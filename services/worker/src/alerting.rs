//! Threshold alerts (SPEC §14) from the decision to the publisher.
//!
//! A decision that makes a key's count reach a threshold
//! ([`sluice_core::alerts::watch`], run by [`crate::counters::Counters`])
//! only notes it: the partition's [`PartitionAlerts`] keeps it (so that the
//! threshold fires once per window, and so that snapshots and handovers
//! carry it, `kept/alerts.rs`) and hands it over a channel to the
//! worker's one publisher task ([`crate::alert_publisher`]). Nothing on
//! the decision path waits for NATS, and nothing here knows it.
//!
//! The publisher publishes each alert to JetStream with its
//! `Nats-Msg-Id` ([`sluice_core::alerts::Alert::msg_id`]), tries again
//! until the stream acknowledges it, and then marks it stored in its
//! partition's alerts. In journal mode it first waits until the journal stored what
//! was decided before the alert was noted, so an alert never announces a
//! count a crash could still lose. Whoever publishes an alert again (a
//! retry whose first ack was lost, a new owner taking over an alert not
//! marked stored, a journal replay reaching the threshold again) sends
//! the same message id, and the stream keeps one.

use sluice_core::alerts::{Alert, Crossing, Fired, FiredAlert};
use sluice_core::policy::Policy;
use sluice_core::region::tally::tallied_key;
use sluice_core::time::Nanos;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use tokio::sync::mpsc;

/// One alert on its way to the stream, and its partition's fired alerts,
/// to mark it stored in.
pub struct Note {
    pub alert: FiredAlert,
    fired: Weak<Mutex<Fired>>,
}

impl Note {
    /// The stream acknowledged it: marked stored among its partition's alerts (if its
    /// partition is still owned here).
    pub fn stored(&self) {
        if let Some(fired) = self.fired.upgrade() {
            let mut fired = fired.lock().unwrap_or_else(|e| e.into_inner());
            fired.stored(&self.alert.msg_id());
        }
    }
}

/// Where a partition's new alerts go: the worker's publisher.
#[derive(Clone)]
pub struct Sink(mpsc::UnboundedSender<Note>);

impl Sink {
    /// A sink and the end the publisher reads.
    pub fn new() -> (Sink, mpsc::UnboundedReceiver<Note>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Sink(tx), rx)
    }
}

/// A partition's fired alerts, and the sink new ones go to (none in unit
/// tests: they are only kept).
#[derive(Clone, Default)]
pub struct PartitionAlerts {
    fired: Arc<Mutex<Fired>>,
    sink: Option<Sink>,
}

impl PartitionAlerts {
    /// The same alerts, sending new ones to `sink`.
    pub fn sending_to(mut self, sink: Sink) -> PartitionAlerts {
        self.sink = Some(sink);
        self
    }

    /// The thresholds a decision of `policy` on the counter `counter_key`
    /// (`policy/token`) reached at `now`: those not fired yet in their
    /// window are kept and sent on.
    pub fn fire(&self, policy: &Policy, counter_key: &str, crossings: &[Crossing], now: Nanos) {
        // A global policy's tally fires for the key it is of.
        let counter_key = tallied_key(counter_key).unwrap_or(counter_key);
        let token = counter_key
            .split_once('/')
            .map_or(counter_key, |(_, token)| token);
        let mut fired = self.fired();
        for c in crossings {
            let alert = FiredAlert {
                alert: Alert::of(c, policy, token, now),
                limit: c.limit,
                stored: false,
            };
            if fired.fire(alert.clone()) {
                self.send(alert);
            }
        }
    }

    /// At takeover: keeps what the last owner fired and publishes again
    /// what it had not seen stored.
    pub fn take_over(&self, carried: &[FiredAlert]) {
        let again = self.fired().take_over(carried);
        for alert in again {
            self.send(alert);
        }
    }

    fn send(&self, alert: FiredAlert) {
        if let Some(Sink(tx)) = &self.sink {
            // Fails only once the publisher is gone (the worker stops): the
            // alert stays among the fired ones, and a snapshot carries it on.
            let _ = tx.send(Note {
                alert,
                fired: Arc::downgrade(&self.fired),
            });
        }
    }

    /// The alerts kept (a bucket's lock, then this one; never the other way).
    pub fn fired(&self) -> MutexGuard<'_, Fired> {
        self.fired.lock().unwrap_or_else(|e| e.into_inner())
    }
}
