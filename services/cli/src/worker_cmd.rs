//! `sluice worker`.

use crate::cli::Common;
use anyhow::Result;
use sluice_worker::WorkerOptions;

#[derive(clap::Args, Debug)]
pub struct WorkerArgs {
    /// Serve Prometheus metrics on this address (off unless given).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// JetStream replicas for the lease and snapshot buckets and the journal
    /// (1 on a single server, 3 in a 3-node cluster).
    #[arg(long, default_value_t = 1, env = "SLUICE_REPLICAS")]
    pub replicas: usize,
    /// This worker's id (unique per process; generated when not given).
    #[arg(long)]
    pub worker_id: Option<String>,
}

pub fn run(common: &Common, args: &WorkerArgs) -> Result<()> {
    let config = common.load_config()?;
    let mut opts = WorkerOptions::new(common.nats.clone(), config);
    opts.auth = common.nats_auth();
    opts.worker_id = args.worker_id.clone();
    opts.replicas = args.replicas;
    opts.metrics_listen = args.metrics_listen;
    // One thread: on the 2-core machines this was measured on, a
    // current-thread runtime answers ~1.5x faster than the multi-thread one
    // (docs/BENCHMARKS.md). Run more workers to use more cores.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(sluice_worker::run(opts, crate::signals::terminate()))
}
