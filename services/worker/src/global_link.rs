//! The task that carries global limits' messages over the link between
//! regions (SPEC §12): transport only. It sends the actions the shards
//! hand it ([`crate::global`], which holds the why) on the link
//! connection, and hands what came of each request back to the shard of
//! the partition that made it as a `sluice_core::region::state::Event`,
//! and tells every partition when the link is cut or back; it keeps no
//! state of the keys. Apart from `global.rs` so that the decision core
//! needs no NATS.

use crate::global::{Forward, Gather, Link, Mailboxes, Need};
use sluice_core::region::global::ASK_TIMEOUT;
use sluice_core::region::report::combine;
use sluice_core::region::state::Action;
use sluice_core::region::tally::Reported;
use sluice_core::region::transport::{self, Outgoing, Send};
use sluice_core::region::RegionName;
use sluice_core::subject::{is_safe_reply_subject, link_answered, link_ask, Verb};
use sluice_core::time::{Clock, Nanos};
use sluice_core::wire::batch;
use sluice_core::wire::inspect::{decode_admin_reply, encode_scope, InspectReply, RegionReport};
use sluice_core::wire::link::{self, Answered};
use sluice_core::wire::{decode_reply, Encoding, Reply};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Starts the link task on `client` (the link connection).
pub fn start(
    client: async_nats::Client,
    clock: Arc<dyn Clock>,
) -> (Link, tokio::task::JoinHandle<()>) {
    let (needs, rx) = mpsc::unbounded_channel();
    let mailboxes = Arc::new(Mailboxes::default());
    let task = tokio::spawn(run(rx, client, clock, mailboxes.clone()));
    (Link::new(needs, mailboxes), task)
}

async fn run(
    mut needs: mpsc::UnboundedReceiver<Need>,
    client: async_nats::Client,
    clock: Arc<dyn Clock>,
    mailboxes: Arc<Mailboxes>,
) {
    let mut tallies = PendingTallies::default();
    let (untaken, mut put_back) = mpsc::unbounded_channel::<TallyGroup>();
    let mut tick = tokio::time::interval(TALLY_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            need = needs.recv() => {
                let Some(need) = need else { return };
                if let Need::Act(Action::Tally { home, partition, from, report }) = need {
                    tallies.add((home, partition), from, report);
                    continue;
                }
                let client = client.clone();
                let clock = clock.clone();
                let mailboxes = mailboxes.clone();
                // Each on its own: one lost request must not hold up the others.
                tokio::spawn(async move {
                    if let Err(e) = carry(need, &client, &*clock, &mailboxes).await {
                        tracing::debug!("a global limit's message across the link failed: {e:#}");
                    }
                });
            }
            Some(group) = put_back.recv() => tallies.put_back(group),
            _ = tick.tick(), if !tallies.is_empty() => {
                for group in tallies.take() {
                    let (client, untaken) = (client.clone(), untaken.clone());
                    tokio::spawn(async move {
                        if let Err(e) = send_tallies(&group, &client).await {
                            tracing::debug!("tallies for region {} not taken yet: {e:#}", group.to.0);
                            let _ = untaken.send(group);
                        }
                    });
                }
            }
        }
    }
}

/// How often the tallies waiting go to their homes: an alert of a global
/// key fires at most this much (and one link trip) after the spending.
const TALLY_EVERY: Duration = Duration::from_millis(250);

/// The most keys whose tallies wait to go (over every home and
/// partition); past it, new reports are dropped until some are taken, and
/// the next spending of those keys reports them again.
const MOST_PENDING_TALLIES: usize = 65_536;

/// The tallies one partition at a home is sent at once, by the key they are of.
struct TallyGroup {
    to: (RegionName, u32),
    from: RegionName,
    reports: HashMap<(String, String), Reported>,
}

/// The latest report of each key not taken by its home yet.
#[derive(Default)]
struct PendingTallies {
    groups: HashMap<(RegionName, u32), TallyGroup>,
    keys: usize,
    dropped_warned: bool,
}

