//! `--tls-cert FILE --tls-key FILE` (SPEC §10): the gateway's one HTTP
//! listener speaks HTTPS instead of plain HTTP, for everything on it
//! (`/v1/*`, `/healthz`, `/metrics` and proxy mode), and the Envoy rate
//! limit service (`--grpc-listen`) uses TLS with the same certificate.
//! An API token sent over plain HTTP can be read by anyone on the path;
//! this is what lets a gateway be reached without a TLS-terminating proxy
//! in front of it.
//!
//! Why an accept loop of our own: `axum::serve` speaks plain TCP only. The
//! loop below is axum's "low-level rustls" pattern: tokio-rustls for the
//! handshake and hyper-util's connection builder (HTTP/1.1 and HTTP/2, by
//! ALPN) for the rest. It brings no new TLS stack or crypto library:
//! rustls with *ring*, as async-nats already uses it.
//!
//! - The files are read and checked when the gateway starts, before it
//!   connects to NATS ([`TlsFiles::load`]); each failure is one line naming
//!   the file and its flag. On SIGHUP they are read again
//!   ([`Certs::reload`]): new handshakes present the new certificate,
//!   connections already open keep theirs, and files that cannot be read or
//!   do not go together are refused with the reason, the old certificate
//!   kept. The gRPC listener takes its handshakes from the same resolver
//!   ([`incoming`]), so it presents the new certificate too.
//! - Each handshake runs in its connection's own task, bounded by
//!   [`HANDSHAKE_TIMEOUT`], so a client that connects and says nothing
//!   holds only that task, never the accept loop. A failed handshake
//!   (plain HTTP sent to the TLS port, a client that does not trust the
//!   certificate) closes that connection and is logged at debug level.
//! - Shutdown: stop accepting, then let the connections finish the
//!   requests in flight (hyper-util's graceful shutdown), as `axum::serve`
//!   does for plain HTTP.
//! - No client certificates: callers authenticate with `--api-token`.

use anyhow::{anyhow, bail, Context as _};
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tower::Service as _;

/// The longest a TLS handshake may take before its connection is closed.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The PEM files the gateway serves TLS with (`--tls-cert`, `--tls-key`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The server's certificate chain, leaf first (PEM).
    pub cert: PathBuf,
    /// The leaf certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// What [`TlsFiles::load`] read and checked: the HTTPS config and the
/// gRPC one (HTTP/2 only), both presenting what [`Certs`] holds, so a
/// reload replaces the certificate of both.
pub(crate) struct Tls {
    pub(crate) http: Arc<ServerConfig>,
    pub(crate) grpc: Arc<ServerConfig>,
    pub(crate) certs: Arc<Certs>,
}

impl TlsFiles {
    /// Reads both files and checks that they make a certificate and its
    /// key; every error names the file and its flag.
    pub(crate) fn load(&self) -> anyhow::Result<Tls> {
        let key = self.read_key()?;
        let certs = Arc::new(Certs {
            files: self.clone(),
            now: RwLock::new(Arc::new(key)),
        });
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut http = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("rustls has no TLS protocol version")?
            .with_no_client_auth()
            .with_cert_resolver(certs.clone());
        let mut grpc = http.clone();
        http.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        grpc.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Tls {
            http: Arc::new(http),
            grpc: Arc::new(grpc),
            certs,
        })
    }

    /// The certificate chain and its signing key, checked to go together.
    fn read_key(&self) -> anyhow::Result<CertifiedKey> {
        let cert_pem = read(&self.cert, "certificate", "--tls-cert")?;
        let key_pem = read(&self.key, "key", "--tls-key")?;
        let certs = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                anyhow!(
                    "the TLS certificate file {} (--tls-cert) is not valid PEM: {e}",
                    self.cert.display()
                )
            })?;
        if certs.is_empty() {
            bail!(
                "the TLS certificate file {} (--tls-cert) holds no certificate; \
                 give a PEM file with -----BEGIN CERTIFICATE-----",
                self.cert.display()
            );
        }
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| match e {
            pem::Error::NoItemsFound => anyhow!(
                "the TLS key file {} (--tls-key) holds no private key; give a PEM file with \
                 -----BEGIN PRIVATE KEY----- (or RSA / EC PRIVATE KEY)",
                self.key.display()
            ),
            e => anyhow!(
                "the TLS key file {} (--tls-key) is not a valid PEM private key: {e}",
                self.key.display()
            ),
        })?;
        let mismatch = |e: rustls::Error| {
            anyhow!(
                "the TLS certificate {} (--tls-cert) and key {} (--tls-key) do not go \
                 together: {e}; give the key of that certificate",
                self.cert.display(),
                self.key.display()
            )
        };
        let signing = rustls::crypto::ring::sign::any_supported_type(&key).map_err(mismatch)?;
        let certified = CertifiedKey::new(certs, signing);
        certified.keys_match().map_err(mismatch)?;
        Ok(certified)
    }
}

