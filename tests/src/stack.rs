//! [`Stack`]: a nats-server with sluice's mapping and a fleet of `sluice
//! worker` processes, for the tests that run the `sluice` binary.
//!
//! Only the tests of the package that builds `sluice` know where it is
//! (`env!("CARGO_BIN_EXE_sluice")` in `sluice-cli`'s tests), so its path is
//! passed in. Workers are [`ChildGuard`]s with their logs in the stack's
//! temp dir; a stack that fails to settle prints their tails.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use async_nats::jetstream;
use sluice_core::config::Config;
use sluice_core::nats_config::{NatsServerConfig, Role, RoleUser};
use sluice_core::storage::{partition_key, LEASE_BUCKET, SNAPSHOT_BUCKET};
use sluice_core::subject::Verb;
use sluice_worker::snapshot::read_manifest;
use tokio::sync::{Mutex, MutexGuard};

use crate::ask::{a_key_per_partition, ask, key_in_partition, request, AskError, PEEK};
use crate::eventually::{eventually, TICK};
use crate::nats::NatsServer;
use crate::process::ChildGuard;

/// How long a stopped worker may take to hand over and exit.
const WORKER_STOP_GRACE: Duration = Duration::from_secs(20);
/// How long workers may take to share out the partitions and answer.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// One test at a time in this test binary: hold the guard for the whole
/// test. For tests that measure recovery times, which a second test's load
/// on the same cores would distort (each test binary has its own lock).
pub async fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::const_new(());
    LOCK.lock().await
}

/// The sluice config most integration tests run, as TOML: 16 partitions,
/// 2 s leases, a snapshot every 500 ms, and two sliding-log policies,
/// `default` (5 per 10 s) and `tenper` (10 per 5 min).
#[derive(Clone, Debug)]
pub struct TestConfig {
    journal: bool,
    snapshot_interval: &'static str,
}

impl Default for TestConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl TestConfig {
    pub fn new() -> Self {
        TestConfig {
            journal: false,
            snapshot_interval: "500ms",
        }
    }

    /// `durability = "journal"`: every counted ask is stored before its answer.
    pub fn journal(mut self) -> Self {
        self.journal = true;
        self
    }

    /// Another `snapshot_interval` (a TOML duration such as `"60s"`).
    pub fn snapshot_interval(mut self, interval: &'static str) -> Self {
        self.snapshot_interval = interval;
        self
    }

    /// The config file's text.
    pub fn toml(&self) -> String {
        let durability = if self.journal {
            "durability = \"journal\"\n"
        } else {
            ""
        };
        format!(
            r#"
partitions = 16
lease_ttl = "2s"
snapshot_interval = "{}"
{durability}
[policies.default]
algorithm = "sliding_log"
limits = [ {{ max = 5, per = "10s" }} ]

[policies.tenper]
algorithm = "sliding_log"
limits = [ {{ max = 10, per = "5m" }} ]
"#,
            self.snapshot_interval
        )
    }

    /// The config, parsed.
    pub fn config(&self) -> Config {
        Config::from_toml(&self.toml(), "test.toml").expect("the test config is valid")
    }
}

/// `sluice worker` against `nats_url` with the config file `config`, as
/// `worker_id` if given; spawn it with [`ChildGuard::spawn_logged`].
pub fn worker_command(
    sluice: &Path,
    nats_url: &str,
    config: &Path,
    worker_id: Option<&str>,
) -> Command {
    let mut cmd = Command::new(sluice);
    cmd.args(["worker", "--nats", nats_url, "--config"])
        .arg(config);
    if let Some(id) = worker_id {
        cmd.args(["--worker-id", id]);
    }
    cmd
}

/// A nats-server with sluice's mapping for the config's partition count,
/// and `sluice worker` processes (ids `t0`, `t1`, ...) sharing one config
/// file. Everything is killed on drop.
///
/// The methods panic on failure (with the workers' logs where they help):
/// a stack is for tests.
#[derive(Debug)]
pub struct Stack {
    pub nats: NatsServer,
    /// The config's partition count.
    pub partitions: u32,
    sluice: PathBuf,
    dir: tempfile::TempDir,
    config_path: PathBuf,
    client: async_nats::Client,
    workers: Vec<(String, ChildGuard)>,
    started: usize,
    /// Environment of every worker (the `worker` role's credentials in a
    /// secured stack).
    worker_env: Vec<(String, String)>,
}

