//! [`Client`]: asks, retries, fallback.
//!
//! One ask goes: validate and encode the key → the deny cache → the network
//! (alone, or queued into its worker's or partition's next batch, see [`crate::batch`])
//! → on "no responders" a couple of quick retries → the fallback. Every step
//! that can end the ask says so in the answer's [`Source`].

use crate::answer::{Answer, Source};
use crate::batch::Batcher;
use crate::budgets::{Budgets, Plan};
use crate::deny_cache::DenyCache;
use crate::error::{ConnectError, Error};
use crate::local::LocalLimiter;
use crate::options::ClientOptions;
use crate::probe;
use crate::stats::{ClientStats, Counters};
use async_nats::client::RequestErrorKind;
use async_nats::connection::State;
use bytes::Bytes;
use sluice_core::ask::Op;
use sluice_core::budget::Refund;
use sluice_core::config::Fallback;
use sluice_core::key::try_encode_key;
use sluice_core::partition::partition_of;
use sluice_core::policies::Policies;
use sluice_core::policy::DEFAULT_POLICY;
use sluice_core::subject::{Verb, TOP};
use sluice_core::wire::batch::Budget;
use sluice_core::wire::usage::{encode_query, TopQuery, TopReply, UsageQuery, UsageReply};
use sluice_core::wire::{self, Encoding, ErrorCode, Reply, MAX_COST};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A sluice client over one NATS connection. Cheap to clone; all clones
/// share the connection, the deny cache, the batch queues and the local
/// limiter, so one `Client` serves any number of tasks.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let client = sluice_client::Client::connect("nats://127.0.0.1:4222").await?;
/// let answer = client.allow("bob@x.io").await?;
/// if !answer.allowed {
///     println!("slow down; retry in {:?}", answer.retry_after);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) nats: async_nats::Client,
    pub(crate) opts: ClientOptions,
    deny: Option<DenyCache>,
    /// Local budgets ([`ClientOptions::budgets`], with batching only).
    budgets: Option<Budgets>,
    local: LocalLimiter,
    pub(crate) batcher: Option<Batcher>,
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

/// Why no worker decided.
#[derive(Clone, Debug)]
pub(crate) enum NoAnswer {
    NoResponders,
    TimedOut,
    Disconnected,
    /// A worker answered 503 (e.g. it does not own the key's partition).
    Unavailable(String),
    Malformed(String),
    Other(String),
}

impl fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoAnswer::NoResponders => f.write_str("no responders: no worker owns the partition"),
            NoAnswer::TimedOut => f.write_str("timed out"),
            NoAnswer::Disconnected => f.write_str("not connected to NATS"),
            NoAnswer::Unavailable(m) => write!(f, "the worker is unavailable: {m}"),
            NoAnswer::Malformed(m) => write!(f, "malformed reply: {m}"),
            NoAnswer::Other(m) => f.write_str(m),
        }
    }
}

/// What a reply decoder makes of one reply.
pub(crate) enum Decoded<T> {
    Done(T),
    /// Worth another try (a 503 reply).
    Retry(NoAnswer),
    Fail(NoAnswer),
}

impl Client {
    /// Connects with [`ClientOptions::default`].
    pub async fn connect(url: &str) -> Result<Client, ConnectError> {
        Client::connect_with(url, ClientOptions::default()).await
    }

    /// Connects to NATS at `url` (a comma-separated list is fine) with
    /// [`ClientOptions::auth`] and, with
    /// batching on and [`ClientOptions::check_partitions`], checks that the
    /// server maps keys with [`ClientOptions::partitions`].
    pub async fn connect_with(url: &str, opts: ClientOptions) -> Result<Client, ConnectError> {
        opts.validate().map_err(ConnectError::Options)?;
        let nats = opts.auth.connect_named(url, &opts.name).await?;
        Client::with_connection(nats, opts).await
    }

