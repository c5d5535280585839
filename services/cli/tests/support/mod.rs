//! Shared pieces of the process-level tests: a stack of nats-server plus
//! `sluice worker` processes, raw NATS asks, and a bounded load generator.

#![allow(dead_code)]

use async_nats::client::RequestErrorKind;
use async_nats::jetstream;
use futures::StreamExt;
use serde::Deserialize;
use sluice_core::config::Config;
use sluice_tests::{ChildGuard, NatsServer};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{watch, Mutex, MutexGuard, Semaphore};

/// One test at a time in this binary (they measure recovery times).
pub async fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::const_new(());
    LOCK.lock().await
}

/// A decision reply, decoded from MessagePack.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Decided {
    pub allowed: bool,
    pub limit: u64,
    pub remaining: u64,
    pub reset_ms: u64,
    pub retry_after_ms: u64,
    pub policy: String,
}

#[derive(Debug, Deserialize)]
struct ErrorBody {
    error: String,
    message: String,
}

/// A nats-server and some `sluice worker` processes sharing one config.
pub struct Stack {
    pub nats: NatsServer,
    dir: tempfile::TempDir,
    config_path: PathBuf,
    pub partitions: u32,
    workers: Vec<(String, ChildGuard)>,
    started: usize,
}

impl Stack {
    pub async fn start(config_toml: &str, workers: usize) -> Stack {
        let config = Config::from_toml(config_toml, "test.toml").expect("test config is valid");
        let server_config =
            sluice_core::nats_config::NatsServerConfig::new(config.partitions).render();
        let nats = NatsServer::start(&server_config).expect("nats-server starts");
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("sluice.toml");
        std::fs::write(&config_path, config_toml).unwrap();
        let mut stack = Stack {
            nats,
            dir,
            config_path,
            partitions: config.partitions,
            workers: Vec::new(),
            started: 0,
        };
        stack.start_workers(workers).await;
        stack
    }

    /// Starts `n` more workers and waits until the partitions are spread
    /// over all of them and every partition answers.
    pub async fn start_workers(&mut self, n: usize) {
        for _ in 0..n {
            let id = format!("t{}", self.started);
            self.started += 1;
            let log = self.dir.path().join(format!("{id}.log"));
            let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
            cmd.args(["worker", "--nats", &self.nats.url(), "--worker-id", &id])
                .arg("--config")
                .arg(&self.config_path)
                .env("SLUICE_LOG", "info");
            let process =
                ChildGuard::spawn_logged(id.clone(), cmd, &log).expect("sluice worker starts");
            self.workers.push((id, process));
        }
        self.wait_stable().await;
    }

    pub async fn clients(&self, n: usize) -> Vec<async_nats::Client> {
        let mut clients = Vec::new();
        for _ in 0..n {
            clients.push(async_nats::connect(self.nats.url()).await.unwrap());
        }
        clients
    }

    /// Worker ids in the order they were started (live ones only).
    pub async fn worker_ids(&self) -> Vec<String> {
        self.workers.iter().map(|(id, _)| id.clone()).collect()
    }

    /// Partition → owning worker id, from the lease bucket.
    pub async fn owners(&self) -> BTreeMap<u32, String> {
        let client = async_nats::connect(self.nats.url()).await.unwrap();
        let mut owners = BTreeMap::new();
        let Ok(kv) = jetstream::new(client).get_key_value("sluice-leases").await else {
            return owners; // no worker has created it yet
        };
        for p in 0..self.partitions {
            if let Some(v) = kv.get(format!("p.{p}")).await.unwrap() {
                owners.insert(p, String::from_utf8_lossy(&v).into_owned());
            }
        }
        owners
    }

    /// When the snapshot each partition's current owner restored was taken.
    pub async fn restored_snapshot_times(&self, partitions: &[u32]) -> HashMap<u32, u64> {
        let client = async_nats::connect(self.nats.url()).await.unwrap();
        let kv = jetstream::new(client)
            .get_key_value("sluice-snapshots")
            .await
            .unwrap();
        let mut times = HashMap::new();
        for &p in partitions {
            let m: serde_json::Value = match kv.get(format!("p.{p}")).await.unwrap() {
                Some(v) => serde_json::from_slice(&v).unwrap(),
                None => continue,
            };
            times.insert(p, m["taken_at_ms"].as_u64().unwrap_or(0));
        }
        times
    }

    pub fn kill_worker(&mut self, id: &str) {
        let i = self
            .workers
            .iter()
            .position(|(w, _)| w == id)
            .expect("known worker");
        let (_, mut process) = self.workers.remove(i);
        process.kill().expect("SIGKILL reaches the worker");
    }

    /// Sends `signal` to one worker (e.g. SIGSTOP / SIGCONT to freeze it).
    pub fn signal_worker(&self, id: &str, signal: sluice_tests::Signal) {
        let (_, process) = self
            .workers
            .iter()
            .find(|(w, _)| w == id)
            .expect("known worker");
        process
            .signal(signal)
            .expect("the signal reaches the worker");
    }

    /// SIGTERM to one worker; it must exit 0 after handing over.
    pub fn stop_worker(&mut self, id: &str) {
        let i = self
            .workers
            .iter()
            .position(|(w, _)| w == id)
            .expect("known worker");
        let (_, mut process) = self.workers.remove(i);
        let status = process.terminate_within(Duration::from_secs(20));
        assert!(
            status.as_ref().map(|s| s.success()).unwrap_or(false),
            "worker {id}: {status:?}"
        );
    }

