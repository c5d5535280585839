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

use crate::admission::Window;
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
    /// Asks for key number `key`.
    fn ask(&self, key: usize) -> impl Future<Output = Reply>;

    /// What a client library did on this connection, for the report
    /// (counters; the generator adds them up across connections).
    fn stats(&self) -> Option<serde_json::Value> {
        None
    }
}

/// How one ask ended, as a target tells it.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    pub outcome: Outcome,
    /// Why, for an [`Outcome::Other`].
    pub why: Option<String>,
    /// Which fixed window the decision counted in, where the target can
    /// tell and was asked to (see [`crate::admission`]).
    pub window: Option<Window>,
}

impl Reply {
    /// An [`Outcome::Other`] and its reason.
    pub fn other(why: impl Into<String>) -> Reply {
        Reply {
            why: Some(why.into()),
            ..Reply::from(Outcome::Other)
        }
    }

    /// The same reply, placed in `window`.
    pub fn in_window(self, window: Option<Window>) -> Reply {
        Reply { window, ..self }
    }
}

impl From<Outcome> for Reply {
    fn from(outcome: Outcome) -> Reply {
        Reply {
            outcome,
            why: None,
            window: None,
        }
    }
}
