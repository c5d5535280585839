//! Holds (SPEC §13, docs/HOLDS.md): [`Client::reserve`],
//! [`Client::settle`], [`Client::extend`], and [`Client::hold`], whose
//! [`HoldGuard`] settles with the real cost or, dropped unsettled, releases.
//!
//! A hold lives at its key's owner, so every verb goes to it: no deny
//! cache, no local budget and no fallback (a hold nobody owns cannot
//! exist): when no worker answers, the verb is an [`Error::Unavailable`].
//! With batching on, a verb travels in its worker's next batch with the
//! asks and other verbs for that worker ([`crate::batch`]; the reply item
//! is what the verb's own reply would be), else alone on its subject.
//! "No responders" and a 503 (the partition is changing owners: alone, or
//! in the item's slot) are retried as an ask's are, a batch item alone on
//! its verb's subject; both mean that nothing was done, so a retry never
//! holds or settles twice. The 503 with `Sluice-Unstored` (the owner did
//! the verb in memory but its journal did not store it) is retried only
//! when the verb is named by an id (SPEC §16; every verb is, with
//! [`crate::ClientOptions::ask_ids`], the default): the owner answers the
//! retry with the first answer, or, if it died before storing, the next
//! owner does the verb once. Unnamed, a second reserve would keep a second
//! hold, so that 503 is the caller's. Never retried: a batch reply that
//! cannot be read, a batch that ended without a reply. A batch carrying a hold verb is sent by a task of its own, so
//! that a caller giving up does not take its neighbours' replies with it.

use crate::answer::{Answer, Source};
use crate::client::{prepare, Client};
use crate::error::Error;
use crate::inner::{Asking, Inner};
use crate::key::{token_of, AsKey, KeyPath};
use crate::outcome::{Decoded, NoAnswer};
use bytes::Bytes;
use sluice_core::holds::HoldId;
use sluice_core::partition::partition_of;
use sluice_core::subject::Verb;
use sluice_core::time::Nanos;
use sluice_core::wire::batch::{Act, HoldAct};
use sluice_core::wire::hold::{encode_held_levels, encode_hold_request, HoldAsk};
use sluice_core::wire::{decode_reply, Encoding, ErrorCode, Reply, DEFAULT_COST, SLUICE_UNSTORED};
use std::time::{Duration, Instant};

pub use sluice_core::wire::hold::HoldTicket;

/// The answer to a reserve or an extend: the decision, and the hold it
/// kept (none when the reserve was denied).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub answer: Answer,
    /// The hold's name and how long until it ends by itself.
    pub ticket: Option<HoldTicket>,
}

impl Held {
    /// The reply body of the hold's verb (as a worker sends it): the
    /// decision of SPEC §1, plus `hold` and `expires_ms` for a kept
    /// hold, and a grouped key's levels (SPEC §17).
    pub fn encode(&self, encoding: Encoding) -> Vec<u8> {
        let held = self.ticket.as_ref().and_then(|t| {
            let id = HoldId::parse(&t.hold)?;
            Some((id, Nanos(t.expires_ms.saturating_mul(1_000_000))))
        });
        let answer = &self.answer;
        encode_held_levels(
            &answer.decision(),
            &answer.policy,
            (held, answer.repeat),
            (&answer.levels, answer.denied_by.as_deref()),
            encoding,
        )
    }
}

/// What [`Client::hold`] got: a live hold, or the denial (with its
/// `retry_after`).
#[derive(Debug)]
pub enum Reserved {
    Held(HoldGuard),
    Denied(Answer),
}

