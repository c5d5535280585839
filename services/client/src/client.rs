//! [`Client`]: asks, retries, fallback.
//!
//! One ask goes: validate and encode the key → the deny cache → the network
//! (alone, or queued into its worker's or partition's next batch, see [`crate::batch`])
//! → on "no responders" a couple of quick retries → the fallback. Every step
//! that can end the ask says so in the answer's [`Source`].

use crate::answer::Answer;
use crate::budgets::{Budgets, Plan};
use crate::error::{ConnectError, Error};
use crate::inner::{request_body, Asking, Inner};
use crate::key::{token_of, AsKey};
use crate::options::ClientOptions;
use crate::outcome::decode_single;
use crate::probe;
use crate::queries::{self, QUERY_TIMEOUT};
use crate::stats::ClientStats;
use async_nats::connection::State;
use sluice_core::ask::Op;
use sluice_core::partition::partition_of;
use sluice_core::policies::Policies;
use sluice_core::policy::DEFAULT_POLICY;
use sluice_core::subject::Verb;
use sluice_core::wire::batch::{Act, Budget};
use sluice_core::wire::usage::{TopQuery, TopReply, UsageQuery, UsageReply};
use sluice_core::wire::{self, Reply, MAX_COST};
use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

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
        Ok(Client {
            inner: Inner::start(nats, opts),
        })
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
    pub async fn allow(&self, key: impl AsKey) -> Result<Answer, Error> {
        self.ask(key, DEFAULT_POLICY, 1).await
    }

    /// Asks for `cost` units of `policy` for `key` (any bytes; the client
    /// percent-encodes it). A cost of 0 looks without consuming
    /// ([`Client::peek`]). With [`ClientOptions::ask_ids`] (the default)
    /// the ask carries an id of the client's own, so that the owner counts
    /// it once however often the client sends it (SPEC §16).
    pub async fn ask(&self, key: impl AsKey, policy: &str, cost: u64) -> Result<Answer, Error> {
        let id = self.inner.ids.as_ref().map(|ids| ids.next());
        self.ask_once(&key, policy, cost, id.as_deref(), 0).await
    }

    /// [`Client::ask`] named by the caller's own `id` (1 to 128 bytes of
    /// printable ASCII; SPEC §16): an ask the caller sends again with the
    /// same id (a retry after a timeout) counts once, and its answer is
    /// the first one's, marked [`Answer::repeat`]. The same id with another
    /// policy or cost is refused ([`Error::IdReused`]).
    pub async fn ask_with_id(
        &self,
        key: impl AsKey,
        policy: &str,
        cost: u64,
        id: &str,
    ) -> Result<Answer, Error> {
        sluice_core::wire::check_id(id).map_err(Error::BadRequest)?;
        self.ask_once(&key, policy, cost, Some(id), 0).await
    }

    /// One ask, waiting up to `wait_ms` for its start (0: not at all).
    pub(crate) async fn ask_once(
        &self,
        key: &(impl AsKey + ?Sized),
        policy: &str,
        cost: u64,
        id: Option<&str>,
        wait_ms: u64,
    ) -> Result<Answer, Error> {
        let inner = &self.inner;
        let token = prepare(key, policy, cost)?;
        inner.stats.asks.fetch_add(1, Ordering::Relaxed);
        let wait = std::time::Duration::from_millis(wait_ms);
        if let Some(answer) = inner
            .deny
            .as_ref()
            .and_then(|d| d.get_waiting(policy, &token, cost, wait))
        {
            inner.stats.deny_cache.fetch_add(1, Ordering::Relaxed);
            return Ok(answer);
        }
        let deadline = Instant::now() + inner.opts.timeout;
        let partition = partition_of(&token, inner.opts.partitions);
        let asking = Asking {
            token: &token,
            policy,
            cost,
            // A peek counts nothing: no id to remember.
            id: id.filter(|_| cost > 0),
            wait_ms,
        };
        // Neither a batch item nor a slice carries a wait: it goes alone.
        if wait_ms > 0 {
            let outcome = inner.single(asking, partition, deadline).await;
            return inner.conclude(&token, policy, outcome, Op::Allow(cost).waiting(wait_ms));
        }
        // A grouped key's levels are decided by its owner alone: no slice
        // of it is asked for (the worker refuses local budgets on one).
        let grouped = token.contains(sluice_core::key::TOKEN_SEPARATOR);
        if let Some(budgets) = inner.budgets.as_ref().filter(|_| !grouped) {
            return self
                .ask_with_budget(budgets, asking, partition, deadline)
                .await;
        }
        // A traced ask goes alone: a batch carries the asks of many traces.
        let outcome = if inner.batcher.is_some() && !crate::trace::is_traced() {
            inner
                .ask_batched(asking, Act::default(), partition, deadline)
                .await
                .0
        } else {
            inner.single(asking, partition, deadline).await
        };
        inner.conclude(&token, policy, outcome, Op::Allow(cost))
    }

    /// An ask with local budgets on: from the key's slice if it has one,
    /// else from the owner, asking for a slice when the key is hot.
    async fn ask_with_budget(
        &self,
        budgets: &Budgets,
        asking: Asking<'_>,
        partition: u32,
        deadline: Instant,
    ) -> Result<Answer, Error> {
        let inner = &self.inner;
        let Asking {
            token,
            policy,
            cost,
            ..
        } = asking;
        let mut ended = None;
        let plan = sluice_core::ask::with_counter_key(policy, token, |key| {
            budgets.plan(key, policy, cost, &mut ended)
        });
        if let Some(refund) = ended {
            inner.spawn_refund(token, policy, refund);
        }
        let (want, sent) = match plan {
            Plan::Local(answer) => {
                inner.stats.budget.fetch_add(1, Ordering::Relaxed);
                return Ok(answer);
            }
            Plan::Ask { want, sent } => (want, sent),
        };
        let budget = want.map_or(Budget::None, Budget::Slice);
        // Traced, it goes alone unless it asks for a slice (only a batch
        // carries that, crate::trace).
        let (outcome, as_sent) = if want.is_none() && crate::trace::is_traced() {
            (inner.single(asking, partition, deadline).await, true)
        } else {
            inner
                .ask_batched(asking, Act::Ask(budget), partition, deadline)
                .await
        };
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
    pub async fn peek(&self, key: impl AsKey, policy: &str) -> Result<Answer, Error> {
        self.ask(key, policy, 0).await
    }

    /// Counts `cost` units of usage already served (SPEC §2): one
    /// publish to `rl.hit.<key>`, no reply, no fallback (a hit published
    /// while no worker owns the key's partition is lost).
    pub async fn hit(&self, key: impl AsKey, policy: &str, cost: u64) -> Result<(), Error> {
        let token = prepare(&key, policy, cost)?;
        // Published once and never again: nothing to name.
        let body = request_body(policy, cost, None);
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
        key: impl AsKey,
        policy: &str,
        cost: u64,
    ) -> Result<Answer, Error> {
        self.hit_named(key, policy, cost, None).await
    }

    /// [`Client::hit_and_peek`] named by the caller's own `id` (SPEC §16)
    /// when given: sent again with it, the hit counts once.
    pub async fn hit_named(
        &self,
        key: impl AsKey,
        policy: &str,
        cost: u64,
        id: Option<&str>,
    ) -> Result<Answer, Error> {
        if let Some(id) = id {
            sluice_core::wire::check_id(id).map_err(Error::BadRequest)?;
        }
        let inner = &self.inner;
        let token = prepare(&key, policy, cost)?;
        inner.stats.hits.fetch_add(1, Ordering::Relaxed);
        let deadline = Instant::now() + inner.opts.timeout;
        let partition = partition_of(&token, inner.opts.partitions);
        let subject = Verb::Hit.client_subject(&token);
        // Sent again after an unstored 503: named, so it counts once.
        let own = inner.ids.as_ref().filter(|_| cost > 0 && id.is_none());
        let id = own.map(|ids| ids.next()).or(id.map(str::to_string));
        let outcome = inner
            .round_trip(
                &subject,
                &request_body(policy, cost, id.as_deref()),
                Some(partition),
                deadline,
                decode_single,
            )
            .await;
        inner.conclude(&token, policy, outcome, Op::Record(cost))
    }

    /// A key's usage history (SPEC §9): one `rl.usage.<key>` request
    /// to the key's owner. No fallback: with no worker there is no history.
    pub async fn usage(&self, key: impl AsKey, query: &UsageQuery) -> Result<UsageReply, Error> {
        queries::usage(&self.inner.nats, &key, query, QUERY_TIMEOUT).await
    }

    /// The threshold alerts (SPEC §14) of `policy` (every policy when
    /// `None`) from `start`, oldest first; with `follow`, each new one as
    /// it is stored, without end ([`crate::alerts`]).
    pub async fn alerts(
        &self,
        policy: Option<&str>,
        start: crate::alerts::Start,
        follow: bool,
    ) -> Result<futures::stream::BoxStream<'static, Result<sluice_core::alerts::Alert, Error>>, Error>
    {
        crate::alerts::alerts(self.nats(), policy, start, follow).await
    }

    /// The keys that used (or were denied) the most in a range
    /// (SPEC §9, `rl.top`).
    pub async fn top(&self, query: &TopQuery) -> Result<TopReply, Error> {
        queries::top(&self.inner.nats, query, QUERY_TIMEOUT).await
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

    /// The id an ask or a hold's verb goes by (SPEC §16): the caller's,
    /// once checked, else one of the client's own (if it draws them).
    pub(crate) fn id_of<'a>(&self, caller: Option<&'a str>) -> Result<Option<Cow<'a, str>>, Error> {
        if let Some(id) = caller {
            sluice_core::wire::check_id(id).map_err(Error::BadRequest)?;
            return Ok(Some(Cow::Borrowed(id)));
        }
        Ok(self.inner.ids.as_ref().map(|ids| Cow::Owned(ids.next())))
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
pub(crate) fn prepare(
    key: &(impl AsKey + ?Sized),
    policy: &str,
    cost: u64,
) -> Result<String, Error> {
    let token = token_of(key)?;
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
}
