//! The HTTP gateway's protections (SPEC §10): an API token on `/v1`
//! with health and metrics left open, against a nats-server that enforces
//! sluice's roles; HTTPS and gRPC over TLS from `--tls-cert/--tls-key`, with
//! a CA made by the test; and bad TLS files refused at start with one line.
//! The gateway runs in the test process (`common::gateway`) but for the
//! last test, which runs `sluice gateway`.

use crate::common;

use axum::http::StatusCode;
use common::gateway::{call, config, header, http, stack, Gateway};
use common::SLUICE;
use sluice_core::config::Fallback;
use sluice_core::nats_config::Role;
use sluice_gateway::GatewayOptions;
use sluice_tests::{
    ask, eventually, one_line_error, serial, test_password, Stack, TestCa, TestConfig, PEEK, TICK,
};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;

/// SPEC §10: with `--api-token`, `/v1/*` needs the bearer token (401
/// and nothing counted otherwise); `/healthz` and `/metrics` stay open. The
/// gateway runs as the `client` role of `sluice nats-config --auth`, which
/// is all it needs (batching, the partition probe, following policies).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_api_token_v1_needs_the_bearer_token_and_health_and_metrics_stay_open() {
    let _serial = serial().await;
    let stack = Stack::start_secured(SLUICE, &TestConfig::new().toml(), 1).await;
    let mut opts = GatewayOptions::new(stack.nats.url(), config(Fallback::Closed));
    opts.nats_auth = sluice_client::NatsAuth {
        user: Some("client".into()),
        password: Some(test_password(Role::Client)),
        ..Default::default()
    };
    opts.api_token = Some(sluice_gateway::ApiToken::new("s3cret"));
    let gw = Gateway::start_with(opts).await;
    let http = http();
    let url = gw.url("/v1/allow/tok-key");

    let (status, headers, body) = call(http.get(&url)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["error"], "unauthorized");
    assert!(header(&headers, "www-authenticate").is_some());
    let (status, _, _) = call(http.get(&url).bearer_auth("wrong")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, _) = call(http.post(&url).header("authorization", "s3cret")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let admin = stack
        .nats
        .connect_as("admin", &test_password(Role::Admin))
        .await
        .unwrap();
    assert_eq!(
        ask(&admin, "tok-key", PEEK).await.unwrap().remaining,
        5,
        "refused requests count nothing"
    );
    let (status, _, body) = call(http.get(&url).bearer_auth("s3cret")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["remaining"], 4);
    assert_eq!(ask(&admin, "tok-key", PEEK).await.unwrap().remaining, 4);

    for open in ["/healthz", "/metrics"] {
        let resp = http.get(gw.url(open)).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{open}");
    }
    gw.stop().await;
}

