//! [`TestCa`]: a certificate authority made at test time (rcgen), with a
//! server certificate for 127.0.0.1 and a client certificate, written as
//! PEM files into a temp dir, for the TLS tests of NATS and the gateway.
//! Nothing is checked in and nothing outlives the test.
//!
//! [`TestCa::https`] is an HTTPS client (hyper over tokio-rustls) that
//! trusts this CA only, for the gateway's `--tls-cert/--tls-key`: the
//! workspace's reqwest is built without TLS, whose rustls backend would
//! bring aws-lc-rs (a C build) into every test build.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use tempfile::TempDir;

/// A CA and two certificates it signed, as files: `ca.pem`, `server.pem` /
/// `server-key.pem` (SAN `127.0.0.1` and `localhost`), `client.pem` /
/// `client-key.pem`. Deleted on drop.
#[derive(Debug)]
pub struct TestCa {
    dir: TempDir,
}

impl TestCa {
    /// Makes a fresh CA and its certificates; each call gives another CA
    /// (two `TestCa`s do not trust each other's certificates).
    pub fn new() -> Result<TestCa> {
        let dir = tempfile::Builder::new()
            .prefix("sluice-tls-")
            .tempdir()
            .context("creating the TLS temp dir")?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "sluice test CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
        let write = |name: &str, text: String| -> Result<()> {
            let path = dir.path().join(name);
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
        };
        write("ca.pem", ca.pem())?;
        for (name, sans, usage) in [
            (
                "server",
                vec!["127.0.0.1".to_string(), "localhost".to_string()],
                ExtendedKeyUsagePurpose::ServerAuth,
            ),
            (
                "client",
                vec!["sluice-test-client".to_string()],
                ExtendedKeyUsagePurpose::ClientAuth,
            ),
        ] {
            let mut params = CertificateParams::new(sans)?;
            params
                .distinguished_name
                .push(DnType::CommonName, format!("sluice test {name}"));
            params.extended_key_usages = vec![usage];
            let key = KeyPair::generate()?;
            let cert = params.signed_by(&key, &ca)?;
            write(&format!("{name}.pem"), cert.pem())?;
            write(&format!("{name}-key.pem"), key.serialize_pem())?;
        }
        Ok(TestCa { dir })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The CA certificate (PEM).
    pub fn ca(&self) -> PathBuf {
        self.path("ca.pem")
    }

    /// The server certificate (PEM), for 127.0.0.1 and localhost.
    pub fn server_cert(&self) -> PathBuf {
        self.path("server.pem")
    }

    /// The server certificate's key (PEM).
    pub fn server_key(&self) -> PathBuf {
        self.path("server-key.pem")
    }

    /// A client certificate (PEM) for mutual TLS.
    pub fn client_cert(&self) -> PathBuf {
        self.path("client.pem")
    }

    /// The client certificate's key (PEM).
    pub fn client_key(&self) -> PathBuf {
        self.path("client-key.pem")
    }

    /// The dir holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A rustls client config that trusts this CA and nothing else.
    pub fn client_tls_config(&self) -> Result<Arc<rustls::ClientConfig>> {
        TestCa::client_tls_config_of(&[self])
    }

    /// A rustls client config that trusts the CAs of `cas` and nothing
    /// else (a certificate replaced by one of another CA).
    pub fn client_tls_config_of(cas: &[&TestCa]) -> Result<Arc<rustls::ClientConfig>> {
        use rustls::pki_types::{pem::PemObject, CertificateDer};
        let mut roots = rustls::RootCertStore::empty();
        for ca in cas {
            for cert in CertificateDer::pem_file_iter(ca.ca())? {
                roots.add(cert?)?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Arc::new(config))
    }

    /// One HTTP/1.1 request over TLS to `addr` (verified as the IP
    /// address, which the server certificate names), trusting this CA
    /// only. Fails when the TLS handshake or the request does.
    pub async fn https(
        &self,
        addr: SocketAddr,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<HttpsResponse> {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
        let tls = tokio_rustls::TlsConnector::from(self.client_tls_config()?)
            .connect(name, tcp)
            .await
            .context("the TLS handshake")?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", addr.to_string());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = sender
            .send_request(request.body(Empty::<Bytes>::new())?)
            .await?;
        let (parts, body) = response.into_parts();
        Ok(HttpsResponse {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: body.collect().await?.to_bytes(),
        })
    }

    /// A nats-server `tls { }` block with this server certificate; with
    /// `verify`, clients must present a certificate signed by this CA.
    pub fn nats_tls_block(&self, verify: bool) -> String {
        format!(
            "tls {{\n  cert_file: {:?}\n  key_file: {:?}\n  ca_file: {:?}\n  verify: {verify}\n  timeout: 5\n}}\n",
            self.server_cert(),
            self.server_key(),
            self.ca()
        )
    }
}

/// What [`TestCa::https`] got back.
#[derive(Debug)]
pub struct HttpsResponse {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
}

impl HttpsResponse {
    /// The body as JSON.
    pub fn json(&self) -> Result<serde_json::Value> {
        serde_json::from_slice(&self.body)
            .with_context(|| format!("a JSON body: {}", String::from_utf8_lossy(&self.body)))
    }
}
