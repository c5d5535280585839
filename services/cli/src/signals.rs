//! The shutdown signal every long-running command waits for: SIGTERM or
//! SIGINT; SIGHUP, on which the gateway reloads; and SIGPIPE for the
//! commands that print a report.

use tokio::signal::unix::{signal, SignalKind};

/// Completes on the first SIGTERM or SIGINT.
pub async fn terminate() {
    let mut term = signal(SignalKind::terminate()).expect("can install a SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("can install a SIGINT handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
        _ = int.recv() => tracing::info!("SIGINT: stopping"),
    }
}

/// Calls `then` on every SIGHUP (the gateway reloads its tokens and
/// certificate) from a task of its own, until aborted. The handler is in
/// place when this returns, so a SIGHUP from then on cannot end the
/// process (its default action). Call it inside the runtime.
pub fn on_hangup(then: impl Fn() + Send + 'static) -> tokio::task::JoinHandle<()> {
    let mut hup = signal(SignalKind::hangup()).expect("can install a SIGHUP handler");
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading");
            then();
        }
    })
}

/// Lets SIGPIPE end the process, as it ends `cat` or `grep`: Rust ignores
/// it, so a write to a closed pipe (`sluice usage alice | head -1`) fails,
/// and `println!` panics on that failure. Only for commands that print a
/// report and end: a server must see a closed socket as an error instead.
pub fn die_on_broken_pipe() {
    use nix::sys::signal::{signal, SigHandler, Signal};
    // SAFETY: restores the default disposition, before any thread starts;
    // no handler of ours runs.
    if let Err(e) = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) } {
        tracing::debug!("cannot restore SIGPIPE: {e}");
    }
}
