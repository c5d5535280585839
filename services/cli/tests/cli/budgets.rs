//! Local budgets (docs/CLIENT.md "Local budgets") with a real
//! nats-server and a real worker: four clients, each on its own NATS
//! connection, hammer one hot key with budgets on, and every allowed
//! answer is checked against the limit from the clients' own records.
//!
//! Each answer is stamped with the wall clock just before the ask and just
//! after the answer (the worker decides with the same machine's clock), so
//! the decision lies between the two stamps:
//! - fixed window: an answer whose two stamps lie in one window was
//!   admitted in it; no window may hold more than `max` of those, and the
//!   whole run no more than `max` per window it touched;
//! - token bucket: sorted by their second stamp, the `i`-th admission
//!   happened by that stamp, so `i ≤ burst + rate · (stamp − start)`.

use sluice_bench::admission::wall_ns;
use sluice_client::{Client, ClientOptions, Source};
use sluice_core::config::Config;
use sluice_core::time::{ManualClock, Nanos};
use sluice_tests::{serial, Stack};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

const CONFIG: &str = r#"
partitions = 16
lease_ttl = "2s"
snapshot_interval = "500ms"

[policies.default]
algorithm = "sliding_window"
limits = [ { max = 15, per = "1s" } ]

[policies.hot]
algorithm = "fixed_window"
limits = [ { max = 300, per = "1s" } ]
local_budget = true

[policies.bucket]
algorithm = "token_bucket"
limits = [ { max = 300, per = "1s", burst = 100 } ]
local_budget = true

[policies.hourly]
algorithm = "fixed_window"
limits = [ { max = 1000, per = "1h" } ]
local_budget = true
"#;

const CLIENTS: usize = 4;
/// Asks in flight per client.
const TASKS: usize = 16;
/// How long the clients ask, and the most asks each task makes.
const RUN: Duration = Duration::from_millis(2_500);
const MAX_ASKS_PER_TASK: usize = 20_000;

/// One answer: wall-clock ns before the ask and after the answer, allowed,
/// and whether it was decided from a slice.
#[derive(Clone, Copy, Debug)]
struct Stamped {
    before: u64,
    after: u64,
    allowed: bool,
    local: bool,
}

