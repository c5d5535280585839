//! The state one client shares among its clones ([`Inner`]), and
//! everything done with it: a round trip with its retries, the batches
//! (formed by [`crate::batch`]), the conclusion of an ask (deny cache,
//! fallback), the refunds of local budgets, and the background tasks that
//! follow the policy bucket and sweep ended slices.
//!
//! [`crate::client::Client`] is the public face: it checks what a caller
//! asks and hands it here.

use crate::answer::{Answer, Source};
use crate::batch::{decode_batch, Batcher, Destination, Outcome, Waiter, MAX_IN_FLIGHT};
use crate::budgets::Budgets;
use crate::deny_cache::DenyCache;
use crate::error::Error;
use crate::local::LocalLimiter;
use crate::options::ClientOptions;
use crate::outcome::{decode_single, Decoded, NoAnswer};
use crate::stats::Counters;
use async_nats::client::RequestErrorKind;
use async_nats::connection::State;
use bytes::Bytes;
use sluice_core::ask::Op;
use sluice_core::budget::Refund;
use sluice_core::config::Fallback;
use sluice_core::key::KeyToken;
use sluice_core::partition::partition_of;
use sluice_core::policy::DEFAULT_POLICY;
use sluice_core::subject::{batch_subject, worker_batch_subject, Verb};
use sluice_core::wire::batch::{self, Act, Budget, Item};
use sluice_core::wire::{self, Encoding, Reply};
use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

pub(crate) struct Inner {
    pub(crate) nats: async_nats::Client,
    pub(crate) opts: ClientOptions,
    pub(crate) deny: Option<DenyCache>,
    /// Local budgets ([`ClientOptions::budgets`], with batching only).
    pub(crate) budgets: Option<Budgets>,
    pub(crate) local: LocalLimiter,
    pub(crate) batcher: Option<Batcher>,
    /// Names the asks it may send more than once ([`ClientOptions::ask_ids`]).
    pub(crate) ids: Option<AskIds>,
    /// Per partition: since when (ms after `epoch`, plus 1; 0 = it answers)
    /// it has answered only "no responders".
    silent_since: Box<[AtomicU64]>,
    epoch: Instant,
    pub(crate) stats: Counters,
    /// The task following the policy bucket
    /// ([`ClientOptions::follow_policies`]); stopped when the last clone of
    /// the client is dropped.
    follower: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The task giving back the slices whose lease ended (local budgets);
    /// stopped with the client, like the follower.
    sweeper: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for task in [&mut self.follower, &mut self.sweeper] {
            let task = task.get_mut().unwrap_or_else(|e| e.into_inner());
            if let Some(task) = task.take() {
                task.abort();
            }
        }
    }
}

/// What one ask is: its key token, policy, cost, id (SPEC §16) and how
/// long it may wait for its start (SPEC §18; 0: not at all), the same
/// however often the client sends it. An ask that may wait goes alone:
/// a batch item cannot carry a wait.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Asking<'a> {
    pub(crate) token: &'a str,
    pub(crate) policy: &'a str,
    pub(crate) cost: u64,
    pub(crate) id: Option<&'a str>,
    pub(crate) wait_ms: u64,
}

/// The request body: empty for the defaults (the cheapest request), else a
/// MessagePack map with what differs.
pub(crate) fn request_body(policy: &str, cost: u64, id: Option<&str>) -> Bytes {
    waiting_body(policy, cost, id, 0)
}

/// [`request_body`] of an ask that may wait `wait_ms` (0: not at all).
fn waiting_body(policy: &str, cost: u64, id: Option<&str>, wait_ms: u64) -> Bytes {
    let policy = (policy != DEFAULT_POLICY).then_some(policy);
    let cost = (cost != wire::DEFAULT_COST).then_some(cost);
    wire::encode_ask(policy, cost, id, Some(wait_ms), Encoding::MsgPack).into()
}

/// Names a client's asks (SPEC §16): a prefix drawn per client, then a
/// number, so that no two clients' ids meet under one key.
pub(crate) struct AskIds {
    prefix: u64,
    next: AtomicU64,
}

