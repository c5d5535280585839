//! A shard's turns at deciding: a batch of messages taken from its
//! subjects, and the sweep that ends holds nobody settled. Apart from
//! `shard.rs`, which moves messages, timers and store calls.

use super::Shard;
use crate::decide::{Answer, Message, Owned};
use crate::reply::Reply;
use crate::traced::Traced;
use sluice_core::region::state::Event;
use sluice_core::subject::{Inbound, Verb};

impl Shard {
    /// The partition as the decision core is handed it.
    pub(super) fn owned(&self) -> Owned<'_> {
        self.owner.owned()
    }

    /// Sweeps what ended in the kept state ([`super::SWEEP`]): the holds
    /// whose end has come, and the global slices whose lease ended.
    pub(super) async fn sweep(&mut self) {
        self.end_holds().await;
        self.sweep_global();
    }

    /// Ends the holds whose end has come (SPEC §13): what they release
    /// goes back, what they charge is usage, in journal mode stored as any
    /// count is.
    async fn end_holds(&mut self) {
        if self.owner.counters().outstanding().holds_len() == 0 {
            return;
        }
        let answering = &self.answering;
        let now = answering.clock.now();
        let owned = self.owned();
        let policies = answering.decider.policies();
        let mut log = answering.decider.turn_log(owned);
        answering.decider.end_holds(&policies, owned, now, &mut log);
        let then = answering.perform(log.take_actions());
        let records = log.finish(&self.owning.stats, self.owner.stats());
        answering
            .outbox
            .answer(records, Vec::new(), std::time::Instant::now(), then)
            .await;
    }

    /// Gives back the slices of global keys whose lease ended (SPEC
    /// §12, [`crate::global`]).
    fn sweep_global(&self) {
        let answering = &self.answering;
        let Some(link) = &answering.link else {
            return;
        };
        let policies = answering.decider.policies();
        let refunds =
            answering
                .decider
                .sweep_global(&policies, self.owned(), answering.clock.now());
        link.perform(refunds);
    }

    /// Applies what the link did with this partition's requests (SPEC
    /// §12): `first`, and whatever else waits.
    pub(super) fn link_events(
        &self,
        first: Event,
        more: &mut tokio::sync::mpsc::UnboundedReceiver<Event>,
    ) {
        let mut state = self.owner.counters().global();
        state.on_event(first);
        while let Ok(event) = more.try_recv() {
            state.on_event(event);
        }
    }

    /// Decides a batch of messages, the first taken at `received`, and
    /// hands the replies to the outbox.
    pub(super) async fn process(
        &mut self,
        batch: &mut Vec<async_nats::Message>,
        received: std::time::Instant,
    ) {
        if batch.is_empty() {
            return;
        }
        let answering = &self.answering;
        let now = answering.clock.now();
        let owned = self.owned();
        let policies = answering.decider.policies();
        let mut log = answering.decider.turn_log(owned);
        let mut replies = Vec::with_capacity(batch.len());
        for msg in batch.drain(..) {
            if is_usage_query(msg.subject.as_str()) {
                tokio::spawn(crate::usage::query::answer_usage(answering.clone(), msg));
                continue;
            }
            let mut traced = Traced::start(answering.tracer.as_ref(), &msg, &answering.worker_id);
            let answer = answering.decider.message(
                &policies,
                Message {
                    subject: msg.subject.as_str(),
                    body: &msg.payload,
                    wants_reply: msg.reply.is_some(),
                },
                owned,
                now,
                &mut log,
            );
            if let (Some(traced), Some(answer)) = (&mut traced, &answer) {
                traced.decided(answer, &policies);
            }
            match (answer, msg.reply, &answering.link) {
                // Answered by the home, through the link task.
                (Some(Answer::Forward(forward)), Some(to), Some(link)) => {
                    link.forward(forward, to.to_string());
                }
                (Some(Answer::Gather(gather)), Some(to), Some(link)) => {
                    link.gather(gather, to.to_string());
                }
                (Some(answer), Some(to), _) => {
                    let mut reply = Reply::of(&answer, &answering.worker_id);
                    reply.traced = traced.map(Box::new);
                    replies.push((to, reply));
                }
                _ => {}
            }
        }
        let then = answering.perform(log.take_actions());
        let records = log.finish(&self.owning.stats, self.owner.stats());
        answering
            .outbox
            .answer(records, replies, received, then)
            .await;
    }
}

/// `rl.p.<n>.usage.<key>`: read from the store, so answered on its own
/// task rather than among the decisions.
fn is_usage_query(subject: &str) -> bool {
    matches!(Inbound::parse(subject), Some(Inbound::Ask(ask)) if ask.verb == Verb::Usage)
}
