//! [`ChildGuard`]: a child process that cannot outlive the test that started it.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result};
use nix::errno::Errno;
use nix::sys::signal::{self, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag};
use nix::unistd::Pid;
use tempfile::TempDir;

/// How long [`ChildGuard::terminate`] waits after SIGTERM before it sends SIGKILL.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// A spawned child process, killed (SIGKILL) and reaped when dropped.
///
/// - [`kill`](Self::kill): SIGKILL, then wait for the exit.
/// - [`terminate`](Self::terminate): SIGTERM, wait up to [`DEFAULT_GRACE`],
///   then SIGKILL. This is how a clean shutdown is tested.
/// - [`wait_within`](Self::wait_within): wait for the process to exit on its
///   own (for example a program that must refuse a bad config).
///
/// Waiting for an exit is event-driven: a helper thread blocks in
/// `waitid(WEXITED | WNOWAIT)`, which reports the exit without reaping the
/// process; only this guard reaps it. So a signal sent by PID after a wait
/// timed out always reaches this child (or its zombie), never a process that
/// reused the PID.
///
/// With [`start`](Self::start) or [`spawn_logged`](Self::spawn_logged) the
/// child's stdout and stderr are appended to a log file; if the guard is
/// dropped while the test panics, the log's tail is printed (the test
/// harness shows it with the failure).
///
/// The child stays in the test's process group, so Ctrl-C on `cargo test`
/// reaches it too. A child that starts children of its own must stop them
/// itself; `kill` only kills the child.
#[derive(Debug)]
pub struct ChildGuard {
    name: String,
    pid: u32,
    child: Child,
    status: Option<ExitStatus>,
    log: Option<PathBuf>,
    _log_dir: Option<TempDir>,
}

