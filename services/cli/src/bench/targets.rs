//! What the load generator talks to: sluice (or the echo responder) through
//! the plain subject, sluice through the batching client, or Redis with a
//! Lua limiter script. One [`Target`] per connection; the tasks of a
//! connection share it.

use super::keys::Rng;
use super::report::Outcome;
use anyhow::{bail, Context as _, Result};
use async_nats::client::RequestErrorKind;
use async_nats::Subject;
use bytes::Bytes;
use sluice_core::key::try_encode_key;
use sluice_core::policy::Policy;
use sluice_core::wire::{self, Encoding, RETRY_AFTER, SERVICE_ERROR_CODE};
use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

/// Where the requests go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TargetKind {
    /// sluice workers (`rl.allow.<key>`).
    Sluice,
    /// A bare responder on the workers' subjects that decides nothing
    /// (`sluice bench --serve-echo`): the ceiling of NATS request-reply here.
    Echo,
    /// Redis + Lua: sliding log in a sorted set (ZREMRANGEBYSCORE, ZCARD, ZADD).
    RedisZset,
    /// Redis + Lua: fixed window with INCR (+ PEXPIRE on the first hit).
    RedisIncr,
    /// Redis + Lua: token bucket in a hash (HMGET, HSET).
    RedisBucket,
}

impl TargetKind {
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::Sluice => "sluice",
            TargetKind::Echo => "echo",
            TargetKind::RedisZset => "redis-zset",
            TargetKind::RedisIncr => "redis-incr",
            TargetKind::RedisBucket => "redis-bucket",
        }
    }

    pub fn is_redis(self) -> bool {
        matches!(
            self,
            TargetKind::RedisZset | TargetKind::RedisIncr | TargetKind::RedisBucket
        )
    }
}

/// How sluice is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ClientKind {
    /// One NATS request per ask on `rl.allow.<key>` (any NATS client can do this).
    Plain,
    /// `sluice-client` with batching: concurrent asks for one worker share a request.
    Batching,
}

impl ClientKind {
    pub fn name(self) -> &'static str {
        match self {
            ClientKind::Plain => "plain",
            ClientKind::Batching => "batching",
        }
    }
}

/// Everything needed to open one connection's [`Target`]; cheap to clone
/// and sent to every load thread.
#[derive(Clone)]
pub struct TargetSpec {
    pub kind: TargetKind,
    pub client: ClientKind,
    pub url: String,
    pub timeout: Duration,
    /// The request subjects `rl.allow.<token>`, by key number (NATS targets).
    pub subjects: Arc<Vec<Subject>>,
    /// The raw keys, by key number (batching client, Redis).
    pub keys: Arc<Vec<String>>,
    pub body: Bytes,
    pub policy: String,
    pub cost: u64,
    /// Script arguments (Redis): derived from the policy's first limit.
    pub redis: Option<RedisLimit>,
    pub batching: Option<super::batching::BatchingSpec>,
}

/// The limit a Redis script enforces.
#[derive(Clone, Copy, Debug)]
pub struct RedisLimit {
    pub max: u64,
    pub window_ms: u64,
    pub burst: u64,
}

impl RedisLimit {
    pub fn of(policy: &Policy) -> RedisLimit {
        let limit = &policy.limits()[0];
        RedisLimit {
            max: limit.max(),
            window_ms: (limit.per().as_u64() / 1_000_000).max(1),
            burst: limit.burst(),
        }
    }
}

