//! Snapshots against a real nats-server: a partition far larger than the
//! 1 MiB max payload round-trips through chunks, and so does the state kept
//! beside its counters when it outgrows the manifest (a partition
//! remembering `max_ids` long ids); generations replace each other without
//! leftovers, and a stale writer is fenced off.

use sluice_core::ask::{counter_key, Op};
use sluice_core::config::Config;
use sluice_core::nats_config::NatsServerConfig;
use sluice_core::policy::Policy;
use sluice_core::storage::chunk_key;
use sluice_core::time::Nanos;
use sluice_tests::NatsServer;
use sluice_worker::counters::{Counters, TurnCopy};
use sluice_worker::kept::Carried;
use sluice_worker::snapshot::{self, Encoded, Manifest, CHUNK_BYTES};
use sluice_worker::store::{StoreOptions, Stores};
use std::time::Duration;

async fn stores(nats: &NatsServer) -> Stores {
    let client = nats.connect().await.unwrap();
    Stores::open(
        client,
        &StoreOptions {
            lease_ttl: Duration::from_secs(3),
            replicas: 1,
            journal: false,
            journal_max_age: Duration::from_secs(3600),
        },
    )
    .await
    .unwrap()
}

/// A nats-server with its default max_payload of 1 MiB (sluice's config
/// raises it), and the stores on it.
async fn at_the_default_max_payload() -> (NatsServer, Stores) {
    let mut server = NatsServerConfig::new(16);
    server.max_payload = 1024 * 1024;
    let nats = NatsServer::start(&server.render()).unwrap();
    let stores = stores(&nats).await;
    (nats, stores)
}

/// The counters copied between two turns, as a snapshot encodes them.
fn copied(counters: &Counters) -> TurnCopy {
    counters
        .copy_between_turns(|_| ())
        .expect("no turn in progress")
        .0
}

fn filled(policy: &Policy, keys: usize, now: Nanos) -> Counters {
    let counters = Counters::new();
    let mut key = String::new();
    for i in 0..keys {
        counter_key(&mut key, policy.name(), &format!("user-{i}"));
        counters.apply(policy, &key, now, Op::Allow(1));
    }
    counters
}

/// Counters stay cached for as long as their window (real time), so a
/// long window keeps them while the test fills 120 000 of them.
fn hourly() -> Config {
    Config::from_toml(
        "[policies.default]\nalgorithm = \"sliding_window\"\nlimits = [ { max = 10, per = \"1h\" } ]\n",
        "test.toml",
    )
    .unwrap()
}

#[tokio::test]
async fn a_partition_of_120_000_keys_round_trips_in_chunks_under_the_max_payload() {
    let (_nats, stores) = at_the_default_max_payload().await;
    let config = hourly();
    let policy = config.default_policy();
    let now = Nanos::from_secs(1_800_000_000);
    let counters = filled(policy, 120_000, now);
    let encoded = snapshot::encode(&copied(&counters), &Carried::default(), Nanos::ZERO).unwrap();
    assert_eq!(encoded.entries, 120_000);

    let manifest = Manifest {
        gen: "1x1".into(),
        lease_rev: 7,
        ..Default::default()
    };
    snapshot::write(&stores, 3, encoded, manifest, 0, None)
        .await
        .unwrap();
    let (read, _) = snapshot::read_manifest(&stores.snapshots, 3).await.unwrap();
    let read = read.expect("a manifest was written");
    assert!(
        read.bytes as usize > 1024 * 1024,
        "bigger than one message: {} bytes",
        read.bytes
    );
    assert_eq!(
        read.chunks as usize,
        (read.bytes as usize).div_ceil(CHUNK_BYTES)
    );
    assert_eq!(read.entries, 120_000);

    let (restored, _) = snapshot::read_entries(&stores.snapshots, 3, &read)
        .await
        .unwrap();
    let fresh = Counters::new();
    assert_eq!(
        fresh.import(restored, now, |name, _| config.policy(name)),
        120_000
    );
    // The restored counters carry the counts: every key has one request fewer left.
    let mut key = String::new();
    counter_key(&mut key, policy.name(), "user-119999");
    let d = fresh.apply(policy, &key, now, Op::Allow(0));
    assert_eq!(d.remaining, policy.limits()[0].max() - 1);
}