impl ChildGuard {
    /// Starts `program` with `args` and extra environment `envs`; stdin is
    /// `/dev/null`, stdout and stderr go to `output.log` in a new temp dir
    /// (see [`log_path`](Self::log_path)).
    pub fn start<A, E, K, V>(program: impl AsRef<OsStr>, args: A, envs: E) -> Result<Self>
    where
        A: IntoIterator,
        A::Item: AsRef<OsStr>,
        E: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        let program = program.as_ref();
        let mut cmd = Command::new(program);
        cmd.args(args).envs(envs);
        let dir = tempfile::Builder::new()
            .prefix("sluice-child-")
            .tempdir()
            .context("creating a temp dir for the child's log")?;
        let name = Path::new(program)
            .file_name()
            .unwrap_or(program)
            .to_string_lossy()
            .into_owned();
        let mut guard = Self::spawn_logged(name, cmd, &dir.path().join("output.log"))?;
        guard._log_dir = Some(dir);
        Ok(guard)
    }

    /// Spawns `cmd` with stdin `/dev/null` and stdout and stderr appended to
    /// `log` (created if missing).
    pub fn spawn_logged(name: impl Into<String>, mut cmd: Command, log: &Path) -> Result<Self> {
        let out = open_log(log)?;
        let err = out.try_clone().context("duplicating the log file handle")?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let mut guard = Self::spawn(name, cmd)?;
        guard.log = Some(log.to_path_buf());
        Ok(guard)
    }

    /// Spawns `cmd` as configured by the caller (stdio included).
    pub fn spawn(name: impl Into<String>, mut cmd: Command) -> Result<Self> {
        let name = name.into();
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {name}: {cmd:?}"))?;
        Ok(Self {
            name,
            pid: child.id(),
            child,
            status: None,
            log: None,
            _log_dir: None,
        })
    }

    /// The name given at spawn, used in messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The child's PID (still reported after it exited).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The file that receives stdout and stderr, if the guard captured them.
    pub fn log_path(&self) -> Option<&Path> {
        self.log.as_deref()
    }

    /// The last `lines` lines of the log (empty when there is none).
    pub fn log_tail(&self, lines: usize) -> String {
        self.log
            .as_deref()
            .map(|p| tail_of_file(p, lines))
            .unwrap_or_default()
    }

    /// The exit status if the child has exited (reaps it), without blocking.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = self
                .child
                .try_wait()
                .with_context(|| format!("checking on {}", self.name))?;
        }
        Ok(self.status)
    }

    /// True while the child has not exited.
    pub fn is_running(&mut self) -> bool {
        matches!(self.try_wait(), Ok(None))
    }

    /// Sends `sig` to the child. Does nothing once the child has been reaped.
    pub fn signal(&self, sig: Signal) -> Result<()> {
        if self.status.is_some() {
            return Ok(());
        }
        // The child is not reaped yet (only this guard reaps it), so the PID
        // is still its own, even if it already exited.
        match signal::kill(self.nix_pid(), sig) {
            Ok(()) | Err(Errno::ESRCH) => Ok(()),
            Err(e) => Err(e).with_context(|| format!("sending {sig} to {}", self.name)),
        }
    }

    /// SIGKILL, then waits for the exit.
    pub fn kill(&mut self) -> Result<ExitStatus> {
        self.signal(Signal::SIGKILL)?;
        self.wait()
    }

    /// SIGTERM, then waits up to [`DEFAULT_GRACE`] before it sends SIGKILL.
    pub fn terminate(&mut self) -> Result<ExitStatus> {
        self.terminate_within(DEFAULT_GRACE)
    }

    /// SIGTERM, then waits up to `grace` before it sends SIGKILL.
    pub fn terminate_within(&mut self, grace: Duration) -> Result<ExitStatus> {
        self.signal(Signal::SIGTERM)?;
        if let Some(status) = self.wait_within(grace)? {
            return Ok(status);
        }
        eprintln!(
            "{} (pid {}) did not exit within {grace:?} of SIGTERM; sending SIGKILL",
            self.name, self.pid
        );
        self.kill()
    }

    /// Waits up to `timeout` for the child to exit on its own; `None` if it
    /// is still running then.
    pub fn wait_within(&mut self, timeout: Duration) -> Result<Option<ExitStatus>> {
        if let Some(status) = self.try_wait()? {
            return Ok(Some(status));
        }
        let pid = self.nix_pid();
        let (tx, rx) = mpsc::channel();
        // The thread ends when the child exits (it may outlive this call if
        // we time out; it then only reports into a closed channel).
        std::thread::Builder::new()
            .name(format!("wait-{}", self.pid))
            .spawn(move || {
                let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
                let result = loop {
                    match waitid(Id::Pid(pid), flags) {
                        Err(Errno::EINTR) => continue,
                        other => break other,
                    }
                };
                let _ = tx.send(result.map(|_| ()));
            })
            .context("spawning a wait thread")?;
        match rx.recv_timeout(timeout) {
            Ok(_) => self.wait().map(Some),
            Err(mpsc::RecvTimeoutError::Timeout) => Ok(None),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                anyhow::bail!("wait thread for {} died", self.name)
            }
        }
    }

    /// Blocks until the child exits and reaps it.
    fn wait(&mut self) -> Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let status = self
            .child
            .wait()
            .with_context(|| format!("waiting for {}", self.name))?;
        self.status = Some(status);
        Ok(status)
    }

    fn nix_pid(&self) -> Pid {
        Pid::from_raw(self.pid as i32)
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if std::thread::panicking() && self.log.is_some() {
            eprintln!(
                "---- last lines of {} (pid {}) log {} ----\n{}",
                self.name,
                self.pid,
                self.log.as_deref().unwrap_or(Path::new("")).display(),
                self.log_tail(40)
            );
        }
        if self.status.is_none() {
            let _ = signal::kill(self.nix_pid(), Signal::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

pub(crate) fn open_log(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening log file {}", path.display()))
}

/// The last `lines` lines of a text file, lossily decoded; empty if unreadable.
pub fn tail_of_file(path: &Path, lines: usize) -> String {
    let Ok(bytes) = std::fs::read(path) else {
        return String::new();
    };
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A finished command's stdout then stderr, as text (for assertion messages).
pub fn output_text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The one line a failed command printed on stderr; panics unless it
/// failed and printed exactly one (non-blank) line.
pub fn one_line_error(o: &std::process::Output) -> String {
    assert!(
        !o.status.success(),
        "expected a failure: {}",
        output_text(o)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    lines[0].to_string()
}