/// The password of `role` in a [`Stack::start_secured`] stack.
pub fn test_password(role: Role) -> String {
    format!("test-{role}-password")
}

/// sluice's server config for `partitions` with the three role users of
/// SPEC §10 (`sluice nats-config --auth`), passwords [`test_password`].
pub fn secured_nats_config(partitions: u32) -> String {
    let mut config = NatsServerConfig::new(partitions);
    config.users = RoleUser::every(|role| test_password(role).into());
    config.render()
}

impl Stack {
    /// Starts nats-server and `workers` workers of the binary `sluice` with
    /// `config_toml`, and waits until they have settled (see
    /// [`start_workers`](Self::start_workers)); with none, the caller
    /// starts its own (e.g. [`start_workers_with`](Self::start_workers_with)).
    pub async fn start(sluice: impl Into<PathBuf>, config_toml: &str, workers: usize) -> Stack {
        Stack::start_with_nats(sluice, config_toml, workers, |_| {}).await
    }

    /// [`Stack::start`] on a server whose config `adjust` changes (from
    /// sluice's, [`NatsServerConfig::new`] with the config's partitions).
    pub async fn start_with_nats(
        sluice: impl Into<PathBuf>,
        config_toml: &str,
        workers: usize,
        adjust: impl FnOnce(&mut NatsServerConfig),
    ) -> Stack {
        let config = Config::from_toml(config_toml, "test.toml").expect("the test config is valid");
        let mut nats_config = NatsServerConfig::new(config.partitions);
        adjust(&mut nats_config);
        let nats = NatsServer::start(&nats_config.render()).expect("nats-server starts");
        let client = nats.connect().await.expect("the stack connects");
        Stack::start_on(sluice, config_toml, workers, nats, client, Vec::new()).await
    }

    /// [`Stack::start`] on a server that enforces the roles of SPEC §10
    /// ([`secured_nats_config`]): workers run as `worker`, the stack's own
    /// connection (owners, snapshots, settling) is `admin`.
    pub async fn start_secured(
        sluice: impl Into<PathBuf>,
        config_toml: &str,
        workers: usize,
    ) -> Stack {
        Stack::start_secured_with_nats(sluice, config_toml, workers, |_| {}).await
    }

    /// [`Stack::start_secured`] on a server whose config `adjust` changes
    /// (after the role users are in).
    pub async fn start_secured_with_nats(
        sluice: impl Into<PathBuf>,
        config_toml: &str,
        workers: usize,
        adjust: impl FnOnce(&mut NatsServerConfig),
    ) -> Stack {
        let config = Config::from_toml(config_toml, "test.toml").expect("the test config is valid");
        let mut nats_config = NatsServerConfig::new(config.partitions);
        nats_config.users = RoleUser::every(|role| test_password(role).into());
        adjust(&mut nats_config);
        let nats = NatsServer::start(&nats_config.render()).expect("nats-server starts");
        let client = nats
            .connect_as(Role::Admin.name(), &test_password(Role::Admin))
            .await
            .expect("the stack connects as admin");
        let env = vec![
            (
                "SLUICE_NATS_USER".to_string(),
                Role::Worker.name().to_string(),
            ),
            (
                "SLUICE_NATS_PASSWORD".to_string(),
                test_password(Role::Worker),
            ),
        ];
        Stack::start_on(sluice, config_toml, workers, nats, client, env).await
    }

    async fn start_on(
        sluice: impl Into<PathBuf>,
        config_toml: &str,
        workers: usize,
        nats: NatsServer,
        client: async_nats::Client,
        worker_env: Vec<(String, String)>,
    ) -> Stack {
        let config = Config::from_toml(config_toml, "test.toml").expect("the test config is valid");
        let dir = tempfile::tempdir().expect("a temp dir for the stack");
        let config_path = dir.path().join("sluice.toml");
        std::fs::write(&config_path, config_toml).expect("the config file is written");
        let mut stack = Stack {
            nats,
            partitions: config.partitions,
            sluice: sluice.into(),
            dir,
            config_path,
            client,
            workers: Vec::new(),
            started: 0,
            worker_env,
        };
        // None: the caller starts its own ([`Stack::start_workers_with`]).
        if workers > 0 {
            stack.start_workers(workers).await;
        }
        stack
    }

