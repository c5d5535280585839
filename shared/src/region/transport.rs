//! How each [`Action`] of a partition's global state travels over the
//! link (SPEC §12), and what a reply means as an [`Event`]: the subjects
//! and bodies, free of I/O, so that the worker's link task and the
//! deterministic simulator of the global limits send the same bytes and
//! read replies the same way. The link task adds only what needs a
//! network: the timeouts, the retries of a hit, and the coalescing of
//! tallies.

use crate::budget::Refund;
use crate::key::KeyToken;
use crate::region::state::{Action, Event};
use crate::region::tally::Reported;
use crate::region::RegionName;
use crate::subject::{
    link_ask, link_batch, link_give, link_hit, link_reclaim, link_resend, link_tally, Verb,
};
use crate::time::Nanos;
use crate::wire::batch::{self, Act, Budget, Item};
use crate::wire::link::{self, Resend, TallyBatch};
use crate::wire::Reply;
use std::borrow::Cow;
use std::collections::HashMap;

/// Whether a message waits for a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Send {
    /// A request: its reply (or the lack of one) tells how it went.
    Request,
    /// Published: nobody answers.
    Publish,
}

/// One message of the link, ready to go.
#[derive(Clone, Debug, PartialEq)]
pub struct Outgoing {
    pub subject: String,
    pub body: Vec<u8>,
    pub send: Send,
}

impl Outgoing {
    fn request(subject: String, body: Vec<u8>) -> Outgoing {
        Outgoing {
            subject,
            body,
            send: Send::Request,
        }
    }

    fn publish(subject: String, body: Vec<u8>) -> Outgoing {
        Outgoing {
            subject,
            body,
            send: Send::Publish,
        }
    }
}

/// A batch of one item of `policy` and `token`; `None` for a token that
/// is no key (the decision core made it from a key it took, so never).
fn one_item(
    policy: &str,
    token: &str,
    (cost, id): (u64, Option<&str>),
    budget: Budget,
) -> Option<Vec<u8>> {
    let item = Item {
        key: KeyToken::parse(token).ok()?,
        policy: Cow::Borrowed(policy),
        cost,
        id: id.map(Cow::Borrowed),
        act: Act::Ask(budget),
    };
    Some(batch::encode_items(&[item]))
}

/// The id of a refund over the link: the slice it is of (when it was
/// taken) and what it gives back and reports spent. A slice is given
/// back once, so no two refunds of a key share one.
pub fn refund_id(refund: &Refund) -> String {
    format!(
        "refund-{}-{}-{}",
        refund.taken_at.as_u64(),
        refund.units,
        refund.spent
    )
}

