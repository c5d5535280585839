//! `sluice alerts [--follow] [--policy P]` (SPEC §14): the threshold
//! alerts the stream `SLUICE_ALERTS` keeps, oldest first, one line each (or
//! JSON lines), read through [`sluice_client::alerts`].

use crate::common::Common;
use anyhow::{anyhow, Result};
use futures::StreamExt;
use sluice_client::alerts::{alerts, Start};
use sluice_core::alerts::Alert;
use sluice_core::config::is_valid_policy_name;
use sluice_core::time::utc_minute;
use std::io::Write;

#[derive(clap::Args, Debug)]
pub struct AlertsArgs {
    /// Go on printing each new alert as it is stored (until interrupted).
    #[arg(long)]
    pub follow: bool,
    /// Only this policy's alerts.
    #[arg(long)]
    pub policy: Option<String>,
    /// One JSON object per line, as published on rl.alert.<policy>.<key>.
    #[arg(long)]
    pub json: bool,
}

pub fn run(common: &Common, args: &AlertsArgs) -> Result<()> {
    if let Some(p) = &args.policy {
        if !is_valid_policy_name(p) {
            return Err(anyhow!("--policy {p:?} is not a valid policy name"));
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let client = common.connect("sluice alerts").await?;
        let mut read = alerts(&client, args.policy.as_deref(), Start::All, args.follow)
            .await
            .map_err(|e| anyhow!("{e}"))?;
        let mut none = true;
        while let Some(alert) = read.next().await {
            let alert = alert.map_err(|e| anyhow!("{e}"))?;
            none = false;
            let line = if args.json {
                serde_json::to_string(&alert)?
            } else {
                line(&alert)
            };
            let mut out = std::io::stdout().lock();
            writeln!(out, "{line}")?;
            // Followed alerts are read as they come, also through a pipe.
            out.flush()?;
        }
        if none && !args.json {
            eprintln!("no alerts stored");
        }
        Ok(())
    })
}

/// `2026-11-27 00:12  quota  alice  80% of 10/1m reached (used 8), window 2026-11-27 00:12 to 00:13`
fn line(a: &Alert) -> String {
    format!(
        "{}  {}  {}  {}% of {}/{} reached (used {}), window {} to {}",
        utc_minute(a.at_ms),
        a.policy,
        a.key,
        a.threshold_pct,
        a.max,
        a.per,
        a.used,
        utc_minute(a.window_start_ms),
        utc_minute(a.window_end_ms),
    )
}
