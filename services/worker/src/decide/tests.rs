//! The decision core with a manual clock and no NATS: each ask is the
//! subject and body a worker would receive.
use super::*;
use crate::journal::record::{Kind, Record};
use crate::stats::Outcome;
use serde::Deserialize;
use sluice_core::partition::partition_of;
use sluice_core::subject::{batch_subject, Verb};
use sluice_core::usage::Counts;
use sluice_core::wire::batch::{self, Act};
use sluice_core::wire::{DecisionReply, ErrorCode, MAX_BODY};
use std::borrow::Cow;
use std::sync::atomic::Ordering;

mod batch_holds;
mod batches;
mod global;
mod hold_levels;
mod ids;
mod levels;
mod penalties;
mod replay;
mod wait;

const PARTITIONS: u32 = 4;
const SEC: u64 = 1_000_000_000;
const T0: Nanos = Nanos(1_000 * SEC);

const CONFIG: &str = r#"
    partitions = 4
    [policies.default]
    algorithm = "sliding_window"
    limits = [ { max = 15, per = "1s" } ]
    [policies.login]
    algorithm = "sliding_log"
    limits = [ { max = 3, per = "1s" }, { max = 5, per = "1m" } ]
"#;

/// One partition's state and a worker's decision core, in journal mode
/// so that every count would show as a record.
struct Fixture {
    decider: Decider,
    /// The policies of the tests' asks (the decider's at the start).
    policies: Arc<Policies>,
    counters: Counters,
    shard: ShardStats,
    partition: u32,
}

impl Fixture {
    /// Journal mode without usage: every record is a count or a reset.
    fn new() -> Fixture {
        Fixture::journal(CONFIG)
    }

    fn with(config: Config, journal: bool) -> Fixture {
        let recording = if journal {
            Recording::Records
        } else {
            Recording::Nothing
        };
        let decider = Decider::new(Arc::new(config), Arc::default(), recording);
        Fixture {
            policies: decider.policies(),
            decider,
            counters: Counters::new(),
            shard: ShardStats::default(),
            partition: 1,
        }
    }

    /// Journal mode without usage, with the policies of `toml`.
    fn journal(toml: &str) -> Fixture {
        let mut config = Config::from_toml(toml, "test.toml").unwrap();
        config.usage.enabled = false;
        Fixture::with(config, true)
    }

    fn owned(&self) -> Owned<'_> {
        Owned {
            partition: self.partition,
            counters: &self.counters,
            stats: &self.shard,
            usage: None,
        }
    }

    /// Sends `body` on `rl.p.<partition>.<verb>.<token>`; returns the
    /// answer and the records to store.
    fn send(
        &self,
        verb: Verb,
        token: &str,
        body: &[u8],
        wants_reply: bool,
        now: Nanos,
    ) -> (Option<Answer<'_>>, Vec<Record>) {
        let subject = verb.mapped_subject(self.partition, token);
        let mut log = self.decider.turn_log(self.owned());
        let answer = self.decider.message(
            &self.policies,
            Message {
                subject: &subject,
                body,
                wants_reply,
            },
            self.owned(),
            now,
            &mut log,
        );
        let records = log.finish(self.decider.stats(), &self.shard);
        (answer, records)
    }

    fn allow(&self, token: &str, body: &[u8], now: Nanos) -> Answer<'_> {
        self.send(Verb::Allow, token, body, true, now)
            .0
            .expect("an allow with a reply subject is answered")
    }

    /// A peek's remaining for `token` under `default`.
    fn remaining(&self, token: &str, now: Nanos) -> u64 {
        match self.allow(token, br#"{"cost":0}"#, now) {
            Answer::Decision { decision, .. } => decision.remaining,
            other => panic!("a peek is decided: {other:?}"),
        }
    }
}

