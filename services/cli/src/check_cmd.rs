//! `sluice check <key>`: asks once and prints the decision.

use crate::common::Common;
use anyhow::Result;
use sluice_client::{Client, ClientOptions};
use sluice_core::config::Fallback;
use sluice_core::policy::DEFAULT_POLICY;

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The key to ask about (any text; it is percent-encoded for you).
    pub key: String,
    /// The policy to apply.
    #[arg(long, default_value = DEFAULT_POLICY)]
    pub policy: String,
    /// Units to take; 0 looks without consuming.
    #[arg(long, default_value_t = 1)]
    pub cost: u64,
    /// Print the decision as JSON (the reply body of CONTRACT §1).
    #[arg(long)]
    pub json: bool,
}

pub fn run(common: &Common, args: &CheckArgs) -> Result<()> {
    let config = common.load_config()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        // A check must say when no worker answers (the closed fallback is an
        // error naming the key), not hide it behind an open or local answer.
        let opts = ClientOptions::from_config(&config)
            .batching(false)
            .deny_cache(false)
            .fallback(Fallback::Closed)
            .auth(common.nats_auth());
        let client = Client::connect_with(&common.nats, opts).await?;
        let answer = client
            .ask(args.key.as_bytes(), &args.policy, args.cost)
            .await?;
        if args.json {
            let body = answer.to_reply().encode(sluice_core::wire::Encoding::Json);
            println!("{}", String::from_utf8_lossy(&body));
        } else {
            let verdict = if answer.allowed { "allowed" } else { "denied" };
            print!(
                "{verdict}  policy={} limit={} remaining={} reset={}ms",
                answer.policy,
                answer.limit,
                answer.remaining,
                answer.reset.as_millis()
            );
            if !answer.allowed {
                print!(" retry_after={}ms", answer.retry_after.as_millis());
            }
            println!();
        }
        Ok(())
    })
}
