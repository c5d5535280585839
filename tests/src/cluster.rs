//! [`NatsCluster`]: several nats-servers routed together on loopback.

use std::ffi::OsString;
use std::net::TcpListener;
use std::time::Instant;

use anyhow::{Context, Result};

use crate::nats::{NatsServer, STARTUP_TIMEOUT};

/// The cluster name every node is started with.
pub const CLUSTER_NAME: &str = "sluice-test";

/// Readiness of a clustered node: the full health check, which passes only
/// once JetStream has a meta leader (and streams are current).
const CLUSTER_HEALTH: &str = "/healthz";

/// How many times [`NatsCluster::start`] tries again when a cluster port it
/// picked was taken by someone else before the server bound it.
const ATTEMPTS: usize = 3;

/// A cluster of nats-servers on loopback, each a [`NatsServer`] with its own
/// temp dir and JetStream store, routed to all the others.
///
/// Client and monitoring ports are chosen by each server (`-1`). Routes need
/// to know the cluster ports up front, so those are picked by binding
/// `127.0.0.1:0` and releasing the port; if another process takes one in the
/// meantime, the whole cluster is started again on new ports (up to 3
/// times). Node `i` runs with
///
/// ```text
/// --server_name n<i> --cluster_name sluice-test --cluster nats://127.0.0.1:<port i>
/// --routes nats://127.0.0.1:<port j>,... (all other nodes)
/// ```
///
/// on top of the [`NatsServer`] flags, so the config text must not set
/// `server_name` or a `cluster` block. `start` returns once every node
/// answers `/healthz` (JetStream meta leader elected), so R3 streams and
/// buckets can be created right away.
///
/// [`NatsCluster::node_mut`]`(i).`[`restart`](NatsServer::restart) brings a
/// node back on its old ports; it rejoins through its routes.
#[derive(Debug)]
pub struct NatsCluster {
    nodes: Vec<NatsServer>,
}

impl NatsCluster {
    /// Starts `size` nodes; node `i` (from 0) runs with `config(i)` as its
    /// config text. Every node must get the same subject mappings.
    pub fn start(size: usize, config: impl Fn(usize) -> String) -> Result<Self> {
        Self::start_some(size, size, config)
    }

    /// [`start`](Self::start), but only the first `up` nodes run (a cluster
    /// still forming: the others have never been seen); start the rest with
    /// [`NatsCluster::node_mut`]`(i).`[`restart`](NatsServer::restart).
    /// Returns once the `up` nodes answer `/healthz`.
    pub fn start_some(size: usize, up: usize, config: impl Fn(usize) -> String) -> Result<Self> {
        anyhow::ensure!(size > 0, "a cluster needs at least one node");
        anyhow::ensure!((1..=size).contains(&up), "1 to {size} nodes can be up");
        let mut attempt = 1;
        loop {
            match Self::try_start(size, up, &config) {
                Ok(cluster) => return Ok(cluster),
                Err((e, port_taken)) if port_taken && attempt < ATTEMPTS => {
                    eprintln!("cluster start attempt {attempt} lost a port race, retrying: {e:#}");
                    attempt += 1;
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    fn try_start(
        size: usize,
        up: usize,
        config: &impl Fn(usize) -> String,
    ) -> std::result::Result<Self, (anyhow::Error, bool)> {
        let ports = free_ports(size).map_err(|e| (e, false))?;
        let url = |p: u16| format!("nats://127.0.0.1:{p}");
        let mut nodes = Vec::with_capacity(size);
        for (i, &port) in ports.iter().enumerate() {
            let routes: Vec<String> = ports
                .iter()
                .filter(|&&p| p != port)
                .map(|&p| url(p))
                .collect();
            let mut args: Vec<OsString> = vec![
                "--server_name".into(),
                format!("n{i}").into(),
                "--cluster_name".into(),
                CLUSTER_NAME.into(),
                "--cluster".into(),
                url(port).into(),
            ];
            if !routes.is_empty() {
                args.push("--routes".into());
                args.push(routes.join(",").into());
            }
            let node = NatsServer::prepare(
                &format!("nats-server n{i}"),
                &config(i),
                args,
                CLUSTER_HEALTH,
            )
            .map_err(|e| (e, false))?;
            nodes.push(node);
        }
        // All nodes first: none is healthy before the others are up.
        for node in &mut nodes[..up] {
            node.spawn().map_err(|e| (e, false))?;
        }
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        for i in 0..up {
            if let Err(e) = nodes[i].wait_ready(deadline) {
                let taken = nodes.iter().any(NatsServer::port_was_taken);
                return Err((e.context(format!("starting cluster node n{i}")), taken));
            }
        }
        Ok(Self { nodes })
    }

    /// The nodes, in start order (`n0`, `n1`, ...).
    pub fn nodes(&self) -> &[NatsServer] {
        &self.nodes
    }

    /// Node `i`.
    pub fn node(&self, i: usize) -> &NatsServer {
        &self.nodes[i]
    }

    /// Node `i`, to stop, kill or restart it.
    pub fn node_mut(&mut self, i: usize) -> &mut NatsServer {
        &mut self.nodes[i]
    }

    /// Stops every running node at once (SIGTERM to all, then waits for
    /// each, as [`NatsServer::stop`]): a whole cluster going down together.
    pub fn stop_all(&mut self) -> Result<()> {
        for node in &self.nodes {
            node.signal(nix::sys::signal::Signal::SIGTERM)?;
        }
        for node in &mut self.nodes {
            node.stop()?;
        }
        Ok(())
    }

    /// Starts every stopped node on its old ports and store, all at once,
    /// and returns once each answers `/healthz` (a meta leader again).
    pub fn start_all(&mut self) -> Result<()> {
        for node in &mut self.nodes {
            if node.pid().is_none() {
                node.spawn()?;
            }
        }
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        for node in &mut self.nodes {
            node.wait_ready(deadline)?;
        }
        Ok(())
    }

    /// The client URLs of all nodes.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(NatsServer::url).collect()
    }

    /// Connects a client that knows every node's URL.
    pub async fn connect(&self) -> Result<async_nats::Client> {
        async_nats::connect(self.urls())
            .await
            .context("connecting to the cluster")
    }
}

/// `n` distinct loopback ports that were free a moment ago.
pub fn free_ports(n: usize) -> Result<Vec<u16>> {
    // Hold all listeners at once so the ports are distinct.
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()
        .context("binding 127.0.0.1:0 to find free ports")?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}
