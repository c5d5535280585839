//! [`ClientOptions`]: timeouts, fallback, batching, deny cache.

use crate::nats_auth::NatsAuth;
use sluice_core::config::{Config, Fallback, DEFAULT_PARTITIONS};
use sluice_core::policy::Policy;
use sluice_core::time::{Clock, SystemClock};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// How a [`Client`](crate::Client) asks and what it does when nobody answers.
///
/// Build it with [`ClientOptions::default`] and set fields, or with
/// [`ClientOptions::from_config`] to take `partitions`, `fallback` and the
/// policies from the same config file the workers run with.
#[derive(Clone)]
pub struct ClientOptions {
    /// The most one ask may take, including retries and time spent waiting
    /// for a batch; after it the fallback decides. Default 100 ms.
    pub timeout: Duration,
    /// What to answer when no worker answers. Default `closed` (an
    /// [`Error::Unavailable`](crate::Error::Unavailable)), as in the config.
    pub fallback: Fallback,
    /// The policies the `local` fallback decides with (and `open` takes its
    /// limit numbers from). Default: the built-in `default` policy only.
    pub policies: BTreeMap<String, Policy>,
    /// The partition count of the server's mapping and the workers' config.
    /// Batches go straight to `rl.p.<n>.batch`, so this must match; the
    /// client checks it at connect time ([`ClientOptions::check_partitions`]).
    /// Default 64.
    pub partitions: u32,
    /// Send concurrent asks for one worker together as one request.
    /// Default true (see the crate docs for the design and the measurements).
    pub batching: bool,
    /// With batching, probe the server's mapping at connect time and refuse
    /// to connect when it disagrees with `partitions`. Default true.
    pub check_partitions: bool,
    /// Answer repeated asks for a denied key and policy locally until their
    /// retry time. Default true.
    pub deny_cache: bool,
    /// Decide most asks of a hot key locally, from slices of its budget
    /// that its owner grants, where the policy has `local_budget = true`
    /// (docs/CLIENT.md, "Local budgets"). Needs batching. Default true.
    pub budgets: bool,
    /// The most keys the deny cache holds (expired ones are dropped first;
    /// when full, new denials are not cached). Default 100 000.
    pub deny_cache_capacity: usize,
    /// How many times to re-send an ask that got "no responders" (its
    /// partition is between owners during a handover) before the fallback
    /// decides. Default 4.
    pub no_responders_retries: u32,
    /// The pause before the first such retry; each further one waits twice
    /// as long. Default 2 ms: with 4 retries, at 2, 6, 14 and 30 ms after the
    /// first try, covering the handover windows measured in docs/CLIENT.md.
    pub no_responders_backoff: Duration,
    /// A partition that has answered only "no responders" for this long is
    /// down (no owner: all workers stopped, or a crashed owner's lease has
    /// not expired yet): asks for it fall back after one try, in well under
    /// a millisecond, until it answers again. Default 200 ms.
    pub down_after: Duration,
    /// Follow the live policies of the `sluice-policies` bucket (SPEC
    /// §7): the `local` and `open` fallbacks use them, and every change
    /// empties the deny cache. Needs read access to that bucket. Default
    /// false (the gateway turns it on).
    pub follow_policies: bool,
    /// The NATS connection name. Default `sluice-client`.
    pub name: String,
    /// NATS credentials and TLS (SPEC §10). Default none: an open,
    /// plain connection. As the `client` role of `sluice nats-config
    /// --auth`, everything here works, batching and `follow_policies`
    /// included (docs/SECURITY.md).
    pub auth: NatsAuth,
    /// The clock of the `local` fallback limiter. Default the system clock.
    pub clock: Arc<dyn Clock>,
    /// Name every ask the client may send more than once (an ask asked
    /// again alone after its batch got a 503, one sent again after an
    /// unstored 503) with an id of its own, so that the owner counts it
    /// once (SPEC §16). Default true.
    pub ask_ids: bool,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        let mut policies = BTreeMap::new();
        let default = Policy::builtin_default();
        policies.insert(default.name().to_string(), default);
        ClientOptions {
            timeout: Duration::from_millis(100),
            fallback: Fallback::default(),
            policies,
            partitions: DEFAULT_PARTITIONS,
            batching: true,
            check_partitions: true,
            deny_cache: true,
            budgets: true,
            deny_cache_capacity: 100_000,
            no_responders_retries: 4,
            no_responders_backoff: Duration::from_millis(2),
            down_after: Duration::from_millis(200),
            follow_policies: false,
            name: "sluice-client".to_string(),
            auth: NatsAuth::default(),
            clock: Arc::new(SystemClock),
            ask_ids: true,
        }
    }
}

impl ClientOptions {
    /// The defaults, with `partitions`, `fallback` and the policies of `config`.
    pub fn from_config(config: &Config) -> ClientOptions {
        ClientOptions {
            partitions: config.partitions,
            fallback: config.fallback,
            policies: config.policies.clone(),
            ..ClientOptions::default()
        }
    }

    pub fn timeout(mut self, timeout: Duration) -> ClientOptions {
        self.timeout = timeout;
        self
    }

    pub fn fallback(mut self, fallback: Fallback) -> ClientOptions {
        self.fallback = fallback;
        self
    }

    pub fn batching(mut self, on: bool) -> ClientOptions {
        self.batching = on;
        self
    }

    pub fn budgets(mut self, on: bool) -> ClientOptions {
        self.budgets = on;
        self
    }

    /// [`ClientOptions::ask_ids`].
    pub fn ask_ids(mut self, on: bool) -> ClientOptions {
        self.ask_ids = on;
        self
    }

    pub fn deny_cache(mut self, on: bool) -> ClientOptions {
        self.deny_cache = on;
        self
    }

    /// NATS credentials and TLS ([`ClientOptions::auth`]).
    pub fn auth(mut self, auth: NatsAuth) -> ClientOptions {
        self.auth = auth;
        self
    }

    pub fn partitions(mut self, partitions: u32) -> ClientOptions {
        self.partitions = partitions;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.partitions == 0 {
            return Err("partitions must be at least 1".into());
        }
        if self.timeout.is_zero() {
            return Err("the timeout must be longer than 0".into());
        }
        Ok(())
    }
}

impl fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientOptions")
            .field("timeout", &self.timeout)
            .field("fallback", &self.fallback)
            .field("policies", &self.policies.keys().collect::<Vec<_>>())
            .field("partitions", &self.partitions)
            .field("batching", &self.batching)
            .field("check_partitions", &self.check_partitions)
            .field("deny_cache", &self.deny_cache)
            .field("budgets", &self.budgets)
            .field("deny_cache_capacity", &self.deny_cache_capacity)
            .field("no_responders_retries", &self.no_responders_retries)
            .field("no_responders_backoff", &self.no_responders_backoff)
            .field("down_after", &self.down_after)
            .field("follow_policies", &self.follow_policies)
            .field("name", &self.name)
            .field("auth", &self.auth)
            .finish_non_exhaustive()
    }
}