    /// Uses an existing NATS connection (for custom connect options).
    pub async fn with_connection(
        nats: async_nats::Client,
        opts: ClientOptions,
    ) -> Result<Client, ConnectError> {
        opts.validate().map_err(ConnectError::Options)?;
        if opts.batching && opts.check_partitions {
            probe::check_partitions(&nats, opts.partitions).await?;
        }
        let partitions = opts.partitions as usize;
        let inner = Inner {
            deny: opts
                .deny_cache
                .then(|| DenyCache::new(opts.deny_cache_capacity)),
            local: LocalLimiter::new(opts.policies.clone(), opts.clock.clone()),
            budgets: (opts.batching && opts.budgets).then(|| Budgets::new(opts.clock.clone())),
            batcher: opts.batching.then(|| Batcher::new(opts.partitions)),
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
        Ok(Client { inner })
    }

    /// Gives back what this client holds of local budgets (docs/CLIENT.md,
    /// "Local budgets"), before it goes away: every slice, its lease over or
    /// not, returns its unspent units to the key's owner (each waiting at
    /// most [`ClientOptions::timeout`]), and no new slice is asked for;
    /// asks go on working, each decided by its key's owner. A client
    /// dropped without it gives nothing back: the units it held stay
    /// counted until their window ends or the bucket refills.
    pub async fn close(&self) {
        let Some(budgets) = &self.inner.budgets else {
            return;
        };
        let refunds = budgets.close().into_iter().filter_map(|(key, refund)| {
            let (policy, token) = key.split_once('/')?;
            let inner = self.inner.clone();
            Some(inner.refund(token.to_string(), policy.to_string(), refund))
        });
        futures::future::join_all(refunds).await;
    }

    /// Asks for one unit of the `default` policy.
    pub async fn allow(&self, key: impl AsRef<[u8]>) -> Result<Answer, Error> {
        self.ask(key, DEFAULT_POLICY, 1).await
    }

    /// Asks for `cost` units of `policy` for `key` (any bytes; the client
    /// percent-encodes it). A cost of 0 looks without consuming
    /// ([`Client::peek`]).
    pub async fn ask(
        &self,
        key: impl AsRef<[u8]>,
        policy: &str,
        cost: u64,
    ) -> Result<Answer, Error> {
        let inner = &self.inner;
        let token = prepare(key.as_ref(), policy, cost)?;
        inner.stats.asks.fetch_add(1, Ordering::Relaxed);
        if let Some(answer) = inner
            .deny
            .as_ref()
            .and_then(|d| d.get(policy, &token, cost))
        {
            inner.stats.deny_cache.fetch_add(1, Ordering::Relaxed);
            return Ok(answer);
        }
        let deadline = Instant::now() + inner.opts.timeout;
        let partition = partition_of(&token, inner.opts.partitions);
        if let Some(budgets) = &inner.budgets {
            return self
                .ask_with_budget(budgets, &token, policy, cost, partition, deadline)
                .await;
        }
        let outcome = if inner.batcher.is_some() {
            inner
                .ask_batched(&token, policy, cost, Budget::None, partition, deadline)
                .await
                .0
        } else {
            inner
                .single(&token, policy, cost, partition, deadline)
                .await
        };
        inner.conclude(&token, policy, outcome, Op::Allow(cost))
    }

    /// An ask with local budgets on: from the key's slice if it has one,
    /// else from the owner, asking for a slice when the key is hot.
    async fn ask_with_budget(
        &self,
        budgets: &Budgets,
        token: &str,
        policy: &str,
        cost: u64,
        partition: u32,
        deadline: Instant,
    ) -> Result<Answer, Error> {
        let inner = &self.inner;
        let mut ended = None;
        let plan = sluice_core::ask::with_counter_key(policy, token, |key| {
            budgets.plan(key, policy, cost, &mut ended)
        });
        if let Some(refund) = ended {
            inner.give_back(token, policy, refund);
        }
        let (want, sent) = match plan {
            Plan::Local(answer) => {
                inner.stats.budget.fetch_add(1, Ordering::Relaxed);
                return Ok(answer);
            }
            Plan::Ask { want, sent } => (want, sent),
        };
        let budget = want.map_or(Budget::None, Budget::Slice);
        let (outcome, as_sent) = inner
            .ask_batched(token, policy, cost, budget, partition, deadline)
            .await;
        if want.is_some() {
            let reply = match &outcome {
                Ok(Reply::Decision(d)) if as_sent => Some(d),
                _ => None,
            };
            if reply.and_then(|d| d.grant).is_some_and(|g| g.units > 0) {
                inner.stats.slices.fetch_add(1, Ordering::Relaxed);
            }
            sluice_core::ask::with_counter_key(policy, token, |key| {
                budgets.settle(key, policy, sent, reply)
            });
        }
        inner.conclude(token, policy, outcome, Op::Allow(cost))
    }

    /// Whether one unit of `policy` would be allowed for `key` now, without
    /// consuming anything (cost 0).
    pub async fn peek(&self, key: impl AsRef<[u8]>, policy: &str) -> Result<Answer, Error> {
        self.ask(key, policy, 0).await
    }

    /// Counts `cost` units of usage already served (CONTRACT §2): one
    /// publish to `rl.hit.<key>`, no reply, no fallback (a hit published
    /// while no worker owns the key's partition is lost).
    pub async fn hit(&self, key: impl AsRef<[u8]>, policy: &str, cost: u64) -> Result<(), Error> {
        let token = prepare(key.as_ref(), policy, cost)?;
        let body = request_body(policy, cost);
        self.inner
            .nats
            .publish(Verb::Hit.client_subject(&token), body)
            .await
            .map_err(|e| Error::Unavailable(format!("cannot publish the hit: {e}")))?;
        self.inner.stats.hits.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Counts `cost` units like [`Client::hit`], but as a request: the answer
    /// is what a peek would say after the hit. When no worker answers, the
    /// fallback applies (`local` records the hit locally).
    pub async fn hit_and_peek(
        &self,
        key: impl AsRef<[u8]>,
        policy: &str,
        cost: u64,
    ) -> Result<Answer, Error> {
        let inner = &self.inner;
        let token = prepare(key.as_ref(), policy, cost)?;
        inner.stats.hits.fetch_add(1, Ordering::Relaxed);
        let deadline = Instant::now() + inner.opts.timeout;
        let partition = partition_of(&token, inner.opts.partitions);
        let subject = Verb::Hit.client_subject(&token);
        let outcome = inner
            .round_trip(
                &subject,
                &request_body(policy, cost),
                Some(partition),
                deadline,
                decode_single,
            )
            .await;
        inner.conclude(&token, policy, outcome, Op::Record(cost))
    }

    /// A key's usage history (CONTRACT §9): one `rl.usage.<key>` request
    /// to the key's owner. No fallback: with no worker there is no history.
    pub async fn usage(
        &self,
        key: impl AsRef<[u8]>,
        query: &UsageQuery,
    ) -> Result<UsageReply, Error> {
        let token = try_encode_key(key.as_ref()).map_err(|e| Error::BadRequest(e.to_string()))?;
        let subject = Verb::Usage.client_subject(&token);
        let msg = self
            .query(&subject, encode_query(query, Encoding::Json))
            .await?;
        wire::inspect::decode_admin_reply(&msg.payload).map_err(|e| unreadable(&subject, e))
    }

    /// The keys that used (or were denied) the most in a range
    /// (CONTRACT §9, `rl.top`).
    pub async fn top(&self, query: &TopQuery) -> Result<TopReply, Error> {
        let msg = self.query(TOP, encode_query(query, Encoding::Json)).await?;
        wire::inspect::decode_admin_reply(&msg.payload).map_err(|e| unreadable(TOP, e))
    }

    /// One operator request; an error reply is the error.
    async fn query(&self, subject: &str, body: Vec<u8>) -> Result<async_nats::Message, Error> {
        let request = async_nats::Request::new()
            .payload(body.into())
            .timeout(Some(QUERY_TIMEOUT));
        let msg = self
            .inner
            .nats
            .send_request(subject.to_string(), request)
            .await
            .map_err(|e| Error::Unavailable(format!("no answer on {subject}: {e}")))?;
        if msg
            .headers
            .as_ref()
            .is_some_and(|h| h.get(wire::SERVICE_ERROR_CODE).is_some())
        {
            if let Ok(Reply::Error(e)) = wire::decode_reply(&msg.payload) {
                return Err(e.into());
            }
        }
        Ok(msg)
    }

    /// Counters of what this client (and its clones) did.
    pub fn stats(&self) -> ClientStats {
        self.inner.stats.snapshot()
    }

    /// True while the NATS connection is up.
    pub fn is_connected(&self) -> bool {
        self.inner.nats.connection_state() == State::Connected
    }

    /// The NATS connection (e.g. to flush or to read its statistics).
    pub fn nats(&self) -> &async_nats::Client {
        &self.inner.nats
    }

    pub fn options(&self) -> &ClientOptions {
        &self.inner.opts
    }

    /// The policies in force as this client knows them: the config's, and
    /// with [`ClientOptions::follow_policies`] the bucket's and its per-key
    /// overrides (what the `local` fallback decides with). For callers that
    /// describe a decision's limit (its window), e.g. the gateway's Envoy
    /// service.
    pub fn policies(&self) -> Arc<Policies> {
        self.inner.local.policies()
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("options", &self.inner.opts)
            .finish_non_exhaustive()
    }
}

/// Checks what can be checked before sending; returns the key token.
fn unreadable(subject: &str, e: String) -> Error {
    Error::Unavailable(format!("a reply on {subject} that cannot be read: {e}"))
}

/// How long a usage or top query may take (a top query asks every worker).
const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

fn prepare(key: &[u8], policy: &str, cost: u64) -> Result<String, Error> {
    let token = try_encode_key(key).map_err(|e| Error::BadRequest(e.to_string()))?;
    if !wire::is_valid_policy_name(policy) {
        return Err(Error::BadRequest(format!(
            "the policy name {policy:?} is not valid; policy names are 1 to {} characters of A-Z, a-z, 0-9, '_' and '-'",
            wire::MAX_POLICY_NAME
        )));
    }
    if cost > MAX_COST {
        return Err(Error::BadRequest(format!(
            "cost {cost} is absurd; no request may cost more than {MAX_COST}"
        )));
    }
    Ok(token)
}

/// The request body: empty for the defaults (the cheapest request), else a
/// MessagePack map with what differs.
pub(crate) fn request_body(policy: &str, cost: u64) -> Bytes {
    let policy = (policy != DEFAULT_POLICY).then_some(policy);
    let cost = (cost != wire::DEFAULT_COST).then_some(cost);
    wire::encode_request(policy, cost, Encoding::MsgPack).into()
}

/// A single reply: a decision or an error; a 503 is worth a retry.
pub(crate) fn decode_single(msg: &async_nats::Message) -> Decoded<Reply> {
    match wire::decode_reply(&msg.payload) {
        Ok(Reply::Error(e)) if e.code == ErrorCode::Unavailable => {
            Decoded::Retry(NoAnswer::Unavailable(e.message))
        }
        Ok(reply) => Decoded::Done(reply),
        Err(e) => {
            tracing::warn!(subject = %msg.subject, "{e}");
            Decoded::Fail(NoAnswer::Malformed(e.to_string()))
        }
    }
}

impl Inner {
    /// Gives a slice's unspent units back to the key's owner (and counts
    /// what was spent as its usage), in the next batch for its owner,
    /// without waiting for the answer. A refund that is lost (no owner
    /// right now) only leaves its units counted until the window ends or
    /// the bucket refills them.
    fn give_back(self: &Arc<Self>, token: &str, policy: &str, refund: Refund) {
        tokio::spawn(
            self.clone()
                .refund(token.to_string(), policy.to_string(), refund),
        );
    }

    /// Gives `refund` back to the owner of `token` under `policy`.
    async fn refund(self: Arc<Self>, token: String, policy: String, refund: Refund) {
        let partition = partition_of(&token, self.opts.partitions);
        let deadline = Instant::now() + self.opts.timeout;
        let budget = Budget::Refund(refund);
        let (mut outcome, _) = self
            .ask_batched(&token, &policy, 0, budget, partition, deadline)
            .await;
        if let Err(NoAnswer::Unavailable(_)) = outcome {
            // The partition moved (a handover): the worker that answered
            // 503 is forgotten as its owner, so once more goes through the
            // partition's subject to whoever owns it now, which took over
            // the slices not back yet.
            (outcome, _) = self
                .ask_batched(&token, &policy, 0, budget, partition, deadline)
                .await;
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
        token: &str,
        policy: &str,
        cost: u64,
        partition: u32,
        deadline: Instant,
    ) -> Result<Reply, NoAnswer> {
        let subject = Verb::Allow.client_subject(token);
        self.round_trip(
            &subject,
            &request_body(policy, cost),
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
            let request = async_nats::Request::new()
                .payload(body.clone())
                .timeout(Some(left));
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
            Op::Allow(cost) => cost,
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
                inner.give_back(token, policy, refund);
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
    fn prepare_encodes_keys_and_refuses_what_no_worker_accepts() {
        assert_eq!(prepare(b"bob@x.io", "default", 1).unwrap(), "bob%40x%2Eio");
        assert!(matches!(
            prepare(b"", "default", 1),
            Err(Error::BadRequest(_))
        ));
        let long = vec![b'@'; 86]; // 258 bytes encoded
        let e = prepare(&long, "default", 1).unwrap_err();
        assert_eq!(e.status(), 400);
        assert!(e.message().contains("256"), "{e}");
        assert!(prepare(&[b'a'; 256], "default", 1).is_ok());
        assert!(matches!(prepare(b"a", "a.b", 1), Err(Error::BadRequest(_))));
        assert!(matches!(
            prepare(b"a", "default", MAX_COST + 1),
            Err(Error::BadRequest(_))
        ));
    }

    #[test]
    fn the_default_ask_has_an_empty_body() {
        assert!(request_body("default", 1).is_empty());
        let body = request_body("login", 3);
        let r = wire::decode_request(&body).unwrap();
        assert_eq!((&*r.policy, r.cost), ("login", 3));
        let peek = request_body("default", 0);
        let r = wire::decode_request(&peek).unwrap();
        assert_eq!((&*r.policy, r.cost), ("default", 0));
    }
}
