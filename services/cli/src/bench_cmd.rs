//! `sluice bench`: a closed-loop load generator against a running system.

use crate::cli::Common;
use anyhow::{bail, Result};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {}

pub fn run(_common: &Common, _args: &BenchArgs) -> Result<()> {
    bail!("sluice bench is not implemented yet")
}
