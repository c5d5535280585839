//! # sluice-client
//!
//! The Rust client of sluice, for API servers: asks "may this key do this
//! now?" over NATS and gets a decision from the key's owning worker. See
//! `docs/CLIENT.md` for the whole story.
//!
//! In the order an ask meets them, from the options a client is made
//! with to the answer it returns:
//!
//! - [`ClientOptions`] (`options.rs`): timeout, fallback, batching, cache.
//! - [`NatsAuth`] (`nats_auth.rs`): NATS credentials and TLS (SPEC §10),
//!   the one builder of connect options for every sluice process.
//! - `probe.rs`: the startup check of the partition count.
//! - [`AsKey`], [`KeyPath`] (`key.rs`): what every verb takes as a key,
//!   plain bytes or a grouped key's tokens (SPEC §17).
//! - [`Client`] (`client.rs`): `connect`, [`Client::allow`], [`Client::ask`]
//!   (policy and cost), [`Client::peek`] (cost 0), [`Client::hit`]; keys are
//!   percent-encoded for the caller; a per-ask timeout; quick retries on
//!   "no responders" (a partition changing owners, ≤ 30 ms), then the
//!   fallback. Cheap to clone and safe to share between tasks.
//! - [`Client::ask_waiting`], [`Client::acquire`] (`wait.rs`): asks that
//!   may wait for a later start (SPEC §18), sent alone; `acquire` sleeps
//!   until the start before returning.
//! - `deny_cache.rs`: a denied key is answered locally until its retry time.
//! - `budgets.rs`: local budgets: a hot key's asks decided from slices of
//!   its budget that its owner granted (`sluice_core::budget`).
//! - `inner.rs`: the state a client's clones share, and what is done with
//!   it: round trips and their retries, batches, the fallback, refunds.
//! - `batch.rs`: concurrent asks for one worker share one request, with no
//!   added delay for an ask that has nothing to share with.
//! - `outcome.rs`: what a round trip ends in (a reply, a retry, no answer).
//! - `local.rs`: the `local` fallback, the workers' algorithms in-process.
//! - [`Answer`] / [`Source`] (`answer.rs`): the decision, its RateLimit
//!   headers, and who made it (worker, deny cache, fallback).
//! - [`queries`]: operator requests (inspect, reset, usage, top), one
//!   round trip each, for the client and the CLI alike.
//! - [`Client::reserve`], [`Client::settle`], [`Client::extend`] and
//!   [`Client::hold`]'s [`HoldGuard`] (`holds.rs`): holds (SPEC §13),
//!   one round trip each to the key's owner, no fallback.
//! - [`policy_store`]: live policies and per-key overrides written to
//!   their bucket (SPEC §7), checked first, for the CLI and the gateway.
//! - [`alerts`]: threshold alerts (SPEC §14) read from their stream,
//!   and followed ([`Client::alerts`]).
//! - [`trace`]: the W3C trace context a caller hands its asks, carried
//!   in their NATS headers (traced asks go alone, not batched).
//! - [`Error`] (`error.rs`): 400 / 404 / 413 / 503, with the worker's sentence.
//!
//! ```no_run
//! use sluice_client::{Client, ClientOptions, Source};
//! use sluice_core::config::Fallback;
//! use std::time::Duration;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let opts = ClientOptions::default()
//!     .timeout(Duration::from_millis(50))
//!     .fallback(Fallback::Open);
//! let client = Client::connect_with("nats://127.0.0.1:4222", opts).await?;
//! let answer = client.ask("bob@x.io", "default", 1).await?;
//! for (name, value) in answer.headers() {
//!     println!("{name}: {value}");
//! }
//! if answer.source != Source::Worker {
//!     println!("decided by {}", answer.source);
//! }
//! # Ok(()) }
//! ```

pub mod alerts;
mod answer;
mod batch;
mod budgets;
mod client;
#[cfg(test)]
mod conformance_tests;
mod deny_cache;
mod error;
mod holds;
mod inner;
mod key;
mod local;
mod nats_auth;
mod options;
mod outcome;
pub mod policy_follow;
pub mod policy_store;
mod probe;
pub mod queries;
mod stats;
pub mod trace;
mod wait;

pub use answer::{Answer, Source};
pub use client::Client;
pub use error::{ConnectError, Error};
pub use holds::{Held, HoldGuard, HoldTicket, Reserved};
pub use key::{AsKey, KeyPath};
pub use nats_auth::{last_refusal, NatsAuth, NatsConnectError};
pub use options::ClientOptions;
/// Re-exported for [`ClientOptions::fallback`] and [`Source::Fallback`].
pub use sluice_core::config::Fallback;
pub use stats::ClientStats;
