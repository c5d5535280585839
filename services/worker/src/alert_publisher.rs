//! The worker's one threshold-alert publisher (SPEC §14): takes the
//! alerts every partition noted ([`crate::alerting`]) and publishes
//! each to the stream `SLUICE_ALERTS` with its `Nats-Msg-Id`
//! ([`sluice_core::alerts::Alert::msg_id`]), off the decision path, until
//! the stream acknowledges it; then marks it stored among its partition's alerts. In
//! journal mode it first waits until the journal stored what was decided
//! before, so an alert never announces a count a crash could still lose.

use crate::alerting::{Note, Sink};
use crate::stats::WorkerStats;
use async_nats::jetstream::{self, message::PublishMessage};
use futures::future::BoxFuture;
use sluice_core::subject::alert_subject;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Waits until what was decided before is stored (journal mode), so that
/// no alert goes out for a count a crash could still lose.
pub type Barrier = Arc<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>;

/// The most alerts published before their acks are awaited.
const BATCH: usize = 256;
/// The first wait before publishing again what the stream did not
/// acknowledge, doubled up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(100);
const MAX_RETRY: Duration = Duration::from_secs(5);

/// The worker's alert publisher: one task, fed by every partition's alerts.
pub struct Publisher;

impl Publisher {
    /// Starts the task; `barrier` in journal mode; alerts not
    /// acknowledged are counted in `stats`.
    pub fn spawn(
        js: jetstream::Context,
        barrier: Option<Barrier>,
        stats: Arc<WorkerStats>,
    ) -> (Sink, JoinHandle<()>) {
        let (sink, rx) = Sink::new();
        (sink, tokio::spawn(publish_all(js, rx, barrier, stats)))
    }
}

async fn publish_all(
    js: jetstream::Context,
    mut rx: mpsc::UnboundedReceiver<Note>,
    barrier: Option<Barrier>,
    stats: Arc<WorkerStats>,
) {
    while let Some(first) = rx.recv().await {
        let mut notes = vec![first];
        while notes.len() < BATCH {
            match rx.try_recv() {
                Ok(n) => notes.push(n),
                Err(_) => break,
            }
        }
        if let Some(barrier) = &barrier {
            barrier().await;
        }
        let mut wait = FIRST_RETRY;
        loop {
            notes = publish_once(&js, notes).await;
            if notes.is_empty() {
                break;
            }
            let failed = notes.len() as u64;
            stats
                .alert_publish_failures
                .fetch_add(failed, Ordering::Relaxed);
            tracing::warn!(
                unstored = notes.len(),
                "threshold alerts not acknowledged by the stream; publishing them again in {wait:?}"
            );
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(MAX_RETRY);
        }
    }
}

/// Publishes `notes` and waits for their acks; returns those not
/// acknowledged. An alert whose partition's alerts are gone (handed over) is
/// published all the same: the next owner's copy carries the same id.
async fn publish_once(js: &jetstream::Context, notes: Vec<Note>) -> Vec<Note> {
    let mut acks = Vec::with_capacity(notes.len());
    for note in notes {
        let a = &note.alert;
        let publish = PublishMessage::build()
            .message_id(a.msg_id())
            .payload(a.alert.to_json().into());
        let sent = js
            .send_publish(alert_subject(&a.alert.policy, &a.alert.key), publish)
            .await;
        acks.push((note, sent));
    }
    let mut unstored = Vec::new();
    for (note, sent) in acks {
        let acked = match sent {
            Ok(ack) => ack.await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match acked {
            Ok(_) => note.stored(),
            Err(e) => {
                tracing::debug!("alert {} not stored: {e}", note.alert.msg_id());
                unstored.push(note);
            }
        }
    }
    unstored
}
