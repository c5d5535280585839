//! # sluice-tests: the integration-test harness
//!
//! Integration tests (in `tests/tests/*.rs`) run against a real
//! **nats-server v2.15.1**, started by this harness for each test, and
//! talk to it over 127.0.0.1 only. Nothing here depends on a server or
//! tool installed by hand: `scripts/install-deps.sh` installs nats-server
//! into `.tools/venv`, and `scripts/test.sh` runs the tests with
//! `SLUICE_NATS_SERVER` pointing at it. See `docs/TESTING.md`.
//!
//! - [`NatsServer`]: one nats-server child process with its own temp dir
//!   (config, log, JetStream store), on a client and monitoring port the
//!   server picks itself. `start`, `url`, `pid`, `stop` (SIGTERM),
//!   `kill` (SIGKILL), `restart` (same ports, same store: JetStream data
//!   survives), `reload` (new config + SIGHUP). Killed and reaped on drop.
//! - [`NatsCluster`]: N routed nats-servers with JetStream clustering, ready
//!   once a meta leader is elected.
//! - [`ChildGuard`]: any other child process (sluice workers, the gateway):
//!   `pid`, `kill` (SIGKILL), `terminate` (SIGTERM, then SIGKILL after a
//!   grace period), `wait_within`; output to a log file; killed on drop.
//! - [`eventually`]: poll an async condition until it holds or a deadline
//!   passes; returns the last error. Only for states with no event to await.
//!
//! Which binary runs: [`nats_server_binary`] (`$SLUICE_NATS_SERVER`, else
//! `<workspace>/.tools/venv/bin/nats-server`, else `PATH`; always checked to
//! be v2.15.1).
//!
//! ```no_run
//! use sluice_tests::NatsServer;
//!
//! # async fn demo() -> anyhow::Result<()> {
//! let server = NatsServer::start(
//!     r#"mappings = { "rl.allow.*": "rl.p.{{partition(16,1)}}.allow.{{wildcard(1)}}" }"#,
//! )?;
//! let client = server.connect().await?;
//! # let _ = client; Ok(()) }
//! ```
//!
//! A convenience that starts a server with sluice's own mapping for a given
//! partition count belongs here once `sluice_core::nats_config` generates
//! that config; until then tests pass config text.

mod cluster;
mod eventually;
mod nats;
mod process;

pub use cluster::{NatsCluster, CLUSTER_NAME};
pub use eventually::eventually;
pub use nats::{
    nats_server_binary, workspace_root, NatsServer, NATS_SERVER_ENV, NATS_SERVER_VERSION,
    STARTUP_TIMEOUT, STOP_GRACE,
};
pub use nix::sys::signal::Signal;
pub use process::{tail_of_file, ChildGuard, DEFAULT_GRACE};