/// SPEC §10: with `--tls-cert/--tls-key` the one HTTP listener serves
/// HTTPS (decisions with the API token, `/healthz` and `/metrics`), the
/// Envoy rate limit service serves gRPC over TLS with the same
/// certificate, and plain HTTP or a client that does not trust the
/// certificate gets no answer. The CA is made by the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tls_files_the_gateway_answers_https_and_grpc_over_tls_and_plain_http_gets_nothing() {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
        rate_limit_descriptor::Entry, RateLimitDescriptor,
    };
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
    use tonic::transport::{Certificate, Channel, ClientTlsConfig};

    let _serial = serial().await;
    let stack = stack().await;
    let ca = TestCa::new().unwrap();
    let grpc_port = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut opts = GatewayOptions::new(stack.nats.url(), config(Fallback::Closed));
    opts.api_token = Some(sluice_gateway::ApiToken::new("s3cret"));
    opts.grpc_listen = Some(SocketAddr::from(([127, 0, 0, 1], grpc_port)));
    opts.tls = Some(sluice_gateway::TlsFiles {
        cert: ca.server_cert(),
        key: ca.server_key(),
    });
    let gw = Gateway::start_with(opts).await;

    // Connections wait in the listener's backlog until the gateway has
    // read its files and connected to NATS; its first answer means the
    // gRPC port is bound too.
    let healthz = eventually(Duration::from_secs(10), TICK, || async {
        let r = ca.https(gw.addr, "GET", "/healthz", &[]).await?;
        anyhow::ensure!(r.status == 200, "healthz {}", r.status);
        Ok(r)
    })
    .await
    .expect("/healthz answers over HTTPS");
    assert_eq!(healthz.json().unwrap()["status"], "ok");
    let metrics = ca.https(gw.addr, "GET", "/metrics", &[]).await.unwrap();
    assert_eq!(metrics.status, 200);

    let path = "/v1/allow/tls-key";
    let refused = ca.https(gw.addr, "GET", path, &[]).await.unwrap();
    assert_eq!(refused.status, 401, "the token is still required");
    let auth = [("authorization", "Bearer s3cret")];
    let decided = ca.https(gw.addr, "GET", path, &auth).await.unwrap();
    assert_eq!(decided.status, 200);
    assert_eq!(decided.json().unwrap()["remaining"], 4);

    // Plain HTTP to the TLS port: the handshake fails, no answer.
    let plain = http().get(gw.url(path)).bearer_auth("s3cret").send().await;
    assert!(plain.is_err(), "plain HTTP got an answer: {plain:?}");
    // A client trusting another CA refuses the certificate.
    let other = TestCa::new().unwrap();
    let err = other
        .https(gw.addr, "GET", "/healthz", &[])
        .await
        .unwrap_err();
    assert!(format!("{err:#}").contains("certificate"), "{err:#}");

    // gRPC over TLS with the same certificate (no [envoy] table: every
    // descriptor counts under the default policy).
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(ca.ca()).unwrap()))
        .domain_name("localhost");
    let channel = Channel::from_shared(format!("https://127.0.0.1:{grpc_port}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .expect("gRPC over TLS connects");
    let mut request = tonic::Request::new(RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: "tls-grpc".into(),
            }],
            ..Default::default()
        }],
        hits_addend: 1,
    });
    request
        .metadata_mut()
        .insert("authorization", "Bearer s3cret".parse().unwrap());
    let reply = RateLimitServiceClient::new(channel)
        .should_rate_limit(request)
        .await
        .expect("ShouldRateLimit over TLS")
        .into_inner();
    assert_eq!(reply.overall_code, Code::Ok as i32);
    // Plain-text gRPC to the TLS port fails.
    let plain = Channel::from_shared(format!("http://127.0.0.1:{grpc_port}"))
        .unwrap()
        .connect()
        .await
        .map(RateLimitServiceClient::new);
    if let Ok(mut client) = plain {
        let r = client.should_rate_limit(RateLimitRequest::default()).await;
        assert!(r.is_err(), "plain gRPC got an answer: {r:?}");
    }
    gw.stop().await;
}

