//! Hold verbs as batch items in the decision core (SPEC §13): a batch's
//! reserve, settle and extend decide, count, journal and answer exactly as
//! the verbs on their own subjects; concurrency holds within one batch,
//! items in order; each refused item gets the verb's own error in its slot.

use super::*;
use sluice_core::holds::HoldId;
use sluice_core::wire::batch::HoldAct;
use sluice_core::wire::hold::HoldTicket;

/// Journal mode, usage off: `llm` (10,000 an hour) and `inflight` (two
/// in flight).
pub(super) fn holds_fixture() -> Fixture {
    Fixture::journal(
        r#"
        partitions = 4
        [policies.llm]
        algorithm = "token_bucket"
        limits = [ { max = 10000, per = "1h" } ]
        [policies.inflight]
        concurrency = 2
        "#,
    )
}

fn act(verb: Verb, ttl_ms: Option<u64>, hold: Option<HoldId>) -> Act {
    Act::Hold(HoldAct { verb, ttl_ms, hold })
}

fn hold_item<'a>(key: &'a str, policy: &'a str, cost: u64, act: Act) -> batch::Item<'a> {
    batch::Item {
        key: KeyToken::parse(key).unwrap(),
        policy: Cow::Borrowed(policy),
        cost,
        id: None,
        act,
    }
}

/// What one item was answered, as a batch result: the verb alone goes
/// through the same encoding ([`wire::hold::encode_held`]) and is decoded
/// back.
fn alone(f: &Fixture, item: &batch::Item<'_>, now: Nanos) -> (wire::Reply, Vec<Record>) {
    let Act::Hold(HoldAct { verb, ttl_ms, hold }) = item.act else {
        panic!("a hold item")
    };
    let hold = hold.map(|h| h.to_string());
    let ask = wire::hold::HoldAsk {
        policy: Some(&item.policy),
        cost: (verb != Verb::Extend).then_some(item.cost),
        ttl_ms,
        hold: hold.as_deref(),
        id: None,
        wait_ms: None,
    };
    let body = wire::hold::encode_hold_request(&ask, Encoding::MsgPack);
    let (answer, records) = f.send(verb, item.key.as_str(), &body, true, now);
    let reply = crate::reply::Reply::of(&answer.expect("answered"), "w");
    (wire::decode_reply(&reply.payload).unwrap(), records)
}

/// Replies and records as text with the hold ids (drawn at random by
/// each decider) written `#<n>`, numbered in order of appearance.
fn with_ids_named(replies: &[wire::Reply], records: &[Record]) -> String {
    let text: Vec<char> = format!("{replies:?} {records:?}").chars().collect();
    let mut seen: Vec<String> = Vec::new();
    let mut out = String::new();
    let mut i = 0;
    while i < text.len() {
        let run: String = text[i..]
            .iter()
            .take_while(|c| c.is_ascii_hexdigit())
            .collect();
        match run.len() {
            0 => {
                out.push(text[i]);
                i += 1;
                continue;
            }
            32 => {
                let n = seen.iter().position(|s| *s == run).unwrap_or_else(|| {
                    seen.push(run.clone());
                    seen.len() - 1
                });
                out.push_str(&format!("#{n}"));
            }
            _ => out.push_str(&run),
        }
        i += run.len();
    }
    out
}

fn ticket(reply: &wire::Reply) -> HoldId {
    match reply {
        wire::Reply::Decision(DecisionReply {
            hold: Some(HoldTicket { hold, .. }),
            ..
        }) => HoldId::parse(hold).unwrap(),
        other => panic!("a kept hold: {other:?}"),
    }
}

