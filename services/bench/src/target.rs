//! The seam between the load generator and what it loads: a [`Connect`]
//! opens one connection, a [`Target`] answers asks on it.
//!
//! The generator sends a clone of the `Connect` to every load thread, which
//! opens its share of the connections on its own current-thread runtime;
//! the tasks riding a connection share its `Target` there. So a `Connect`
//! must be `Send + Clone`, while a `Target` and its futures need not be
//! `Send` (they never leave their thread), which is why the methods return
//! plain `impl Future` rather than being `async fn` in a public trait.
//!
//! Keys are numbers in `0..K` (see [`crate::keys`]): a target turns one into
//! a subject or a key name it prepared up front, so choosing a key costs the
//! generator nothing per request.

use crate::report::Outcome;
use anyhow::Result;
use std::future::Future;

/// Opens the connections of one target (NATS, Redis, ...).
pub trait Connect: Clone + Send + 'static {
    type Target: Target;

    /// Opens connection number `index` (on the calling thread's runtime).
    fn connect(&self, index: usize) -> impl Future<Output = Result<Self::Target>>;
}

/// One connection of the load generator.
pub trait Target: 'static {
    /// Asks for key number `key`; an [`Outcome::Other`] comes with a reason.
    fn ask(&self, key: usize) -> impl Future<Output = (Outcome, Option<String>)>;

    /// What a client library did on this connection, for the report
    /// (counters; the generator adds them up across connections).
    fn stats(&self) -> Option<serde_json::Value> {
        None
    }
}
