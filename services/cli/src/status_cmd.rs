//! `sluice status`: partitions, their owners, snapshot ages, worker health.
//!
//! What it shows is gathered by `sluice_worker::fleet` (the gateway's
//! dashboard shows the same); this command prints it as a table or JSON.

use crate::common::Common;
use anyhow::Result;
use sluice_worker::fleet::{self, Status};
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// How long to wait for workers to answer.
    #[arg(long, default_value = "500ms", value_parser = crate::common::parse_duration)]
    pub wait: Duration,
}

pub fn run(common: &Common, args: &StatusArgs) -> Result<()> {
    let config = common.load_config()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let status = rt.block_on(async {
        let client = common.connect("sluice status").await?;
        let mut status = fleet::collect(&client, config.partitions, args.wait).await?;
        let steps: Vec<String> = match config.usage.enabled {
            true => config.usage.tiers.iter().map(|t| t.name()).collect(),
            false => Vec::new(),
        };
        status.replication = Some(fleet::replication(&client, &steps).await);
        anyhow::Ok(status)
    })?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print!("{}", table(&status));
    }
    Ok(())
}

fn table(s: &Status) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    if !s.regions.is_empty() {
        let _ = writeln!(out, "REGIONS ({})", s.regions.len());
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        for r in &s.regions {
            let state = if r.here {
                "this region".to_string()
            } else if r.link_up {
                "link up".to_string()
            } else {
                match r.last_seen_ms.filter(|&ms| ms > 0) {
                    Some(ms) => format!(
                        "link DOWN (last answered {:.1}s ago)",
                        now_ms.saturating_sub(ms) as f64 / 1000.0
                    ),
                    None => "link DOWN".to_string(),
                }
            };
            let _ = writeln!(out, "  {:<20} {state}", r.region);
        }
        out.push('\n');
    }
    out.push_str(&replication_warnings(s));
    let _ = writeln!(out, "WORKERS ({})", s.workers.len());
    let _ = writeln!(
        out,
        "  {:<20} {:>10} {:>10} {:>10} {:>8} {:>8} {:>11} {:>10} {:>19} {:>9}",
        "worker",
        "partitions",
        "allowed",
        "denied",
        "hits",
        "errors",
        "journal_err",
        "policy_rev",
        "keys/max_keys",
        "evicted"
    );
    for w in &s.workers {
        let _ = writeln!(
            out,
            "  {:<20} {:>10} {:>10} {:>10} {:>8} {:>8} {:>11} {:>10} {:>19} {:>9}",
            w.worker,
            w.partitions.len(),
            w.allowed,
            w.denied,
            w.hits,
            w.errors,
            w.journal_errors,
            w.policy_revision,
            format!("{}/{}", w.keys, w.max_keys),
            w.evicted_keys
        );
    }
    for w in &s.workers {
        for (key, why) in &w.refused_policies {
            let _ = writeln!(out, "  {}: refused policy value {key:?}: {why}", w.worker);
        }
    }
    let _ = writeln!(
        out,
        "\nPARTITIONS ({}, {} unowned)",
        s.partitions.len(),
        s.unowned.len()
    );
    let _ = writeln!(
        out,
        "  {:>4}  {:<20} {:>12} {:>10} {:>10}",
        "p", "owner", "snapshot_age", "keys", "decisions"
    );
    for r in &s.partitions {
        let age = r
            .snapshot_age_ms
            .map(|ms| format!("{:.1}s", ms as f64 / 1000.0))
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "  {:>4}  {:<20} {:>12} {:>10} {:>10}",
            r.partition,
            r.owner.as_deref().unwrap_or("(none)"),
            age,
            r.snapshot_keys
                .map(|k| k.to_string())
                .unwrap_or_else(|| "-".into()),
            r.decisions
                .map(|k| k.to_string())
                .unwrap_or_else(|| "-".into()),
        );
    }
    out
}

/// A line for each bucket or stream kept with fewer replicas than the NATS
/// cluster could give: one node lost loses it.
fn replication_warnings(s: &Status) -> String {
    let Some(r) = &s.replication else {
        return String::new();
    };
    let mut out = String::new();
    for kept in r.below_cluster() {
        out.push_str(&format!(
            "WARNING: {stream} is kept with {have} replica(s) but the NATS cluster could give {could}: \
             losing one NATS node loses it; raise it with `nats stream edit {stream} --replicas {could}` \
             (docs/OPERATIONS.md, \"Durability and replicas\")\n",
            stream = kept.stream,
            have = kept.replicas,
            could = r.cluster_could_give
        ));
    }
    if !out.is_empty() {
        out.push('\n');
    }
    out
}