    /// SIGTERM to every worker; each must exit 0 after handing over.
    pub fn stop_workers(&mut self) {
        for (id, mut process) in self.workers.drain(..) {
            let status = process.terminate_within(Duration::from_secs(20));
            assert!(
                status.as_ref().map(|s| s.success()).unwrap_or(false),
                "worker {id} did not exit cleanly: {status:?}\n{}",
                process.log_tail(30)
            );
        }
    }

    /// True when no partition has a responder.
    pub async fn no_partition_answers(&self, client: &async_nats::Client) -> bool {
        for p in 0..self.partitions {
            match request(
                client,
                &format!("rl.allow.{}", key_in_partition(p, self.partitions)),
                br#"{"cost":0}"#,
            )
            .await
            {
                Err(e) if e.contains("no responders") => {}
                other => {
                    eprintln!("partition {p} still answers: {other:?}");
                    return false;
                }
            }
        }
        true
    }

    async fn wait_stable(&self) {
        let ids: Vec<String> = self.workers.iter().map(|(id, _)| id.clone()).collect();
        let client = async_nats::connect(self.nats.url()).await.unwrap();
        let partitions = self.partitions;
        let floor = partitions as usize / ids.len().max(1);
        let stable = eventually(Duration::from_secs(30), || async {
            let owners = self.owners().await;
            if owners.len() != partitions as usize {
                return None;
            }
            let mut shares: HashMap<&str, usize> = HashMap::new();
            for o in owners.values() {
                *shares.entry(o.as_str()).or_default() += 1;
            }
            let balanced = ids.iter().all(|id| {
                let n = shares.get(id.as_str()).copied().unwrap_or(0);
                n == floor || n == floor + 1
            }) && shares.len() == ids.len();
            if !balanced {
                return None;
            }
            for p in 0..partitions {
                ask(&client, &key_in_partition(p, partitions), br#"{"cost":0}"#)
                    .await
                    .ok()?;
            }
            Some(())
        })
        .await;
        if stable.is_none() {
            for (id, process) in &self.workers {
                eprintln!("--- worker {id} log (tail) ---\n{}", process.log_tail(40));
            }
            panic!(
                "the workers did not settle: owners {:?}",
                self.owners().await
            );
        }
    }
}

/// A key that the server maps to partition `p` of `partitions`.
pub fn key_in_partition(p: u32, partitions: u32) -> String {
    (0..)
        .map(|i| format!("probe-{i}"))
        .find(|k| sluice_core::partition::partition_of(k, partitions) == p)
        .unwrap()
}

/// Sends one request; Err carries "no responders", "timed out" or another reason.
pub async fn request(
    client: &async_nats::Client,
    subject: &str,
    body: &[u8],
) -> Result<async_nats::Message, String> {
    let req = async_nats::Request::new()
        .payload(body.to_vec().into())
        .timeout(Some(Duration::from_secs(2)));
    client
        .send_request(subject.to_string(), req)
        .await
        .map_err(|e| match e.kind() {
            RequestErrorKind::NoResponders => "no responders".to_string(),
            RequestErrorKind::TimedOut => "timed out".to_string(),
            _ => e.to_string(),
        })
}

/// The (code, word, message) of an error reply.
pub fn error_of(msg: &async_nats::Message) -> Option<(u16, String, String)> {
    let headers = msg.headers.as_ref()?;
    let code: u16 = headers
        .get("Nats-Service-Error-Code")?
        .as_str()
        .parse()
        .ok()?;
    let body: ErrorBody = if msg.payload.first() == Some(&b'{') {
        serde_json::from_slice(&msg.payload).ok()?
    } else {
        rmp_serde::from_slice(&msg.payload).ok()?
    };
    assert_eq!(
        headers.get("Nats-Service-Error").map(|v| v.as_str()),
        Some(body.message.as_str())
    );
    Some((code, body.error, body.message))
}

/// Asks `rl.allow.<key>`; Err when there was no decision.
pub async fn ask(client: &async_nats::Client, key: &str, body: &[u8]) -> Result<Decided, String> {
    let msg = request(client, &format!("rl.allow.{key}"), body).await?;
    if let Some(e) = error_of(&msg) {
        return Err(format!("error reply {e:?}"));
    }
    if msg.payload.first() == Some(&b'{') {
        serde_json::from_slice(&msg.payload).map_err(|e| e.to_string())
    } else {
        rmp_serde::from_slice(&msg.payload).map_err(|e| e.to_string())
    }
}

/// Polls `f` every 20 ms until it returns Some or `timeout` passes.
pub async fn eventually<T, F, Fut>(timeout: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One answered (or failed) ask of a load run.
#[derive(Debug, Clone)]
pub struct Answered {
    pub key: String,
    pub answered: bool,
    pub allowed: bool,
    /// Wall clock when the reply arrived (ms since the epoch).
    pub answered_at_ms: u64,
}

/// A bounded load: every ask once, `concurrency` in flight over the clients.
pub struct Load {
    progress: watch::Receiver<usize>,
    task: tokio::task::JoinHandle<Vec<Answered>>,
}

/// The most a load run may take before it stops asking.
pub const LOAD_DEADLINE: Duration = Duration::from_secs(90);

impl Load {
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

    pub async fn finish(self) -> Vec<Answered> {
        self.task.await.unwrap()
    }
}

/// Every key was allowed at most `max` times.
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
