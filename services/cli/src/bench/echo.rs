//! `sluice bench --serve-echo`: a bare responder on the workers' subjects
//! that decides nothing, for the ceiling of NATS request-reply on this
//! machine. It answers every `rl.p.<n>.allow.<key>` with the same canned
//! decision (same headers and body size as a worker's first answer under
//! the default policy), and every `rl.p.<n>.batch` with that decision once
//! per item, so both the plain subject and the batching client can be
//! measured against it. Like a worker, each echo process names itself in
//! its batch replies and also answers batches on its own worker subject
//! (`rl.w.<echo-id>.batch`), so the batching client sends it the asks of
//! many partitions at once, as it would a worker. Several echo processes
//! share the load (one queue group). One connection, one current-thread
//! runtime, like a worker.

use anyhow::Result;
use async_nats::HeaderMap;
use bytes::Bytes;
use futures::StreamExt;
use sluice_core::policy::Decision;
use sluice_core::policy::DEFAULT_POLICY;
use sluice_core::subject::{every_owner_subject, worker_batch_subject};
use sluice_core::time::Nanos;
use sluice_core::wire::{self, batch, DecisionReply, Encoding, Reply};

const QUEUE: &str = "sluice-echo";

pub fn serve(url: &str, auth: &sluice_client::NatsAuth) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let id = format!("echo{}", std::process::id());
    let canned = Canned::new();
    rt.block_on(async {
        let client = auth.connect_named(url, "sluice-bench-echo").await?;
        let mut subs = vec![client.subscribe(worker_batch_subject(&id)).await?];
        for subject in every_owner_subject() {
            subs.push(client.queue_subscribe(subject, QUEUE.into()).await?);
        }
        let mut subs = futures::stream::select_all(subs);
        client.flush().await?;
        tracing::info!(%url, id, subjects = ?every_owner_subject(), "echo responder answering every partition and its worker batches");
        let mut batch_headers = HeaderMap::new();
        batch_headers.insert(batch::WORKER_HEADER, id.as_str());
        let stop = crate::signals::terminate();
        tokio::pin!(stop);
        let mut answered: u64 = 0;
        loop {
            tokio::select! {
                biased;
                _ = &mut stop => break,
                msg = subs.next() => {
                    let Some(msg) = msg else { break };
                    let Some(reply) = msg.reply else { continue };
                    answered += 1;
                    let result = if msg.subject.ends_with(".batch") {
                        let n = batch_len(&msg.payload).unwrap_or(0);
                        client
                            .publish_with_headers(reply, batch_headers.clone(), canned.batch(n))
                            .await
                    } else {
                        client
                            .publish_with_headers(reply, canned.headers.clone(), canned.body.clone())
                            .await
                    };
                    if let Err(e) = result {
                        tracing::warn!("cannot reply: {e}");
                    }
                }
            }
        }
        tracing::info!(answered, "echo responder stopped");
        let _ = client.drain().await;
        Ok(())
    })
}

struct Canned {
    headers: HeaderMap,
    body: Bytes,
    /// Batch replies by item count, made on first use.
    batches: std::cell::RefCell<Vec<Option<Bytes>>>,
    decision: DecisionReply,
}

impl Canned {
    fn new() -> Canned {
        let decision = Decision {
            allowed: true,
            limit: 15,
            remaining: 14,
            reset: Nanos::from_millis(67),
            retry_after: Nanos::ZERO,
            shadow_denied: false,
            wait: Nanos::ZERO,
            blocked: false,
        };
        let mut headers = HeaderMap::new();
        for (name, value) in wire::decision_headers(&decision) {
            headers.insert(name, value.as_str());
        }
        Canned {
            headers,
            body: wire::encode_decision(&decision, DEFAULT_POLICY, Encoding::MsgPack).into(),
            batches: std::cell::RefCell::new(vec![None; batch::MAX_ITEMS + 1]),
            decision: DecisionReply::new(&decision, DEFAULT_POLICY),
        }
    }

    fn batch(&self, n: usize) -> Bytes {
        let n = n.min(batch::MAX_ITEMS);
        let mut cache = self.batches.borrow_mut();
        cache[n]
            .get_or_insert_with(|| {
                let results = vec![Reply::Decision(self.decision.clone()); n];
                batch::encode_results(&results).into()
            })
            .clone()
    }
}

/// The item count of a batch body (`{"items": [...]}`), read from the
/// array header without decoding the items.
fn batch_len(body: &[u8]) -> Option<usize> {
    let rest = body.strip_prefix(b"\x81\xa5items")?;
    match *rest.first()? {
        b @ 0x90..=0x9f => Some((b & 0x0f) as usize),
        0xdc => Some(u16::from_be_bytes([*rest.get(1)?, *rest.get(2)?]) as usize),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::key::KeyToken;
    use std::borrow::Cow;

    #[test]
    fn batch_len_reads_the_item_count_of_real_batches() {
        for n in [1usize, 15, 16, 255, 256] {
            let tokens: Vec<String> = (0..n).map(|i| format!("k{i}")).collect();
            let items: Vec<batch::Item<'_>> = tokens
                .iter()
                .map(|t| batch::Item {
                    key: KeyToken::parse(t).unwrap(),
                    policy: Cow::Borrowed("default"),
                    cost: 1,
                    id: None,
                    act: Default::default(),
                })
                .collect();
            let body = batch::encode_items(&items);
            assert_eq!(batch_len(&body), Some(n));
        }
        assert_eq!(batch_len(b""), None);
    }

    #[test]
    fn canned_replies_decode_as_decisions() {
        let c = Canned::new();
        match wire::decode_reply(&c.body).unwrap() {
            Reply::Decision(d) => assert!(d.allowed),
            other => panic!("{other:?}"),
        }
        let replies = batch::decode_results(&c.batch(3), 3).unwrap();
        assert_eq!(replies.len(), 3);
        assert_eq!(c.body.len(), 69);
    }
}
