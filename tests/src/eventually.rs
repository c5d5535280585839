//! [`eventually`]: poll a condition until it holds or a deadline passes.

use std::future::Future;
use std::time::Duration;

use anyhow::{anyhow, Result};
use tokio::time::Instant;

/// A tick for waiting on other processes on loopback (a lease taken, a
/// partition answering): short next to what they take, long enough not to
/// load the cores they share.
pub const TICK: Duration = Duration::from_millis(20);

/// Calls `condition` every `tick` until it returns `Ok`, and returns that
/// value. After `timeout` it gives up and returns the last error, with the
/// timeout and the number of attempts as context. An attempt still running
/// at the deadline is cancelled.
///
/// Use this only where there is no event to await (a state that some other
/// process reaches "soon", such as a lease expiring or a partition changing
/// owner); where an event exists (a reply, a watch update, a process exit)
/// await it instead.
///
/// ```no_run
/// # async fn demo(client: async_nats::Client) -> anyhow::Result<()> {
/// use std::time::Duration;
/// use sluice_core::subject::Verb;
/// use sluice_tests::eventually;
///
/// let reply = eventually(Duration::from_secs(5), Duration::from_millis(50), || {
///     let client = client.clone();
///     async move { client.request(Verb::Allow.client_subject("alice"), "".into()).await }
/// })
/// .await?;
/// # let _ = reply; Ok(()) }
/// ```
pub async fn eventually<T, E, F, Fut>(
    timeout: Duration,
    tick: Duration,
    mut condition: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, E>>,
    E: Into<anyhow::Error>,
{
    let deadline = Instant::now() + timeout;
    let mut attempts = 0u32;
    let mut last_err: Option<anyhow::Error> = None;
    loop {
        attempts += 1;
        match tokio::time::timeout_at(deadline, condition()).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) => last_err = Some(e.into()),
            Err(_elapsed) => {
                let err = last_err
                    .unwrap_or_else(|| anyhow!("the attempt was still running at the deadline"));
                return Err(err.context(format!(
                    "condition not met within {timeout:?} ({attempts} attempts; the last one was cut off)"
                )));
            }
        }
        let now = Instant::now();
        if now >= deadline {
            let err = last_err.unwrap_or_else(|| anyhow!("no attempt finished"));
            return Err(err.context(format!(
                "condition not met within {timeout:?} ({attempts} attempts)"
            )));
        }
        // The last attempt runs at the deadline.
        tokio::time::sleep_until((now + tick).min(deadline)).await;
    }
}