impl Client {
    /// `rl.reserve.<key>`: decides like [`Client::ask`] with `cost` and,
    /// when allowed, holds it for `ttl` (`None`: the policy's `hold_ttl`)
    /// until [`Client::settle`]. A denied reserve holds nothing.
    ///
    /// ```no_run
    /// # async fn demo(client: sluice_client::Client) -> Result<(), sluice_client::Error> {
    /// let held = client.reserve("user-7", "llm", 4000, None).await?;
    /// if let Some(ticket) = held.ticket {
    ///     // ... the model answers, using 1234 tokens ...
    ///     client.settle("user-7", "llm", &ticket.hold, 1234).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn reserve(
        &self,
        key: impl AsKey,
        policy: &str,
        cost: u64,
        ttl: Option<Duration>,
    ) -> Result<Held, Error> {
        self.reserve_named(key, policy, cost, ttl, None).await
    }

    /// [`Client::reserve`] named by the caller's own `id` when given (1 to
    /// 128 bytes of printable ASCII; SPEC §16): sent again with the same
    /// id (a retry after a timeout), it keeps one hold, and its answer is
    /// the first one's (the same hold), marked [`Answer::repeat`]. Without
    /// one, the client names it itself ([`crate::ClientOptions::ask_ids`]).
    pub async fn reserve_named(
        &self,
        key: impl AsKey,
        policy: &str,
        cost: u64,
        ttl: Option<Duration>,
        id: Option<&str>,
    ) -> Result<Held, Error> {
        self.reserve_with(key, (policy, cost, ttl), id, 0).await
    }

    /// A reserve that may wait up to `wait_ms` for its start (SPEC §18; 0:
    /// not at all), named by `id` or by the client.
    pub(crate) async fn reserve_with(
        &self,
        key: impl AsKey,
        (policy, cost, ttl): (&str, u64, Option<Duration>),
        id: Option<&str>,
        wait_ms: u64,
    ) -> Result<Held, Error> {
        let ask = HoldAsk {
            policy: Some(policy),
            cost: Some(cost),
            ttl_ms: ttl_ms(ttl)?,
            hold: None,
            id,
            wait_ms: (wait_ms > 0).then_some(wait_ms),
        };
        self.hold_verb(Verb::Reserve, &key, &ask).await
    }

    /// `rl.settle.<key>`: ends the hold and charges `cost` in its place
    /// (the real cost; 0 for work that failed). The answer is what a peek
    /// says after it. A hold that is unknown, settled or ended is
    /// [`Error::UnknownHold`].
    pub async fn settle(
        &self,
        key: impl AsKey,
        policy: &str,
        hold: &str,
        cost: u64,
    ) -> Result<Answer, Error> {
        self.settle_named(key, policy, hold, cost, None).await
    }

    /// [`Client::settle`] named by the caller's own `id` when given (SPEC
    /// §16): a settle sent again with it is answered as the first was,
    /// marked [`Answer::repeat`], instead of [`Error::UnknownHold`].
    pub async fn settle_named(
        &self,
        key: impl AsKey,
        policy: &str,
        hold: &str,
        cost: u64,
        id: Option<&str>,
    ) -> Result<Answer, Error> {
        let ask = HoldAsk {
            policy: Some(policy),
            cost: Some(cost),
            ttl_ms: None,
            hold: Some(hold),
            id,
            wait_ms: None,
        };
        Ok(self.hold_verb(Verb::Settle, &key, &ask).await?.answer)
    }

    /// `rl.extend.<key>`: keeps a live hold for `ttl` from now (`None`:
    /// the policy's `hold_ttl`); the ticket says its new end.
    pub async fn extend(
        &self,
        key: impl AsKey,
        policy: &str,
        hold: &str,
        ttl: Option<Duration>,
    ) -> Result<Held, Error> {
        self.extend_named(key, policy, hold, ttl, None).await
    }

    /// [`Client::extend`] named by the caller's own `id` when given (SPEC
    /// §16): sent again with it, it is answered as the first was.
    pub async fn extend_named(
        &self,
        key: impl AsKey,
        policy: &str,
        hold: &str,
        ttl: Option<Duration>,
        id: Option<&str>,
    ) -> Result<Held, Error> {
        let ask = HoldAsk {
            policy: Some(policy),
            cost: None,
            ttl_ms: ttl_ms(ttl)?,
            hold: Some(hold),
            id,
            wait_ms: None,
        };
        self.hold_verb(Verb::Extend, &key, &ask).await
    }

    /// Reserves like [`Client::reserve`] and, when allowed, hands the hold
    /// to a [`HoldGuard`]: [`HoldGuard::settle`] charges the real cost;
    /// a guard dropped unsettled (an error, a panic, a cancelled task)
    /// releases the hold (settles it with cost 0) on a spawned task.
    ///
    /// ```no_run
    /// # async fn demo(client: sluice_client::Client) -> Result<(), sluice_client::Error> {
    /// use sluice_client::Reserved;
    /// match client.hold("tenant-1", "inflight", 1, None).await? {
    ///     Reserved::Held(guard) => {
    ///         // ... the work; a `?` here releases the slot ...
    ///         guard.settle(1).await?;
    ///     }
    ///     Reserved::Denied(answer) => println!("busy; retry in {:?}", answer.retry_after),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn hold(
        &self,
        key: impl AsKey,
        policy: &str,
        cost: u64,
        ttl: Option<Duration>,
    ) -> Result<Reserved, Error> {
        // Kept as its token: the guard settles the very key it reserved.
        let key = KeyPath::of_token(token_of(&key)?);
        let held = self.reserve(&key, policy, cost, ttl).await?;
        Ok(match held.ticket {
            Some(ticket) => Reserved::Held(HoldGuard {
                client: self.clone(),
                key,
                policy: policy.to_string(),
                ticket,
                answer: held.answer,
                open: true,
            }),
            None => Reserved::Denied(held.answer),
        })
    }

    /// One hold verb to the key's owner: in its worker's next batch with
    /// batching on, else alone on the verb's subject (a reserve that may
    /// wait always alone: a batch item carries no wait); named by the
    /// caller's id, else by one of the client's own (if it draws them).
    async fn hold_verb(
        &self,
        verb: Verb,
        key: &(impl AsKey + ?Sized),
        ask: &HoldAsk<'_>,
    ) -> Result<Held, Error> {
        let policy = ask.policy.unwrap_or_default();
        let token = prepare(key, policy, ask.cost.unwrap_or(0))?;
        let id = self.id_of(ask.id)?;
        let id = id.as_deref();
        let hold = ask
            .hold
            .map(sluice_core::holds::id)
            .transpose()
            .map_err(|e| Error::BadRequest(e.to_string()))?;
        let act = HoldAct {
            verb,
            ttl_ms: ask.ttl_ms,
            hold,
        };
        let cost = ask.cost.unwrap_or(DEFAULT_COST);
        let inner = &self.inner;
        let partition = partition_of(&token, inner.opts.partitions);
        let deadline = Instant::now() + inner.opts.timeout;
        let asking = Asking {
            token: &token,
            policy,
            cost,
            id,
            wait_ms: ask.wait_ms.unwrap_or(0),
        };
        let outcome = if inner.batcher.is_some() && asking.wait_ms == 0 {
            inner
                .ask_batched(asking, Act::Hold(act), partition, deadline)
                .await
                .0
        } else {
            inner.single_hold(asking, act, partition, deadline).await
        };
        match outcome {
            Ok(Reply::Decision(mut d)) => {
                let ticket = d.hold.take();
                Ok(Held {
                    answer: Answer::from_reply(d, Source::Worker),
                    ticket,
                })
            }
            Ok(Reply::Error(e)) => Err(e.into()),
            Err(why) => Err(Error::Unavailable(format!(
                "no worker answered {} ({why}); a hold lives at its key's owner, so there is no fallback: try again once a worker owns the key's partition",
                verb.client_subject(&token)
            ))),
        }
    }
}

