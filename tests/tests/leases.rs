//! Partition leases against a real nats-server, where an answer is lost:
//! a renewal or claim that was stored but whose answer never came back,
//! and a renewal that gets no answer at all (how a live worker lost its
//! partitions when the meta leader's node stopped).

use sluice_core::nats_config::NatsServerConfig;
use sluice_tests::NatsServer;
use sluice_worker::lease::{self, Holder, LeaseError};
use sluice_worker::store::{self, StoreOptions, Stores};
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_secs(3);

async fn stores(nats: &NatsServer) -> Stores {
    let client = nats.connect().await.unwrap();
    Stores::open(
        client,
        &StoreOptions {
            lease_ttl: TTL,
            replicas: 1,
            journal: false,
            journal_max_age: Duration::from_secs(3600),
        },
    )
    .await
    .unwrap()
}

fn server() -> NatsServer {
    NatsServer::start(&NatsServerConfig::new(4).render()).unwrap()
}

#[tokio::test]
async fn a_renewal_stored_but_unanswered_leaves_the_lease_with_its_run() {
    let nats = server();
    let stores = stores(&nats).await;
    let run = Holder::new("w-1");
    let mut lease = lease::acquire(&stores.leases, "p.1", &run, TTL)
        .await
        .unwrap();
    // The renewal this run sent was stored; its answer never came back.
    let stored = stores
        .leases
        .update("p.1", run.value(), lease.revision)
        .await
        .unwrap();
    let stale = lease.revision;
    lease::renew(&stores.leases, &mut lease, &run, TTL)
        .await
        .expect("the lease is still this run's");
    assert!(
        lease.revision > stored && stored > stale,
        "renewed past the stored revision: {stale} -> {stored} -> {}",
        lease.revision
    );
    assert!(lease.is_valid());

    // The same worker id in another run (restarted while this one was
    // frozen) is someone else: its write takes the lease.
    let restarted = Holder::new("w-1");
    stores
        .leases
        .update("p.1", restarted.value(), lease.revision)
        .await
        .unwrap();
    let err = lease::renew(&stores.leases, &mut lease, &run, TTL)
        .await
        .unwrap_err();
    assert!(matches!(err, LeaseError::Taken), "{err}");
}

#[tokio::test]
async fn a_claim_stored_but_unanswered_is_taken_on_the_next_try() {
    let nats = server();
    let stores = stores(&nats).await;
    let run = Holder::new("w-2");
    // The claim this run sent was stored; its answer never came back.
    let stored = store::create(&stores.leases, "p.2", run.value())
        .await
        .unwrap()
        .expect("the key was free");
    let lease = lease::acquire(&stores.leases, "p.2", &run, TTL)
        .await
        .expect("this run's own claim");
    assert!(lease.revision > stored, "renewed when taken: {lease:?}");
    assert!(lease.is_valid());

    let other = Holder::new("w-2");
    let err = lease::acquire(&stores.leases, "p.2", &other, TTL)
        .await
        .unwrap_err();
    assert!(matches!(err, LeaseError::Taken), "{err}");
}

#[tokio::test]
async fn a_renewal_without_an_answer_gives_up_in_time_to_try_again() {
    let nats = server();
    let stores = stores(&nats).await;
    let run = Holder::new("w-3");
    let mut lease = lease::acquire(&stores.leases, "p.3", &run, TTL)
        .await
        .unwrap();
    let deadline = lease.valid_until;
    nats.freeze().unwrap();
    let started = Instant::now();
    let renewal = lease::renew(&stores.leases, &mut lease, &run, TTL).await;
    let waited = started.elapsed();
    nats.thaw().unwrap();
    let err = renewal.unwrap_err();
    assert!(matches!(err, LeaseError::Transient(_)), "{err}");
    // Before, the renewal waited the library's 5 s for its answer: past the
    // lease's deadline (TTL - margin = 2.5 s), with no second try.
    assert!(
        Instant::now() + lease::renew_interval(TTL) / 4 < deadline,
        "gave up after {waited:?}, too late to try again before the deadline"
    );
    assert_eq!(
        lease.valid_until, deadline,
        "a failed renewal moves nothing"
    );
    lease::renew(&stores.leases, &mut lease, &run, TTL)
        .await
        .expect("the next try renews it");
}