/// The messages that carry `action`, one per region it goes to. A tally
/// goes alone here ([`tally_message`] sends several together).
pub fn messages_of(action: &Action) -> Vec<Outgoing> {
    match action {
        Action::Grant {
            home,
            partition,
            policy,
            token,
            want,
            ..
        } => {
            // The batch protocol's slice rides on an ask of at least 1: at
            // the home, a link item's cost and slice are one grant of up to
            // their sum.
            let body = one_item(
                policy,
                token,
                (1, None),
                Budget::Slice(want.saturating_sub(1)),
            );
            let subject = link_batch(home.as_str(), *partition);
            body.map(|body| Outgoing::request(subject, body))
                .into_iter()
                .collect()
        }
        Action::Refund {
            home,
            partition,
            policy,
            token,
            refund,
        } => {
            // Named by what it gives back, so that the home takes a
            // refund the link carried twice once (SPEC §16).
            let id = refund_id(refund);
            let body = one_item(policy, token, (0, Some(&id)), Budget::Refund(*refund));
            let subject = link_batch(home.as_str(), *partition);
            body.map(|body| Outgoing::request(subject, body))
                .into_iter()
                .collect()
        }
        Action::Hit {
            home,
            partition,
            token,
            body,
            ..
        } => vec![Outgoing::request(
            link_hit(home.as_str(), *partition, token),
            body.clone(),
        )],
        Action::Reset {
            regions,
            partition,
            token,
            body,
        } => regions
            .iter()
            .map(|region| {
                let subject = link_ask(region.as_str(), *partition, Verb::Reset, token);
                Outgoing::request(subject, body.clone())
            })
            .collect(),
        Action::Gift {
            home,
            partition,
            gift,
        } => vec![Outgoing::publish(
            link_give(home.as_str(), *partition),
            link::encode(gift),
        )],
        Action::Tally {
            home,
            partition,
            from,
            report,
        } => vec![tally_message(
            home,
            *partition,
            from,
            std::slice::from_ref(report),
        )],
        Action::Resend {
            regions,
            partition,
            home,
        } => {
            let body = link::encode(&Resend {
                home: home.as_str().to_string(),
            });
            regions
                .iter()
                .map(|region| {
                    Outgoing::publish(link_resend(region.as_str(), *partition), body.clone())
                })
                .collect()
        }
        Action::Reclaim {
            regions,
            partition,
            reclaim,
        } => {
            let body = link::encode(reclaim);
            regions
                .iter()
                .map(|region| {
                    Outgoing::publish(link_reclaim(region.as_str(), *partition), body.clone())
                })
                .collect()
        }
    }
}

/// The request that reports `from`'s tallies `reports` to the home's
/// owner of `partition`.
pub fn tally_message(
    home: &RegionName,
    partition: u32,
    from: &RegionName,
    reports: &[Reported],
) -> Outgoing {
    let batch = TallyBatch {
        from: from.as_str().to_string(),
        reports: reports.to_vec(),
    };
    Outgoing::request(link_tally(home.as_str(), partition), link::encode(&batch))
}

/// What a reply to a [`Action::Grant`] means, received at `received`
/// (`None`: no reply in time): the event for the partition that asked
/// (none when nothing was granted) and whether the home answered, or why
/// not.
pub fn grant_outcome(
    action: &Action,
    reply: Option<&[u8]>,
    received: Nanos,
) -> (Option<Event>, Result<(), String>) {
    let Action::Grant {
        home,
        policy,
        token,
        sent,
        ..
    } = action
    else {
        return (None, Err(format!("{action:?} is no grant request")));
    };
    let Some(reply) = reply else {
        return (None, Err("no answer in time".to_string()));
    };
    let decided = match batch::decode_results(reply, 1) {
        Ok(mut results) => results.pop(),
        Err(e) => return (None, Err(format!("a reply that is no batch's: {e}"))),
    };
    match decided {
        Some(Reply::Decision(d)) => {
            let mut counter_key = String::new();
            crate::ask::counter_key(&mut counter_key, policy, token);
            let event = Event::Granted {
                home: home.clone(),
                counter_key,
                sent: *sent,
                received,
                grant: d.grant,
                decision: d.decision(),
            };
            (Some(event), Ok(()))
        }
        other => (None, Err(format!("the home refused a slice: {other:?}"))),
    }
}

/// Whether each home answers the requests of a worker's partitions: a
/// home is cut off when the latest request to it that got an outcome, by
/// when it was sent, got no answer or a refusal (no owner there), and
/// reachable when that one was answered. By send time, so that a request
/// sent before the link came back, which times out after a later one was
/// answered, does not mark it cut again. Before any request, a home is
/// taken as reachable. It is the link's health, not any key's: the
/// transport keeps it for all the worker's partitions and tells each of
/// them when it changes ([`Event::Reach`]), so that a partition that has
/// not asked for a while decides from what the others found.
#[derive(Debug, Default)]
pub struct LinkHealth {
    /// Per home: when the latest answered and the latest unanswered
    /// requests were sent.
    sent: HashMap<RegionName, (Nanos, Nanos)>,
}

