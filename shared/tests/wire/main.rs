//! Request bodies, decision and error replies, headers and batches, byte by
//! byte where the format is promised (docs/PROTOCOL.md). One test binary,
//! split by what is tested: requests, replies (decisions, errors, headers,
//! the MessagePack writer) and batches; the helpers more than one of them
//! uses are here.

mod batches;
mod replies;
mod requests;

use serde_json::Value as Json;
use sluice_core::policy::Decision;
use sluice_core::time::Nanos;

fn msgpack(value: &Json) -> Vec<u8> {
    rmp_serde::to_vec_named(value).unwrap()
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
    }
}