impl Inner {
    /// One hold verb alone, one round trip to the key's owner on the
    /// verb's subject: `policy`, `cost` unless it is an extend, and the id.
    pub(crate) async fn single_hold(
        &self,
        asking: Asking<'_>,
        act: HoldAct,
        partition: u32,
        deadline: Instant,
    ) -> Result<Reply, NoAnswer> {
        let hold = act.hold.map(|id| id.to_string());
        let ask = HoldAsk {
            policy: Some(asking.policy),
            cost: (act.verb != Verb::Extend).then_some(asking.cost),
            ttl_ms: act.ttl_ms,
            hold: hold.as_deref(),
            id: asking.id,
            wait_ms: (asking.wait_ms > 0).then_some(asking.wait_ms),
        };
        let subject = act.verb.client_subject(asking.token);
        let body = Bytes::from(encode_hold_request(&ask, Encoding::Json));
        let named = asking.id.is_some();
        self.round_trip(&subject, &body, Some(partition), deadline, |msg| {
            decode(msg, named)
        })
        .await
    }
}

/// A hold verb's reply; a 503 is worth another try, as an ask's, unless
/// the owner says it did the verb without storing it (`Sluice-Unstored`)
/// and the verb has no id (`named`) to make the retry its repeat.
fn decode(msg: &async_nats::Message, named: bool) -> Decoded<Reply> {
    let unstored = msg
        .headers
        .as_ref()
        .is_some_and(|h| h.get(SLUICE_UNSTORED).is_some());
    match decode_reply(&msg.payload) {
        Ok(Reply::Error(e)) if e.code == ErrorCode::Unavailable && (named || !unstored) => {
            Decoded::Retry(NoAnswer::Unavailable(e.message))
        }
        Ok(reply) => Decoded::Done(reply),
        Err(e) => Decoded::Fail(NoAnswer::Malformed(e.to_string())),
    }
}

/// A ttl in whole milliseconds (at least 1); the worker checks its range.
fn ttl_ms(ttl: Option<Duration>) -> Result<Option<u64>, Error> {
    ttl.map(|t| {
        let ms = u64::try_from(t.as_millis()).unwrap_or(u64::MAX);
        if ms == 0 {
            return Err(Error::BadRequest(format!(
                "a hold's ttl of {t:?} is under 1 ms; give 1 ms to 1 h, or None for the policy's hold_ttl"
            )));
        }
        Ok(ms)
    })
    .transpose()
}

