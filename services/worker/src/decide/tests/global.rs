//! Global limits at a delegate (SPEC §12): an ask that what the region
//! holds cannot pay for goes to the home while the link is up, and is
//! decided as `on_cut` says while it is cut off.

use super::*;
use sluice_core::region::state::{Action, Event};
use sluice_core::region::RegionName;

/// West, not the home, of a global window of 10 a minute decided from
/// slices alone (`on_cut = "closed"`): it holds nothing until a slice
/// comes.
fn west_of_a_closed_window() -> Fixture {
    closed_window_in("west")
}

/// The window's owner in `region` (east is the home).
fn closed_window_in(region: &str) -> Fixture {
    window_in(region, 10, "closed")
}

/// The owner in `region` of a global window of `max` a minute whose home
/// is east, with `on_cut`.
fn window_in(region: &str, max: u64, on_cut: &str) -> Fixture {
    let mut f = Fixture::journal(&format!(
        r#"
partitions = 4
region = "{region}"
[policies.default]
algorithm = "fixed_window"
limits = [ {{ max = {max}, per = "1m" }} ]
scope = "global"
home = "east"
regions = ["east", "west"]
on_cut = "{on_cut}"
"#
    ));
    f.decider = f.decider.in_region(RegionName::new(region).unwrap());
    f
}

#[test]
fn an_ask_the_region_cannot_pay_for_goes_to_the_home_while_the_link_is_up() {
    let f = west_of_a_closed_window();
    let key = key_in(f.partition, "g");
    let (answer, records) = f.send(Verb::Allow, &key, b"", true, T0);
    match answer {
        Some(Answer::Forward(forward)) => {
            assert_eq!(forward.home.as_str(), "east");
            assert_eq!((forward.token.as_str(), forward.cost), (key.as_str(), 1));
            assert!(
                !forward.unanswered.allowed,
                "denied if the home does not answer"
            );
        }
        other => panic!("sent to the home, not answered here: {other:?}"),
    }
    assert!(records.is_empty(), "nothing counted here: {records:?}");
}

#[test]
fn while_the_home_is_cut_off_the_region_decides_as_on_cut_says() {
    let f = west_of_a_closed_window();
    f.counters.global().on_event(Event::Reach {
        home: RegionName::new("east").unwrap(),
        cut: true,
    });
    let key = key_in(f.partition, "c");
    let denied = decision(f.allow(&key, b"", T0));
    assert!(!denied.allowed, "closed: no slice, no answer from the home");
}

#[test]
fn in_a_batch_such_an_ask_is_answered_ask_alone() {
    let f = west_of_a_closed_window();
    let key = key_in(f.partition, "b");
    let item = batch::Item {
        key: sluice_core::key::KeyToken::parse(&key).unwrap(),
        policy: Cow::Borrowed("default"),
        cost: 1,
        id: None,
        act: Act::Ask(Budget::None),
    };
    let (results, _) = batch_of(&f, &[item], T0);
    match &results[..] {
        [wire::Reply::Error(e)] => {
            assert_eq!(e.code, ErrorCode::Unavailable);
            assert!(e.message.contains("alone"), "{}", e.message);
        }
        other => panic!("one 503 to ask alone: {other:?}"),
    }
}

/// What a hit of `key` at the west leaves to cross the link: the hit
/// sent to the home (west holds nothing to count it from).
fn hit_sent_home(west: &Fixture, key: &str) -> Vec<u8> {
    let subject = Verb::Hit.mapped_subject(west.partition, key);
    let mut log = west.decider.turn_log(west.owned());
    let message = Message {
        subject: &subject,
        body: br#"{"cost":3}"#,
        wants_reply: false,
    };
    west.decider
        .message(&west.policies, message, west.owned(), T0, &mut log);
    let actions = log.take_actions();
    log.finish(west.decider.stats(), &west.shard);
    let hits: Vec<&Vec<u8>> = (actions.now.iter())
        .filter_map(|a| match a {
            Action::Hit { body, .. } => Some(body),
            _ => None,
        })
        .collect();
    match &hits[..] {
        [body] => body.to_vec(),
        other => panic!("one hit sent to the home (and a slice asked for): {actions:?} {other:?}"),
    }
}

/// A hit the link sends twice (its answer was lost, so the link task
/// sends it again) counts once at the home: it carries an id the west
/// drew (SPEC §16). The same body without the id counts twice: the id is
/// what closes the gap.
#[test]
fn a_hit_sent_to_the_home_twice_counts_once_there_by_its_id() {
    let west = west_of_a_closed_window();
    let key = key_in(west.partition, "h");
    let body = hit_sent_home(&west, &key);
    let sent = wire::decode_request(&body).unwrap();
    assert!(sent.id.is_some(), "the hit is named: {sent:?}");

    let east = closed_window_in("east");
    let subject = sluice_core::subject::link_ask("east", east.partition, Verb::Hit, &key);
    let deliver = |body: &[u8]| {
        let mut log = east.decider.turn_log(east.owned());
        let message = Message {
            subject: &subject,
            body,
            wants_reply: true,
        };
        let answer = east
            .decider
            .message(&east.policies, message, east.owned(), T0, &mut log);
        log.finish(east.decider.stats(), &east.shard);
        answer
    };
    for _ in 0..2 {
        deliver(&body);
    }
    assert_eq!(east.remaining(&key, T0), 7, "3 of 10, counted once");

    let unnamed = wire::encode_request(Some("default"), Some(3), Encoding::MsgPack);
    for _ in 0..2 {
        deliver(&unnamed);
    }
    assert_eq!(east.remaining(&key, T0), 1, "without an id: twice 3 more");
}