impl AskIds {
    fn new() -> AskIds {
        use std::hash::BuildHasher;
        let seed = (std::process::id(), Instant::now());
        AskIds {
            prefix: std::collections::hash_map::RandomState::new().hash_one(format!("{seed:?}")),
            next: AtomicU64::new(0),
        }
    }

    /// A new id: 16 hex digits of prefix, a dash, the number in hex.
    pub(crate) fn next(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("{:016x}-{n:x}", self.prefix)
    }
}

impl Inner {
    /// The shared state of a client over `nats` (options already checked),
    /// with its background tasks started.
    pub(crate) fn start(nats: async_nats::Client, opts: ClientOptions) -> Arc<Inner> {
        let partitions = opts.partitions as usize;
        let inner = Inner {
            deny: opts
                .deny_cache
                .then(|| DenyCache::new(opts.deny_cache_capacity)),
            local: LocalLimiter::new(opts.policies.clone(), opts.clock.clone()),
            budgets: (opts.batching && opts.budgets).then(|| Budgets::new(opts.clock.clone())),
            batcher: opts.batching.then(|| Batcher::new(opts.partitions)),
            ids: opts.ask_ids.then(AskIds::new),
            silent_since: (0..partitions).map(|_| AtomicU64::new(0)).collect(),
            epoch: Instant::now(),
            stats: Counters::default(),
            follower: Default::default(),
            sweeper: Default::default(),
            nats,
            opts,
        };
        let inner = Arc::new(inner);
        if inner.opts.follow_policies {
            let task = tokio::spawn(follow_policies(Arc::downgrade(&inner)));
            *inner.follower.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
        }
        if inner.budgets.is_some() {
            let task = tokio::spawn(sweep_slices(Arc::downgrade(&inner)));
            *inner.sweeper.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
        }
        inner
    }

    /// Gives a slice's unspent units back to the key's owner (and counts
    /// what was spent as its usage), in the next batch for its owner,
    /// without waiting for the answer. A refund that is lost (no owner
    /// right now) only leaves its units counted until the window ends or
    /// the bucket refills them.
    pub(crate) fn spawn_refund(self: &Arc<Self>, token: &str, policy: &str, refund: Refund) {
        tokio::spawn(
            self.clone()
                .refund(token.to_string(), policy.to_string(), refund),
        );
    }

    /// Gives `refund` back to the owner of `token` under `policy`.
    pub(crate) async fn refund(self: Arc<Self>, token: String, policy: String, refund: Refund) {
        let partition = partition_of(&token, self.opts.partitions);
        let deadline = Instant::now() + self.opts.timeout;
        let act = Act::Ask(Budget::Refund(refund));
        let refunding = Asking {
            token: &token,
            policy: &policy,
            cost: 0,
            id: None,
            wait_ms: 0,
        };
        let (mut outcome, _) = self.ask_batched(refunding, act, partition, deadline).await;
        if let Err(NoAnswer::Unavailable(_)) = outcome {
            // The partition moved (a handover): the worker that answered
            // 503 is forgotten as its owner, so once more goes through the
            // partition's subject to whoever owns it now, which took over
            // the slices not back yet.
            (outcome, _) = self.ask_batched(refunding, act, partition, deadline).await;
        }
        match outcome {
            Ok(Reply::Decision(_)) => {
                self.stats.refunds.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Reply::Error(e)) => {
                tracing::debug!(key = token, policy, "a slice given back was refused: {e}");
            }
            Err(why) => {
                tracing::debug!(
                    key = token,
                    policy,
                    "a slice could not be given back: {why}"
                );
            }
        }
    }

    /// One ask on its own: `rl.allow.<key>`, through the server's mapping.
    pub(crate) async fn single(
        &self,
        asking: Asking<'_>,
        partition: u32,
        deadline: Instant,
    ) -> Result<Reply, NoAnswer> {
        let subject = Verb::Allow.client_subject(asking.token);
        self.round_trip(
            &subject,
            &waiting_body(asking.policy, asking.cost, asking.id, asking.wait_ms),
            Some(partition),
            deadline,
            decode_single,
        )
        .await
    }