/// Four clients asking `policy` for one key as fast as they can; every
/// answer stamped.
async fn hammer(stack: &Stack, policy: &'static str) -> Vec<Stamped> {
    let config = Config::from_toml(CONFIG, "test.toml").unwrap();
    let options = ClientOptions::from_config(&config).timeout(Duration::from_secs(2));
    assert!(options.budgets, "budgets are on by default");
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let client = Client::connect_with(&stack.nats.url(), options.clone())
            .await
            .expect("the client connects");
        clients.push(client);
    }
    let records = Arc::new(Mutex::new(Vec::new()));
    let end = Instant::now() + RUN;
    let mut tasks = Vec::new();
    for client in &clients {
        for _ in 0..TASKS {
            let client = client.clone();
            let records = records.clone();
            tasks.push(tokio::spawn(async move {
                let mut mine = Vec::new();
                for _ in 0..MAX_ASKS_PER_TASK {
                    if Instant::now() >= end {
                        break;
                    }
                    let before = wall_ns();
                    let answer = client.ask("the-hot-key", policy, 1).await;
                    let after = wall_ns();
                    let answer = answer.expect("every ask is answered");
                    mine.push(Stamped {
                        before,
                        after,
                        allowed: answer.allowed,
                        local: answer.source == Source::Budget,
                    });
                    // The deny cache answers at once: let the others run.
                    tokio::task::yield_now().await;
                }
                records.lock().unwrap().extend(mine);
            }));
        }
    }
    for task in tasks {
        task.await.expect("no task panics");
    }
    let stats: Vec<_> = clients.iter().map(|c| c.stats()).collect();
    let slices: u64 = stats.iter().map(|s| s.slices).sum();
    assert!(slices > 0, "slices were granted: {stats:?}");
    Arc::try_unwrap(records).unwrap().into_inner().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_clients_on_one_hot_key_never_admit_more_than_a_fixed_window_allows() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, CONFIG, 1).await;
    let records = hammer(&stack, "hot").await;
    const MAX: u64 = 300;
    const PER: u64 = 1_000_000_000;
    let allowed: Vec<_> = records.iter().filter(|r| r.allowed).collect();
    let local = allowed.iter().filter(|r| r.local).count();
    assert!(
        local > allowed.len() / 4,
        "most admissions need no round trip: {local} of {} were local",
        allowed.len()
    );
    let mut certain = std::collections::BTreeMap::<u64, u64>::new();
    for r in &allowed {
        if r.before / PER == r.after / PER {
            *certain.entry(r.before / PER).or_default() += 1;
        }
    }
    for (window, n) in &certain {
        assert!(
            *n <= MAX,
            "window {window}: {n} admitted, the limit is {MAX}"
        );
    }
    let first = records.iter().map(|r| r.before).min().unwrap() / PER;
    let last = records.iter().map(|r| r.after).max().unwrap() / PER;
    let windows = last - first + 1;
    assert!(
        allowed.len() as u64 <= MAX * windows,
        "{} admitted over {windows} windows of {MAX}",
        allowed.len()
    );
    // Under-admission in the windows the run covered whole: what the
    // clients held in slices when the window ended, or gave back too late.
    let whole: Vec<u64> = (first + 1..last)
        .map(|w| certain.get(&w).copied().unwrap_or(0))
        .collect();
    eprintln!(
        "fixed window: {} asks, {} admitted ({local} from slices) over {windows} windows; admitted in the whole windows: {whole:?} of {MAX}",
        records.len(),
        allowed.len()
    );
    for n in &whole {
        assert!(
            *n >= MAX / 2,
            "a window the clients asked through admitted {n} of {MAX}: budgets lost too much"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_clients_on_one_hot_key_never_admit_more_than_a_token_bucket_allows() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, CONFIG, 1).await;
    let records = hammer(&stack, "bucket").await;
    const RATE_PER_S: u128 = 300;
    const BURST: u128 = 100;
    let start = records.iter().map(|r| r.before).min().unwrap();
    let mut done: Vec<u64> = records
        .iter()
        .filter(|r| r.allowed)
        .map(|r| r.after)
        .collect();
    done.sort_unstable();
    for (i, at) in done.iter().enumerate() {
        let elapsed = u128::from(at - start);
        let bound = BURST + RATE_PER_S * elapsed / 1_000_000_000;
        assert!(
            (i as u128) < bound,
            "{} admitted {elapsed} ns after the start; a bucket of {BURST} refilled at {RATE_PER_S}/s allows {bound}",
            i + 1
        );
    }
    let local = records.iter().filter(|r| r.allowed && r.local).count();
    eprintln!(
        "token bucket: {} asks, {} admitted ({local} from slices)",
        records.len(),
        done.len()
    );
    assert!(local > 0, "some admissions came from slices");
}

/// A client whose clock stands still (all its asks fall in one tick, so
/// a key asked a few times is hot, and no slice's lease ends: only closing
/// gives slices back), and an observer without budgets.
async fn holder_and_observer(stack: &Stack) -> (Client, Client) {
    let config = Config::from_toml(CONFIG, "test.toml").unwrap();
    let mut options = ClientOptions::from_config(&config).timeout(Duration::from_secs(2));
    options.clock = Arc::new(ManualClock::new(Nanos(wall_ns())));
    let holder = Client::connect_with(&stack.nats.url(), options)
        .await
        .unwrap();
    let observer = ClientOptions::from_config(&config).budgets(false);
    let observer = Client::connect_with(&stack.nats.url(), observer)
        .await
        .unwrap();
    (holder, observer)
}

/// A client that closes gives back what its slices hold at once, their
/// leases still running: nothing stays counted for the rest of a long
/// window, as it would if the client just went away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closing_client_gives_back_what_its_slices_hold() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, CONFIG, 1).await;
    let (client, observer) = holder_and_observer(&stack).await;
    let key = "a-key-asked-often";
    for _ in 0..20 {
        let answer = client.ask(key, "hourly", 1).await.unwrap();
        assert!(answer.allowed);
    }
    let stats = client.stats();
    assert!(stats.budget > 0, "{stats:?}");
    let left = observer.peek(key, "hourly").await.unwrap().remaining;
    assert!(left < 1000 - 20, "a slice holds units: {left} left");

    client.close().await;
    let left = observer.peek(key, "hourly").await.unwrap().remaining;
    assert_eq!(left, 1000 - 20, "20 asks, and nothing held");
    // Asks go on, each decided by the owner.
    let answer = client.ask(key, "hourly", 1).await.unwrap();
    assert_eq!(answer.source, Source::Worker);
    assert_eq!(answer.remaining, 1000 - 21);
}