    /// Runs `sluice ARGS --nats <the stack's server>` to its end.
    pub fn command(&self, args: &[&str]) -> std::process::Output {
        Command::new(&self.sluice)
            .args(args)
            .args(["--nats", &self.nats.url()])
            .output()
            .expect("sluice runs")
    }

    /// The stdout of `sluice ARGS` against the stack, which must succeed.
    pub fn run(&self, args: &[&str]) -> String {
        let out = self.command(args);
        assert!(
            out.status.success(),
            "sluice {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A key in a partition of each worker that owns one.
    pub async fn a_key_per_worker(&self) -> Vec<String> {
        let mut keys = Vec::new();
        let mut seen = Vec::new();
        for (p, owner) in self.owners().await {
            if !seen.contains(&owner) {
                seen.push(owner);
                keys.push(crate::ask::key_in_partition(p, self.partitions));
            }
        }
        keys
    }

    /// `sluice policy set NAME --algorithm ALGORITHM --limit LIMIT`.
    pub fn set_policy(&self, name: &str, algorithm: &str, limit: &str) {
        self.run(&[
            "policy",
            "set",
            name,
            "--algorithm",
            algorithm,
            "--limit",
            limit,
        ]);
    }

    /// The config file every worker runs with.
    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// Starts `n` more workers and waits until the partitions are spread
    /// evenly over all live workers and every partition answers.
    pub async fn start_workers(&mut self, n: usize) {
        self.start_workers_with(n, &[]).await;
    }

    /// [`start_workers`](Self::start_workers), with `args` added to each
    /// worker's command line (e.g. `--metrics-listen 127.0.0.1:PORT`).
    pub async fn start_workers_with(&mut self, n: usize, args: &[&str]) {
        for _ in 0..n {
            self.spawn_worker_with(args);
        }
        self.wait_settled().await;
    }

    /// Starts one more worker without waiting for anything; its id.
    pub fn spawn_worker(&mut self) -> String {
        self.spawn_worker_with(&[])
    }

    /// [`spawn_worker`](Self::spawn_worker), with `args` added to its
    /// command line.
    pub fn spawn_worker_with(&mut self, args: &[&str]) -> String {
        let id = format!("t{}", self.started);
        self.started += 1;
        let log = self.dir.path().join(format!("{id}.log"));
        let mut cmd = worker_command(&self.sluice, &self.nats.url(), &self.config_path, Some(&id));
        cmd.args(args).env("SLUICE_LOG", "info");
        cmd.envs(self.worker_env.iter().map(|(k, v)| (k, v)));
        let process =
            ChildGuard::spawn_logged(id.clone(), cmd, &log).expect("sluice worker starts");
        self.workers.push((id.clone(), process));
        id
    }

    /// `n` new connections to the stack's server.
    pub async fn clients(&self, n: usize) -> Vec<async_nats::Client> {
        let mut clients = Vec::new();
        for _ in 0..n {
            clients.push(self.nats.connect().await.expect("a client connects"));
        }
        clients
    }

    /// The log of the live worker `id` so far.
    pub fn worker_log(&self, id: &str) -> String {
        let (_, process) = self
            .workers
            .iter()
            .find(|(w, _)| w == id)
            .unwrap_or_else(|| panic!("no live worker {id}"));
        process.log_tail(usize::MAX)
    }

    /// Ids of the live workers, in the order they were started.
    pub fn worker_ids(&self) -> Vec<String> {
        self.workers.iter().map(|(id, _)| id.clone()).collect()
    }

    /// Partition → owning worker id, from the lease bucket.
    pub async fn owners(&self) -> BTreeMap<u32, String> {
        self.read_owners()
            .await
            .expect("the lease bucket is readable")
    }

    async fn read_owners(&self) -> Result<BTreeMap<u32, String>> {
        let mut owners = BTreeMap::new();
        let js = jetstream::new(self.client.clone());
        let Ok(kv) = js.get_key_value(LEASE_BUCKET).await else {
            return Ok(owners); // no worker has created it yet
        };
        for p in 0..self.partitions {
            if let Some(v) = kv.get(partition_key(p)).await? {
                owners.insert(p, sluice_core::format::holder_of(&v)?);
            }
        }
        Ok(owners)
    }

    /// When the snapshot that each of `partitions`' current owner restored
    /// was taken (ms since the epoch); partitions with no snapshot are left
    /// out.
    pub async fn restored_snapshot_times(&self, partitions: &[u32]) -> HashMap<u32, u64> {
        let kv = jetstream::new(self.client.clone())
            .get_key_value(SNAPSHOT_BUCKET)
            .await
            .expect("the snapshot bucket exists");
        let mut times = HashMap::new();
        for &p in partitions {
            let (manifest, _) = read_manifest(&kv, p)
                .await
                .expect("the manifest is readable");
            if let Some(m) = manifest {
                times.insert(p, m.taken_at_ms);
            }
        }
        times
    }

    /// SIGKILL to one worker: a crash.
    pub fn kill_worker(&mut self, id: &str) {
        let mut process = self.take_worker(id);
        process.kill().expect("SIGKILL reaches the worker");
    }

    /// Sends `signal` to one worker (e.g. SIGSTOP / SIGCONT to freeze it).
    pub fn signal_worker(&self, id: &str, signal: crate::Signal) {
        self.worker(id)
            .signal(signal)
            .expect("the signal reaches the worker");
    }

    /// The process id of one worker.
    pub fn worker_pid(&self, id: &str) -> u32 {
        self.worker(id).pid()
    }

    fn worker(&self, id: &str) -> &ChildGuard {
        let (_, process) = self
            .workers
            .iter()
            .find(|(w, _)| w == id)
            .expect("known worker");
        process
    }

    /// SIGTERM to one worker; it must exit 0 after handing over.
    pub fn stop_worker(&mut self, id: &str) {
        let process = self.take_worker(id);
        stop_cleanly(id, process);
    }

    /// SIGTERM to every worker; each must exit 0 after handing over.
    pub fn stop_workers(&mut self) {
        for (id, process) in self.workers.drain(..) {
            stop_cleanly(&id, process);
        }
    }

    fn take_worker(&mut self, id: &str) -> ChildGuard {
        let i = self
            .workers
            .iter()
            .position(|(w, _)| w == id)
            .expect("known worker");
        self.workers.remove(i).1
    }

    /// True when no partition has a responder: a peek at a key of each
    /// finds no one.
    pub async fn no_partition_answers(&self, client: &async_nats::Client) -> bool {
        for (p, key) in a_key_per_partition(self.partitions).iter().enumerate() {
            let subject = Verb::Allow.client_subject(key);
            match request(client, &subject, PEEK).await {
                Err(AskError::NoResponders) => {}
                other => {
                    eprintln!("partition {p} still answers: {other:?}");
                    return false;
                }
            }
        }
        true
    }

    /// Waits until every partition is owned, each live worker owns its
    /// share (partitions / workers, rounded down or up), and every
    /// partition answers a peek.
    async fn wait_settled(&self) {
        let ids = self.worker_ids();
        let partitions = self.partitions;
        let floor = partitions as usize / ids.len().max(1);
        let settled = eventually(SETTLE_TIMEOUT, TICK, || async {
            let owners = self.read_owners().await?;
            ensure!(
                owners.len() == partitions as usize,
                "{} of {partitions} partitions owned",
                owners.len()
            );
            let mut shares: HashMap<&str, usize> = HashMap::new();
            for o in owners.values() {
                *shares.entry(o.as_str()).or_default() += 1;
            }
            let balanced = ids.iter().all(|id| {
                let n = shares.get(id.as_str()).copied().unwrap_or(0);
                n == floor || n == floor + 1
            }) && shares.len() == ids.len();
            ensure!(balanced, "not yet balanced: {shares:?}");
            for p in 0..partitions {
                ask(&self.client, &key_in_partition(p, partitions), PEEK)
                    .await
                    .with_context(|| format!("partition {p} does not answer"))?;
            }
            Ok(())
        })
        .await;
        if let Err(e) = settled {
            for (id, process) in &self.workers {
                eprintln!("--- worker {id} log (tail) ---\n{}", process.log_tail(40));
            }
            panic!(
                "the workers did not settle: {e:#}; owners {:?}",
                self.read_owners().await
            );
        }
    }
}

/// SIGTERM; the worker must exit 0 within [`WORKER_STOP_GRACE`].
fn stop_cleanly(id: &str, mut process: ChildGuard) {
    let status = process.terminate_within(WORKER_STOP_GRACE);
    assert!(
        status.as_ref().is_ok_and(|s| s.success()),
        "worker {id} did not exit cleanly: {status:?}\n{}",
        process.log_tail(30)
    );
}