/// Sends `items` as one batch on the fixture's partition; returns the
/// results and the records to store.
fn batch_of(f: &Fixture, items: &[batch::Item<'_>], now: Nanos) -> (Vec<wire::Reply>, Vec<Record>) {
    let body = batch::encode_items(items);
    let subject = batch_subject(f.partition);
    let mut log = f.decider.turn_log(f.owned());
    let message = Message {
        subject: &subject,
        body: &body,
        wants_reply: true,
    };
    let answer = f
        .decider
        .message(&f.policies, message, f.owned(), now, &mut log);
    let records = log.finish(f.decider.stats(), &f.shard);
    let Some(Answer::Batch(Ok(results))) = answer else {
        panic!("expected batch results, got {answer:?}");
    };
    (results, records)
}

/// A key token of `partition`.
fn key_in(partition: u32, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| partition_of(k, PARTITIONS) == partition)
        .unwrap()
}

/// The fixture's counters as a snapshot stores them (MessagePack) and
/// the next owner reads them back.
fn snapshot_entries(f: &Fixture) -> Vec<crate::counters::Entry> {
    let mut entries = Vec::new();
    f.counters.for_each(|key, state| {
        entries.push(crate::counters::Entry {
            key: key.to_string(),
            state: state.clone(),
        })
    });
    let bytes = rmp_serde::to_vec_named(&entries).unwrap();
    rmp_serde::from_slice(&bytes).unwrap()
}

fn decision(answer: Answer<'_>) -> Decision {
    match answer {
        Answer::Decision { decision, .. } => decision,
        other => panic!("expected a decision, got {other:?}"),
    }
}