/// Bad TLS files end `sluice gateway` at start with one line that names
/// the file and its flag (before it connects to anything: no NATS here).
#[test]
fn bad_tls_files_end_the_gateway_with_one_line_naming_the_file_and_flag() {
    let ca = TestCa::new().unwrap();
    let missing = ca.dir().join("missing.pem");
    let gateway = |cert: &std::path::Path, key: &std::path::Path| {
        std::process::Command::new(SLUICE)
            .args([
                "gateway",
                "--listen",
                "127.0.0.1:0",
                "--nats",
                "nats://127.0.0.1:1",
            ])
            .arg("--tls-cert")
            .arg(cert)
            .arg("--tls-key")
            .arg(key)
            .env("SLUICE_LOG", "error")
            .output()
            .unwrap()
    };
    let cases = [
        (
            missing.clone(),
            ca.server_key(),
            "cannot read the TLS certificate file",
            "--tls-cert",
        ),
        (
            ca.server_cert(),
            missing.clone(),
            "cannot read the TLS key file",
            "--tls-key",
        ),
        (
            ca.server_key(),
            ca.server_key(),
            "holds no certificate",
            "--tls-cert",
        ),
        (
            ca.server_cert(),
            ca.server_cert(),
            "holds no private key",
            "--tls-key",
        ),
        (
            ca.server_cert(),
            ca.client_key(),
            "do not go together",
            "--tls-key",
        ),
    ];
    for (cert, key, what, flag) in cases {
        let line = one_line_error(&gateway(&cert, &key));
        assert!(line.contains(what) && line.contains(flag), "{line}");
        let named = if flag == "--tls-cert" { &cert } else { &key };
        assert!(line.contains(&named.display().to_string()), "{line}");
    }
    let only_cert = std::process::Command::new(SLUICE)
        .args(["gateway", "--tls-cert"])
        .arg(ca.server_cert())
        .output()
        .unwrap();
    assert!(one_line_error(&only_cert).contains("--tls-cert needs --tls-key"));
}

/// The leaf certificate `addr` presents in a TLS handshake, trusting the
/// CAs of `cas` only.
async fn presented(addr: SocketAddr, cas: &[&TestCa]) -> anyhow::Result<Vec<u8>> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let tls = tokio_rustls::TlsConnector::from(TestCa::client_tls_config_of(cas)?)
        .connect(name, tcp)
        .await?;
    let leaf = tls.get_ref().1.peer_certificates().and_then(|c| c.first());
    Ok(leaf.expect("a server presents a certificate").to_vec())
}

/// The DER of the first certificate in the PEM file `path`.
fn leaf_of(path: &std::path::Path) -> Vec<u8> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    CertificateDer::pem_file_iter(path)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .to_vec()
}

/// A reload (SIGHUP in `sluice gateway`) puts a new certificate in force on
/// both TLS listeners, HTTPS and gRPC, for new handshakes; files that do
/// not make a certificate are refused and the one in force stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_presents_the_new_certificate_on_https_and_grpc() {
    let _serial = serial().await;
    let stack = stack().await;
    let (old, new) = (TestCa::new().unwrap(), TestCa::new().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::copy(old.server_cert(), &cert).unwrap();
    std::fs::copy(old.server_key(), &key).unwrap();
    let grpc = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let reload = std::sync::Arc::new(tokio::sync::Notify::new());
    let mut opts = GatewayOptions::new(stack.nats.url(), config(Fallback::Closed));
    opts.grpc_listen = Some(grpc);
    opts.tls = Some(sluice_gateway::TlsFiles {
        cert: cert.clone(),
        key: key.clone(),
    });
    opts.reload = Some(reload.clone());
    let gw = Gateway::start_with(opts).await;
    let both = [&old, &new];
    let (old_leaf, new_leaf) = (leaf_of(&old.server_cert()), leaf_of(&new.server_cert()));
    for addr in [gw.addr, grpc] {
        let leaf = eventually(Duration::from_secs(10), TICK, || presented(addr, &both))
            .await
            .expect("a TLS handshake");
        assert!(
            leaf == old_leaf,
            "{addr} presents the certificate it started with"
        );
    }

    // A key that is not the certificate's: refused, the old one stays.
    std::fs::copy(new.server_cert(), &cert).unwrap();
    reload.notify_one();
    for addr in [gw.addr, grpc] {
        assert!(presented(addr, &both).await.unwrap() == old_leaf, "{addr}");
    }

    std::fs::copy(new.server_key(), &key).unwrap();
    reload.notify_one();
    for addr in [gw.addr, grpc] {
        eventually(Duration::from_secs(10), TICK, || async {
            let leaf = presented(addr, &both).await?;
            anyhow::ensure!(
                leaf == new_leaf,
                "{addr} still presents the old certificate"
            );
            Ok(())
        })
        .await
        .expect("the new certificate is presented after the reload");
    }
}
