//! `sluice inspect KEY` and `sluice reset KEY` (SPEC §8): one request
//! through the partition mapping to the key's owner, and its reply as a
//! table or JSON.

use crate::common::Common;
use anyhow::{anyhow, Result};
use serde::de::DeserializeOwned;
use sluice_client::queries::{self, QUERY_TIMEOUT};
use sluice_core::subject::Verb;
use sluice_core::wire::inspect::{InspectReply, ResetReply};

#[derive(clap::Args, Debug)]
pub struct KeyArgs {
    #[arg(help = crate::common::KEY_HELP)]
    pub key: String,
    #[command(flatten)]
    pub form: crate::common::KeyForm,
    /// Only this policy (default: every policy with state for the key).
    #[arg(long)]
    pub policy: Option<String>,
    /// Print the reply as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn inspect(common: &Common, args: &KeyArgs) -> Result<()> {
    let reply: InspectReply = scoped(common, args, Verb::Inspect)?;
    if args.json {
        println!("{}", serde_json::to_string(&reply)?);
        return Ok(());
    }
    if reply.policies.is_empty() {
        println!("{}: no state (every limit is whole)", args.key);
    }
    for p in &reply.policies {
        let over = match &p.overridden {
            Some(o) if o.blocked => ", blocked by an override",
            Some(_) => ", limits from an override",
            None => "",
        };
        println!("{} under {} ({}{over}):", args.key, p.policy, p.algorithm);
        // A penalty's block (SPEC §18), to the minute it ends (UTC).
        if let Some(until) = p.blocked_until {
            let minute = sluice_core::time::utc_minute(until);
            println!("  blocked by block_for until {until} ms since the epoch ({minute} UTC)");
        }
        println!(
            "  {:>10} {:>10} {:>8} {:>10} {:>10}",
            "max", "per", "used", "remaining", "reset"
        );
        for l in &p.limits {
            println!(
                "  {:>10} {:>9}ms {:>8} {:>10} {:>8}ms",
                l.max, l.per_ms, l.used, l.remaining, l.reset_ms
            );
        }
        // A global policy's: what each region has of it (SPEC §12).
        for r in p.regions.iter().flatten() {
            match (r.reached, r.limits.first()) {
                (true, Some(l)) => println!(
                    "  in {:<12} {:>8} used {:>10} remaining of {}",
                    r.region, l.used, l.remaining, l.max
                ),
                (true, None) => println!("  in {:<12} nothing of it", r.region),
                (false, _) => println!("  in {:<12} not reached", r.region),
            }
        }
    }
    Ok(())
}

pub fn reset(common: &Common, args: &KeyArgs) -> Result<()> {
    let reply: ResetReply = scoped(common, args, Verb::Reset)?;
    if args.json {
        println!("{}", serde_json::to_string(&reply)?);
    } else if reply.reset.is_empty() {
        println!("{}: nothing to reset", args.key);
    } else {
        println!("{}: reset under {}", args.key, reply.reset.join(", "));
    }
    if !args.json && !reply.regions.is_empty() {
        println!("  sent to regions {}", reply.regions.join(", "));
    }
    Ok(())
}

/// Sends `verb` (inspect or reset) for the key and decodes the reply.
fn scoped<T: DeserializeOwned>(common: &Common, args: &KeyArgs, verb: Verb) -> Result<T> {
    let key = args.form.key(&args.key)?;
    request_once(common, verb.as_str(), |nats| async move {
        queries::scoped(&nats, verb, &key, args.policy.as_deref(), QUERY_TIMEOUT).await
    })
}

/// Runs one operator request (`sluice_client::queries`) on a connection
/// of its own, named for the command `what`; an error reply becomes the
/// error, with its status and sentence.
pub fn request_once<T, F>(
    common: &Common,
    what: &str,
    send: impl FnOnce(async_nats::Client) -> F,
) -> Result<T>
where
    F: std::future::Future<Output = Result<T, sluice_client::Error>>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let client = common.connect(&format!("sluice {what}")).await?;
        send(client)
            .await
            .map_err(|e| anyhow!("{} {}: {}", e.status(), e.code().word(), e.message()))
    })
}
