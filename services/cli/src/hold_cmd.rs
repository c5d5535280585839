//! `sluice reserve KEY`, `sluice settle KEY --hold ID --cost N` and
//! `sluice extend KEY --hold ID` (SPEC §13, docs/HOLDS.md): one hold
//! verb through the Rust client, its decision printed as `sluice check`
//! prints one, with the hold's name and end.

use crate::check_cmd::{describe, with_client, Target};
use crate::common::Common;
use anyhow::Result;
use sluice_client::Held;
use sluice_core::wire::Encoding;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct ReserveArgs {
    #[command(flatten)]
    pub target: Target,
    /// Units to hold (the cost you expect).
    #[arg(long, default_value_t = 1)]
    pub cost: u64,
    /// How long the hold lives unsettled, in ms (default: the policy's hold_ttl).
    #[arg(long)]
    pub ttl_ms: Option<u64>,
}

#[derive(clap::Args, Debug)]
pub struct SettleArgs {
    #[command(flatten)]
    pub target: Target,
    /// The hold's name, as `sluice reserve` printed it.
    #[arg(long)]
    pub hold: String,
    /// The real cost (0 for work that failed).
    #[arg(long)]
    pub cost: u64,
}

#[derive(clap::Args, Debug)]
pub struct ExtendArgs {
    #[command(flatten)]
    pub target: Target,
    /// The hold's name, as `sluice reserve` printed it.
    #[arg(long)]
    pub hold: String,
    /// How long it lives from now, in ms (default: the policy's hold_ttl).
    #[arg(long)]
    pub ttl_ms: Option<u64>,
}

pub fn reserve(common: &Common, args: &ReserveArgs) -> Result<()> {
    with_client(common, |client| async move {
        let t = &args.target;
        let ttl = args.ttl_ms.map(Duration::from_millis);
        let held = client
            .reserve(&t.form.key(&t.key)?, &t.policy, args.cost, ttl)
            .await?;
        print(&held, t.json);
        Ok(())
    })
}

pub fn settle(common: &Common, args: &SettleArgs) -> Result<()> {
    with_client(common, |client| async move {
        let t = &args.target;
        let answer = client
            .settle(&t.form.key(&t.key)?, &t.policy, &args.hold, args.cost)
            .await?;
        if !t.json {
            println!("settled {} with cost {}", args.hold, args.cost);
        }
        print(
            &Held {
                answer,
                ticket: None,
            },
            t.json,
        );
        Ok(())
    })
}

pub fn extend(common: &Common, args: &ExtendArgs) -> Result<()> {
    with_client(common, |client| async move {
        let t = &args.target;
        let ttl = args.ttl_ms.map(Duration::from_millis);
        let held = client
            .extend(&t.form.key(&t.key)?, &t.policy, &args.hold, ttl)
            .await?;
        print(&held, t.json);
        Ok(())
    })
}

/// The hold (`hold=… expires_ms=…`) on a line of its own, then the
/// decision as `sluice check` prints it; or the reply as JSON.
fn print(held: &Held, json: bool) {
    if json {
        println!("{}", String::from_utf8_lossy(&held.encode(Encoding::Json)));
        return;
    }
    if let Some(t) = &held.ticket {
        println!("hold={} expires_ms={}", t.hold, t.expires_ms);
    }
    println!("{}", describe(&held.answer));
}
