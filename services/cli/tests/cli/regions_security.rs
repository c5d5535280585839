//! The link between regions secured (SPEC §10 and §12):
//! with the roles, the link authenticates with its own nkey and carries
//! nothing but link subjects; with certificates it runs over mutual TLS,
//! so nothing crosses in the clear and a region whose certificate another
//! CA signed is refused.

use crate::common;

use anyhow::bail;
use sluice_core::nats_config::{CertAndKey, LinkTls, Role};
use sluice_core::region::Hello;
use sluice_core::subject::{link_hello, link_inbox_prefix};
use sluice_tests::{
    ask, eventually, link_key, serial, test_password, NatsServer, TestCa, TestConfig, TwoRegions,
    EAST, TICK, WEST,
};
use std::time::Duration;

use common::SLUICE;

/// A connection to `nats` as `role`, with replies under `inbox` if given.
async fn connect_as_role(nats: &NatsServer, role: Role, inbox: Option<&str>) -> async_nats::Client {
    let mut opts = async_nats::ConnectOptions::with_user_and_password(
        role.name().to_string(),
        test_password(role),
    );
    if let Some(prefix) = inbox {
        opts = opts.custom_inbox_prefix(prefix);
    }
    opts.connect(nats.url()).await.expect("connects")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_roles_the_link_authenticates_and_carries_nothing_but_link_subjects() {
    let _serial = serial().await;
    let seed = nkeys::KeyPair::new_user().seed().unwrap();
    let regions = TwoRegions::start_secured(SLUICE, &TestConfig::new().toml(), 1, &seed).await;
    // The workers' role reaches the other region over the link (the link
    // authenticated with its nkey), replies coming back to a link inbox.
    assert_eq!(hello_over_the_link(&regions).await.region, EAST);

    // A client of west reaches nothing of east's: not the link subjects
    // (its role may not use them), not east's JetStream (denied on the
    // link, and another domain), not east's asks (regional).
    for role in [Role::Client, Role::Admin] {
        let client = connect_as_role(&regions.west.nats, role, None).await;
        // A refused publish gets no answer: a second is plenty for one
        // that would (answers take milliseconds on loopback).
        let within = |subject: String| {
            let client = client.clone();
            async move {
                tokio::time::timeout(Duration::from_secs(1), client.request(subject, "".into()))
                    .await
                    .map_err(|_| "no answer".to_string())
                    .and_then(|r| r.map_err(|e| e.to_string()))
            }
        };
        let to_link = within(link_hello(EAST)).await;
        assert!(
            to_link.is_err(),
            "{role} reached east's workers over the link"
        );
        let to_js = within("$JS.east.API.INFO".to_string()).await;
        assert!(to_js.is_err(), "{role} reached east's JetStream: {to_js:?}");
    }
    // Its own region's JetStream is its own domain (asked as a worker, the
    // role that may).
    let own = connect_as_role(&regions.west.nats, Role::Worker, None).await;
    let info = own.request("$JS.API.INFO", "".into()).await.unwrap();
    let info: serde_json::Value = serde_json::from_slice(&info.payload).unwrap();
    assert_eq!(info["domain"], WEST, "{info}");
    // Asks stay in their region: east's client is answered by east.
    let east = connect_as_role(&regions.east.nats, Role::Client, None).await;
    assert!(ask(&east, "heidi", b"").await.unwrap().allowed);
    // Without certificates the link is in the clear: the proxy saw the
    // subjects (what the TLS test below checks it does not).
    assert!(regions.link.carried(link_hello(EAST).as_bytes()));
}

/// West's worker role asks east's link hello over the link until it is
/// answered (the link may still be settling its interest).
async fn hello_over_the_link(regions: &TwoRegions) -> Hello {
    let worker = connect_as_role(
        &regions.west.nats,
        Role::Worker,
        Some(&link_inbox_prefix(WEST)),
    )
    .await;
    eventually(Duration::from_secs(15), TICK, || async {
        let m = worker
            .request(link_hello(EAST), "".into())
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        anyhow::Ok(serde_json::from_slice::<Hello>(&m.payload)?)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_the_link_carries_nothing_in_the_clear_and_refuses_another_cas_region() {
    let _serial = serial().await;
    let seed = nkeys::KeyPair::new_user().seed().unwrap();
    let ca = TestCa::new().unwrap();
    let regions =
        TwoRegions::start_secured_over_tls(SLUICE, &TestConfig::new().toml(), 1, &seed, &ca).await;
    assert_eq!(hello_over_the_link(&regions).await.region, EAST);
    // The proxy between them saw neither the link's subjects nor west's
    // CONNECT (which holds the link's signed nonce): all of it was inside TLS.
    assert!(!regions.link.carried(link_hello(EAST).as_bytes()));
    assert!(!regions.link.carried(b"CONNECT {"));

    // A third region whose certificate another CA signed: it trusts
    // east's CA and holds the link's nkey, so only its certificate is
    // wrong, and east's listener refuses it.
    let stranger = TestCa::new().unwrap();
    let tls = LinkTls {
        identity: Some(CertAndKey {
            cert: stranger.client_cert().display().to_string(),
            key: stranger.client_key().display().to_string(),
        }),
        ca: Some(ca.ca().display().to_string()),
    };
    let config = regions.third_region("north", Some(link_key(&seed)), Some(tls));
    let north = NatsServer::start(&config.render()).unwrap();
    eventually(Duration::from_secs(20), TICK, || async {
        let log = regions.east.nats.log_tail(200);
        if !log.contains("TLS leafnode handshake error") {
            bail!("east's log: {log}\nnorth's log: {}", north.log_tail(30));
        }
        anyhow::Ok(())
    })
    .await
    .unwrap();
    let leafz = regions.east.nats.monitoring_get("/leafz").unwrap();
    let leafz: serde_json::Value = serde_json::from_str(&leafz).unwrap();
    assert_eq!(leafz["leafnodes"], 1, "only west is linked: {leafz}");
}
