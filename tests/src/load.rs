//! [`Load`]: a bounded load of raw NATS asks, run in the background while a
//! test crashes, stops or adds workers; then [`assert_no_key_over`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use tokio::sync::{watch, Semaphore};

use crate::ask::ask;

/// The most a load run may take before it stops asking.
pub const LOAD_DEADLINE: Duration = Duration::from_secs(90);

/// One answered (or failed) ask of a load run.
#[derive(Debug, Clone)]
pub struct Answered {
    pub key: String,
    /// A decision came back (not an error, not a timeout).
    pub answered: bool,
    pub allowed: bool,
    /// Wall clock when the reply arrived (ms since the epoch).
    pub answered_at_ms: u64,
}

/// A bounded load: every ask once, `concurrency` in flight over the clients.
#[derive(Debug)]
pub struct Load {
    progress: watch::Receiver<usize>,
    task: tokio::task::JoinHandle<Vec<Answered>>,
}

impl Load {
    /// Starts asking, in a task: each `(key, _)` of `asks` once, with
    /// `body`, round robin over `clients`, at most `concurrency` at a time;
    /// no new ask after [`LOAD_DEADLINE`].
    pub fn start(
        clients: &[async_nats::Client],
        asks: Vec<(String, usize)>,
        concurrency: usize,
        body: &'static [u8],
    ) -> Load {
        let (tx, progress) = watch::channel(0usize);
        let clients = clients.to_vec();
        let task = tokio::spawn(async move {
            let deadline = Instant::now() + LOAD_DEADLINE;
            let limit = Arc::new(Semaphore::new(concurrency));
            let tx = Arc::new(tx);
            let mut inflight = futures::stream::FuturesUnordered::new();
            for (i, (key, _)) in asks.into_iter().enumerate() {
                if Instant::now() >= deadline {
                    break;
                }
                let permit = limit.clone().acquire_owned().await.unwrap();
                let client = clients[i % clients.len()].clone();
                let tx = tx.clone();
                inflight.push(tokio::spawn(async move {
                    let outcome = ask(&client, &key, body).await;
                    drop(permit);
                    tx.send_modify(|n| *n += 1);
                    let answered_at_ms = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .unwrap()
                        .as_millis() as u64;
                    Answered {
                        key,
                        answered: outcome.is_ok(),
                        allowed: outcome.map(|d| d.allowed).unwrap_or(false),
                        answered_at_ms,
                    }
                }));
            }
            let mut results = Vec::new();
            while let Some(r) = inflight.next().await {
                results.push(r.unwrap());
            }
            results
        });
        Load { progress, task }
    }

    /// Waits until `n` asks have completed.
    pub async fn reached(&mut self, n: usize) {
        let _ = self.progress.wait_for(|done| *done >= n).await;
    }

    /// Waits for every ask and returns their outcomes.
    pub async fn finish(self) -> Vec<Answered> {
        self.task.await.unwrap()
    }
}

/// `rounds` asks of every key, a round at a time, as [`Load::start`] takes
/// them.
pub fn rounds(keys: &[String], rounds: usize) -> Vec<(String, usize)> {
    (0..rounds)
        .flat_map(|r| keys.iter().map(move |k| (k.clone(), r)))
        .collect()
}

/// Most asks were answered, and every key was allowed at most `max` times.
pub fn assert_no_key_over(results: &[Answered], max: usize) {
    let mut allowed: HashMap<&str, usize> = HashMap::new();
    for r in results.iter().filter(|r| r.allowed) {
        *allowed.entry(&r.key).or_default() += 1;
    }
    let answered = results.iter().filter(|r| r.answered).count();
    assert!(
        answered > results.len() / 2,
        "most asks were answered ({answered} of {})",
        results.len()
    );
    for (key, n) in allowed {
        assert!(n <= max, "{key} was allowed {n} times, limit {max}");
    }
}