/// A partition remembering as many ids as it may, each long (SPEC §16):
/// as JSON in the manifest they would pass the 1 MiB max payload, and no
/// snapshot of the partition could be written. They travel in the chunks
/// after the counters (format 3), and a new owner reads them all back;
/// the manifest as stored stays small, and a small carried state stays in
/// the manifest (format 2, which the release before reads).
#[tokio::test]
async fn ids_too_many_for_the_manifest_travel_in_the_chunks() {
    use sluice_core::ask_ids::{Asked, FirstAnswer, DEFAULT_MAX_IDS};
    use sluice_core::subject::Verb;

    let (_nats, stores) = at_the_default_max_payload().await;
    let config = hourly();
    let policy = config.default_policy();
    let now = Nanos::from_secs(1_800_000_000);
    let counters = filled(policy, 100, now).remembering(DEFAULT_MAX_IDS);
    let first = FirstAnswer::new(
        sluice_core::policy::Decision {
            allowed: true,
            limit: 10,
            remaining: 9,
            reset: Nanos::from_secs(1),
            retry_after: Nanos::ZERO,
            shadow_denied: false,
            wait: Nanos::ZERO,
            blocked: false,
        },
        now,
    );
    let asked = Asked {
        verb: Verb::Allow,
        policy: policy.name(),
        cost: 1,
    };
    let until = Nanos(now.0 + 3_600_000_000_000);
    for i in 0..DEFAULT_MAX_IDS {
        let token = format!("tenant-{i:08}%2Fuser-with-a-name-of-some-length");
        let id = format!("{i:08x}-5f0e-4c1a-9d3b-{i:012x}-retry-of-order");
        let mut ids = counters.ids();
        let name = ids.name(&token, &id);
        ids.remember(name, asked, first, until, now);
    }
    let (copy, carried) = counters
        .copy_between_turns(|c| Carried::read(c, now, false))
        .unwrap();
    assert_eq!(carried.ids.len(), DEFAULT_MAX_IDS);
    assert!(
        serde_json::to_vec(&carried).unwrap().len() > 1024 * 1024,
        "too large for the manifest"
    );
    let manifest = Manifest {
        gen: "1x1".into(),
        lease_rev: 7,
        carried: carried.clone(),
        ..Default::default()
    };
    let encoded = snapshot::encode(&copy, &carried, Nanos::ZERO).unwrap();
    snapshot::write(&stores, 3, encoded, manifest, 0, None)
        .await
        .unwrap();
    let stored = stores.snapshots.get("p.3").await.unwrap().unwrap();
    assert!(stored.len() < 4096, "{} bytes", stored.len());
    let (read, _) = snapshot::read_manifest(&stores.snapshots, 3).await.unwrap();
    let read = read.expect("a manifest was written");
    assert_eq!(read.v, 3);
    assert!(read.carried_bytes > 0 && read.carried.ids.is_empty());
    let (entries, back) = snapshot::read_entries(&stores.snapshots, 3, &read)
        .await
        .unwrap();
    assert_eq!(entries.len(), 100);
    assert_eq!(back, Some(carried));

    // Small: in the manifest, in the format the release before reads.
    let small = filled(policy, 10, now);
    for i in 0..10 {
        let id = format!("order-{i}");
        let mut ids = small.ids();
        let name = ids.name("user-1", &id);
        ids.remember(name, asked, first, until, now);
    }
    let (copy, carried) = small
        .copy_between_turns(|c| Carried::read(c, now, false))
        .unwrap();
    let encoded = snapshot::encode(&copy, &carried, Nanos::ZERO).unwrap();
    let manifest = Manifest {
        gen: "1x2".into(),
        lease_rev: 7,
        carried,
        ..Default::default()
    };
    snapshot::write(&stores, 4, encoded, manifest, 0, None)
        .await
        .unwrap();
    let (read, _) = snapshot::read_manifest(&stores.snapshots, 4).await.unwrap();
    let read = read.unwrap();
    assert_eq!(
        (read.v, read.carried_bytes, read.carried.ids.len()),
        (2, 0, 10)
    );
    let (entries, back) = snapshot::read_entries(&stores.snapshots, 4, &read)
        .await
        .unwrap();
    assert_eq!((entries.len(), back), (10, None));
}

#[tokio::test]
async fn a_new_generation_replaces_the_old_one_and_purges_its_chunks() {
    let nats = NatsServer::start_with_partitions(16).unwrap();
    let stores = stores(&nats).await;
    let config = hourly();
    let now = Nanos::from_secs(1_800_000_000);
    let policy = config.default_policy();
    let encoded = snapshot::encode(
        &copied(&filled(policy, 50_000, now)),
        &Carried::default(),
        Nanos::ZERO,
    )
    .unwrap();
    let first = Manifest {
        gen: "1x1".into(),
        lease_rev: 1,
        ..Default::default()
    };
    let (_, rev1) = snapshot::write(&stores, 5, encoded, first, 0, None)
        .await
        .unwrap();
    let second = Manifest {
        gen: "1x2".into(),
        lease_rev: 1,
        ..Default::default()
    };
    snapshot::write(
        &stores,
        5,
        snapshot::encode(
            &copied(&filled(policy, 10, now)),
            &Carried::default(),
            Nanos::ZERO,
        )
        .unwrap(),
        second,
        rev1,
        Some("1x1"),
    )
    .await
    .unwrap();
    let (m, _) = snapshot::read_manifest(&stores.snapshots, 5).await.unwrap();
    assert_eq!(m.unwrap().gen, "1x2");
    assert_eq!(
        stores.snapshots.get(chunk_key(5, "1x1", 0)).await.unwrap(),
        None,
        "old chunks are gone"
    );
    assert!(stores
        .snapshots
        .get(chunk_key(5, "1x2", 0))
        .await
        .unwrap()
        .is_some());
}

#[tokio::test]
async fn a_writer_that_lost_the_partition_cannot_overwrite_the_new_owners_snapshot() {
    let nats = NatsServer::start_with_partitions(16).unwrap();
    let stores = stores(&nats).await;
    let old = Manifest {
        gen: "1x1".into(),
        lease_rev: 1,
        ..Default::default()
    };
    let (_, rev) = snapshot::write(&stores, 9, Encoded::default(), old, 0, None)
        .await
        .unwrap();
    // The new owner fences the manifest with its lease revision.
    let fenced = Manifest {
        gen: "1x1".into(),
        lease_rev: 40,
        worker: "new".into(),
        ..Default::default()
    };
    snapshot::write_manifest(&stores.snapshots, 9, &fenced, rev)
        .await
        .unwrap();
    // The old owner's late snapshot still expects the revision it knew.
    let late = Manifest {
        gen: "1x9".into(),
        lease_rev: 1,
        ..Default::default()
    };
    let err = snapshot::write(&stores, 9, Encoded::default(), late, rev, Some("1x1")).await;
    assert!(err.is_err(), "the stale write must fail");
    let (m, _) = snapshot::read_manifest(&stores.snapshots, 9).await.unwrap();
    assert_eq!(m.unwrap().worker, "new");
}