    /// One request with the no-responders retries, until `deadline`.
    /// `partition` is the partition whose owner the subject reaches; `None`
    /// for a worker's own subject, where "no responders" means that worker
    /// is gone, so a retry cannot help.
    pub(crate) async fn round_trip<T>(
        &self,
        subject: &str,
        body: &Bytes,
        partition: Option<u32>,
        deadline: Instant,
        decode: impl Fn(&async_nats::Message) -> Decoded<T>,
    ) -> Result<T, NoAnswer> {
        let mut attempt = 0;
        loop {
            if self.nats.connection_state() != State::Connected {
                return Err(NoAnswer::Disconnected);
            }
            let now = Instant::now();
            let left = deadline.saturating_duration_since(now);
            if left.is_zero() {
                return Err(NoAnswer::TimedOut);
            }
            self.stats.round_trips.fetch_add(1, Ordering::Relaxed);
            let mut request = async_nats::Request::new()
                .payload(body.clone())
                .timeout(Some(left));
            if let Some(headers) = crate::trace::current() {
                request = request.headers(headers);
            }
            let why = match self.nats.send_request(subject.to_string(), request).await {
                Ok(msg) => {
                    if let Some(p) = partition {
                        self.mark_up(p);
                    }
                    match decode(&msg) {
                        Decoded::Done(t) => return Ok(t),
                        Decoded::Fail(why) => return Err(why),
                        Decoded::Retry(why) => why,
                    }
                }
                Err(e) => match e.kind() {
                    RequestErrorKind::NoResponders => {
                        self.stats.no_responders.fetch_add(1, Ordering::Relaxed);
                        let Some(p) = partition else {
                            return Err(NoAnswer::NoResponders);
                        };
                        self.mark_silent(p);
                        NoAnswer::NoResponders
                    }
                    RequestErrorKind::TimedOut => {
                        self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                        return Err(NoAnswer::TimedOut);
                    }
                    _ => return Err(NoAnswer::Other(e.to_string())),
                },
            };
            // A partition silent for longer than a handover takes is down:
            // fall back after this one try instead of retrying.
            let down = matches!(why, NoAnswer::NoResponders)
                && partition.is_some_and(|p| self.silent_for(p) >= self.opts.down_after);
            if attempt >= self.opts.no_responders_retries || down {
                return Err(why);
            }
            let pause = self.opts.no_responders_backoff * (1u32 << attempt.min(16));
            let retry_at = Instant::now() + pause;
            if retry_at >= deadline {
                // No time left for another try: say why now rather than later.
                return Err(why);
            }
            attempt += 1;
            self.stats.retries.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep_until(retry_at.into()).await;
        }
    }

    /// Turns a worker's reply (or its absence) into the caller's result.
    pub(crate) fn conclude(
        &self,
        token: &str,
        policy: &str,
        outcome: Result<Reply, NoAnswer>,
        op: Op,
    ) -> Result<Answer, Error> {
        // A hit's answer is a peek's: a denial is cached as one of cost 0.
        let cost = match op {
            Op::Allow(cost) | Op::Wait { cost, .. } => cost,
            Op::Record(_) => 0,
        };
        match outcome {
            Ok(Reply::Decision(d)) => {
                self.stats.worker.fetch_add(1, Ordering::Relaxed);
                let answer = Answer::from_reply(d, Source::Worker);
                if let Some(deny) = &self.deny {
                    deny.insert(token, cost, &answer);
                }
                Ok(answer)
            }
            Ok(Reply::Error(e)) => {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                Err(e.into())
            }
            Err(why) => self.fallback(token, policy, cost, why, op),
        }
    }

