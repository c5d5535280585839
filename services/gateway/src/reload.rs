//! What SIGHUP does to a running gateway (`sluice gateway` turns the
//! signal into a notification, [`crate::GatewayOptions::reload`]): the
//! token file (`--api-tokens`) and the TLS certificate and key
//! (`--tls-cert`, `--tls-key`) are read again and put in force whole. Open
//! connections are not touched: their requests go on, checked against
//! the tokens in force when each arrives. Anything that cannot be read or
//! is not valid is logged with the reason, and what was in force stays.

use crate::https::Certs;
use crate::tokens::Tokens;
use std::sync::Arc;
use tokio::sync::Notify;

/// Reloads on every notification of `reload`, until aborted.
pub(crate) async fn on_notice(
    reload: Arc<Notify>,
    tokens: Option<Arc<Tokens>>,
    certs: Option<Arc<Certs>>,
) {
    loop {
        reload.notified().await;
        once(tokens.as_deref(), certs.as_deref());
    }
}

/// One reload: the token file, then the certificate, each on its own (a
/// bad one does not stop the other).
pub(crate) fn once(tokens: Option<&Tokens>, certs: Option<&Certs>) {
    match tokens.filter(|t| t.has_file()) {
        Some(tokens) => match tokens.reload() {
            Ok(n) => tracing::info!("reloaded the API tokens: {n} in force"),
            Err(e) => tracing::error!("kept the API tokens in force: {e:#}"),
        },
        None => tracing::info!("no token file (--api-tokens) to reload"),
    }
    if let Some(certs) = certs {
        let files = certs.files();
        match certs.reload() {
            Ok(()) => tracing::info!(
                "reloaded the TLS certificate {} and key {}: new connections get it",
                files.cert.display(),
                files.key.display()
            ),
            Err(e) => tracing::error!("kept the TLS certificate in force: {e:#}"),
        }
    }
}