/// (ms after T0, policy, cost, verb, ttl_ms, the hold of step n).
type Step = (u64, &'static str, u64, Verb, Option<u64>, Option<usize>);

/// The same steps on two owners at the same times: one gets each verb on
/// its own subject, the other each in a batch of one. Replies (hold and
/// end included), records and stats are the same, but for the ids.
#[test]
fn a_batched_hold_verb_answers_counts_and_journals_as_the_verb_alone() {
    let (single, batched) = (holds_fixture(), holds_fixture());
    let key = key_in(1, "user");
    let key = key.as_str();
    let (mut singles, mut batches) = (Vec::new(), Vec::new());
    let (mut single_records, mut batch_records) = (Vec::new(), Vec::new());
    let steps: [Step; 12] = [
        (0, "llm", 4000, Verb::Reserve, Some(60_000), None),
        (10, "llm", 0, Verb::Extend, Some(120_000), Some(0)),
        (20, "llm", 1500, Verb::Settle, None, Some(0)),
        (30, "llm", 1500, Verb::Settle, None, Some(0)), // settled: 404
        (40, "llm", 20_000, Verb::Reserve, None, None), // above capacity: 400
        (50, "llm", 1, Verb::Reserve, Some(7_200_000), None), // ttl over 1 h: 400
        (60, "nope", 1, Verb::Reserve, None, None),     // unknown policy: 404
        (70, "inflight", 1, Verb::Reserve, None, None),
        (80, "inflight", 1, Verb::Reserve, None, None),
        (90, "inflight", 1, Verb::Reserve, None, None), // full: denied
        (100, "inflight", 1, Verb::Settle, None, Some(7)),
        (110, "inflight", 1, Verb::Reserve, None, None),
    ];
    for (ms, policy, cost, verb, ttl_ms, of) in steps {
        let now = T0.saturating_add(Nanos::from_millis(ms));
        let hold_of = |replies: &[wire::Reply]| of.map(|n| ticket(&replies[n]));
        let a = hold_item(key, policy, cost, act(verb, ttl_ms, hold_of(&singles)));
        let b = hold_item(key, policy, cost, act(verb, ttl_ms, hold_of(&batches)));
        let (reply, mut records) = alone(&single, &a, now);
        singles.push(reply);
        single_records.append(&mut records);
        let (mut replies, mut records) = batch_of(&batched, &[b], now);
        batches.append(&mut replies);
        batch_records.append(&mut records);
    }
    // Each ask alone is a turn, a batch of one item too, but a refused
    // ask still takes a turn: the numbers differ, their order does not.
    for records in [&mut single_records, &mut batch_records] {
        assert!(records.windows(2).all(|w| w[0].q < w[1].q), "{records:?}");
        records.iter_mut().for_each(|r| r.q = 0);
    }
    assert_eq!(
        with_ids_named(&singles, &single_records),
        with_ids_named(&batches, &batch_records)
    );
    let words: Vec<_> = batches
        .iter()
        .map(|r| match r {
            wire::Reply::Decision(d) => format!("{} {}", d.allowed, d.remaining),
            wire::Reply::Error(e) => e.code.word().to_string(),
        })
        .collect();
    assert_eq!(
        words,
        [
            "true 6000",
            "true 6000",
            "true 8500",
            "unknown_hold",
            "bad_request",
            "bad_request",
            "unknown_policy",
            "true 1",
            "true 0",
            "false 0",
            "true 1",
            "true 0",
        ],
        "{batches:?}"
    );
    // Settles and extends are not decisions; a denied reserve is denied.
    for stats in [single.decider.stats(), batched.decider.stats()] {
        let count = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        assert_eq!(
            (
                count(&stats.allowed),
                count(&stats.denied),
                count(&stats.errors)
            ),
            (4, 1, 4)
        );
    }
}

/// Within one batch, items are decided in order: a concurrency of 2 holds
/// over three reserves, and a settle ahead of a reserve frees its slot.
#[test]
fn concurrency_holds_within_one_batch_in_item_order() {
    let f = holds_fixture();
    let key = key_in(1, "tenant");
    let reserve = || hold_item(&key, "inflight", 1, act(Verb::Reserve, None, None));
    let (results, _) = batch_of(&f, &[reserve(), reserve(), reserve()], T0);
    let allowed: Vec<bool> = results
        .iter()
        .map(|r| matches!(r, wire::Reply::Decision(d) if d.allowed && d.hold.is_some()))
        .collect();
    assert_eq!(allowed, [true, true, false], "{results:?}");
    let first = ticket(&results[0]);
    let settle = hold_item(&key, "inflight", 1, act(Verb::Settle, None, Some(first)));
    let (results, _) = batch_of(&f, &[reserve(), settle, reserve()], Nanos(T0.0 + 1));
    let words: Vec<_> = results
        .iter()
        .map(|r| match r {
            wire::Reply::Decision(d) => (d.allowed, d.hold.is_some()),
            wire::Reply::Error(e) => panic!("{e}"),
        })
        .collect();
    assert_eq!(words, [(false, false), (true, false), (true, true)]);
}

/// A hold item of a partition this owner does not answer for gets the
/// 503 of the partition check and changes nothing; its neighbour is
/// decided.
#[test]
fn a_hold_item_of_another_partition_gets_503_and_changes_nothing() {
    let f = holds_fixture();
    let (here, elsewhere) = (key_in(1, "user"), key_in(2, "user"));
    let items = [
        hold_item(&elsewhere, "llm", 10, act(Verb::Reserve, None, None)),
        hold_item(&here, "llm", 10, act(Verb::Reserve, None, None)),
    ];
    let (results, records) = batch_of(&f, &items, T0);
    let wire::Reply::Error(e) = &results[0] else {
        panic!("{results:?}")
    };
    assert_eq!(e.code, ErrorCode::Unavailable);
    ticket(&results[1]);
    assert_eq!(records.len(), 1, "only the reserve here: {records:?}");
    assert_eq!(records[0].k, here);
}