#[test]
fn decisions_are_counted_by_outcome_and_policy() {
    let f = Fixture::new();
    let key = key_in(1, "k");
    for _ in 0..16 {
        f.allow(&key, b"", T0);
    }
    f.allow(&key, br#"{"policy":"login"}"#, T0);
    f.send(
        Verb::Hit,
        &key,
        br#"{"policy":"login","cost":2}"#,
        false,
        T0,
    );
    f.allow(&key, br#"{"policy":"nope"}"#, T0);
    f.allow("bad%zz", b"", T0);
    let stats = f.decider.stats();
    assert_eq!(stats.decisions_of(Outcome::Allowed, "default"), 15);
    assert_eq!(stats.decisions_of(Outcome::Denied, "default"), 1);
    assert_eq!(stats.decisions_of(Outcome::Allowed, "login"), 1);
    assert_eq!(stats.decisions_of(Outcome::Hit, "login"), 1);
    assert_eq!(stats.decisions_of(Outcome::Error, ""), 2);
    assert_eq!(stats.decisions_of(Outcome::Error, "nope"), 0);
}

#[test]
fn every_error_reply_changes_no_counter() {
    let f = Fixture::new();
    let mine = key_in(1, "k");
    let elsewhere = key_in(2, "k");
    let cases: Vec<(&str, Vec<u8>, ErrorCode, Encoding)> = vec![
        // The key token.
        ("bad%zz", vec![], ErrorCode::BadRequest, Encoding::MsgPack),
        ("bad%4", vec![], ErrorCode::BadRequest, Encoding::MsgPack),
        // The body.
        (&mine, vec![0xc1], ErrorCode::BadRequest, Encoding::MsgPack),
        (
            &mine,
            br#"{"cots":5}"#.to_vec(),
            ErrorCode::BadRequest,
            Encoding::Json,
        ),
        (
            &mine,
            br#"{"cost":-1}"#.to_vec(),
            ErrorCode::BadRequest,
            Encoding::Json,
        ),
        (
            &mine,
            br#"{"cost":1.5}"#.to_vec(),
            ErrorCode::BadRequest,
            Encoding::Json,
        ),
        (
            &mine,
            br#"{"cost":1} x"#.to_vec(),
            ErrorCode::BadRequest,
            Encoding::Json,
        ),
        (
            &mine,
            vec![b' '; MAX_BODY + 1],
            ErrorCode::TooLarge,
            Encoding::MsgPack,
        ),
        // The partition.
        (
            &elsewhere,
            vec![],
            ErrorCode::Unavailable,
            Encoding::MsgPack,
        ),
        // The policy.
        (
            &mine,
            br#"{"policy":"nope"}"#.to_vec(),
            ErrorCode::UnknownPolicy,
            Encoding::Json,
        ),
        (
            &mine,
            br#"{"policy":"bad name!"}"#.to_vec(),
            ErrorCode::BadRequest,
            Encoding::Json,
        ),
        // The cost: more than the policy can ever hold.
        (
            &mine,
            br#"{"cost":16}"#.to_vec(),
            ErrorCode::BadRequest,
            Encoding::Json,
        ),
        (
            &mine,
            br#"{"policy":"login","cost":4}"#.to_vec(),
            ErrorCode::BadRequest,
            Encoding::Json,
        ),
    ];
    let n = cases.len() as u64;
    for (token, body, code, encoding) in cases {
        let capacity = std::str::from_utf8(&body)
            .is_ok_and(|b| b.contains(r#""cost":16"#) || b.contains(r#""cost":4"#));
        // A hit records what was served, whatever its size: only an
        // allow can cost too much.
        let verbs: &[Verb] = if capacity {
            &[Verb::Allow]
        } else {
            &[Verb::Allow, Verb::Hit]
        };
        for &verb in verbs {
            let (answer, records) = f.send(verb, token, &body, true, T0);
            match answer {
                Some(Answer::Error { error, encoding: e }) => {
                    assert_eq!(error.code, code, "{verb:?} {token} {body:?}: {error}");
                    assert_eq!(e, encoding, "{token} {body:?}: the reply's encoding");
                }
                other => panic!("{verb:?} {token} {body:?}: expected {code:?}, got {other:?}"),
            }
            assert!(records.is_empty(), "{token} {body:?} stored a record");
        }
    }
    assert!(f.counters.is_empty(), "a refused request changed a counter");
    assert_eq!(f.shard.changes(), 0);
    assert_eq!(f.decider.stats().errors.load(Ordering::Relaxed), 2 * n - 2);
    // The key asked with a refused cost still has its whole limit.
    assert_eq!(f.remaining(&mine, T0), 15);
}

#[test]
fn an_allowed_ask_counts_once_and_is_recorded() {
    let f = Fixture::new();
    let key = key_in(1, "alice");
    let d = decision(f.allow(&key, b"", T0));
    assert!(d.allowed);
    assert_eq!((d.limit, d.remaining), (15, 14));
    assert_eq!(f.shard.changes(), 1);
    let (_, records) = f.send(Verb::Allow, &key, br#"{"cost":2}"#, true, T0);
    assert_eq!(records.len(), 1);
    assert_eq!(
        (
            records[0].n,
            records[0].p.as_str(),
            records[0].k.as_str(),
            records[0].c
        ),
        (1, "default", key.as_str(), 2)
    );
    assert_eq!(f.remaining(&key, T0), 12);
}

#[test]
fn a_peek_consumes_nothing() {
    let f = Fixture::new();
    let key = key_in(1, "peek");
    for _ in 0..20 {
        let (answer, records) = f.send(Verb::Allow, &key, br#"{"cost":0}"#, true, T0);
        let d = decision(answer.unwrap());
        assert!(d.allowed);
        assert_eq!(d.remaining, 15);
        assert!(records.is_empty());
    }
    assert_eq!(f.shard.changes(), 0);
}

#[test]
fn a_denial_changes_nothing_and_says_when_to_retry() {
    let f = Fixture::new();
    let key = key_in(1, "busy");
    for _ in 0..15 {
        assert!(decision(f.allow(&key, b"", T0)).allowed);
    }
    let changes = f.shard.changes();
    let (answer, records) = f.send(Verb::Allow, &key, b"", true, T0);
    let d = decision(answer.unwrap());
    assert!(!d.allowed);
    assert!(d.retry_after > Nanos::ZERO);
    assert!(records.is_empty());
    assert_eq!(f.shard.changes(), changes);
    assert_eq!(f.decider.stats().denied.load(Ordering::Relaxed), 1);
}

#[test]
fn every_limit_of_a_policy_must_hold() {
    let f = Fixture::new();
    let key = key_in(1, "login");
    let login = br#"{"policy":"login"}"#;
    let allowed = |now| decision(f.allow(&key, login, now)).allowed;
    assert!((0..3).all(|_| allowed(T0)));
    let d = decision(f.allow(&key, login, T0));
    assert!(!d.allowed, "the 1s limit holds");
    assert_eq!(d.limit, 3);
    let later = Nanos(T0.as_u64() + SEC);
    assert!(allowed(later) && allowed(later));
    let d = decision(f.allow(&key, login, later));
    assert!(!d.allowed, "the 1m limit holds");
    assert_eq!(d.limit, 5);
}

#[test]
fn a_hit_counts_over_the_limit_and_an_unanswerable_allow_counts_nothing() {
    let f = Fixture::new();
    let key = key_in(1, "hits");
    let (answer, records) = f.send(Verb::Hit, &key, br#"{"cost":20}"#, false, T0);
    assert!(answer.is_none());
    assert_eq!(records.len(), 1);
    assert_eq!(f.remaining(&key, T0), 0);
    // An allow nobody waits for (the mapping probe) is not a request.
    let other = key_in(1, "probe");
    let (answer, records) = f.send(Verb::Allow, &other, b"", false, T0);
    assert!(answer.is_none() && records.is_empty());
    assert_eq!(f.remaining(&other, T0), 15);
    // A hit with a reply subject answers what a peek would.
    let (answer, _) = f.send(Verb::Hit, &other, b"", true, T0);
    assert_eq!(decision(answer.unwrap()).remaining, 14);
}

#[test]
fn inspect_shows_every_limit_and_consumes_nothing() {
    let f = Fixture::new();
    let key = key_in(1, "seen");
    let login = br#"{"policy":"login"}"#;
    for _ in 0..2 {
        assert!(decision(f.allow(&key, login, T0)).allowed);
    }
    assert!(decision(f.allow(&key, b"", T0)).allowed);
    let changes = f.shard.changes();
    let inspect = |body: &[u8]| match f.send(Verb::Inspect, &key, body, true, T0).0 {
        Some(Answer::Inspect(reply, _)) => reply,
        other => panic!("expected an inspect reply, got {other:?}"),
    };
    let all = inspect(b"");
    assert_eq!(all.key, key);
    let mut names: Vec<&str> = all.policies.iter().map(|p| p.policy.as_str()).collect();
    names.sort();
    assert_eq!(names, ["default", "login"]);
    let login_state = inspect(login);
    assert_eq!(login_state.policies.len(), 1);
    let limits = &login_state.policies[0].limits;
    assert_eq!(
        limits
            .iter()
            .map(|l| (l.max, l.per_ms, l.used, l.remaining))
            .collect::<Vec<_>>(),
        [(3, 1_000, 2, 1), (5, 60_000, 2, 3)]
    );
    assert_eq!(login_state.policies[0].algorithm, "sliding_log");
    assert_eq!(f.shard.changes(), changes, "an inspect changed a counter");
    // Again: still the same, nothing was consumed.
    assert_eq!(inspect(login), login_state);
    // A key with no state shows no policy; an unknown policy is a 404.
    assert!(inspect_of(&f, &key_in(1, "never")).policies.is_empty());
    match f
        .send(Verb::Inspect, &key, br#"{"policy":"nope"}"#, true, T0)
        .0
    {
        Some(Answer::Error { error, .. }) => assert_eq!(error.code, ErrorCode::UnknownPolicy),
        other => panic!("expected a 404, got {other:?}"),
    }
}

fn inspect_of(f: &Fixture, key: &str) -> InspectReply {
    match f.send(Verb::Inspect, key, b"", true, T0).0 {
        Some(Answer::Inspect(reply, _)) => reply,
        other => panic!("expected an inspect reply, got {other:?}"),
    }
}

#[test]
fn reset_forgets_one_policy_or_all_and_is_journaled_and_replayed() {
    let f = Fixture::new();
    let key = key_in(1, "reset");
    for _ in 0..15 {
        f.allow(&key, b"", T0);
    }
    f.allow(&key, br#"{"policy":"login"}"#, T0);
    assert_eq!(f.remaining(&key, T0), 0);
    let (answer, records) = f.send(Verb::Reset, &key, br#"{"policy":"default"}"#, true, T0);
    match answer {
        Some(Answer::Reset(reply, Encoding::Json)) => assert_eq!(reply.reset, ["default"]),
        other => panic!("expected a reset reply, got {other:?}"),
    }
    assert_eq!(records.len(), 1);
    assert!(records[0].r && records[0].c == 0 && records[0].p == "default");
    assert_eq!(f.remaining(&key, T0), 15);
    assert_eq!(
        inspect_of(&f, &key).policies.len(),
        1,
        "login kept its state"
    );
    // All policies; then nothing is left to reset.
    let (answer, _) = f.send(Verb::Reset, &key, b"", true, T0);
    assert!(matches!(answer, Some(Answer::Reset(ref r, _)) if r.reset == ["login"]));
    let (answer, records) = f.send(Verb::Reset, &key, b"", true, T0);
    assert!(matches!(answer, Some(Answer::Reset(ref r, _)) if r.reset.is_empty()));
    assert!(records.is_empty());

    // Replayed in order at takeover: the counts, then the reset.
    let replayed = Counters::new();
    let counted = Record {
        n: 1,
        p: "default".into(),
        k: key.clone(),
        c: 15,
        t: T0.as_u64(),
        r: false,
        d: false,
        s: false,
        g: 0,
        u: 0,
        h: None,
        e: 0,
        x: 0,
        v: 0,
        i: None,
        q: 0,
    };
    let reset = Record {
        c: 0,
        r: true,
        d: false,
        ..counted.clone()
    };
    assert!(f.decider.replay(&f.policies, &counted, &replayed));
    assert!(!replayed.is_empty());
    assert!(f.decider.replay(&f.policies, &reset, &replayed));
    assert!(replayed.is_empty(), "the replayed reset forgot the key");
}

#[test]
fn a_reset_record_reads_as_before_when_it_is_no_reset() {
    // Records are stored positionally (rmp-serde arrays): a count keeps
    // its five fields, so journals written before resets existed read
    // the same, and a reset adds the sixth.
    let count = Record {
        n: 1,
        p: "default".into(),
        k: "k".into(),
        c: 2,
        t: 7,
        r: false,
        d: false,
        s: false,
        g: 0,
        u: 0,
        h: None,
        e: 0,
        x: 0,
        v: 0,
        i: None,
        q: 0,
    };
    let bytes = rmp_serde::to_vec(&count).unwrap();
    assert_eq!(bytes[0], 0x95, "a count is an array of five");
    let old: (u32, String, String, u64, u64) = rmp_serde::from_slice(&bytes).unwrap();
    assert_eq!(old, (1, "default".into(), "k".into(), 2, 7));
    let reset = Record {
        r: true,
        d: false,
        c: 0,
        ..count.clone()
    };
    let back: Record = rmp_serde::from_slice(&rmp_serde::to_vec(&reset).unwrap()).unwrap();
    assert_eq!(back, reset);
    // What a worker of the version before resets makes of a message
    // with one: the whole message is unreadable (and skipped, logged).
    #[derive(Deserialize, Debug)]
    #[allow(dead_code)]
    struct OldRecord {
        n: u32,
        p: String,
        k: String,
        c: u64,
        t: u64,
    }
    let message = rmp_serde::to_vec(&vec![reset.clone(), reset]).unwrap();
    let old = rmp_serde::from_slice::<Vec<OldRecord>>(&message);
    assert!(old.is_err(), "{old:?}");
    // A denial (usage): seven fields, read back as one.
    let denial = Record {
        d: true,
        c: 3,
        ..count.clone()
    };
    let bytes = rmp_serde::to_vec(&denial).unwrap();
    let back: Record = rmp_serde::from_slice(&bytes).unwrap();
    assert_eq!(back, denial);
    assert_eq!(rmp_serde::to_vec(&count).unwrap().first(), Some(&0x95));
    assert_eq!(bytes.first(), Some(&0x97));
}

#[test]
fn a_policy_changed_in_force_keeps_what_was_counted_and_a_new_algorithm_starts_afresh() {
    let f = Fixture::new();
    let key = key_in(1, "live");
    for _ in 0..5 {
        assert!(decision(f.allow(&key, b"", T0)).allowed);
    }
    let decide_under = |json: &[u8]| {
        let mut p = (*f.decider.policies()).clone();
        p.apply("default", Some(json)).unwrap();
        f.decider.set_policies(p);
        let policies = f.decider.policies();
        let mut log = f.decider.turn_log(f.owned());
        let subject = Verb::Allow.mapped_subject(f.partition, &key);
        let answer = f.decider.message(
            &policies,
            Message {
                subject: &subject,
                body: PEEK_BODY,
                wants_reply: true,
            },
            f.owned(),
            T0,
            &mut log,
        );
        decision(answer.unwrap())
    };
    // Lowered from 15 to 3 in the same window: the 5 counted stay.
    let d = decide_under(br#"{"algorithm":"sliding_window","limits":[{"max":3,"per":"1s"}]}"#);
    assert_eq!((d.limit, d.remaining, d.allowed), (3, 0, false));
    // Raised to 20: 15 left.
    let d = decide_under(br#"{"algorithm":"sliding_window","limits":[{"max":20,"per":"1s"}]}"#);
    assert_eq!((d.limit, d.remaining), (20, 15));
    // Another algorithm: the key starts afresh.
    let d = decide_under(br#"{"algorithm":"fixed_window","limits":[{"max":20,"per":"1s"}]}"#);
    assert_eq!((d.limit, d.remaining), (20, 20));
}

const PEEK_BODY: &[u8] = br#"{"cost":0}"#;

mod hostile {
    //! Arbitrary bytes on every subject a shard listens to: an answer
    //! (an error or a decision) whenever one is wanted, never a panic,
    //! and a counter changes only with a decision that counted.
    use super::*;
    use proptest::prelude::*;
    use sluice_core::subject::PARTITION_PREFIX;

    /// Bodies: any bytes, and near-misses of the real formats (a JSON
    /// or MessagePack map with odd fields and values), so the property
    /// reaches past the first byte.
    fn body() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..64),
            (
                "[a-z]{0,8}",
                prop_oneof![
                    any::<i64>().prop_map(|v| v.to_string()),
                    "\"[ -~]{0,12}\"".prop_map(String::from),
                    Just("null".to_string()),
                    Just("1.5".to_string()),
                    Just("[1]".to_string()),
                ]
            )
                .prop_map(|(k, v)| format!("{{\"{k}\":{v}}}").into_bytes()),
            (
                0u64..40,
                prop_oneof![
                    Just("default".to_string()),
                    Just("login".to_string()),
                    "[a-z_]{1,10}"
                ]
            )
                .prop_map(|(cost, policy)| {
                    wire::encode_request(Some(&policy), Some(cost), Encoding::MsgPack)
                }),
            proptest::collection::vec(any::<u8>(), 0..64).prop_map(|mut v| {
                v.insert(0, 0x81);
                v
            }),
        ]
    }

    fn token() -> impl Strategy<Value = String> {
        prop_oneof![
            "[A-Za-z0-9_%-]{1,12}".prop_map(String::from),
            "[ -~]{0,12}".prop_map(String::from),
            Just("*".to_string()),
            Just(">".to_string()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn any_message_gets_an_answer_and_only_a_counted_decision_changes_a_counter(
            verb in prop_oneof![Just("allow"), Just("hit"), Just("inspect"), Just("reset"), Just("batch")],
            token in token(),
            body in body(),
            wants_reply in any::<bool>(),
        ) {
            let f = Fixture::new();
            let subject = if verb == "batch" {
                batch_subject(f.partition)
            } else {
                format!("{PARTITION_PREFIX}.{}.{verb}.{token}", f.partition)
            };
            let mut log = f.decider.turn_log(f.owned());
            let answer = f.decider.message(&f.policies, Message { subject: &subject, body: &body, wants_reply }, f.owned(), T0, &mut log);
            let records = log.finish(f.decider.stats(), &f.shard);
            let counted = f.shard.changes();
            prop_assert_eq!(records.len() as u64, counted, "a record for every change (journal mode)");
            match answer {
                None => prop_assert!(
                    !wants_reply || verb == "inspect" || Inbound::parse(&subject).is_none(),
                    "a wanted reply was not given"
                ),
                Some(Answer::Error { .. }) | Some(Answer::Batch(Err(_))) => {
                    prop_assert_eq!(counted, 0, "an error reply changed a counter");
                    prop_assert!(f.counters.is_empty());
                }
                Some(Answer::Held { .. }) => prop_assert!(counted <= 2),
                Some(Answer::Decision { decision, .. }) => {
                    prop_assert!(counted <= 1);
                    if verb == "allow" && !decision.allowed {
                        prop_assert_eq!(counted, 0, "a denial changed a counter");
                    }
                }
                Some(Answer::Inspect(..)) => prop_assert_eq!(counted, 0, "an inspect changed a counter"),
                Some(Answer::Forward(_) | Answer::Gather(_)) => prop_assert!(false, "sent across without regions"),
                Some(Answer::Reset(reply, _)) => prop_assert_eq!(counted, reply.reset.len() as u64),
                Some(Answer::Batch(Ok(results))) => {
                    let decided = results.iter().filter(|r| matches!(r, wire::Reply::Decision(d) if d.allowed)).count();
                    prop_assert!(counted as usize <= decided);
                }
            }
        }
    }
}

/// Usage (SPEC §9) in snapshot mode goes into the ledger when
/// decided: allowed asks and hits as used, denied asks as denied, a
/// peek as neither, each under the policy asked for.
#[test]
fn usage_is_recorded_in_the_ledger_as_decided_in_snapshot_mode() {
    let f = Fixture::with(Config::from_toml(CONFIG, "test.toml").unwrap(), false);
    let ledger = Ledger::new(f.decider.config().usage.tiers.clone(), 0);
    let key = key_in(1, "u");
    let owned = Owned {
        usage: Some(&ledger),
        ..f.owned()
    };
    let send = |verb: Verb, body: &[u8]| {
        let subject = verb.mapped_subject(1, &key);
        let mut log = f.decider.turn_log(owned);
        let message = Message {
            subject: &subject,
            body,
            wants_reply: true,
        };
        f.decider.message(&f.policies, message, owned, T0, &mut log);
        assert!(
            log.finish(f.decider.stats(), &f.shard).is_empty(),
            "no records in snapshot mode"
        );
    };
    for _ in 0..17 {
        send(Verb::Allow, b""); // 15 allowed, 2 denied
    }
    send(Verb::Allow, br#"{"cost":0}"#);
    send(Verb::Hit, br#"{"cost":4}"#);
    send(Verb::Allow, br#"{"policy":"login","cost":2}"#);
    let minute = T0.as_u64() / 1_000_000 / 60_000 * 60_000;
    let everything = |_: &str, _: &str| true;
    let mut counts = ledger
        .minute_counts(minute, &everything)
        .expect("the minute is in memory")
        .lacking(&crate::usage::ledger::WriteMarks::default());
    counts.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        counts,
        vec![
            (
                "default".to_string(),
                key.clone(),
                Counts {
                    used: 19,
                    denied: 2
                }
            ),
            (
                "login".to_string(),
                key.clone(),
                Counts { used: 2, denied: 0 }
            ),
        ]
    );
}

/// In journal mode a denial becomes a record of its own (`d`), so its
/// usage survives a crash; a peek still stores nothing.
#[test]
fn a_denial_is_journaled_for_its_usage_in_journal_mode() {
    let f = Fixture::with(Config::from_toml(CONFIG, "test.toml").unwrap(), true);
    let key = key_in(1, "d");
    let mut records = Vec::new();
    for _ in 0..16 {
        records.extend(f.send(Verb::Allow, &key, b"", true, T0).1);
    }
    records.extend(f.send(Verb::Allow, &key, br#"{"cost":0}"#, true, T0).1);
    assert_eq!(records.len(), 16);
    assert!(records[..15].iter().all(|r| !r.d && r.c == 1));
    assert!(records[15].d && records[15].c == 1 && !records[15].r);
    // Replayed, a denial changes no counter.
    let fresh = Counters::new();
    assert!(!f.decider.replay(&f.policies, &records[15], &fresh));
    assert_eq!(fresh.len(), 0);
}