/// A client may give back only what a slice it was granted held: a refund
/// made up by a client (any holder of the client role can send one) frees
/// nothing, or it would be a reset without the admin role (docs/SECURITY.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_no_slice_explains_frees_nothing() {
    use sluice_core::budget::Refund;
    use sluice_core::key::KeyToken;
    use sluice_core::partition::partition_of;
    use sluice_core::subject::batch_subject;
    use sluice_core::wire::batch::{self, Act, Budget, Item};
    use sluice_core::wire::Reply;
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, CONFIG, 1).await;
    let config = Config::from_toml(CONFIG, "test.toml").unwrap();
    let client = ClientOptions::from_config(&config).budgets(false);
    let client = Client::connect_with(&stack.nats.url(), client)
        .await
        .unwrap();
    let key = "a-key-someone-wants-freed";
    for _ in 0..10 {
        assert!(client.ask(key, "hourly", 1).await.unwrap().allowed);
    }
    // The refund a client would send for a slice of 10 taken just now, by
    // hand on the partition's batch subject.
    let forged = Item {
        key: KeyToken::parse(key).unwrap(),
        policy: "hourly".into(),
        cost: 0,
        id: None,
        act: Act::Ask(Budget::Refund(Refund {
            units: 10,
            spent: 0,
            taken_at: Nanos(wall_ns()),
        })),
    };
    let subject = batch_subject(partition_of(key, config.partitions));
    let reply = client
        .nats()
        .request(subject, batch::encode_items(&[forged]).into())
        .await
        .unwrap();
    match &batch::decode_results(&reply.payload, 1).unwrap()[0] {
        Reply::Decision(d) => assert_eq!(d.remaining, 1000 - 10, "answered as a peek"),
        other => panic!("a refund is answered as a peek: {other:?}"),
    }
    let left = client.peek(key, "hourly").await.unwrap().remaining;
    assert_eq!(left, 1000 - 10, "nothing was freed");
}

/// A handover carries the slices not back yet to the partition's next
/// owner, whose counters already count them: their refunds still give the
/// unspent units back there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slices_given_back_after_a_handover_still_come_back() {
    use sluice_tests::key_in_partition;
    let _serial = serial().await;
    let mut stack = Stack::start(SLUICE, CONFIG, 1).await;
    let config = Config::from_toml(CONFIG, "test.toml").unwrap();
    let (client, observer) = holder_and_observer(&stack).await;
    // One hot key in every partition, each with a slice held.
    let keys: Vec<String> = (0..config.partitions)
        .map(|p| key_in_partition(p, config.partitions))
        .collect();
    // The client finds hot keys in a fixed table of heat slots by key
    // hash (its seed random per client), where a hot key keeps its slot:
    // a key whose slot another hot key holds is asked as usual, with no
    // slice (about one run in a hundred has such a pair here).
    let mut sliced = Vec::new();
    for (p, key) in keys.iter().enumerate() {
        for _ in 0..20 {
            assert!(client.ask(key, "hourly", 1).await.unwrap().allowed);
        }
        let left = observer.peek(key, "hourly").await.unwrap().remaining;
        assert!(left <= 1000 - 20, "{key}: 20 asks counted ({left} left)");
        if left < 1000 - 20 {
            sliced.push(p as u32);
        }
    }
    assert!(
        sliced.len() + 2 >= keys.len(),
        "a slice holds units of all keys but a slot's collision: {sliced:?}"
    );
    let before = stack.owners().await;
    stack.start_workers(1).await;
    let after = stack.owners().await;
    let moved: Vec<u32> = (0..config.partitions)
        .filter(|p| before.get(p) != after.get(p))
        .collect();
    assert!(!moved.is_empty(), "the newcomer took partitions: {after:?}");
    assert!(
        moved.iter().any(|p| sliced.contains(p)),
        "a moved partition's key held a slice: moved {moved:?}, sliced {sliced:?}"
    );

    client.close().await;
    for (p, key) in keys.iter().enumerate() {
        let left = observer.peek(key, "hourly").await.unwrap().remaining;
        assert_eq!(
            left,
            1000 - 20,
            "{key} (partition {p}, moved: {}): 20 asks, and nothing held",
            moved.contains(&(p as u32))
        );
    }
}
