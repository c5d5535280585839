//! The shutdown signal every long-running command waits for: SIGTERM or SIGINT.

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
