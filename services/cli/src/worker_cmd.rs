//! `sluice worker`.

use crate::common::Common;
use anyhow::Result;
use sluice_worker::WorkerOptions;

#[derive(clap::Args, Debug)]
pub struct WorkerArgs {
    /// Serve Prometheus metrics on this address (off unless given).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// JetStream replicas for the buckets and streams (leases, snapshots,
    /// policies, journal, alerts, usage). Default: 3 when the NATS cluster
    /// has 3 or more servers, 1 on a single server.
    #[arg(
        long,
        env = "SLUICE_REPLICAS",
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=5)
    )]
    pub replicas: Option<usize>,
    /// This worker's id (unique per process; generated when not given).
    #[arg(long)]
    pub worker_id: Option<String>,
    #[command(flatten)]
    pub traces: crate::common::TraceArgs,
}

pub fn run(common: &Common, args: &WorkerArgs) -> Result<()> {
    let config = common.load_config()?;
    let mut opts = WorkerOptions::new(common.nats.clone(), config);
    opts.auth = common.nats_auth();
    opts.worker_id = args.worker_id.clone();
    opts.replicas = args.replicas;
    opts.metrics_listen = args.metrics_listen;
    opts.taking_over = Some(huge_pages_off_while_taking_over);
    // One thread: on the 2-core machines this was measured on, a
    // current-thread runtime answers ~1.5x faster than the multi-thread one
    // (docs/BENCHMARKS-HISTORY.md, "Hot keys with local budgets", tried a
    // two-thread runtime). Run more workers to use more cores.
    let traces = args.traces.start("sluice-worker")?;
    opts.tracer = traces.as_ref().map(|t| t.tracer().clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let ran = rt.block_on(sluice_worker::run(opts, crate::signals::terminate()));
    if let Some(traces) = traces {
        traces.shutdown();
    }
    ran
}

/// Turns transparent huge pages off for this process while it takes
/// partitions over, and back on after. mimalloc asks for them on its arenas
/// (`MADV_HUGEPAGE`), and the kernel then zeroes 2 MiB at the first touch
/// of each: in a takeover after heavy load that was 42 % of the answering
/// thread's time, and every partition answered in 0.44–0.62 s against
/// 0.35–0.38 s without (docs/BENCHMARKS.md, "Many keys").
/// Back on after, so that steady-state decisions keep the huge pages'
/// shorter page walks. The flag is checked at each page fault, so it covers
/// arenas mapped before it.
fn huge_pages_off_while_taking_over(taking_over: bool) {
    if let Err(e) = nix::sys::prctl::set_thp_disable(taking_over) {
        tracing::debug!("cannot turn transparent huge pages on or off: {e}");
    }
}

#[cfg(test)]
mod tests {
    fn thp_enabled() -> String {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("THP_enabled:"));
        line.expect("the kernel reports THP_enabled").to_string()
    }

    #[test]
    fn huge_pages_are_off_while_taking_over_and_on_after() {
        super::huge_pages_off_while_taking_over(true);
        assert_eq!(thp_enabled(), "THP_enabled:\t0");
        super::huge_pages_off_while_taking_over(false);
        assert_eq!(thp_enabled(), "THP_enabled:\t1");
    }
}
