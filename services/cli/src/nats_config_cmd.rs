//! `sluice nats-config`: the nats-server config with the partition mapping.

use crate::cli::Common;
use anyhow::Result;
use sluice_core::nats_config::{Cluster, NatsServerConfig};

#[derive(clap::Args, Debug)]
pub struct NatsConfigArgs {
    /// Client listen address of the server.
    #[arg(long, default_value = "127.0.0.1:4222")]
    pub listen: String,
    /// Monitoring (HTTP) listen address; off unless given.
    #[arg(long)]
    pub http: Option<String>,
    /// Server name (unique per server in a cluster).
    #[arg(long, default_value = "sluice-nats")]
    pub server_name: String,
    /// JetStream store directory.
    #[arg(long)]
    pub store_dir: Option<String>,
    /// Cluster name: print the cluster form (with --cluster-listen and --route).
    #[arg(long)]
    pub cluster_name: Option<String>,
    /// Cluster listen address (cluster form).
    #[arg(long, default_value = "0.0.0.0:6222")]
    pub cluster_listen: String,
    /// A route to another server of the cluster (repeatable), e.g. nats-route://n2:6222.
    #[arg(long = "route")]
    pub routes: Vec<String>,
}

pub fn run(common: &Common, args: &NatsConfigArgs) -> Result<()> {
    let config = common.load_config()?;
    let mut server = NatsServerConfig::new(config.partitions);
    server.listen = args.listen.clone();
    server.http = args.http.clone();
    server.server_name = args.server_name.clone();
    server.store_dir = args.store_dir.clone();
    server.cluster = args.cluster_name.as_ref().map(|name| Cluster {
        name: name.clone(),
        listen: args.cluster_listen.clone(),
        routes: args.routes.clone(),
    });
    print!("{}", server.render());
    Ok(())
}