impl TargetSpec {
    /// Prepares subjects, keys and the body for `keys` keys named `<prefix><i>`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        kind: TargetKind,
        client: ClientKind,
        url: String,
        timeout: Duration,
        prefix: &str,
        keys: u64,
        policy: &str,
        cost: u64,
        redis: Option<RedisLimit>,
    ) -> Result<TargetSpec> {
        let raw: Vec<String> = (0..keys).map(|i| format!("{prefix}{i}")).collect();
        let subjects = if kind.is_redis() || client == ClientKind::Batching {
            Vec::new()
        } else {
            raw.iter()
                .map(|k| {
                    let token = try_encode_key(k.as_bytes())
                        .map_err(|e| anyhow::anyhow!("key {k:?}: {e}"))?;
                    Ok(Subject::from(format!("rl.allow.{token}")))
                })
                .collect::<Result<Vec<_>>>()?
        };
        let body = wire::encode_request(
            (policy != wire::DEFAULT_POLICY).then_some(policy),
            (cost != wire::DEFAULT_COST).then_some(cost),
            Encoding::MsgPack,
        );
        Ok(TargetSpec {
            kind,
            client,
            url,
            timeout,
            subjects: Arc::new(subjects),
            keys: Arc::new(raw),
            body: body.into(),
            policy: policy.to_string(),
            cost,
            redis,
            batching: None,
        })
    }

    /// Opens connection number `index` (on the calling thread's runtime).
    pub async fn connect(&self, index: usize) -> Result<Target> {
        if self.kind.is_redis() {
            let client = redis::Client::open(self.url.as_str())
                .with_context(|| format!("bad Redis URL {}", self.url))?;
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .with_context(|| format!("cannot connect to Redis at {}", self.url))?;
            let script = Arc::new(redis::Script::new(match self.kind {
                TargetKind::RedisZset => ZSET_LUA,
                TargetKind::RedisIncr => INCR_LUA,
                _ => BUCKET_LUA,
            }));
            script
                .prepare_invoke()
                .load_async(&mut conn)
                .await
                .context("cannot load the Lua script into Redis")?;
            return Ok(Target::Redis(RedisTarget {
                conn,
                script,
                kind: self.kind,
                keys: self.keys.clone(),
                limit: self.redis.expect("redis targets have a limit"),
                cost: self.cost,
                timeout: self.timeout,
                member: Cell::new(Rng::new(index as u64 + 1).next_u64() << 20),
            }));
        }
        match self.client {
            ClientKind::Plain => {
                let client = async_nats::ConnectOptions::new()
                    .name(format!("sluice-bench-{index}"))
                    .connect(self.url.as_str())
                    .await
                    .with_context(|| format!("cannot connect to NATS at {}", self.url))?;
                Ok(Target::Nats(NatsTarget {
                    client,
                    subjects: self.subjects.clone(),
                    body: self.body.clone(),
                    timeout: self.timeout,
                }))
            }
            ClientKind::Batching => {
                let spec = self
                    .batching
                    .as_ref()
                    .context("the batching client is not set up")?;
                Ok(Target::Batching(
                    super::batching::connect(spec, self, index).await?,
                ))
            }
        }
    }
}

/// One connection of the load generator.
pub enum Target {
    Nats(NatsTarget),
    Redis(RedisTarget),
    Batching(super::batching::BatchingTarget),
}

impl Target {
    /// Asks for key number `key`; an `Outcome::Other` comes with a reason.
    pub async fn ask(&self, key: usize) -> (Outcome, Option<String>) {
        match self {
            Target::Nats(t) => t.ask(key).await,
            Target::Redis(t) => t.ask(key).await,
            Target::Batching(t) => t.ask(key).await,
        }
    }

    /// What the client did, for the report (batching client only).
    pub fn stats(&self) -> Option<serde_json::Value> {
        match self {
            Target::Batching(t) => Some(t.stats()),
            _ => None,
        }
    }
}

pub struct NatsTarget {
    client: async_nats::Client,
    subjects: Arc<Vec<Subject>>,
    body: Bytes,
    timeout: Duration,
}

impl NatsTarget {
    async fn ask(&self, key: usize) -> (Outcome, Option<String>) {
        let request = async_nats::Request::new()
            .payload(self.body.clone())
            .timeout(Some(self.timeout));
        match self
            .client
            .send_request(self.subjects[key].clone(), request)
            .await
        {
            Ok(msg) => (classify_reply(&msg), None),
            Err(e) => match e.kind() {
                RequestErrorKind::NoResponders => (Outcome::NoResponders, None),
                RequestErrorKind::TimedOut => (Outcome::Timeout, None),
                _ => (Outcome::Other, Some(e.to_string())),
            },
        }
    }
}