/// The certificate the HTTPS listener presents, replaced whole by
/// [`Certs::reload`]: each handshake takes the one in force, and
/// connections already open keep theirs.
#[derive(Debug)]
pub(crate) struct Certs {
    files: TlsFiles,
    now: RwLock<Arc<CertifiedKey>>,
}

impl Certs {
    /// Reads the files again; on any error the certificate in force stays.
    pub(crate) fn reload(&self) -> anyhow::Result<()> {
        let key = self.files.read_key()?;
        *self.now.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(key);
        Ok(())
    }

    pub(crate) fn files(&self) -> &TlsFiles {
        &self.files
    }
}

impl ResolvesServerCert for Certs {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.now.read().unwrap_or_else(|e| e.into_inner()).clone())
    }
}

fn read(path: &Path, what: &str, flag: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| {
        format!(
            "cannot read the TLS {what} file {} ({flag})",
            path.display()
        )
    })
}

/// Serves `router` over TLS on `listener` until `stop` turns true (or its
/// sender is gone); then stops accepting and waits for the connections to
/// finish their requests.
pub(crate) async fn serve(
    listener: TcpListener,
    config: Arc<ServerConfig>,
    router: Router,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let acceptor = TlsAcceptor::from(config);
    let mut make_service = router.into_make_service_with_connect_info::<SocketAddr>();
    let graceful = GracefulShutdown::new();
    while let Some((tcp, remote)) = accept_next(&listener, &mut stop, "an HTTPS").await {
        let service = match make_service.call(remote).await {
            Ok(service) => TowerToHyperService::new(service),
            Err(never) => match never {},
        };
        let acceptor = acceptor.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let Some(tls) = handshake(&acceptor, tcp, remote).await else {
                return;
            };
            let builder = auto::Builder::new(TokioExecutor::new());
            let conn = builder
                .serve_connection_with_upgrades(TokioIo::new(tls), service)
                .into_owned();
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!("HTTPS connection from {remote}: {e}");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// The TLS connections of `listener` (`--grpc-listen` with TLS), for a
/// server that takes its connections from a stream (tonic's
/// `serve_with_incoming_shutdown`): each handshake in a task of its own,
/// as in [`serve`], so that a silent client holds up no other. Accepting
/// stops when `stop` turns true.
pub(crate) fn incoming(
    listener: TcpListener,
    config: Arc<ServerConfig>,
    mut stop: watch::Receiver<bool>,
) -> impl futures::Stream<Item = std::io::Result<TlsStream<TcpStream>>> {
    let (done, handshaken) = tokio::sync::mpsc::channel(64);
    let acceptor = TlsAcceptor::from(config);
    tokio::spawn(async move {
        loop {
            let next = tokio::select! {
                _ = done.closed() => return,
                next = accept_next(&listener, &mut stop, "a gRPC") => next,
            };
            let Some((tcp, remote)) = next else {
                return;
            };
            let (acceptor, done) = (acceptor.clone(), done.clone());
            tokio::spawn(async move {
                if let Some(tls) = handshake(&acceptor, tcp, remote).await {
                    let _ = done.send(Ok(tls)).await;
                }
            });
        }
    });
    futures::stream::unfold(handshaken, |mut handshaken| async move {
        let next = handshaken.recv().await?;
        Some((next, handshaken))
    })
}

/// The next connection of `listener` (`what` kind, for the log), or none
/// once `stop` turns true. Connections gone before they were accepted are
/// skipped; other errors (out of file descriptors, most likely) wait a
/// little instead of spinning, as axum::serve does.
async fn accept_next(
    listener: &TcpListener,
    stop: &mut watch::Receiver<bool>,
    what: &str,
) -> Option<(TcpStream, SocketAddr)> {
    loop {
        let accepted = tokio::select! {
            biased;
            _ = stop.wait_for(|stop| *stop) => return None,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok(accepted) => return Some(accepted),
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                tracing::warn!("accepting {what} connection failed: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// `tcp`'s TLS handshake, bounded by [`HANDSHAKE_TIMEOUT`]; none (logged at
/// debug level) when it fails or takes too long.
async fn handshake(
    acceptor: &TlsAcceptor,
    tcp: TcpStream,
    remote: SocketAddr,
) -> Option<TlsStream<TcpStream>> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => Some(tls),
        Ok(Err(e)) => {
            tracing::debug!("TLS handshake with {remote} failed: {e}");
            None
        }
        Err(_) => {
            tracing::debug!("TLS handshake with {remote} took over {HANDSHAKE_TIMEOUT:?}");
            None
        }
    }
}

/// Errors of one connection that was gone before it was accepted.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}
