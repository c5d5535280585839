//! Operations of a history sent as an outsider sends them, over NATS:
//! what an answer says happened ([`outcome_of`]), and an operation sent
//! again with its id while that is unknown ([`until_known`]). One way for
//! every fault test that records a history (one key's, a group's), so
//! that they cannot differ on what counts as unknown.

use super::Outcome;
use crate::AskError;
use sluice_core::wire::{decode_reply, DecisionReply, ErrorCode, ErrorReply, Reply};
use std::future::Future;

/// What the answer to a request says happened: a decision (`decided`
/// says which outcome it is), an error `refused` explains, a 503 (done in
/// memory or not at all: [`Outcome::Unknown`]), no responders (nobody
/// received it: [`Outcome::NotDelivered`]) or a timeout (unknown). Any
/// other error fails the test: only unavailable may fail.
pub fn outcome_of(
    answer: Result<async_nats::Message, AskError>,
    decided: impl FnOnce(DecisionReply) -> Outcome,
    refused: impl FnOnce(&ErrorReply) -> Option<Outcome>,
) -> Outcome {
    match answer {
        Ok(msg) => match decode_reply(&msg.payload) {
            Ok(Reply::Decision(d)) => decided(d),
            Ok(Reply::Error(e)) => refused(&e).unwrap_or_else(|| {
                assert_eq!(
                    e.code,
                    ErrorCode::Unavailable,
                    "only unavailable may fail: {e:?}"
                );
                Outcome::Unknown
            }),
            Err(e) => panic!("a reply that is neither a decision nor an error: {e:?}"),
        },
        Err(AskError::NoResponders) => Outcome::NotDelivered,
        Err(_) => Outcome::Unknown,
    }
}

/// Sends an operation (`send`, with the same id each time) again while
/// its outcome (`outcome_of` what was sent) is unknown, at most `retries`
/// more times and only while `may_retry` says so: one operation from the
/// first send to the last answer. Not delivered after a send that may
/// have counted, it is still unknown; not delivered at all, nothing is
/// sent again (it took no effect). Returns the last send and its outcome
/// as the history records it.
pub async fn until_known<T, Fut>(
    retries: usize,
    may_retry: impl Fn() -> bool,
    outcome_of: impl Fn(&T) -> Outcome,
    mut send: impl FnMut() -> Fut,
) -> (T, Outcome)
where
    Fut: Future<Output = T>,
{
    let mut sent = send().await;
    let mut unknown = false;
    for _ in 0..retries {
        match outcome_of(&sent) {
            Outcome::Unknown => unknown = true,
            Outcome::NotDelivered if unknown => {}
            _ => break,
        }
        if !may_retry() {
            break;
        }
        sent = send().await;
    }
    let last = outcome_of(&sent);
    let recorded = if unknown && last == Outcome::NotDelivered {
        Outcome::Unknown
    } else {
        last
    };
    (sent, recorded)
}
