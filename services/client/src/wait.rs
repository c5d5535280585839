//! Asks that may wait for a later start instead of being denied (SPEC
//! §18): [`Client::ask_waiting`] says when, [`Client::acquire`] also
//! sleeps until then, so that callers on many servers start their work
//! spaced at a policy's rate (docs/PACING.md).
//!
//! Why here and not in [`crate::client`]: waiting changes where an ask
//! goes, not what the client checks. Such an ask is sent alone on
//! `rl.allow.<key>`, never batched nor decided from a local budget (a
//! batch item and a slice carry no wait), after the deny cache (which
//! answers it only while the retry time is past its wait). When no
//! worker answers, the fallback decides as for any ask: `open` allows
//! without a wait, `closed` fails, and `local` waits too, within this
//! process's own limiter (so K servers falling back pace at up to K
//! times the rate, the `local` fallback's usual price).

use crate::answer::Answer;
use crate::error::Error;
use crate::holds::Held;
use crate::key::AsKey;
use crate::Client;
use std::time::Duration;

impl Client {
    /// Asks for `cost` units of `policy` for `key`, allowing the ask to
    /// wait up to `wait` for its start (whole milliseconds, rounded down,
    /// at most the policy's `max_wait`; a `token_bucket` or `gcra` policy
    /// only, else [`Error::BadRequest`]). Returns at once: when allowed
    /// for a later moment, [`Answer::wait`] says how long from now the
    /// caller starts, its units already taken. Denied when even `wait`
    /// is not long enough, consuming nothing. A `wait` under 1 ms asks
    /// as [`Client::ask`] does.
    pub async fn ask_waiting(
        &self,
        key: impl AsKey,
        policy: &str,
        cost: u64,
        wait: Duration,
    ) -> Result<Answer, Error> {
        self.ask_waiting_named(key, policy, cost, wait, None).await
    }

    /// [`Client::ask_waiting`] named by the caller's own `id` when given
    /// (SPEC §16; else by one of the client's, as [`Client::ask`]): sent
    /// again with it, the ask counts once and is answered its first wait.
    pub async fn ask_waiting_named(
        &self,
        key: impl AsKey,
        policy: &str,
        cost: u64,
        wait: Duration,
        id: Option<&str>,
    ) -> Result<Answer, Error> {
        let id = self.id_of(id)?;
        self.ask_once(&key, policy, cost, id.as_deref(), wait_ms(wait))
            .await
    }

    /// [`Client::ask_waiting`], then, when allowed for a later moment,
    /// sleeps until it before returning: the caller may start its work as
    /// soon as this returns an allowed answer ([`Answer::wait`] says how
    /// long it slept). A denial returns at once, without sleeping.
    ///
    /// ```no_run
    /// # async fn demo(client: sluice_client::Client) -> Result<(), sluice_client::Error> {
    /// use std::time::Duration;
    /// let answer = client.acquire("partner-api", "partner", 1, Duration::from_secs(2)).await?;
    /// if answer.allowed {
    ///     // call the partner's API now
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire(
        &self,
        key: impl AsKey,
        policy: &str,
        cost: u64,
        wait: Duration,
    ) -> Result<Answer, Error> {
        let answer = self.ask_waiting(key, policy, cost, wait).await?;
        if answer.allowed && !answer.wait.is_zero() {
            tokio::time::sleep(answer.wait).await;
        }
        Ok(answer)
    }

    /// [`Client::reserve`] that may wait up to `wait` for its start (SPEC
    /// §18; the rules of [`Client::ask_waiting`]): kept for a later
    /// moment, the hold's units are taken at once, [`Answer::wait`] says
    /// how long from now the caller starts its work, and the hold's ttl
    /// runs from that start. It waits for the policy's rate limits only,
    /// never for a `concurrency` slot. Returns at once: sleep
    /// [`Answer::wait`] before the work (as [`Client::acquire`] does).
    pub async fn reserve_waiting(
        &self,
        key: impl AsKey,
        policy: &str,
        cost: u64,
        ttl: Option<Duration>,
        wait: Duration,
    ) -> Result<Held, Error> {
        let asked = (policy, cost, ttl);
        self.reserve_waiting_named(key, asked, wait, None).await
    }

    /// [`Client::reserve_waiting`] of `(policy, cost, ttl)`, named by the
    /// caller's own `id` when given (SPEC §16; else by one of the
    /// client's): sent again with it, it keeps one hold, and its repeat is
    /// told the wait left until the same start.
    pub async fn reserve_waiting_named(
        &self,
        key: impl AsKey,
        (policy, cost, ttl): (&str, u64, Option<Duration>),
        wait: Duration,
        id: Option<&str>,
    ) -> Result<Held, Error> {
        let asked = (policy, cost, ttl);
        self.reserve_with(key, asked, id, wait_ms(wait)).await
    }
}

/// A wait as the wire's `wait_ms`: whole milliseconds rounded down, so
/// that a wait of exactly a policy's `max_wait` is never over it.
fn wait_ms(wait: Duration) -> u64 {
    u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_go_as_whole_milliseconds_rounded_down() {
        assert_eq!(wait_ms(Duration::from_micros(250_900)), 250);
        assert_eq!(wait_ms(Duration::from_micros(999)), 0);
        assert_eq!(wait_ms(Duration::MAX), u64::MAX);
    }
}
