//! Whether the gateway's NATS credentials may inspect and reset keys
//! (SPEC §10: the `admin` role may, the `client` role may not).
//!
//! NATS does not tell a client its permissions, and a request to a subject
//! it may not publish on is dropped by the server: it ends in a timeout,
//! not a refusal. So a background task asks: an inspect of a probe key
//! (a read), and a reset with a body every worker refuses as malformed
//! (400: nothing reset, nothing journaled; the one error a worker counts
//! for it). An answer means the subject is open to us, and is not asked
//! again; a timeout means it is not (asked again every minute, in case
//! the credentials or the workers change), "no responders" that nobody
//! owns the probe key's partition yet (asked again in 2 s). The key page
//! reads what was found: it does not wait for an inspect that cannot be
//! answered, and it offers the reset only when a reset can be sent.

use async_nats::RequestErrorKind;
use sluice_core::subject::Verb;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The key the probes are about (nothing is counted for it).
const PROBE_KEY: &str = "sluice-ui-permission-probe";
/// A policy name no worker accepts, so a reset is answered 400.
const MALFORMED: &[u8] = br#"{"policy":"!"}"#;
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How often to ask again after a timeout, and after no responders.
const DENIED_EVERY: Duration = Duration::from_secs(60);
const UNKNOWN_EVERY: Duration = Duration::from_secs(2);

/// What the credentials allow for one subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// Not probed yet, or nobody answered.
    Unknown = 0,
    Allowed = 1,
    Denied = 2,
}

/// What the gateway's credentials allow of `rl.inspect` and `rl.reset`.
#[derive(Debug, Default)]
pub(crate) struct AdminAccess {
    inspect: AtomicU8,
    reset: AtomicU8,
}

impl AdminAccess {
    pub(crate) fn inspect(&self) -> Access {
        load(&self.inspect)
    }

    pub(crate) fn reset(&self) -> Access {
        load(&self.reset)
    }

    /// Probes until both are allowed (abort the task to stop sooner).
    pub(crate) async fn follow(self: Arc<Self>, nats: async_nats::Client) {
        loop {
            for (verb, body, found) in [
                (Verb::Inspect, &b""[..], &self.inspect),
                (Verb::Reset, MALFORMED, &self.reset),
            ] {
                if load(found) != Access::Allowed {
                    found.store(probe(&nats, verb, body).await as u8, Ordering::Relaxed);
                }
            }
            let (inspect, reset) = (self.inspect(), self.reset());
            if inspect == Access::Allowed && reset == Access::Allowed {
                return;
            }
            let unknown = inspect == Access::Unknown || reset == Access::Unknown;
            tokio::time::sleep(if unknown { UNKNOWN_EVERY } else { DENIED_EVERY }).await;
        }
    }
}

fn load(a: &AtomicU8) -> Access {
    match a.load(Ordering::Relaxed) {
        1 => Access::Allowed,
        2 => Access::Denied,
        _ => Access::Unknown,
    }
}

async fn probe(nats: &async_nats::Client, verb: Verb, body: &'static [u8]) -> Access {
    let request = async_nats::Request::new()
        .payload(body.into())
        .timeout(Some(PROBE_TIMEOUT));
    match nats
        .send_request(verb.client_subject(PROBE_KEY), request)
        .await
    {
        Ok(_) => Access::Allowed,
        Err(e) if e.kind() == RequestErrorKind::TimedOut => Access::Denied,
        Err(_) => Access::Unknown,
    }
}