/// A live hold from [`Client::hold`]: [`HoldGuard::settle`] ends it with
/// the real cost; dropped unsettled, it is released (settled with cost 0)
/// on a spawned task of the current Tokio runtime (with none, it ends at
/// its ttl as the policy's `on_expiry` says).
#[derive(Debug)]
pub struct HoldGuard {
    client: Client,
    key: KeyPath,
    policy: String,
    ticket: HoldTicket,
    answer: Answer,
    /// Not yet settled (nor released, nor handed to a settle).
    open: bool,
}

impl HoldGuard {
    /// The reserve's decision.
    pub fn answer(&self) -> &Answer {
        &self.answer
    }

    /// The hold's name and, as of the reserve or the last extend, how long
    /// until it ends by itself.
    pub fn ticket(&self) -> &HoldTicket {
        &self.ticket
    }

    /// Ends the hold charging `cost` (the real cost). Whatever the outcome,
    /// the guard is spent: after an error (no worker answered) the hold
    /// ends at its ttl as the policy's `on_expiry` says.
    pub async fn settle(mut self, cost: u64) -> Result<Answer, Error> {
        self.open = false;
        let (key, policy) = (self.key.clone(), std::mem::take(&mut self.policy));
        self.client
            .settle(key, &policy, &self.ticket.hold, cost)
            .await
    }

    /// Ends the hold charging nothing (work that failed).
    pub async fn release(self) -> Result<Answer, Error> {
        self.settle(0).await
    }

    /// Keeps the hold for `ttl` more from now (`None`: the policy's
    /// `hold_ttl`).
    pub async fn extend(&mut self, ttl: Option<Duration>) -> Result<Answer, Error> {
        let held = self
            .client
            .extend(&self.key, &self.policy, &self.ticket.hold, ttl)
            .await?;
        if let Some(ticket) = held.ticket {
            self.ticket = ticket;
        }
        Ok(held.answer)
    }
}

impl HoldGuard {
    /// Ends the hold charging `cost` on a spawned task of the current Tokio
    /// runtime, for callers that cannot wait (the gateway's proxied body,
    /// dropped when its response ends). With no runtime, or if the settle
    /// fails, the hold ends at its ttl as the policy's `on_expiry` says.
    pub fn settle_later(mut self, cost: u64) {
        self.spawn_settle(cost);
    }

    /// What [`HoldGuard::settle_later`] and a drop do; the guard is spent.
    fn spawn_settle(&mut self, cost: u64) {
        self.open = false;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(hold = %self.ticket.hold, "a hold ended outside a Tokio runtime cannot be settled; it ends at its ttl");
            return;
        };
        let client = self.client.clone();
        let key = self.key.clone();
        let policy = std::mem::take(&mut self.policy);
        let hold = self.ticket.hold.clone();
        runtime.spawn(async move {
            if let Err(e) = client.settle(key, &policy, &hold, cost).await {
                tracing::warn!(%hold, cost, "settling a hold in the background failed ({e}); it ends at its ttl");
            }
        });
    }
}

impl Drop for HoldGuard {
    fn drop(&mut self) {
        if self.open {
            // Released: nothing charged.
            self.spawn_settle(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::error_message;
    use sluice_core::wire::{ErrorReply, UNSTORED_YES};

    fn reply_503(unstored: bool) -> async_nats::Message {
        let error = ErrorReply::unavailable("either way");
        let more: &[(&str, &str)] = if unstored {
            &[(SLUICE_UNSTORED, UNSTORED_YES)]
        } else {
            &[]
        };
        error_message(&error, Encoding::Json, more)
    }

    /// A 503 of a partition changing owners is tried again; one whose verb
    /// the owner did without storing it is tried again only if the verb is
    /// named (the retry is its repeat); unnamed, a second reserve would
    /// keep a second hold: the caller gets it.
    #[test]
    fn an_unstored_503_is_retried_only_when_the_verb_is_named() {
        for named in [false, true] {
            assert!(matches!(
                decode(&reply_503(false), named),
                Decoded::Retry(_)
            ));
        }
        assert!(matches!(decode(&reply_503(true), true), Decoded::Retry(_)));
        match decode(&reply_503(true), false) {
            Decoded::Done(Reply::Error(e)) => assert_eq!(e.code, ErrorCode::Unavailable),
            _ => panic!("an unnamed unstored 503 is answered, not retried"),
        }
    }
}