impl PendingTallies {
    fn is_empty(&self) -> bool {
        self.keys == 0
    }

    /// Keeps `report`, in place of the key's earlier one.
    fn add(&mut self, to: (RegionName, u32), from: RegionName, report: Reported) {
        let group = self.groups.entry(to.clone()).or_insert_with(|| TallyGroup {
            to,
            from,
            reports: HashMap::new(),
        });
        let key = (report.policy.clone(), report.key.clone());
        if !group.reports.contains_key(&key) {
            if self.keys >= MOST_PENDING_TALLIES {
                if !self.dropped_warned {
                    tracing::warn!(
                        "{MOST_PENDING_TALLIES} keys' tallies wait for their homes (link down?): \
                         newer reports are dropped until some are taken"
                    );
                    self.dropped_warned = true;
                }
                return;
            }
            self.keys += 1;
        }
        group.reports.insert(key, report);
    }

    /// Every group waiting, to send.
    fn take(&mut self) -> Vec<TallyGroup> {
        self.keys = 0;
        self.dropped_warned = false;
        self.groups.drain().map(|(_, group)| group).collect()
    }

    /// A group its home did not take: each report waits again, unless a
    /// newer one of its key came meanwhile.
    fn put_back(&mut self, group: TallyGroup) {
        let TallyGroup { to, from, reports } = group;
        for (key, report) in reports {
            let newer = self
                .groups
                .get(&to)
                .is_some_and(|waiting| waiting.reports.contains_key(&key));
            if !newer {
                self.add(to.clone(), from.clone(), report);
            }
        }
    }
}

/// Sends one group of tallies to its home's owner; an error when it was
/// not taken (no answer, no owner there, refused).
async fn send_tallies(group: &TallyGroup, client: &async_nats::Client) -> anyhow::Result<()> {
    let (home, partition) = &group.to;
    let reports: Vec<Reported> = group.reports.values().cloned().collect();
    let message = transport::tally_message(home, *partition, &group.from, &reports);
    let reply = request(client, message.subject, message.body).await?;
    batch::decode_results(&reply.payload, 0)?;
    Ok(())
}

/// The pauses between sends of a hit the home did not take.
const HIT_FIRST_RETRY: Duration = Duration::from_millis(100);
const HIT_MAX_RETRY: Duration = Duration::from_secs(2);

fn timeout() -> Duration {
    ASK_TIMEOUT.into()
}

async fn request(
    client: &async_nats::Client,
    subject: String,
    body: Vec<u8>,
) -> anyhow::Result<async_nats::Message> {
    let reply = tokio::time::timeout(timeout(), client.request(subject, body.into()))
        .await
        .map_err(|_| anyhow::anyhow!("no answer within {:?}", timeout()))??;
    Ok(reply)
}

async fn carry(
    need: Need,
    client: &async_nats::Client,
    clock: &dyn Clock,
    mailboxes: &Mailboxes,
) -> anyhow::Result<()> {
    match need {
        Need::Act(action) => act(action, client, clock, mailboxes).await,
        Need::Forward { forward, reply } => relay(forward, reply, client, clock, mailboxes).await,
        Need::Gather { gather, reply } => complete(gather, reply, client).await,
    }
}

