//! Reading and following threshold alerts (SPEC §14) from the stream
//! `SLUICE_ALERTS`: the one way the client, `sluice alerts` and the
//! gateway's dashboard read them.
//!
//! The stream keeps each alert once, so reading it (rather than
//! subscribing to `rl.alert.>`) gives every alert exactly once, those
//! stored before the reader started included, and a follower that
//! reconnects misses none: an ordered consumer picks up after the last
//! one it delivered.

use crate::error::Error;
use async_nats::jetstream::{self, consumer};
use futures::stream::{self, BoxStream, StreamExt};
use sluice_core::alerts::Alert;
use sluice_core::storage::ALERT_STREAM;
use sluice_core::subject::alert_filter;

/// Where a reading of the alerts starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Every alert the stream keeps.
    All,
    /// The last `n` alerts the stream stored (of any policy; those of
    /// other policies are then left out when a policy is named).
    Last(u64),
    /// Only those stored from now on.
    New,
}

/// The alerts of `policy` (every policy when `None`) from `start`, oldest
/// first: until the last one stored when the reading began, or, with
/// `follow`, on with each new one as it is stored (the stream never ends).
pub async fn alerts(
    nats: &async_nats::Client,
    policy: Option<&str>,
    start: Start,
    follow: bool,
) -> Result<BoxStream<'static, Result<Alert, Error>>, Error> {
    let js = jetstream::new(nats.clone());
    let mut stream = js.get_stream(ALERT_STREAM).await.map_err(|e| {
        Error::Unavailable(format!(
            "cannot read the stream {ALERT_STREAM} ({e}); a worker creates it when it starts"
        ))
    })?;
    let deliver_policy = match start {
        Start::All => consumer::DeliverPolicy::All,
        Start::New => consumer::DeliverPolicy::New,
        Start::Last(n) => {
            let state = stream
                .info()
                .await
                .map_err(|e| Error::Unavailable(format!("cannot read {ALERT_STREAM}: {e}")))?
                .state
                .clone();
            let start_sequence = state
                .last_sequence
                .saturating_sub(n.saturating_sub(1))
                .max(state.first_sequence)
                .max(1);
            consumer::DeliverPolicy::ByStartSequence { start_sequence }
        }
    };
    let mut consumer = stream
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: alert_filter(policy),
            deliver_policy,
            ..Default::default()
        })
        .await
        .map_err(|e| Error::Unavailable(format!("cannot read {ALERT_STREAM}: {e}")))?;
    let pending = match consumer.info().await {
        Ok(info) => info.num_pending,
        Err(e) => {
            return Err(Error::Unavailable(format!(
                "cannot read {ALERT_STREAM}: {e}"
            )))
        }
    };
    if !follow && pending == 0 {
        return Ok(stream::empty().boxed());
    }
    let messages = consumer
        .messages()
        .await
        .map_err(|e| Error::Unavailable(format!("cannot read {ALERT_STREAM}: {e}")))?;
    let alerts = messages.map(|m| {
        let m = m.map_err(|e| Error::Unavailable(format!("reading {ALERT_STREAM}: {e}")))?;
        Alert::from_json(&m.payload).map_err(Error::BadRequest)
    });
    Ok(match follow {
        true => alerts.boxed(),
        false => alerts
            .take(usize::try_from(pending).unwrap_or(usize::MAX))
            .boxed(),
    })
}
