//! `sluice`: one binary for every role (SPEC §5).
//!
//! This file only parses the command line, sets up logging (`logging.rs`)
//! and the runtime, loads the config, and hands over to the library that
//! does the work. Each command's code lives in its own module.

mod alerts_cmd;
mod bench_cmd;
mod check_cmd;
mod cli;
mod common;
mod dev_cmd;
mod gateway_cmd;
mod hold_cmd;
mod key_cmd;
mod logging;
mod nats_config_cmd;
mod policy_cmd;
mod signals;
mod status_cmd;
mod usage_cmd;
mod version;
mod worker_cmd;

use clap::Parser;
use std::process::ExitCode;

/// mimalloc instead of glibc's malloc: under load a worker spent about a
/// quarter of its CPU in glibc's malloc and free (`_int_malloc`,
/// `malloc_consolidate`, ...; docs/BENCHMARKS-HISTORY.md, "Allocator"), for the many
/// short-lived buffers of messages, headers and replies.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    logging::init(cli.common.log_format);
    match cli.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the reason and its causes; a refusal by the NATS
            // server is the real reason when there was one (what failed
            // after it, a timeout, is only its consequence).
            let reason = match sluice_client::last_refusal() {
                Some(refused) => format!(
                    "the NATS server refused: {refused}; this NATS user lacks the permission \
                     (docs/SECURITY.md lists what each role may do)"
                ),
                None => format!("{e:#}").replace('\n', " "),
            };
            eprintln!("sluice: {reason}");
            ExitCode::FAILURE
        }
    }
}