/// Carries out one action: its messages (`sluice_core::region::transport`),
/// with the timeouts and the retries a network needs; a grant's outcome
/// goes back to the partition that asked.
async fn act(
    action: Action,
    client: &async_nats::Client,
    clock: &dyn Clock,
    mailboxes: &Mailboxes,
) -> anyhow::Result<()> {
    let messages = transport::messages_of(&action);
    match &action {
        Action::Grant {
            home,
            partition,
            sent,
            ..
        } => {
            let Some(message) = messages.into_iter().next() else {
                anyhow::bail!("a grant request for no key: {action:?}");
            };
            let answered = request(client, message.subject, message.body).await;
            let reply = answered.as_ref().ok().map(|m| &m.payload[..]);
            let (event, outcome) = transport::grant_outcome(&action, reply, clock.now());
            mailboxes.reached(home, *sent, outcome.is_ok());
            if let Some(event) = event {
                mailboxes.deliver(*partition, event);
            }
            if let Err(why) = outcome {
                anyhow::bail!("{why}");
            }
        }
        Action::Hit {
            home, token, until, ..
        } => {
            for message in messages {
                send_hit(message, (home, token), *until, client, clock).await?;
            }
        }
        Action::Reset { token, .. } => {
            for message in messages {
                // A region cut off now does not get it: its counts stay.
                if let Err(e) = request(client, message.subject.clone(), message.body).await {
                    tracing::warn!(
                        "the reset of {token} ({}) did not reach its region ({e:#}); its count \
                         there stays",
                        message.subject
                    );
                }
            }
        }
        _ => {
            for message in messages {
                match message.send {
                    Send::Request => {
                        request(client, message.subject, message.body).await?;
                    }
                    Send::Publish => {
                        client.publish(message.subject, message.body.into()).await?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// Sends a hit to the home until it takes it: again after a 5xx (no owner
/// of the partition there right now) or no answer, until `until`.
async fn send_hit(
    message: Outgoing,
    (home, token): (&RegionName, &str),
    until: Nanos,
    client: &async_nats::Client,
    clock: &dyn Clock,
) -> anyhow::Result<()> {
    let mut pause = HIT_FIRST_RETRY;
    loop {
        let error = match request(client, message.subject.clone(), message.body.clone()).await {
            Ok(m) => match decode_reply(&m.payload)? {
                Reply::Decision(_) => return Ok(()),
                Reply::Error(e) if e.code.status() >= 500 => anyhow::anyhow!("{e}"),
                Reply::Error(e) => anyhow::bail!("the home refused a hit: {e}"),
            },
            Err(e) => e,
        };
        if clock.now().saturating_add(pause.into()) >= until {
            tracing::warn!(
                "a hit of {token} for the home region {home} is dropped: its window ended \
                 before the home took it ({error:#}); it stays in this region's usage"
            );
            return Ok(());
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(HIT_MAX_RETRY);
    }
}

/// Sends a forwarded ask to the home's owner and relays its answer to the
/// asker as it came (headers and body, in the asker's encoding); when the
/// home does not answer in time, or refuses (no owner there), answers the
/// forward's denial instead and takes the home as cut off. Then tells this
/// region's owner of the partition what was answered, for the ask's usage.
async fn relay(
    forward: Forward,
    reply: String,
    client: &async_nats::Client,
    clock: &dyn Clock,
    mailboxes: &Mailboxes,
) -> anyhow::Result<()> {
    // As every reply: never into sluice's own subjects (docs/SECURITY.md).
    if !is_safe_reply_subject(&reply) {
        anyhow::bail!("a forwarded ask's reply subject {reply} is not an inbox");
    }
    let sent = clock.now();
    let subject = link_ask(
        forward.home.as_str(),
        forward.partition,
        Verb::Allow,
        &forward.token,
    );
    let answer = request(client, subject, forward.body.clone()).await;
    let decided = answer
        .as_ref()
        .ok()
        .and_then(|m| match decode_reply(&m.payload) {
            // A shadow denial is answered allowed, and is a denial.
            Ok(Reply::Decision(d)) => Some(Ok(d.allowed && !d.shadow_denied)),
            Ok(Reply::Error(e)) if e.code.status() < 500 => Some(Err(())),
            _ => None,
        });
    mailboxes.reached(&forward.home, sent, decided.is_some());
    let allowed = match (answer, decided) {
        (Ok(m), Some(decided)) => {
            let headers = m.headers.unwrap_or_default();
            client
                .publish_with_headers(reply, headers, m.payload)
                .await?;
            decided.ok()
        }
        _ => {
            let encoding = Encoding::of_body(&forward.body);
            let denial =
                crate::reply::Reply::decision(&forward.unanswered, &forward.decided_by, encoding);
            client
                .publish_with_headers(reply, denial.headers, denial.payload)
                .await?;
            Some(false)
        }
    };
    // An ask refused as a bad request counted nothing anywhere.
    let Some(allowed) = allowed else {
        return Ok(());
    };
    let note = Answered {
        policy: forward.policy,
        key: forward.token,
        cost: forward.cost,
        allowed,
    };
    let subject = link_answered(forward.here.as_str(), forward.partition);
    client.publish(subject, link::encode(&note).into()).await?;
    Ok(())
}

/// Completes an inspect of a key with global policies: asks every other
/// region the policy holds across for its own state of the key (at once,
/// each within [`ASK_TIMEOUT`]), reports each region's and the global
/// state they make (`sluice_core::region::report`), and answers `reply`.
async fn complete(
    gather: Gather,
    reply: String,
    client: &async_nats::Client,
) -> anyhow::Result<()> {
    if !is_safe_reply_subject(&reply) {
        anyhow::bail!("an inspect's reply subject {reply} is not an inbox");
    }
    let Gather {
        reply: mut inspect,
        encoding,
        partition,
        policies,
    } = gather;
    let token = inspect.key.clone();
    for policy in policies {
        let asks = policy.regions.iter().map(|(region, here, own)| {
            let (token, name) = (&token, &policy.policy);
            async move {
                let (reached, limits) = match here {
                    true => (true, own.clone()),
                    false => {
                        let subject = link_ask(region.as_str(), partition, Verb::Inspect, token);
                        let body = encode_scope(Some(name), Encoding::MsgPack);
                        match request(client, subject, body)
                            .await
                            .map(|m| decode_admin_reply::<InspectReply>(&m.payload))
                        {
                            Ok(Ok(theirs)) => {
                                let found = theirs.policies.into_iter().find(|p| p.policy == *name);
                                // No state there: its part is whole.
                                (true, found.map_or_else(|| own.clone(), |p| p.limits))
                            }
                            _ => (false, Vec::new()),
                        }
                    }
                };
                RegionReport {
                    region: region.as_str().to_string(),
                    reached,
                    limits,
                }
            }
        });
        let regions = futures::future::join_all(asks).await;
        let global = combine(policy.count, &policy.whole, policy.home.as_str(), &regions);
        if let Some(report) = inspect
            .policies
            .iter_mut()
            .find(|p| p.policy == policy.policy)
        {
            report.limits = global;
            report.regions = Some(regions);
        }
    }
    let answer = crate::reply::Reply::body(inspect.encode(encoding), encoding);
    client
        .publish_with_headers(reply, answer.headers, answer.payload)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::algorithm::fixed_window::State;

    fn report(key: &str, count: u64) -> Reported {
        Reported {
            policy: "plan".to_string(),
            key: key.to_string(),
            windows: vec![State { start: 0, count }],
        }
    }

    fn counts(pending: &mut PendingTallies) -> Vec<(String, u64)> {
        let mut all: Vec<(String, u64)> = pending
            .take()
            .into_iter()
            .flat_map(|g| g.reports.into_values())
            .map(|r| (r.key, r.windows[0].count))
            .collect();
        all.sort();
        all
    }

    /// The latest report of a key waits; one not taken waits again unless
    /// a newer one came meanwhile.
    #[test]
    fn the_latest_report_of_each_key_waits_until_taken() {
        let east = RegionName::new("east").unwrap();
        let west = RegionName::new("west").unwrap();
        let mut pending = PendingTallies::default();
        pending.add((east.clone(), 3), west.clone(), report("a", 1));
        pending.add((east.clone(), 3), west.clone(), report("a", 4));
        pending.add((east.clone(), 3), west.clone(), report("b", 2));
        let mut sent = pending.take();
        assert!(pending.is_empty());
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].reports.len(), 2);
        // Not taken; meanwhile a newer report of a.
        pending.add((east.clone(), 3), west.clone(), report("a", 9));
        pending.put_back(sent.pop().unwrap());
        assert_eq!(
            counts(&mut pending),
            [("a".to_string(), 9), ("b".to_string(), 2)]
        );
        assert!(pending.is_empty());
    }
}