impl LinkHealth {
    /// A request to `home` sent at `sent` was answered, or not: the
    /// [`Event::Reach`] to tell every partition when that changed whether
    /// the home is cut off.
    pub fn outcome(&mut self, home: &RegionName, sent: Nanos, answered: bool) -> Option<Event> {
        let was_cut = self.is_cut(home);
        let (ok, failed) = self.sent.entry(home.clone()).or_default();
        let latest = if answered { ok } else { failed };
        *latest = (*latest).max(sent);
        let cut = self.is_cut(home);
        (cut != was_cut).then(|| Event::Reach {
            home: home.clone(),
            cut,
        })
    }

    pub fn is_cut(&self, home: &RegionName) -> bool {
        self.sent.get(home).is_some_and(|(ok, failed)| failed > ok)
    }

    /// What a partition that starts now is told: every home cut off.
    pub fn now(&self) -> Vec<Event> {
        self.sent
            .keys()
            .filter(|home| self.is_cut(home))
            .map(|home| Event::Reach {
                home: home.clone(),
                cut: true,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::link::Reclaim;

    fn region(name: &str) -> RegionName {
        RegionName::new(name).unwrap()
    }

    /// A reclaim is published to each region asked; a grant request is a
    /// batch request to the home, and no reply makes it not granted.
    #[test]
    fn actions_become_the_link_messages_and_a_lost_grant_is_not_granted() {
        let reclaim = Action::Reclaim {
            regions: vec![region("west"), region("south")],
            partition: 3,
            reclaim: Reclaim {
                policy: "plan".into(),
                key: "alice".into(),
                window_start: 0,
            },
        };
        let sent: Vec<(String, Send)> = messages_of(&reclaim)
            .into_iter()
            .map(|m| (m.subject, m.send))
            .collect();
        assert_eq!(
            sent,
            [
                ("sluice-link.west.p.3.reclaim".to_string(), Send::Publish),
                ("sluice-link.south.p.3.reclaim".to_string(), Send::Publish),
            ]
        );
        let grant = Action::Grant {
            home: region("east"),
            partition: 3,
            policy: "plan".into(),
            token: "alice".into(),
            want: 10,
            sent: Nanos(5),
        };
        let messages = messages_of(&grant);
        assert_eq!(messages.len(), 1);
        assert_eq!(messages[0].subject, "sluice-link.east.p.3.batch");
        assert_eq!(messages[0].send, Send::Request);
        let (event, outcome) = grant_outcome(&grant, None, Nanos(9));
        assert_eq!(event, None);
        assert!(outcome.is_err());
        let (_, outcome) = grant_outcome(&grant, Some(b"\x01"), Nanos(9));
        assert!(outcome.unwrap_err().contains("no batch"), "a garbled reply");
    }

    /// A home is reachable until a request to it goes unanswered, cut off
    /// from then until one is answered again; each home on its own; a
    /// change is told once.
    #[test]
    fn a_home_is_cut_off_from_an_unanswered_request_to_a_later_answered_one() {
        let mut health = LinkHealth::default();
        let (east, south) = (region("east"), region("south"));
        let reach = |cut| {
            Some(Event::Reach {
                home: region("east"),
                cut,
            })
        };
        assert!(!health.is_cut(&east), "before any request");
        assert_eq!(health.outcome(&east, Nanos(10), false), reach(true));
        assert!(health.is_cut(&east));
        assert!(!health.is_cut(&south));
        assert_eq!(health.now(), [reach(true).unwrap()]);
        assert_eq!(health.outcome(&east, Nanos(20), false), None, "still cut");
        assert_eq!(health.outcome(&east, Nanos(30), true), reach(false));
        // A request sent before the link came back times out after.
        assert_eq!(health.outcome(&east, Nanos(25), false), None);
        assert!(
            !health.is_cut(&east),
            "a late timeout of an earlier request"
        );
        assert_eq!(health.outcome(&east, Nanos(40), false), reach(true));
    }
}