    fn fallback(
        &self,
        token: &str,
        policy: &str,
        cost: u64,
        why: NoAnswer,
        op: Op,
    ) -> Result<Answer, Error> {
        tracing::debug!(
            key = token,
            policy,
            "no worker answered ({why}); fallback {}",
            self.opts.fallback
        );
        match self.opts.fallback {
            Fallback::Open => {
                self.stats.fallback_open.fetch_add(1, Ordering::Relaxed);
                Ok(self.local.open(policy, cost))
            }
            Fallback::Local => {
                self.stats.fallback_local.fetch_add(1, Ordering::Relaxed);
                self.local.decide(token, policy, op)
            }
            Fallback::Closed => {
                self.stats.fallback_closed.fetch_add(1, Ordering::Relaxed);
                Err(Error::Unavailable(format!(
                    "no sluice worker answered for key {token} ({why}), and the fallback is \"closed\""
                )))
            }
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// How long the partition has answered only "no responders".
    fn silent_for(&self, partition: u32) -> Duration {
        match self.silent_since[partition as usize].load(Ordering::Relaxed) {
            0 => Duration::ZERO,
            since => Duration::from_millis(self.now_ms().saturating_sub(since - 1)),
        }
    }

    fn mark_silent(&self, partition: u32) {
        let slot = &self.silent_since[partition as usize];
        if slot.load(Ordering::Relaxed) == 0 {
            let _ =
                slot.compare_exchange(0, self.now_ms() + 1, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    fn mark_up(&self, partition: u32) {
        let slot = &self.silent_since[partition as usize];
        if slot.load(Ordering::Relaxed) != 0 {
            slot.store(0, Ordering::Relaxed);
        }
    }

    /// Sends the item at once if its destination is idle, else joins the
    /// destination's next batch. `act`: an ask, with what it does for a
    /// local budget (only a batch can carry that: an ask the worker sends
    /// back to be asked alone is asked without it, and a refund then fails
    /// as unavailable), or a hold's verb (asked alone, if it must be, on
    /// its own subject; [`crate::holds`] says when it must not be). The
    /// flag says whether the reply answered the item as sent.
    pub(crate) async fn ask_batched(
        self: &Arc<Self>,
        asking: Asking<'_>,
        act: Act,
        partition: u32,
        deadline: Instant,
    ) -> (Result<Reply, NoAnswer>, bool) {
        let batcher = self.batcher.as_ref().expect("batching is on");
        debug_assert_eq!(asking.wait_ms, 0, "an ask that may wait goes alone");
        let (tx, rx) = oneshot::channel();
        let Asking {
            token,
            policy,
            cost,
            id,
            ..
        } = asking;
        let waiter = Waiter {
            token: token.to_string(),
            policy: policy.to_string(),
            cost,
            id: id.map(str::to_string),
            act,
            partition,
            tx,
        };
        // A turn if one was free; `alone` if the destination was idle.
        let (turn, alone) = {
            let mut state = batcher.state();
            let destination = match &state.owners[partition as usize] {
                Some(worker) => Destination::Worker(worker.clone()),
                None => Destination::Partition(partition),
            };
            let lane = state.busy.entry(destination.clone()).or_default();
            if lane.turns >= MAX_IN_FLIGHT {
                lane.queue.push_back(waiter);
                (None, None)
            } else {
                lane.turns += 1;
                let alone = if lane.turns == 1 {
                    Some(waiter)
                } else {
                    lane.queue.push_back(waiter);
                    None
                };
                let turn = Turn {
                    inner: self.clone(),
                    destination,
                };
                (Some(turn), alone)
            }
        };
        match (turn, alone) {
            // The destination is idle: this ask goes at once, alone.
            (Some(turn), Some(waiter)) => {
                self.send_turn(turn, vec![waiter]).await;
            }
            // A request is in flight and there is room for another: let the
            // asks that arrive in the same scheduler tick (the callers the
            // last reply woke) queue up, then send them all.
            (Some(turn), None) => {
                tokio::task::yield_now().await;
                let next = {
                    let mut state = batcher.state();
                    match state.busy.get_mut(&turn.destination) {
                        Some(lane) => lane.take_batch(),
                        None => Vec::new(),
                    }
                };
                if !next.is_empty() {
                    self.send_turn(turn, next).await;
                }
            }
            // Both turns taken: queued for the next batch.
            (None, _) => {}
        }
        match tokio::time::timeout_at(deadline.into(), rx).await {
            Ok(Ok(Outcome::Done(outcome))) => return (outcome, true),
            Ok(Ok(Outcome::AskAlone)) => {}
            // The batch went without a reply (the runtime is stopping): an
            // ask is asked again alone, and so is a named hold verb (the
            // owner answers a repeat), but an unnamed one may have been
            // done, so it is not sent again.
            Ok(Err(_)) if matches!(act, Act::Hold(_)) && id.is_none() => {
                return (
                    Err(NoAnswer::Other(
                        "the batch carrying this hold's verb ended without a reply, so whether the owner did it is unknown (a hold it kept ends at its ttl)".into(),
                    )),
                    false,
                )
            }
            Ok(Err(_)) => {}
            Err(_) => {
                self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                return (Err(NoAnswer::TimedOut), false);
            }
        }
        let outcome = match act {
            Act::Ask(Budget::Refund(_)) => Err(NoAnswer::Unavailable(
                "a refund travels only in a batch, and the worker it went to no longer owns its partition".into(),
            )),
            // Asked again with the same id: counted once if the batch was.
            Act::Ask(_) => self.single(asking, partition, deadline).await,
            Act::Hold(hold) => self.single_hold(asking, hold, partition, deadline).await,
        };
        (outcome, false)
    }

    /// Sends `waiters` on `turn`, which is handed on when they are
    /// answered. A batch with a hold's verb is sent by a task of its own,
    /// so that it goes on if the caller holding the turn gives up: its
    /// neighbours' hold verbs may be done by then, and could not be asked
    /// again. A batch of asks is sent by the caller (no task to wake; a
    /// neighbour of a caller that gives up asks again alone).
    async fn send_turn(self: &Arc<Self>, turn: Turn, waiters: Vec<Waiter>) {
        if waiters.iter().any(|w| matches!(w.act, Act::Hold(_))) {
            tokio::spawn(async move {
                turn.inner.send_batch(&turn.destination, waiters).await;
                drop(turn);
            });
        } else {
            self.send_batch(&turn.destination, waiters).await;
        }
    }

    /// Sends `waiters` as one batch to `destination` and tells each its result.
    async fn send_batch(&self, destination: &Destination, waiters: Vec<Waiter>) {
        let items: Vec<Item<'_>> = waiters
            .iter()
            .map(|w| Item {
                key: KeyToken::parse(&w.token).expect("encode_key makes canonical tokens"),
                policy: Cow::Borrowed(w.policy.as_str()),
                cost: w.cost,
                id: w.id.as_deref().map(Cow::Borrowed),
                act: w.act,
            })
            .collect();
        let body = Bytes::from(batch::encode_items(&items));
        drop(items);
        let n = waiters.len();
        self.stats.batches.fetch_add(1, Ordering::Relaxed);
        self.stats
            .batched_asks
            .fetch_add(n as u64, Ordering::Relaxed);
        let deadline = Instant::now() + self.opts.timeout;
        let decode = |msg: &async_nats::Message| decode_batch(msg, &waiters);
        // A batch carries the asks of many callers: none's trace.
        let result = crate::trace::untraced(async {
            match destination {
                Destination::Worker(id) => {
                    self.stats.worker_batches.fetch_add(1, Ordering::Relaxed);
                    let subject = worker_batch_subject(id);
                    self.round_trip(&subject, &body, None, deadline, decode)
                        .await
                }
                Destination::Partition(p) => {
                    let subject = batch_subject(*p);
                    self.round_trip(&subject, &body, Some(*p), deadline, decode)
                        .await
                }
            }
        })
        .await;
        let batcher = self.batcher.as_ref().expect("batching is on");
        match result {
            Ok((worker, results)) => {
                batcher
                    .state()
                    .learn(destination, worker, &waiters, &results);
                for (w, r) in waiters.into_iter().zip(results) {
                    let _ = w.tx.send(r);
                }
            }
            Err(why) => {
                if let (NoAnswer::NoResponders, Destination::Worker(gone)) = (&why, destination) {
                    batcher.state().forget_worker(gone);
                }
                // A worker that is gone, or a reply that is not a batch
                // reply: each caller asks alone, through the mapping, and
                // falls back if that fails too. A partition's batch subject
                // has the same owner as its mapped subjects, so after the
                // quick retries of `round_trip` it is down: fall back now.
                let retry_alone = match (&why, destination) {
                    (NoAnswer::NoResponders, Destination::Worker(_)) => true,
                    (NoAnswer::NoResponders, Destination::Partition(_)) => false,
                    (NoAnswer::Malformed(_), _) => true,
                    _ => false,
                };
                for w in waiters {
                    // A hold's verb that got a reply it cannot read may
                    // have been done: it is not sent again.
                    let hold = matches!(w.act, Act::Hold(_));
                    let _ = w.tx.send(
                        if retry_alone && !(hold && matches!(why, NoAnswer::Malformed(_))) {
                            Outcome::AskAlone
                        } else {
                            Outcome::Done(Err(why.clone()))
                        },
                    );
                }
            }
        }
    }
}

/// Holding one of a destination's turns; dropping it hands the turn on.
struct Turn {
    inner: Arc<Inner>,
    destination: Destination,
}

impl Drop for Turn {
    fn drop(&mut self) {
        let batcher = self.inner.batcher.as_ref().expect("batching is on");
        let mut state = batcher.state();
        let Some(lane) = state.busy.get_mut(&self.destination) else {
            return;
        };
        let next = lane.take_batch();
        if next.is_empty() {
            lane.turns -= 1;
            if lane.turns == 0 {
                state.busy.remove(&self.destination);
            }
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                drop(state);
                let turn = Turn {
                    inner: self.inner.clone(),
                    destination: self.destination.clone(),
                };
                rt.spawn(async move {
                    turn.inner.send_batch(&turn.destination, next).await;
                    drop(turn);
                });
            }
            // No runtime to send from: the callers ask alone (their
            // channels close when `next` is dropped).
            Err(_) => {
                state.busy.remove(&self.destination);
            }
        }
    }
}

/// Every lease, gives back the slices whose lease ended (of keys no
/// longer asked: an ask finds its key's ended slice itself), for as long
/// as the client lives.
async fn sweep_slices(inner: std::sync::Weak<Inner>) {
    let mut tick = tokio::time::interval(sluice_core::budget::LEASE.into());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let budgets = inner
            .budgets
            .as_ref()
            .expect("the sweeper runs with budgets");
        for (key, refund) in budgets.sweep() {
            if let Some((policy, token)) = key.split_once('/') {
                inner.spawn_refund(token, policy, refund);
            }
        }
    }
}

/// Keeps the `local` fallback's policies those of the bucket and empties the
/// deny cache on every change, for as long as the client lives (the task
/// holds no strong reference to it).
async fn follow_policies(inner: std::sync::Weak<Inner>) {
    let Some(strong) = inner.upgrade() else {
        return;
    };
    let js = async_nats::jetstream::new(strong.nats.clone());
    let base = sluice_core::policies::Policies::new(strong.opts.policies.clone());
    drop(strong);
    crate::policy_follow::follow(js, base, move |event| {
        let Some(inner) = inner.upgrade() else {
            return;
        };
        match event {
            crate::policy_follow::Event::InForce { policies, .. } => {
                inner.local.set_policies(policies.clone());
                if let Some(deny) = &inner.deny {
                    deny.clear();
                }
            }
            crate::policy_follow::Event::Refused { key, reason, .. } => {
                tracing::warn!(key, "refused a value in the policy bucket: {reason}");
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_ask_has_an_empty_body() {
        assert!(request_body("default", 1, None).is_empty());
        let body = request_body("login", 3, None);
        let r = wire::decode_request(&body).unwrap();
        assert_eq!((&*r.policy, r.cost), ("login", 3));
        let peek = request_body("default", 0, None);
        let r = wire::decode_request(&peek).unwrap();
        assert_eq!((&*r.policy, r.cost), ("default", 0));
        let waiting = waiting_body("default", 1, None, 250);
        let r = wire::decode_request(&waiting).unwrap();
        assert_eq!((&*r.policy, r.cost, r.wait_ms), ("default", 1, 250));
    }
}
