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
