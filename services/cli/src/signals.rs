//! The shutdown signal every long-running command waits for: SIGTERM or
//! SIGINT; and SIGPIPE for the commands that print a report.

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
