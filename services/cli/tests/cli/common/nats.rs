//! A 3-node NATS cluster's node config, and signals to its processes: what
//! `nemesis.rs` and `nats_freeze_experiments.rs` share.

use sluice_core::nats_config::NatsServerConfig;
use sluice_tests::Signal;

/// One node's config in a [`NatsCluster`](sluice_tests::NatsCluster): sluice's
/// own (`sluice_core::nats_config`) for `partitions`, without its
/// `server_name`.
pub fn server_config(partitions: u32) -> String {
    // The cluster gives each node its name (`--server_name`).
    NatsServerConfig::new(partitions)
        .render()
        .lines()
        .filter(|l| !l.starts_with("server_name"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Sends `sig` to the process `pid` (a NATS node or a worker).
pub fn signal(pid: u32, sig: Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig).expect("signal sent");
}
