//! Request bodies, decision and error replies, headers and batches, byte by
//! byte where the format is promised (docs/PROTOCOL.md). One test binary,
//! split by what is tested: requests, replies (decisions, errors, headers,
//! the MessagePack writer) and batches; the helpers more than one of them
//! uses are here.

mod batch_holds;
mod batches;
mod replies;
mod requests;

use serde_json::Value as Json;
use sluice_core::policy::Decision;
use sluice_core::time::Nanos;

fn msgpack(value: &Json) -> Vec<u8> {
    rmp_serde::to_vec_named(value).unwrap()
}

/// A map with these fields in this order (serde_json's maps sort theirs),
/// as rmp-serde or serde_json writes it: what a reply body must be.
struct Ordered<'a>(&'a [(&'a str, Json)]);

impl serde::Serialize for Ordered<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

/// Encodes `items` as a batch, checks that they decode back, each valid,
/// and returns the body.
fn round_trip(items: &[sluice_core::wire::batch::Item<'_>]) -> Vec<u8> {
    use sluice_core::wire::batch;
    let body = batch::encode_items(items);
    let decoded: Vec<_> = batch::decode_items(&body)
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(decoded, items);
    body
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn allowed() -> Decision {
    Decision {
        allowed: true,
        limit: 15,
        remaining: 14,
        reset: Nanos(66_700_001),
        retry_after: Nanos::ZERO,
        shadow_denied: false,
        wait: Nanos::ZERO,
        blocked: false,
    }
}

fn denied() -> Decision {
    Decision {
        allowed: false,
        limit: 10,
        remaining: 0,
        reset: Nanos::from_secs(60),
        retry_after: Nanos(300_000_000),
        shadow_denied: false,
        wait: Nanos::ZERO,
        blocked: false,
    }
}
