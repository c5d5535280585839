//! Global limits at a delegate (SPEC §12): an ask that what the region
//! holds cannot pay for goes to the home while the link is up, and is
//! decided as `on_cut` says while it is cut off.

use super::*;
use sluice_core::region::state::Event;
use sluice_core::region::RegionName;

/// West, not the home, of a global window of 10 a minute decided from
/// slices alone (`on_cut = "closed"`): it holds nothing until a slice
/// comes.
fn west_of_a_closed_window() -> Fixture {
    let mut f = Fixture::journal(
        r#"
partitions = 4
region = "west"
[policies.default]
algorithm = "fixed_window"
limits = [ { max = 10, per = "1m" } ]
scope = "global"
home = "east"
regions = ["east", "west"]
on_cut = "closed"
"#,
    );
    f.decider = f.decider.in_region(RegionName::new("west").unwrap());
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