/// The home's demand (what it keeps for its own asks out of a grant to
/// another region) is rebuilt by the journal's records of its own asks,
/// as a takeover after a crash replays them; what other regions' owners
/// sent is not its demand.
#[test]
fn the_journal_rebuilds_what_the_home_asked_of_a_key() {
    let east = window_in("east", 100, "reserved");
    let key = key_in(east.partition, "h");
    let mut records = Vec::new();
    for i in 0..6 {
        let (answer, made) = east.send(Verb::Allow, &key, b"", true, Nanos(T0.0 + i));
        assert!(matches!(answer, Some(Answer::Decision { decision, .. }) if decision.allowed));
        records.extend(made);
    }
    let limit = east.policies.get("default").unwrap().limits()[0].clone();
    let counter_key = format!("default/{key}");
    let later = Nanos(T0.0 + 1_000_000_000);
    let keeps = |counters: &Counters| {
        let mut global = counters.global();
        global.home_keeps(&counter_key, 50, &limit, later)
    };
    let restored = Counters::new();
    for record in &records {
        east.decider.replay(&east.policies, record, &restored);
    }
    assert_eq!(keeps(&restored), keeps(&east.counters));
    assert_eq!(keeps(&restored), 44, "6 of its share of 50 taken");
    // Without the replay, no ask of its own seen 41 s into the window:
    // it would keep nothing.
    assert_eq!(keeps(&Counters::new()), 0);
}

/// A gift of spare units the link carries twice (NATS may deliver a
/// publish again after a reconnect) fills the home's part once: the home
/// remembers it by its id ([`sluice_core::wire::link::Gift::id`]), and
/// the journal keeps that id, whose replay gives the gift again after a
/// crash, and drops a repeat after it.
/// Found by the simulator (tests/simulate, seed 2587): a doubled gift let
/// a global GCRA admit one more than its bound.
#[test]
fn a_gift_the_link_carries_twice_fills_the_homes_part_once() {
    let mut east = Fixture::journal(
        r#"
partitions = 4
region = "east"
[policies.default]
algorithm = "token_bucket"
limits = [ { max = 10, per = "1m" } ]
scope = "global"
home = "east"
regions = ["east", "west"]
region_shares = { east = 1, west = 1 }
on_cut = "reserved"
"#,
    );
    east.decider = east.decider.in_region(RegionName::new("east").unwrap());
    let key = key_in(east.partition, "gift");
    let mut records = Vec::new();
    for _ in 0..5 {
        let (answer, made) = east.send(Verb::Allow, &key, b"", true, T0);
        assert!(matches!(answer, Some(Answer::Decision { decision, .. }) if decision.allowed));
        records.extend(made);
    }
    assert_eq!(east.remaining(&key, T0), 0, "east's part (5 of 10) spent");

    let gift = sluice_core::wire::link::Gift {
        policy: "default".into(),
        key: key.clone(),
        units: 2,
        taken_at: T0.as_u64(),
        from: "west".into(),
    };
    let body = sluice_core::wire::link::encode(&gift);
    let subject = sluice_core::subject::link_give("east", east.partition);
    let deliver = |counters: &Counters, records: &mut Vec<Record>| {
        let owned = Owned {
            counters,
            ..east.owned()
        };
        let mut log = east.decider.turn_log(owned);
        let message = Message {
            subject: &subject,
            body: &body,
            wants_reply: false,
        };
        east.decider
            .message(&east.policies, message, owned, T0, &mut log);
        records.extend(log.finish(east.decider.stats(), &east.shard));
    };
    deliver(&east.counters, &mut records);
    deliver(&east.counters, &mut Vec::new());
    assert_eq!(east.remaining(&key, T0), 2, "given once");

    // After a crash, the journal's records rebuild the count, the gift
    // (the record of its id) and its id: a late repeat gives nothing.
    let restored = Counters::new();
    for record in &records {
        east.decider.replay(&east.policies, record, &restored);
    }
    deliver(&restored, &mut Vec::new());
    let state = restored.state(&format!("default/{key}")).expect("restored");
    let part = east.policies.get("default").unwrap();
    let part = part.counted_under(east.decider.region());
    assert_eq!(part.inspect(&state, T0)[0].remaining, 2, "given once again");
}
