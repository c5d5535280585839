//! `sluice inspect KEY` and `sluice reset KEY` (CONTRACT §8): one request
//! through the partition mapping to the key's owner, and its reply as a
//! table or JSON.

use crate::common::Common;
use anyhow::{anyhow, bail, Result};
use serde::de::DeserializeOwned;
use sluice_core::key::try_encode_key;
use sluice_core::subject::Verb;
use sluice_core::wire::inspect::{decode_admin_reply, encode_scope, InspectReply, ResetReply};
use sluice_core::wire::{decode_reply, Encoding, Reply, SERVICE_ERROR_CODE};
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct KeyArgs {
    /// The key (any text; it is percent-encoded for you).
    pub key: String,
    /// Only this policy (default: every policy with state for the key).
    #[arg(long)]
    pub policy: Option<String>,
    /// Print the reply as JSON.
    #[arg(long)]
    pub json: bool,
}

/// How long to wait for the key's owner (a top query asks every worker).
const TIMEOUT: Duration = Duration::from_secs(10);

pub fn inspect(common: &Common, args: &KeyArgs) -> Result<()> {
    let reply: InspectReply = request(common, args, Verb::Inspect)?;
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
    }
    Ok(())
}

pub fn reset(common: &Common, args: &KeyArgs) -> Result<()> {
    let reply: ResetReply = request(common, args, Verb::Reset)?;
    if args.json {
        println!("{}", serde_json::to_string(&reply)?);
    } else if reply.reset.is_empty() {
        println!("{}: nothing to reset", args.key);
    } else {
        println!("{}: reset under {}", args.key, reply.reset.join(", "));
    }
    Ok(())
}

/// Sends `verb` for the key and decodes the reply (an error reply becomes
/// the error, with its sentence).
fn request<T: DeserializeOwned>(common: &Common, args: &KeyArgs, verb: Verb) -> Result<T> {
    let token =
        try_encode_key(args.key.as_bytes()).map_err(|e| anyhow!("key {:?}: {e}", args.key))?;
    let body = encode_scope(args.policy.as_deref(), Encoding::Json);
    request_once(common, verb.as_str(), &verb.client_subject(&token), body)
}

/// Sends one request to a worker (`what` names the command to the
/// server) and decodes its reply; an error reply becomes the error, with
/// its status and sentence.
pub fn request_once<T: DeserializeOwned>(
    common: &Common,
    what: &str,
    subject: &str,
    body: Vec<u8>,
) -> Result<T> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let client = common.connect(&format!("sluice {what}")).await?;
        let msg = tokio::time::timeout(TIMEOUT, client.request(subject.to_string(), body.into()))
            .await
            .map_err(|_| anyhow!("no answer on {subject} within {TIMEOUT:?}"))?
            .map_err(|e| anyhow!("no worker answered on {subject} ({e}); is a worker running?"))?;
        let is_error = msg
            .headers
            .as_ref()
            .is_some_and(|h| h.get(SERVICE_ERROR_CODE).is_some());
        if is_error {
            match decode_reply(&msg.payload) {
                Ok(Reply::Error(e)) => {
                    bail!("{} {}: {}", e.code.status(), e.code.word(), e.message)
                }
                _ => bail!(
                    "an error reply that cannot be read: {:?}",
                    String::from_utf8_lossy(&msg.payload)
                ),
            }
        }
        decode_admin_reply(&msg.payload).map_err(|e| anyhow!("a reply that cannot be read: {e}"))
    })
}
