//! `sluice check <key>`: asks once and prints the decision.

use crate::common::Common;
use anyhow::Result;
use sluice_client::{Answer, Client, ClientOptions};
use sluice_core::config::Fallback;
use sluice_core::policy::DEFAULT_POLICY;

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    pub target: Target,
    /// Units to take; 0 looks without consuming.
    #[arg(long, default_value_t = 1)]
    pub cost: u64,
}

/// A key, a policy and how to print the reply: what `sluice check` and
/// the holds' commands all take.
#[derive(clap::Args, Debug)]
pub struct Target {
    #[arg(help = crate::common::KEY_HELP)]
    pub key: String,
    #[command(flatten)]
    pub form: crate::common::KeyForm,
    /// The policy to apply.
    #[arg(long, default_value = DEFAULT_POLICY)]
    pub policy: String,
    /// Print the reply as JSON (the reply body of SPEC §1; a hold's
    /// with `hold` and `expires_ms`).
    #[arg(long)]
    pub json: bool,
}

pub fn run(common: &Common, args: &CheckArgs) -> Result<()> {
    with_client(common, |client| async move {
        let target = &args.target;
        let key = target.form.key(&target.key)?;
        let answer = client.ask(&key, &target.policy, args.cost).await?;
        if target.json {
            let body = answer.to_reply().encode(sluice_core::wire::Encoding::Json);
            println!("{}", String::from_utf8_lossy(&body));
        } else {
            println!("{}", describe(&answer));
        }
        Ok(())
    })
}

/// How long a command's ask may take, retries included. The client
/// library's default (100 ms) is for an API server's hot path, where a
/// late answer is worth less than the fallback's; a command run by hand or
/// by a script wants the owner's answer, and its first ask also pays for
/// a new process and connection, which on a loaded machine took longer
/// than 100 ms (a test saw `check` time out so).
const COMMAND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Runs `f` with a client that asks the owner only (no batching, no deny
/// cache) and says when no worker answers: a check (or a hold's verb)
/// must not hide that behind an open or local answer.
pub(crate) fn with_client<F>(common: &Common, f: impl FnOnce(Client) -> F) -> Result<()>
where
    F: std::future::Future<Output = Result<()>>,
{
    let config = common.load_config()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let opts = ClientOptions::from_config(&config)
            .batching(false)
            .deny_cache(false)
            .fallback(Fallback::Closed)
            .timeout(COMMAND_TIMEOUT)
            .auth(common.nats_auth());
        let client = Client::connect_with(&common.nats, opts).await?;
        f(client).await
    })
}

/// `allowed  policy=… limit=… remaining=… reset=…ms` (and, when denied,
/// `retry_after=…ms`); for a grouped ask, `denied_by=…` and a line per
/// level, outermost first.
pub(crate) fn describe(answer: &Answer) -> String {
    let verdict = if answer.allowed { "allowed" } else { "denied" };
    let mut line = format!(
        "{verdict}  policy={} limit={} remaining={} reset={}ms",
        answer.policy,
        answer.limit,
        answer.remaining,
        answer.reset.as_millis()
    );
    if !answer.allowed {
        line += &format!(" retry_after={}ms", answer.retry_after.as_millis());
    }
    // A grouped ask (SPEC §17): the level that denied, then every level.
    if let Some(level) = &answer.denied_by {
        line += &format!(" denied_by={level}");
    }
    for l in &answer.levels {
        line += &format!(
            "\n  level {:<12} remaining={} reset={}ms",
            l.policy, l.remaining, l.reset_ms
        );
    }
    line
}