/// Reads a reply the way any NATS client can (CONTRACT §1): an error has
/// `Nats-Service-Error-Code`, a denial has `Retry-After`, anything else is
/// an allowed decision. The body is not decoded.
pub fn classify_reply(msg: &async_nats::Message) -> Outcome {
    let Some(headers) = &msg.headers else {
        return Outcome::Other;
    };
    if let Some(code) = headers.get(SERVICE_ERROR_CODE) {
        return Outcome::ErrorReply(code.as_str().parse().unwrap_or(0));
    }
    if headers.get(RETRY_AFTER).is_some() {
        Outcome::Denied
    } else {
        Outcome::Allowed
    }
}

pub struct RedisTarget {
    conn: redis::aio::MultiplexedConnection,
    script: Arc<redis::Script>,
    kind: TargetKind,
    keys: Arc<Vec<String>>,
    limit: RedisLimit,
    cost: u64,
    timeout: Duration,
    /// A unique sorted-set member per request (sliding log).
    member: Cell<u64>,
}

impl RedisTarget {
    async fn ask(&self, key: usize) -> (Outcome, Option<String>) {
        let mut conn = self.conn.clone();
        let key = &self.keys[key];
        let mut invocation = self.script.key(key);
        let l = self.limit;
        match self.kind {
            TargetKind::RedisZset => {
                let m = self.member.get();
                self.member.set(m + 1);
                invocation.arg(l.window_ms).arg(l.max).arg(m);
            }
            TargetKind::RedisIncr => {
                invocation.arg(l.window_ms).arg(l.max).arg(self.cost);
            }
            _ => {
                invocation
                    .arg(l.window_ms)
                    .arg(l.max)
                    .arg(l.burst)
                    .arg(self.cost);
            }
        }
        let call = invocation.invoke_async::<(i64, i64)>(&mut conn);
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok((1, _))) => (Outcome::Allowed, None),
            Ok(Ok(_)) => (Outcome::Denied, None),
            Ok(Err(e)) => (Outcome::Other, Some(e.to_string())),
            Err(_) => (Outcome::Timeout, None),
        }
    }
}

/// Pings Redis once (a clear error before the load starts).
pub async fn check_redis(url: &str) -> Result<()> {
    let client = redis::Client::open(url).with_context(|| format!("bad Redis URL {url}"))?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .with_context(|| format!("cannot connect to Redis at {url}"))?;
    let pong: String = redis::cmd("PING").query_async(&mut conn).await?;
    if pong != "PONG" {
        bail!("Redis at {url} answered PING with {pong:?}");
    }
    Ok(())
}

// The Lua limiters. Each reads the server's clock (TIME), as a sluice worker
// decides with its own clock, and returns {allowed (1|0), remaining}.

/// Sliding log: one sorted-set member per allowed request, scored by time (µs).
/// ARGV: window_ms, max, unique member id.
pub const ZSET_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local window = tonumber(ARGV[1]) * 1000
local max = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local n = redis.call('ZCARD', KEYS[1])
if n < max then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return {1, max - n - 1}
end
return {0, 0}
"#;

/// Fixed window: INCR a counter per window, PEXPIRE it on its first hit.
/// ARGV: window_ms, max, cost.
pub const INCR_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
local k = KEYS[1] .. ':' .. math.floor(now / window)
local cost = tonumber(ARGV[3])
local n = redis.call('INCRBY', k, cost)
if n == cost then redis.call('PEXPIRE', k, window) end
local max = tonumber(ARGV[2])
if n <= max then return {1, max - n} end
redis.call('DECRBY', k, cost)
return {0, 0}
"#;

/// Token bucket: tokens and last refill time in a hash.
/// ARGV: window_ms, max (tokens per window), burst (bucket size), cost.
pub const BUCKET_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local rate = tonumber(ARGV[2]) / tonumber(ARGV[1])
local burst = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(b[1]) or burst
local ts = tonumber(b[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
local allowed = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate))
return {allowed, math.floor(tokens)}
"#;
