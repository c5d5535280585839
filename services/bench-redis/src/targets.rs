//! The Redis targets: Redis with a Lua limiter script, loaded by the same
//! generator as sluice so their numbers compare (docs/BENCHMARKS.md). One
//! multiplexed connection per load connection, the script loaded once on
//! each, then invoked by its SHA (EVALSHA) for every ask. The limit is the
//! first limit of `--policy` in `--config`, so Redis enforces what the
//! workers would.

use anyhow::{bail, Context as _, Result};
use sluice_bench::admission::Window;
use sluice_bench::{Connect, Outcome, Reply, Rng, Target};
use sluice_core::policy::Policy;
use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

/// Which Lua limiter (named `redis-*`, as in the reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RedisKind {
    /// Sliding log in a sorted set (ZREMRANGEBYSCORE, ZCARD, ZADD).
    #[value(name = "redis-zset")]
    Zset,
    /// Fixed window with INCR (+ PEXPIRE on the first hit).
    #[value(name = "redis-incr")]
    Incr,
    /// Token bucket in a hash (HMGET, HSET).
    #[value(name = "redis-bucket")]
    Bucket,
}

impl RedisKind {
    pub fn name(self) -> &'static str {
        match self {
            RedisKind::Zset => "redis-zset",
            RedisKind::Incr => "redis-incr",
            RedisKind::Bucket => "redis-bucket",
        }
    }

    fn lua(self) -> &'static str {
        match self {
            RedisKind::Zset => ZSET_LUA,
            RedisKind::Incr => INCR_LUA,
            RedisKind::Bucket => BUCKET_LUA,
        }
    }
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

/// Everything needed to open one connection's [`RedisTarget`]; cheap to
/// clone and sent to every load thread.
#[derive(Clone)]
pub struct RedisSpec {
    pub kind: RedisKind,
    pub url: String,
    pub timeout: Duration,
    /// The keys, by key number.
    pub keys: Arc<Vec<String>>,
    pub limit: RedisLimit,
    pub cost: u64,
}

impl Connect for RedisSpec {
    type Target = RedisTarget;

    async fn connect(&self, index: usize) -> Result<RedisTarget> {
        let client = redis::Client::open(self.url.as_str())
            .with_context(|| format!("bad Redis URL {}", self.url))?;
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .with_context(|| format!("cannot connect to Redis at {}", self.url))?;
        let script = redis::Script::new(self.kind.lua());
        script
            .prepare_invoke()
            .load_async(&mut conn)
            .await
            .context("cannot load the Lua script into Redis")?;
        Ok(RedisTarget {
            conn,
            script,
            spec: self.clone(),
            member: Cell::new(Rng::new(index as u64 + 1).next_u64() << 20),
        })
    }
}

/// One connection to Redis.
pub struct RedisTarget {
    conn: redis::aio::MultiplexedConnection,
    script: redis::Script,
    spec: RedisSpec,
    /// A unique sorted-set member per request (sliding log).
    member: Cell<u64>,
}

impl Target for RedisTarget {
    async fn ask(&self, key: usize) -> Reply {
        let mut conn = self.conn.clone();
        let spec = &self.spec;
        let mut invocation = self.script.key(&spec.keys[key]);
        let l = spec.limit;
        match spec.kind {
            RedisKind::Zset => {
                let m = self.member.get();
                self.member.set(m + 1);
                invocation.arg(l.window_ms).arg(l.max).arg(m);
            }
            RedisKind::Incr => {
                invocation.arg(l.window_ms).arg(l.max).arg(spec.cost);
            }
            RedisKind::Bucket => {
                invocation
                    .arg(l.window_ms)
                    .arg(l.max)
                    .arg(l.burst)
                    .arg(spec.cost);
            }
        }
        // {allowed, remaining} and, from INCR's script, the window number.
        let call = invocation.invoke_async::<Vec<i64>>(&mut conn);
        match tokio::time::timeout(spec.timeout, call).await {
            Ok(Ok(reply)) => {
                let outcome = match reply.first() {
                    Some(1) => Outcome::Allowed,
                    _ => Outcome::Denied,
                };
                let window = reply.get(2).map(|&k| Window::Index(k as u64));
                Reply::from(outcome).in_window(window)
            }
            Ok(Err(e)) => Reply::other(e.to_string()),
            Err(_) => Outcome::Timeout.into(),
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
// decides with its own clock, and returns {allowed (1|0), remaining}; INCR's
// also the number of its window (for the admission accounting).

/// Sliding log: one sorted-set member per allowed request, scored by time (µs).
/// ARGV: window_ms, max, unique member id.
const ZSET_LUA: &str = r#"
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
/// Windows are `[k·window_ms, (k+1)·window_ms)` since the epoch, as a
/// worker's. ARGV: window_ms, max, cost. Returns {allowed, remaining, k}.
const INCR_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
local w = math.floor(now / window)
local k = KEYS[1] .. ':' .. w
local cost = tonumber(ARGV[3])
local n = redis.call('INCRBY', k, cost)
if n == cost then redis.call('PEXPIRE', k, window) end
local max = tonumber(ARGV[2])
if n <= max then return {1, max - n, w} end
redis.call('DECRBY', k, cost)
return {0, 0, w}
"#;

/// Token bucket: tokens and last refill time in a hash.
/// ARGV: window_ms, max (tokens per window), burst (bucket size), cost.
const BUCKET_LUA: &str = r#"
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

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::config::Config;

    #[test]
    fn the_scripts_enforce_the_first_limit_of_the_policy() {
        let config = Config::from_toml(
            r#"
[policies.bucket]
algorithm = "token_bucket"
limits = [ { max = 100, per = "1s", burst = 250 }, { max = 1000, per = "1h" } ]
"#,
            "test.toml",
        )
        .unwrap();
        let limit = RedisLimit::of(config.policy("bucket").unwrap());
        assert_eq!((limit.max, limit.window_ms, limit.burst), (100, 1000, 250));
    }
}
