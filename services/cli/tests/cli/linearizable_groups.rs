//! A group exact through a crash, checked as an outsider checks it (SPEC
//! §17): real grouped asks from several lanes for the members of one
//! organisation (costs 1 and 2, each with an id, sent again with the same
//! id while their outcome is unknown), against three workers in journal
//! mode, while the group's owner is killed with `kill -9` and a new
//! worker started; every ask is recorded with when it was sent, when its
//! answer came and what it was, and the history is checked against the
//! two-level model (`sluice_tests::linearizability::groups`): the org's
//! pool and each member's own limit, all or nothing.
//!
//! The load goes on until every lane has been denied a while after the
//! crash, so a count lost or replayed twice at either level shows as an
//! answer no order explains. Bounded: at most `MAX_RUN` of load,
//! `ASKS_PER_LANE` asks a lane.

use crate::common::SLUICE;
use sluice_core::partition::partition_of;
use sluice_core::subject::Verb;
use sluice_core::wire::DecisionReply;
use sluice_tests::linearizability::groups::{check_group, GroupAsk, GroupLimits};
use sluice_tests::linearizability::sent::{outcome_of, until_known};
use sluice_tests::linearizability::Outcome;
use sluice_tests::{request_within, serial, Stack, TICK};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PARTITIONS: u32 = 8;
const ORG: u64 = 240;
const MEMBER: u64 = 80;
const MEMBERS: usize = 4;
const LANES: usize = 8;
/// The most asks a lane sends, undelivered ones included.
const ASKS_PER_LANE: usize = 400;
const MAX_RUN: Duration = Duration::from_secs(40);
const CLIENT_TIMEOUT: Duration = Duration::from_secs(1);
const RETRIES: usize = 3;
/// Asks answered before the crash: about a third of the pool.
const CRASH_AFTER: usize = 60;
/// Denials each lane must see after the crash before the load stops.
const DENIALS_AFTER: usize = 5;

fn config() -> String {
    format!(
        r#"
partitions = {PARTITIONS}
lease_ttl = "2s"
snapshot_interval = "500ms"
durability = "journal"

[policies.org]
algorithm = "fixed_window"
limits = [ {{ max = {ORG}, per = "36500d" }} ]

[policies.member]
algorithm = "fixed_window"
parent = "org"
limits = [ {{ max = {MEMBER}, per = "36500d" }} ]
"#
    )
}

/// One grouped ask under `member`, sent again with its id while its
/// outcome is unknown: (its return, its outcome, its call), ns since `t0`.
async fn ask(
    nats: &async_nats::Client,
    key: &str,
    cost: u64,
    id: &str,
    t0: Instant,
) -> (Option<u64>, Outcome, u64) {
    let body = format!(r#"{{"policy":"member","cost":{cost},"id":"{id}"}}"#);
    let subject = Verb::Allow.client_subject(key);
    let call = t0.elapsed().as_nanos() as u64;
    let send = || async {
        let answer = request_within(nats, &subject, body.as_bytes(), CLIENT_TIMEOUT).await;
        let decided = |d: DecisionReply| match d.allowed {
            true => Outcome::Admitted,
            false => Outcome::Denied,
        };
        outcome_of(answer, decided, |_| None)
    };
    let (_, outcome) = until_known(RETRIES, || t0.elapsed() <= MAX_RUN, |o| *o, send).await;
    let ret = (outcome != Outcome::Unknown).then(|| t0.elapsed().as_nanos() as u64);
    (ret, outcome, call)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_asks_through_a_kill_of_its_owner_are_linearizable() {
    let _serial = serial().await;
    let mut stack = Stack::start(SLUICE, &config(), 3).await;
    let owners = stack.owners().await;
    let victim = stack.worker_ids().remove(0);
    let org = (0..)
        .map(|i| format!("org{i}"))
        .find(|o| owners.get(&partition_of(o, PARTITIONS)) == Some(&victim))
        .unwrap();
    let clients = stack.clients(2).await;
    let t0 = Instant::now();
    let history: Arc<Mutex<Vec<GroupAsk>>> = Arc::default();
    let crashed = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let crash_now = Arc::new(tokio::sync::Notify::new());
    let lanes: Vec<_> = (0..LANES)
        .map(|lane| {
            let nats = clients[lane % clients.len()].clone();
            let (history, crashed, answered, crash_now) = (
                history.clone(),
                crashed.clone(),
                answered.clone(),
                crash_now.clone(),
            );
            let member = lane % MEMBERS;
            let key = format!("{org}.m{member}");
            tokio::spawn(async move {
                let mut denials_after = 0;
                for n in 0..ASKS_PER_LANE {
                    if denials_after >= DENIALS_AFTER || t0.elapsed() > MAX_RUN {
                        break;
                    }
                    let cost = 1 + (n % 2) as u64;
                    let (ret, outcome, call) =
                        ask(&nats, &key, cost, &format!("g{lane}-{n}"), t0).await;
                    if outcome == Outcome::NotDelivered {
                        // Nobody owns the partition yet: it took no
                        // effect; ask again once a new owner may be there
                        // (a client's back-off, bounded by MAX_RUN).
                        tokio::time::sleep(TICK).await;
                        continue;
                    }
                    if outcome == Outcome::Denied && crashed.load(Ordering::Relaxed) {
                        denials_after += 1;
                    }
                    if answered.fetch_add(1, Ordering::Relaxed) + 1 == CRASH_AFTER {
                        crash_now.notify_one();
                    }
                    history.lock().unwrap().push(GroupAsk {
                        member,
                        cost,
                        call,
                        ret,
                        outcome,
                    });
                }
                denials_after
            })
        })
        .collect();
    tokio::time::timeout(MAX_RUN, crash_now.notified())
        .await
        .expect("the load reaches the crash");
    stack.kill_worker(&victim);
    crashed.store(true, Ordering::Relaxed);
    stack.start_workers(1).await;
    let mut denials = Vec::new();
    for lane in lanes {
        denials.push(lane.await.unwrap());
    }
    let history = history.lock().unwrap().clone();
    let count = |o: Outcome| history.iter().filter(|a| a.outcome == o).count();
    assert!(
        denials.iter().all(|&d| d >= DENIALS_AFTER),
        "a lane never saw the pool full after the crash: denials after it {denials:?}; \
         {} asks in {:?}: {} admitted, {} denied, {} unknown, {} not delivered",
        history.len(),
        t0.elapsed(),
        count(Outcome::Admitted),
        count(Outcome::Denied),
        count(Outcome::Unknown),
        count(Outcome::NotDelivered),
    );
    let limits = GroupLimits {
        org: ORG,
        member: MEMBER,
        members: MEMBERS,
    };
    let checked = check_group(limits, &history).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        checked.org_used + 1 >= ORG,
        "the pool was filled: {checked:?}"
    );
    let unknown = history
        .iter()
        .filter(|a| a.outcome == Outcome::Unknown)
        .count();
    eprintln!(
        "groups: {} asks, {unknown} unknown, {} steps",
        checked.ops, checked.steps
    );
}
