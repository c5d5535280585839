//! The one way out: a decision core [`Answer`] becomes NATS headers and a
//! payload here, and is published by [`publish`], for plain asks, batches,
//! worker batches and journal mode alike.
//!
//! Headers are those of SPEC §1 ([`wire::RateLimitHeaders`],
//! [`wire::error_headers`]); every batch reply, error or not, names this
//! worker ([`batch::WORKER_HEADER`]) so the batching client learns who owns
//! the partitions it asked for. Decision headers are formatted without a
//! `String` per number: a reply is built for every request.

use crate::decide::Answer;
use crate::traced::Traced;
use async_nats::{HeaderMap, HeaderName, Subject};
use bytes::Bytes;
use sluice_core::policy::Decision;
use sluice_core::subject::{is_link_reply_subject, is_safe_reply_subject};
use sluice_core::wire::{self, batch, Encoding, ErrorReply, RateLimitHeaders};

/// A reply to send: headers and payload.
#[derive(Debug)]
pub struct Reply {
    pub headers: HeaderMap,
    pub payload: Bytes,
    /// What it answers, to put a 503 in its place ([`Reply::unstored`]).
    form: Form,
    /// A traced ask's spans, ended when the reply is published.
    pub traced: Option<Box<Traced>>,
}

/// A single ask's reply in the ask's encoding, or a batch's.
#[derive(Clone, Copy, Debug)]
enum Form {
    Single(Encoding),
    Batch,
}

/// A reply and where it goes.
pub type Outgoing = (Subject, Reply);

/// Header names are parsed once; a clone is a pointer copy.
static RATELIMIT_LIMIT: HeaderName = HeaderName::from_static(wire::RATELIMIT_LIMIT);
static RATELIMIT_REMAINING: HeaderName = HeaderName::from_static(wire::RATELIMIT_REMAINING);
static RATELIMIT_RESET: HeaderName = HeaderName::from_static(wire::RATELIMIT_RESET);
static RETRY_AFTER: HeaderName = HeaderName::from_static(wire::RETRY_AFTER);
static SLUICE_SHADOW: HeaderName = HeaderName::from_static(wire::SLUICE_SHADOW);
static SLUICE_REPEAT: HeaderName = HeaderName::from_static(wire::SLUICE_REPEAT);

impl Reply {
    /// The reply to `answer`, from worker `worker_id`.
    pub fn of(answer: &Answer<'_>, worker_id: &str) -> Reply {
        match answer {
            Answer::Decision {
                decision,
                policy,
                repeat: false,
                encoding,
                grouped: None,
            } => Reply::decision(decision, policy, *encoding),
            Answer::Decision {
                decision,
                policy,
                repeat,
                encoding,
                grouped,
            } => {
                let mut reply = Reply::decision(decision, policy, *encoding);
                reply.payload = match grouped {
                    Some(g) => {
                        let levels = (&g.levels[..], g.denied_by.as_deref());
                        wire::encode_grouped(decision, policy, levels, *repeat, *encoding)
                    }
                    None => wire::encode_repeat(decision, policy, *encoding),
                }
                .into();
                if *repeat {
                    reply
                        .headers
                        .insert(SLUICE_REPEAT.clone(), wire::REPEAT_YES);
                }
                reply
            }
            Answer::Held {
                decision,
                policy,
                held,
                repeat,
                encoding,
                grouped,
            } => {
                let mut reply = Reply::decision(decision, policy, *encoding);
                let levels = grouped
                    .as_ref()
                    .map_or((&[][..], None), |g| (&g.levels[..], g.denied_by.as_deref()));
                let held = (*held, *repeat);
                reply.payload =
                    wire::hold::encode_held_levels(decision, policy, held, levels, *encoding)
                        .into();
                if *repeat {
                    reply
                        .headers
                        .insert(SLUICE_REPEAT.clone(), wire::REPEAT_YES);
                }
                reply
            }
            Answer::Error { error, encoding } => Reply::error(error, *encoding),
            Answer::Inspect(reply, encoding) => Reply::body(reply.encode(*encoding), *encoding),
            Answer::Reset(reply, encoding) => Reply::body(reply.encode(*encoding), *encoding),
            // Answered as this region has it when not handed to the link
            // task (crate::shard::turns hands it over).
            Answer::Gather(gather) => {
                Reply::body(gather.reply.encode(gather.encoding), gather.encoding)
            }
            // The link task answers it (crate::shard::turns hands it over);
            // were it answered here, the asker would be told to ask again.
            Answer::Forward(forward) => Reply::error(
                &ErrorReply::unavailable(format!(
                    "policy {} is decided at its home region {}; ask again",
                    forward.decided_by, forward.home
                )),
                Encoding::of_body(&forward.body),
            ),
            Answer::Batch(results) => {
                let mut reply = match results {
                    Ok(results) => Reply {
                        headers: HeaderMap::new(),
                        payload: batch::encode_results(results).into(),
                        form: Form::Batch,
                        traced: None,
                    },
                    Err(error) => Reply::error(error, Encoding::MsgPack),
                };
                reply.headers.insert(batch::WORKER_HEADER, worker_id);
                reply.form = Form::Batch;
                reply
            }
        }
    }

    /// A reply that is only a body (inspect, reset).
    pub fn body(body: Vec<u8>, encoding: Encoding) -> Reply {
        Reply {
            headers: HeaderMap::new(),
            payload: body.into(),
            form: Form::Single(encoding),
            traced: None,
        }
    }

    /// The reply to a decided request.
    pub fn decision(decision: &Decision, policy: &str, encoding: Encoding) -> Reply {
        let values = RateLimitHeaders::of(decision);
        let mut number = itoa::Buffer::new();
        let mut headers = HeaderMap::new();
        headers.insert(RATELIMIT_LIMIT.clone(), number.format(values.limit));
        headers.insert(RATELIMIT_REMAINING.clone(), number.format(values.remaining));
        headers.insert(RATELIMIT_RESET.clone(), number.format(values.reset_s));
        if let Some(retry_after) = values.retry_after_s {
            headers.insert(RETRY_AFTER.clone(), number.format(retry_after));
        }
        if let Some((_, value)) = values.shadow() {
            headers.insert(SLUICE_SHADOW.clone(), value);
        }
        Reply {
            headers,
            payload: wire::encode_decision(decision, policy, encoding).into(),
            form: Form::Single(encoding),
            traced: None,
        }
    }

    /// The reply to a refused request.
    pub fn error(error: &ErrorReply, encoding: Encoding) -> Reply {
        let mut headers = HeaderMap::new();
        for (name, value) in wire::error_headers(error) {
            headers.insert(name, value.as_str());
        }
        Reply {
            headers,
            payload: wire::encode_error(error, encoding).into(),
            form: Form::Single(encoding),
            traced: None,
        }
    }

    /// The 503 sent instead of this reply when the journal did not store
    /// what its ask counted (`journal_failure = "unavailable"`); a batch's
    /// keeps naming the worker.
    pub fn unstored(mut self) -> Reply {
        let mut traced = self.traced.take();
        if let Some(traced) = &mut traced {
            traced.unstored();
        }
        let error = ErrorReply::unavailable(
            "the journal did not store what this request counted (JetStream did not acknowledge \
             the append), so it is not answered as decided; what it did stays done in this owner's \
             memory (a reserve's hold lives until its ttl, docs/HOLDS.md)",
        );
        let mut reply = match self.form {
            Form::Single(encoding) => Reply::error(&error, encoding),
            Form::Batch => {
                let mut reply = Reply::error(&error, Encoding::MsgPack);
                if let Some(worker) = self.headers.get(batch::WORKER_HEADER) {
                    reply.headers.insert(batch::WORKER_HEADER, worker.as_str());
                }
                reply.form = Form::Batch;
                reply
            }
        };
        // What was done stays done in memory: a hold's verb must not be
        // sent again as if nothing had happened.
        reply
            .headers
            .insert(wire::SLUICE_UNSTORED, wire::UNSTORED_YES);
        reply.traced = traced;
        reply
    }
}

/// Publishes `replies` in order; a reply that cannot be sent is logged (its
/// asker times out and asks again).
///
/// A reply subject inside sluice's own or the system's subjects is refused
/// ([`is_safe_reply_subject`]): the worker may write there, the asker may
/// not, so replying would lend the asker the worker's permissions.
pub async fn publish(client: &async_nats::Client, replies: Vec<Outgoing>) {
    for (to, reply) in replies {
        // Another region's owner asks with its link inbox (crate::global).
        if !is_safe_reply_subject(to.as_str()) && !is_link_reply_subject(to.as_str()) {
            tracing::warn!(
                "refused to reply to {to}: a reply subject must be an inbox, not one of \
                 sluice's or the system's subjects (a request tried to have this worker \
                 publish there)"
            );
            continue;
        }
        if let Err(e) = client
            .publish_with_headers(to, reply.headers, reply.payload)
            .await
        {
            tracing::warn!("cannot send a reply: {e}");
        }
        // A traced ask's spans end here, its reply sent.
        drop(reply.traced);
    }
}
